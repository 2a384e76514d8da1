"""A notebook-style rollout with a progress bar: ``rollout.yml`` (a canary host, then batches of 25 %, each gated
by the NIXL smoke test), one bar for the whole run, built from the run's events.

    python examples/rollout_progress.py INVENTORY

In a notebook, paste ``run_with_bar`` into a cell and call it: the bar redraws in place (carriage return), and
the current task and the last progress line (the install's uv output) are shown beside it.
"""

from __future__ import annotations

import sys

from provision import api


class Bar:
    """Task results done out of those planned (the plan counts every selected task on every host)."""

    def __init__(self, total: int, width: int = 30) -> None:
        self.total, self.done, self.width, self.note = max(total, 1), 0, width, ""

    def __call__(self, event: api.Event) -> None:
        if isinstance(event, api.TaskFinished):
            self.done += 1
            self.note = f"{event.host}: {event.result.status.value}"
        elif isinstance(event, api.TaskStarted):
            self.note = event.name
        elif isinstance(event, api.Progress):
            self.note = f"{event.host} .. {event.message}"
        else:
            return
        filled = min(self.width, self.width * self.done // self.total)
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {self.note}"[:110]
        print(f"\r{line:<110}", end="", flush=True)


def run_with_bar(inventory: str, playbook: str = "rollout.yml") -> api.RunResult:
    planned = api.plan_playbook(playbook, inventory)  # validated: nothing contacted yet
    total = sum(len(planned.tasks(play)) * len(planned.hosts(play)) for play in planned.plays)
    total += sum(len(planned.hosts(play)) for play in planned.plays if play.gather_facts)
    result = planned.run(on_event=Bar(total))
    print()
    for host, stats in result.summary.stats.items():
        print(f"{host}: ok={stats.ok} changed={stats.changed} failed={stats.failed} unreachable={stats.unreachable}")
    return result


if __name__ == "__main__":
    outcome = run_with_bar(sys.argv[1])
    if not outcome.ok:
        print(f"ERROR: {outcome.reason}", file=sys.stderr)
    sys.exit(outcome.exit_code)
