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
from provision.transport.local import _PipeStream
from tests.support.processes import finish, start_locker

NAME = "grace-host"
GRACE = remote.host_library("lockwait").LOCK_GRACE  # the take both use: provision/remote/programs/lockwait.py


def holder(home: Path) -> subprocess.Popen[bytes]:
    """The run lock of NAME held (by the stand-alone locker) until its stdin is closed."""
    proc = start_locker(home, NAME, 0, b"the run that ends")
    assert proc.stdout is not None and proc.stdout.readline() == b"locked\n"
    return proc


def by_locker(home: Path) -> tuple[str, Callable[[], None]]:
    proc = start_locker(home, NAME, 0, b"the next run")
    assert proc.stdout is not None
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


# the ended run's agent lets go 1.5 s after the next run asked: taken; or it never does: refused after the grace
CASES = {"let-go-within-the-grace": (1.5, "locked"), "held-past-the-grace": (None, "busy the run that ends")}


@pytest.mark.parametrize("taker", TAKERS)
@pytest.mark.parametrize("case", CASES)
def test_a_held_lock_is_waited_for_for_the_grace_then_refused_naming_its_holder(
    tmp_path: Path, taker: str, case: str
) -> None:
    lets_go, expected = CASES[case]
    held = holder(tmp_path)
    assert held.stdin is not None
    timer = threading.Timer(lets_go or 0.0, held.stdin.close)
    if lets_go is not None:
        timer.start()
    started = time.monotonic()
    try:
        answer, end = TAKERS[taker](tmp_path)
        waited = time.monotonic() - started
        end()
    finally:
        timer.cancel()
        finish(held)
    assert answer == expected, answer
    assert waited >= (1.0 if lets_go is not None else GRACE - 0.5)  # it did wait
