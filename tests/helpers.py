"""Small helpers shared by tests."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.cli import main
from provision.results import TaskResult


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(argv: list[str]) -> CliResult:
    """Run the real CLI in-process and capture its exit code and output."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return CliResult(code, out.getvalue(), err.getvalue())


def named(shown: str, name: str) -> bool:
    """A task shown as ``name``, or as a role's task ``ROLE : name`` (Ansible's and provision's title)."""
    return shown == name or shown.endswith(f" : {name}")


@contextlib.contextmanager
def lab_ssh_config(lab: Any) -> Iterator[None]:
    """``PROVISION_SSH_CONFIG`` set to the lab's ssh config for the block (the in-process CLI reads it), then
    put back as it was."""
    old = os.environ.get("PROVISION_SSH_CONFIG")
    os.environ["PROVISION_SSH_CONFIG"] = str(lab.ssh_config_path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PROVISION_SSH_CONFIG", None)
        else:
            os.environ["PROVISION_SSH_CONFIG"] = old


def run_cli_in(workdir: Path, argv: list[str]) -> CliResult:
    """:func:`run_cli` from ``workdir`` (retry files and relative paths land there), back where it was after."""
    old = Path.cwd()
    os.chdir(workdir)
    try:
        return run_cli(argv)
    finally:
        os.chdir(old)


class Collect:
    """A reporter (provision.report.Sink) that keeps every task result and prints nothing."""

    def __init__(self) -> None:
        self.results: list[TaskResult] = []

    def play_start(self, name: str, hosts: list[str]) -> None: ...
    def task_start(self, name: str, *, handler: bool = False) -> None: ...
    def progress(self, host: str, msg: str) -> None: ...
    def line(self, text: str = "") -> None: ...

    def task_result(self, result: TaskResult) -> None:
        self.results.append(result)
