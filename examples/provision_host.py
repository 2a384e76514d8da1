"""Provision one fresh host from a script: bootstrap, install, the NIXL smoke gate — stop at the first failure.

    python examples/provision_host.py INVENTORY HOST

Prints each task's result per host and the install's progress lines as they come; exits with provision's code
(0 ok, 2 failed, 4 unreachable, 5 invalid input).
"""

from __future__ import annotations

import sys

from provision import api

STAGES = ("bootstrap.yml", "install.yml", "smoke.yml")


def show(event: api.Event) -> None:
    if isinstance(event, api.TaskStarted):
        print(f"-- {event.name}")
    elif isinstance(event, api.TaskFinished):
        result = event.result
        print(f"   {result.host}: {result.status.value}", api.masked(result.msg) if result.failed else "")
    elif isinstance(event, api.Progress):
        print(f"   {event.host} .. {event.message}")


def main(inventory: str, host: str) -> int:
    try:
        fleet = api.load(inventory, limit=host)
    except api.ProvisionError as exc:  # a bad inventory or a host that is not in it: nothing was contacted
        print(f"ERROR: {exc}", file=sys.stderr)
        return exc.exit_code
    for playbook in STAGES:
        result = api.run_playbook(playbook, fleet, on_event=show)
        print(f"{playbook}: exit {result.exit_code}, {result.changed} changed")
        if not result.ok:
            print(f"ERROR: {result.reason}", file=sys.stderr)
            return result.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
