"""The run lock's grace, without a network: a run that asks for a host's run lock while the agent of a run that
just ended still holds it (it takes that run's commands with it first: up to 2 s more for one that ignores
TERM) waits for it, up to ``LOCK_GRACE`` seconds (``remote/programs/lockwait.py``), instead of being told the
host is busy; a lock held for longer is still refused, naming its holder. Both takers: the host's python agent
(``op: lock``) and the stand-alone locker (``RUN_LOCKER``) of a host whose agent could not start. Against a
real sshd: tests/integration/test_trust_transport.py (a run right after an interrupted one)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from provision import remote
from provision.transport.agent import PythonAgent
from provision.transport.base import RUN_LOCKER
from provision.transport.local import _PipeStream
from tests.unit.test_heartbeat import finish

NAME = "grace-host"
GRACE = remote.host_library("lockwait").LOCK_GRACE  # the take both use: provision/remote/programs/lockwait.py


def holder(home: Path) -> subprocess.Popen[bytes]:
    """The run lock of NAME held (by the stand-alone locker) until its stdin is closed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_LOCKER, NAME, "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "HOME": str(home)},
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"the run that ends\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == b"locked\n"
    return proc


def by_locker(home: Path) -> tuple[str, Callable[[], None]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_LOCKER, NAME, "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "HOME": str(home)},
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"the next run\n")
    proc.stdin.flush()
    return proc.stdout.readline().decode().strip(), lambda: finish(proc)


def by_agent(home: Path) -> tuple[str, Callable[[], None]]:
    proc = subprocess.Popen(
        ["/bin/sh", "-c", PythonAgent.command(sys.executable, 0).direct()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "HOME": str(home)},
    )
    answer, _ = PythonAgent("local", _PipeStream(proc)).lock(NAME, "the next run")
    return answer, lambda: finish(proc)


TAKERS = {"agent": by_agent, "locker": by_locker}


@pytest.mark.parametrize("taker", TAKERS)
def test_a_lock_let_go_within_the_grace_is_taken(tmp_path: Path, taker: str) -> None:
    held = holder(tmp_path)
    assert held.stdin is not None
    timer = threading.Timer(1.5, held.stdin.close)  # the ended run's agent exits 1.5 s after the next run asked
    timer.start()
    started = time.monotonic()
    try:
        answer, end = TAKERS[taker](tmp_path)
        waited = time.monotonic() - started
        end()
    finally:
        timer.cancel()
        finish(held)
    assert answer == "locked", answer
    assert waited >= 1.0  # it did wait for the holder


@pytest.mark.parametrize("taker", TAKERS)
def test_a_lock_held_past_the_grace_is_refused_naming_its_holder(tmp_path: Path, taker: str) -> None:
    held = holder(tmp_path)
    started = time.monotonic()
    try:
        answer, end = TAKERS[taker](tmp_path)
        waited = time.monotonic() - started
        end()
    finally:
        finish(held)
    assert answer == "busy the run that ends", answer
    assert waited >= GRACE - 0.5
