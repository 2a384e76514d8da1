"""Bad input through the real CLI: ``provision`` run in a subprocess against an inventory whose only host must
never be contacted (127.0.0.1 port 1, where nothing listens: a contacted host ends "unreachable", exit 4, not
with the validation error expected), and the check that the error is ONE line with no traceback.
``UNREACHABLE_INVENTORY`` is the in-process tests' ghost (127.0.0.254), with a ``marker`` var to format in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

INVENTORY = """\
all:
  hosts:
    ghost:
      ansible_host: 127.0.0.1
      ansible_port: 1
"""
PLAY = "- hosts: all\n  gather_facts: false\n"
OK_PLAYBOOK = PLAY + "  tasks:\n    - debug: {msg: hi}\n"


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def provision(*args: str, cwd: Path) -> Run:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PROVISION_DEBUG_LOG": str(cwd / "debug.log")}
    proc = subprocess.run(
        [sys.executable, "-m", "provision", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def assert_one_line(run: Run, code: int, pattern: str) -> None:
    assert run.code == code, run.err
    assert "Traceback" not in run.err + run.out, run.err
    assert "unreachable" not in run.err.lower(), "a host was contacted"
    assert len(run.lines) == 1, run.err
    assert re.search(pattern, run.lines[0]), run.lines[0]


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(INVENTORY)
    return path


def task(extra: str, module: str = "debug: {msg: hi}") -> str:
    keys = "".join(f"      {line}\n" for line in extra.splitlines())
    return PLAY + f"  tasks:\n    - name: t\n      {module}\n" + keys


UNREACHABLE_INVENTORY = """\
all:
  hosts:
    ghost:
      ansible_host: 127.0.0.254
      ansible_port: 1
      marker: "{marker}"
"""
