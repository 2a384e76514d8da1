"""``reboot`` (ansible.builtin's action): the host rebooted, the run's connection opened again (a new SSH
connection, its host key verified as the first one's), the reboot checked as ansible-core checks it.

As ansible-core's action: the boot id (``boot_time_command``, default ``cat /proc/sys/kernel/random/boot_id``)
read; the shutdown command found in ``search_paths`` (the ``find`` module's rules, through ``remote/info.py``)
and run (``shutdown -r DELAY_MIN "MSG"``: ``pre_reboot_delay`` in whole minutes; Alpine's ``reboot``;
``reboot_command`` instead when given, its first word looked up the same way); a connection lost while it runs is
a success; ``post_reboot_delay`` slept; then the boot id read again (the connection closed first, and after
every failure, so that each try is a new connection) until it differs, then ``test_command`` (default
``whoami``) until it succeeds, each wait up to ``reboot_timeout`` seconds, with Ansible's backoff (1, 2, 4, 8,
then 12 s, plus up to a second of jitter; never past the deadline). Every command runs through ``/bin/sh`` as
Ansible's low-level commands do, under ``become`` when the task has it. The result: ``rebooted``,
``changed``, ``elapsed`` (whole seconds since the reboot command); check mode reports the reboot without
doing it; on a ``local`` connection the task fails (it would reboot the controller). ``connect_timeout``
bounds each try's command (Ansible's sets the SSH connection's timeout; provision's connect timeout is the
run's ``--connect-timeout``).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from ..commands import Command, argv_join
from ..errors import HostError
from ..transport import LocalConnection
from .base import Arg, HelperError, Module, ModuleContext, ModuleResult, register

DEFAULT_SEARCH_PATHS = ["/sbin", "/bin", "/usr/sbin", "/usr/bin", "/usr/local/sbin"]
MAX_FAIL_SLEEP = 12
TRY_LIMIT = 60.0  # seconds one try's command may take when connect_timeout is not given


class _NotYet(Exception):
    """One try of a wait did not succeed (the reason is its message)."""


def _argv(distribution: str, delay_min: int, message: str) -> list[str]:
    """The shutdown command's arguments for the host's distribution (os-release ``ID``), as Ansible's table."""
    if distribution == "alpine":
        return []
    return ["-r", f"+{delay_min}" if distribution == "void" else str(delay_min), message]


