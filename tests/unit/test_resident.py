"""The resident agent (``--persist``): the host side (``remote/agent.py`` ``_resident``, run here as a real local
process, as sshd would start it) driven by the keeper's side (:class:`provision.transport.resident.Resident`).
Each run's agent is a fork of the resident: its own run lock, its commands ended with its run, the scripts the
resident readied never sent; what a host sends that is not a resident's frame closes it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.transport.agent import AgentUnavailable, PythonAgent, script_source
from provision.transport.persist import KeptStream, _answer
from provision.transport.resident import Resident
from tests.support.processes import alive, wait_for


class PipeChannel:
    """What the keeper's Resident needs of a paramiko channel, over a local process's pipes."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.closed = False
        self.sent = bytearray()

    def recv(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        return os.read(self.proc.stdout.fileno(), n)

    def sendall(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.sent += data
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            assert self.proc.stdin is not None
            with contextlib.suppress(OSError):
                self.proc.stdin.close()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


def _start(home: Path, idle: float = 60.0) -> tuple[subprocess.Popen[bytes], Resident]:
    command = PythonAgent.command(sys.executable, 0.0, {"op": "resident", "idle": idle}).direct()
    proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={**os.environ, "HOME": str(home)}, start_new_session=True)  # fmt: skip
    resident = Resident(None, PipeChannel(proc))
    assert resident.started.wait(30), "the resident did not start"
    return proc, resident


def _stop(proc: subprocess.Popen[bytes], res: Resident) -> None:
    res.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert proc.stdout is not None
    proc.stdout.close()


RUNS: list[Run] = []


@pytest.fixture
def resident(home: Path) -> Iterator[tuple[subprocess.Popen[bytes], Resident]]:
    proc, res = _start(home)
    yield proc, res
    while RUNS:
        RUNS.pop().end()
    _stop(proc, res)


class Run:
    """A run's end of its stream through the keeper: a socket pair, the keeper's end relayed by the Resident."""

    def __init__(self, resident: Resident, lock: str = "lab") -> None:
        ours, keepers = socket.socketpair()
        first = json.dumps(PythonAgent.lock_request(lock, f"run {id(self)}")).encode()
        self.rid = resident.open(keepers, 0.0, 60.0, b"%d\n" % len(first) + first)
        assert resident.first_answer(self.rid, 30), "no first answer"
        resident.hand_over(self.rid, json.dumps({"ok": True, "scripts": resident.readied}).encode() + b"\n")
        threading.Thread(target=self._relay, args=(resident, keepers), daemon=True).start()
        said = _answer(ours)
        self.sock = ours
        RUNS.append(self)
        self.agent = PythonAgent("local", KeptStream(ours, said.get("scripts")), preloaded=True)
        self.agent.has_scripts(said.get("scripts") or {})
        self.lock, _ = self.agent.lock(lock, f"run {id(self)}", sent=True)

    def _relay(self, resident: Resident, keepers: socket.socket) -> None:
        with keepers:  # as the keeper's client thread does
            resident.relay(self.rid)

    def shell(self, script: str, timeout: float = 30) -> tuple[int, bytes, bytes]:
        done = self.agent.try_exec(script.encode(), b"", timeout)
        assert done is not None
        return done

    def end(self) -> None:
        """As the run's process ending (a close alone does not end a socket another thread is reading)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def test_each_run_is_a_fork_of_the_resident_with_its_own_run_lock(resident: tuple, home: Path) -> None:
    proc, res = resident
    first = Run(res)
    assert first.lock == "locked"
    second = Run(res)
    assert second.lock.startswith("busy"), "two runs at once held the same host's run lock"
    agents = []
    for run in (first, second):
        rc, out, _ = run.shell("ps -o ppid= -p $PPID; echo $PPID")
        assert rc == 0
        parent, agent = map(int, out.split())
        assert parent == res.pid, "a run's agent is not a child of the resident"
        agents.append(agent)
    assert len(set(agents)) == 2 and res.pid not in agents
    first.end()
    assert wait_for(lambda: not alive(agents[0]), 10) is not None, "a run's agent outlived its run"
    assert alive(agents[1])
    third = Run(res)
    assert third.lock == "locked", "the run lock outlived the run that held it"
    assert proc.poll() is None


def test_the_end_of_a_run_ends_its_command_and_not_the_resident(resident: tuple, home: Path) -> None:
    proc, res = resident
    run = Run(res)
    rc, out, _ = run.shell("echo $PPID")
    assert rc == 0
    agent = int(out)
    pid_file = home / "sleep.pid"

    def sleep() -> None:
        with contextlib.suppress(AgentUnavailable):  # its stream ends under it: the point of the test
            run.agent.try_exec(b"echo $$ > sleep.pid; exec sleep 300", b"", 600)

    threading.Thread(target=sleep, daemon=True).start()
    assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 10) is not None
    sleeper = int(pid_file.read_text())
    assert alive(sleeper)
    run.end()
    assert wait_for(lambda: not alive(sleeper), 10) is not None, "the command outlived its run"
    # the run's agent holds the run lock until it exits, a moment after it ended its command (a run started in
    # that moment waits for it: the lock's grace, remote/programs/lockwait.py)
    assert wait_for(lambda: not alive(agent), 10) is not None, "the run's agent outlived its run"
    assert proc.poll() is None and res.alive()
    assert Run(res).lock == "locked"


def test_scripts_the_resident_readied_are_never_sent(resident: tuple) -> None:
    _, res = resident
    text, digest = script_source("file_state.py")
    other = script_source("info.py")[0] + "\n# another version\n"
    res.preload({"file_state.py": (text, digest), "info.py": (other, hashlib.sha256(other.encode()).hexdigest())})
    run = Run(res)
    assert res.readied.get("file_state.py") == digest
    assert "info.py" not in run.agent._sent, "a script whose source differs from ours counts as sent"
    channel = res.channel
    before = len(channel.sent)
    result = run.agent.call("file_state.py", ["stat"], b'{"paths": ["."]}', 30)
    assert result.rc == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])
    assert len(channel.sent) - before < 1000, "the script's source was sent although the resident had it"


def test_the_end_of_its_input_ends_every_run_and_the_resident(resident: tuple) -> None:
    proc, res = resident
    runs = [Run(res, lock=f"l{i}") for i in range(3)]
    res.channel.close()
    for run in runs:
        with pytest.raises(AgentUnavailable):
            run.agent.read("/etc/hostname", 1000)
    assert proc.wait(10) == 0


def test_an_idle_resident_exits_by_itself(home: Path) -> None:
    proc, res = _start(home, idle=1.0)
    try:
        assert proc.wait(15) == 0
        assert wait_for(lambda: res.dead.is_set(), 5) is not None
    finally:
        _stop(proc, res)


class SocketChannel:
    """A host that sends what it likes: the test writes the host's bytes on ``host``."""

    def __init__(self) -> None:
        self.ours, self.host = socket.socketpair()
        self.closed = False

    def recv(self, n: int) -> bytes:
        return self.ours.recv(n)

    def sendall(self, data: bytes) -> None:
        self.ours.sendall(data)

    def close(self) -> None:
        self.closed = True
        self.ours.close()
        self.host.close()


@pytest.mark.parametrize("frames", [
    b"x" * 300,  # a header without end
    b"d 1 %d\n" % ((1 << 20) + 1),  # a frame larger than the limit
    b"z 1\n",  # not a resident's frame
    b"r notapid\n",
])  # fmt: skip
def test_what_is_not_a_resident_frame_closes_it(frames: bytes) -> None:
    channel = SocketChannel()
    res = Resident(None, channel)
    channel.host.sendall(b"r 4242\n")
    assert res.started.wait(5) and res.pid == 4242
    ours, keepers = socket.socketpair()
    rid = res.open(keepers, 0.0, 60.0, b"2\n{}")
    channel.host.sendall(b"d 999 3\nabc")  # for a run that is not there: dropped
    time.sleep(0.1)
    assert res.alive()
    channel.host.sendall(frames)
    assert wait_for(lambda: res.dead.is_set(), 5) is not None, "the resident lived on after a frame it cannot send"
    assert res.first_answer(rid, 1) is False
    ours.close()
    keepers.close()
