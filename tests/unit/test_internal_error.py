"""A crash in the middle of a run (a bug) still gets the recap, the retry file, ONE line naming the internal
error and exit 2; the traceback goes to the debug log (and to stderr only with -vvv).

The crash is genuine: a test-only module registered for the test raises inside ``Module.run`` (or returns a
message the reporter cannot print), and the real CLI runs the playbook in-process on local hosts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provision.api import runs
from provision.cli import common
from provision.modules import REGISTRY, Arg, Module, ModuleContext, ModuleResult
from tests.support.cli import CliResult, run_cli

INVENTORY = "all:\n  vars:\n    ansible_connection: local\n  hosts:\n    one:\n    two:\n"
PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: boom
      crash: {host: one}
    - name: after
      debug: {msg: still here}
"""


class Crash(Module):
    """Raises RuntimeError on the host named by ``host``: a module with a bug."""

    name = "crash"
    controller_only = True
    args = {"host": Arg(required=True)}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if ctx.host == args["host"]:
            raise RuntimeError("injected crash")
        return ModuleResult(msg="fine")


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("cannot print me")


class BadMessage(Module):
    """Returns a message that the reporter cannot turn into text: the reporter crashes."""

    name = "bad_message"
    controller_only = True
    show_msg = True
    args = {"host": Arg(required=True)}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        return ModuleResult(msg=Unprintable() if ctx.host == args["host"] else "fine")  # type: ignore[arg-type]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for module in (Crash, BadMessage):
        monkeypatch.setitem(REGISTRY, module.name, module)
    monkeypatch.setattr(common, "DEBUG_LOG", tmp_path / "debug.log")
    monkeypatch.chdir(tmp_path)  # the retry file is written to the working directory
    (tmp_path / "inv.yml").write_text(INVENTORY)
    return tmp_path


def run(project: Path, playbook: str, *flags: str) -> CliResult:
    (project / "pb.yml").write_text(playbook)
    return run_cli(["run", "pb.yml", "-i", "inv.yml", *flags])


def test_module_crash_fails_its_host_with_recap_retry_file_and_one_line(project: Path) -> None:
    result = run(project, PLAYBOOK)
    assert result.code == 2, result.out + result.err
    assert "Traceback" not in result.out + result.err
    assert result.err.splitlines() == [
        "ERROR: internal error in task 'boom' on one (pb.yml:4): RuntimeError: injected crash; this is a bug in "
        f"provision, the traceback is in {project / 'debug.log'}"
    ]
    assert "fatal: [one]: FAILED! => internal error in task 'boom' on one" in result.out
    assert "PLAY RECAP" in result.out
    recap = result.out.split("PLAY RECAP")[1]
    assert "one : ok=0" in recap and "failed=1" in recap
    assert "two : ok=2" in recap  # the other host went on to the next task
    assert (project / "pb.retry").read_text() == "one\n"
    log = (project / "debug.log").read_text()
    assert "Traceback" in log and "RuntimeError: injected crash" in log and "in run" in log


def test_module_crash_traceback_on_stderr_with_vvv(project: Path) -> None:
    result = run(project, PLAYBOOK, "-vvv")
    assert result.code == 2
    assert "Traceback (most recent call last)" in result.err
    assert result.err.strip().splitlines()[-1].startswith("ERROR: internal error in task 'boom' on one")


def test_module_crash_with_json_still_emits_the_document(project: Path) -> None:
    import json

    result = run(project, PLAYBOOK, "--json")
    assert result.code == 2
    doc = json.loads(result.out)
    assert doc["stats"]["one"]["failed"] == 1 and doc["stats"]["two"]["failed"] == 0
    assert "Traceback" not in result.err


def test_reporter_crash_stops_the_run_with_recap_retry_file_and_one_line(project: Path) -> None:
    playbook = PLAYBOOK.replace("crash: {host: one}", "bad_message: {host: two}")
    result = run(project, playbook)
    assert result.code == 2, result.out + result.err
    assert "Traceback" not in result.out + result.err
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "ERROR: internal error in the executor: RuntimeError: cannot print me; this is a bug in provision"
    ), result.err
    assert "PLAY RECAP" in result.out and "Run stopped early: internal error in the executor" in result.out
    assert (project / "pb.retry").read_text() == "one\ntwo\n"  # the run did not finish on either host


def test_crash_before_the_run_is_one_line_and_exit_2(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last net in main(): a bug outside a run (here in planning) never shows a traceback."""

    def broken_plan(*args: Any, **kwargs: Any) -> None:
        raise KeyError("broken planner")

    monkeypatch.setattr(runs, "check_plan", broken_plan)  # plan_playbook plans in api/runs.py
    result = run(project, PLAYBOOK)
    assert result.code == 2
    assert result.err.splitlines() == [
        f"ERROR: internal error: KeyError: 'broken planner'; this is a bug in provision, the traceback is in "
        f"{project / 'debug.log'}"
    ]
    assert "broken_plan" in (project / "debug.log").read_text()


def test_loop_template_that_is_not_a_list_fails_the_task_in_one_line(project: Path) -> None:
    result = run(project, PLAYBOOK.replace("crash: {host: one}", "debug: {msg: x}\n      loop: \"{{ 'abc' }}\""))
    assert result.code == 2
    assert "Traceback" not in result.out + result.err
    fatal = [line for line in result.out.splitlines() if line.startswith("fatal:")]
    assert fatal == [
        f"fatal: [{h}]: FAILED! => loop must give a list, got str 'abc' (pb.yml:4)" for h in ("one", "two")
    ]
