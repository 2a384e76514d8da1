"""Small helpers shared by tests."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path

from provision.cli import main


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


def run_cli_in(workdir: Path, argv: list[str]) -> CliResult:
    """:func:`run_cli` from ``workdir`` (retry files and relative paths land there), back where it was after."""
    old = Path.cwd()
    os.chdir(workdir)
    try:
        return run_cli(argv)
    finally:
        os.chdir(old)