@register
class Reboot(Module):
    name = "reboot"
    args = {
        "boot_time_command": Arg(default="cat /proc/sys/kernel/random/boot_id"),
        "connect_timeout": Arg("int"),
        "msg": Arg(default="Reboot initiated by Ansible"),
        "post_reboot_delay": Arg("int", default=0),
        "pre_reboot_delay": Arg("int", default=0),
        "reboot_command": Arg(),
        "reboot_timeout": Arg("int", default=600),
        "search_paths": Arg("list", default=DEFAULT_SEARCH_PATHS),
        "test_command": Arg(default="whoami"),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if isinstance(ctx.conn, LocalConnection) or ctx.variables.get("ansible_connection") == "local":
            msg = "Running reboot with local connection would reboot the control node."
            return ModuleResult(failed=True, msg=msg, data={"elapsed": 0, "rebooted": False})
        if ctx.check:
            return ModuleResult(changed=True, data={"elapsed": 0, "rebooted": True})
        distribution = _distribution(ctx)
        try:
            command = self._command(ctx, args, distribution)
        except HelperError as exc:
            return exc.as_result()
        except _NotYet as exc:
            return ModuleResult(failed=True, msg=str(exc))
        try:
            previous = _boot_time(ctx, args["boot_time_command"], None)
        except (_NotYet, HostError) as exc:
            return ModuleResult(failed=True, msg=str(exc), data={"reboot": False})  # sic: Ansible's key
        try:
            done = ctx.run(command)
        except HostError:  # the connection closed under the command: the host is going down
            done = None
        started = time.monotonic()
        if done is not None and done.rc != 0:
            msg = f"Reboot command failed. Error was: '{done.stdout.strip()}, {done.stderr.strip()}'"
            return ModuleResult(failed=True, msg=msg, data={"rebooted": False, "elapsed": _since(started)})
        time.sleep(max(0, args["post_reboot_delay"]))
        _reconnect(ctx)
        waits = (
            ("last boot time check", lambda limit: _boot_time(ctx, args["boot_time_command"], previous, limit)),
            ("post-reboot test command", lambda limit: _test(ctx, args["test_command"], limit)),
        )
        with ctx.waiting(f"{ctx.host} to reboot", float(args["reboot_timeout"])):
            for what, attempt in waits:  # each wait up to reboot_timeout, as Ansible's
                deadline = time.monotonic() + args["reboot_timeout"]
                if not _until(ctx, attempt, deadline, args["connect_timeout"]):
                    msg = f"Timed out waiting for {what} (timeout={args['reboot_timeout']})"
                    return ModuleResult(failed=True, msg=msg, data={"rebooted": True, "elapsed": _since(started)})
        return ModuleResult(changed=True, data={"rebooted": True, "elapsed": _since(started)})

    def _command(self, ctx: ModuleContext, args: dict[str, Any], distribution: str) -> Command:
        """The reboot command: Ansible's default for the distribution, or ``reboot_command`` (shell text) with its
        first word found in ``search_paths`` when it is not a path."""
        given = args["reboot_command"]
        word, _, rest = str(given).partition(" ") if given is not None else (_bin(distribution), "", "")
        path = word if word.startswith("/") else _find(ctx, word, args["search_paths"])
        if given is not None:
            return Command.shell(f"{argv_join([path])} {rest}")
        return Command.of(path, *_argv(distribution, max(0, args["pre_reboot_delay"]) // 60, args["msg"]))


def _bin(distribution: str) -> str:
    return "reboot" if distribution == "alpine" else "shutdown"


def _distribution(ctx: ModuleContext) -> str:
    """The host's os-release ``ID`` (lower case), from its facts when gathered, else read from the host."""
    facts = ctx.variables.get("ansible_facts")
    known = facts.get("distribution") if isinstance(facts, dict) else None
    if isinstance(known, str) and known:
        return known.lower()
    try:
        text = (ctx.get("/etc/os-release") or b"").decode("utf-8", "replace")
    except HostError:
        return ""
    for line in text.splitlines():
        if line.startswith("ID="):
            return line[3:].strip().strip("\"'").lower()
    return ""


def _find(ctx: ModuleContext, name: str, paths: list[str]) -> str:
    """The first ``paths`` folder holding ``name`` (the ``find`` module, as Ansible's action asks it), joined
    here from the playbook's own words: the host only says which folder."""
    request = {"paths": paths, "patterns": [name], "file_type": "any", "recurse": False, "hidden": False}
    request |= {"follow": False, "get_checksum": False, "checksum_algorithm": "sha1", "use_regex": False}
    request |= {"read_whole_file": False, "exact_mode": True, "age_stamp": "mtime"}
    answer = ctx.call_helper("info.py", "find", stdin=json.dumps(request).encode(), what="find", check_rc=False)
    found = {str(f.get("path")) for f in answer.get("files") or [] if isinstance(f, dict)}
    for folder in paths:
        candidate = f"{folder.rstrip('/')}/{name}"
        if candidate in found:
            return candidate
    raise _NotYet(f'Task failed: Unable to find command "{name}" in search paths: {paths!r}')  # as 2.19 says it


def _shell(ctx: ModuleContext, text: str, timeout: float | None = None) -> Any:
    return ctx.run(Command.shell(text), timeout=timeout)


def _boot_time(ctx: ModuleContext, command: str, previous: str | None, timeout: float | None = None) -> str:
    """The host's boot id; with ``previous``, :class:`_NotYet` while it is still that (or empty)."""
    done = _shell(ctx, command, timeout)
    if done.rc != 0:
        raise _NotYet(
            f"reboot: failed to get host boot time info, rc: {done.rc}, stdout: {done.stdout}, stderr: {done.stderr}"
        )
    now = str(done.stdout).strip()
    if previous is not None and (not now or now == previous):
        raise _NotYet("boot time has not changed")
    return now


def _test(ctx: ModuleContext, command: str, timeout: float | None = None) -> None:
    done = _shell(ctx, command, timeout)
    if done.rc != 0:
        raise _NotYet(f"Test command failed: {done.stderr} {done.stdout}")


def _reconnect(ctx: ModuleContext) -> None:
    """The run's connection to the host closed: the next command opens a new one (host key checked again)."""
    ctx.conn.close()


def _until(
    ctx: ModuleContext, attempt: Callable[[float], object], deadline: float, connect_timeout: int | None
) -> bool:
    """``attempt`` tried until it succeeds (True) or ``deadline`` passes (False), with Ansible's backoff; a
    try that loses the connection closes it, so the next one connects anew."""
    failures = 0
    while time.monotonic() < deadline:
        limit = min(float(connect_timeout or TRY_LIMIT), max(1.0, deadline - time.monotonic()))
        try:
            attempt(limit)
            return True
        except HostError:
            _reconnect(ctx)
        except _NotYet:
            pass
        pause = min(2.0**failures, MAX_FAIL_SLEEP) + secrets.randbelow(1000) / 1000
        failures += 1
        time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
    return False


def _since(started: float) -> int:
    return int(time.monotonic() - started)


__all__ = ["Reboot"]
