"""``reboot`` where it needs no host to reboot: against ansible-core on a local connection (both refuse: it
would reboot the controller), in check mode, and its bad arguments refused before any host is touched. The
reboot itself is compared on a lab host run by a systemd of its own (case ``mod_reboot``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from provision.catalog import lookup
from provision.modules.base import ModuleContext, ModuleResult
from provision.modules.reboot import _argv
from provision.transport import LocalConnection
from tests.support.ansible_ref import ansible_results
from tests.support.bad_input import UNREACHABLE_INVENTORY
from tests.support.cli import run_cli


def _run(raw: Any, check: bool = False) -> ModuleResult:
    cls = lookup("ansible.builtin.reboot")
    assert cls is not None
    args = cls.coerce(cls.validate_static(cls.normalize(raw), lambda v: False))
    ctx = ModuleContext(host="h", conn=LocalConnection("h"), variables={}, check=check)
    return cls().run(ctx, args)


def test_a_local_connection_is_refused_as_ansible_refuses_it(tmp_path: Path) -> None:
    (ansible,) = ansible_results(tmp_path, [{"reboot": {"reboot_timeout": 5}}])
    mine = _run({"reboot_timeout": 5})
    assert ansible["failed"] and mine.failed
    assert mine.msg == ansible["msg"] == "Running reboot with local connection would reboot the control node."
    assert {k: mine.data[k] for k in ("rebooted", "elapsed")} == {k: ansible[k] for k in ("rebooted", "elapsed")}
    assert not mine.changed and not ansible["changed"]


def test_check_mode_reports_the_reboot_and_runs_nothing() -> None:
    # a local connection is refused first (as Ansible); an SSH host in check mode: changed, rebooted, elapsed 0
    cls = lookup("reboot")
    assert cls is not None
    args = cls.coerce({"reboot_command": "/bin/false"})
    ctx = ModuleContext(host="h", conn=_NoHost(), variables={}, check=True)  # type: ignore[arg-type]
    result = cls().run(ctx, args)
    assert (result.changed, result.failed, result.data) == (True, False, {"elapsed": 0, "rebooted": True})


class _NoHost:
    """A connection that fails any use: check mode must not touch the host."""

    name = "h"
    commands_run = 0

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"check mode used the connection ({name})")


@pytest.mark.parametrize(
    ("distribution", "argv"),
    [
        ("debian", ["-r", "1", "bye"]),
        ("ubuntu", ["-r", "1", "bye"]),
        ("void", ["-r", "+1", "bye"]),
        ("alpine", []),
    ],
)
def test_the_shutdown_arguments_follow_ansibles_table(distribution: str, argv: list[str]) -> None:
    assert _argv(distribution, 90 // 60, "bye") == argv


BAD = {
    "unknown": ("reboot: {reboot_timeout_sec: 5}", r"reboot: unknown argument 'reboot_timeout_sec'"),
    "not_an_int": ("reboot: {reboot_timeout: soon}", r"reboot: reboot_timeout"),
    "delay": ("ansible.builtin.reboot: {pre_reboot_delay: later}", r"reboot: pre_reboot_delay"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_arguments_exit_5_before_any_host(tmp_path: Path, case: str) -> None:
    task, pattern = BAD[case]
    inv = tmp_path / "inv.yml"
    inv.write_text(UNREACHABLE_INVENTORY.format(marker=tmp_path / "touched"))
    playbook = tmp_path / "pb.yml"
    playbook.write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n    - {task}\n")
    result = run_cli(["run", str(playbook), "-i", str(inv)])
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert result.code == 5, result.err
    assert len(lines) == 1 and re.search(pattern, lines[0]), result.err
