"""Heartbeats, without a network: the runner, the run-lock holder and the agent, fed through local pipes as an
SSH channel would feed them. H > 0: 3 H seconds without a byte on stdin end them (and what they started), as
the end of stdin does; heartbeats keep them going; H = 0 (LocalConnection) waits for the end of stdin only.
Against a real sshd and a frozen controller: tests/integration/test_trust_transport.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from provision.commands import HEARTBEAT, Command
from provision.transport import ConnectOptions
from provision.transport.agent import PythonAgent
from provision.transport.local import _PipeStream
from tests.support.processes import alive, finish, start_locker, wait_for

H = 0.3


@contextmanager
def beating(proc: subprocess.Popen[bytes], every: float) -> Iterator[threading.Event]:
    """Send heartbeats on ``proc``'s stdin until the block ends (or the returned event is set)."""
    stop = threading.Event()
    assert proc.stdin is not None
    stdin = proc.stdin

    def beat() -> None:
        while not stop.wait(every):
            try:
                stdin.write(HEARTBEAT)
                stdin.flush()
            except (OSError, ValueError):
                return

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join()


def start_runner(cmd: Command, heartbeat: float, timeout: float = 60) -> subprocess.Popen[bytes]:
    inv = cmd.render(timeout, None, heartbeat)
    proc = subprocess.Popen(["/bin/sh", "-c", inv.text], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(inv.stdin)
    proc.stdin.flush()
    return proc


def test_default_interval_follows_the_keepalive_within_bounds() -> None:
    assert ConnectOptions().heartbeat_interval() == 10.0
    assert ConnectOptions(connect_timeout=1).heartbeat_interval() == 1.0
    assert ConnectOptions(connect_timeout=0.2).heartbeat_interval() == 1.0
    assert ConnectOptions(connect_timeout=60).heartbeat_interval() == 10.0
    assert ConnectOptions(connect_timeout=60, keepalive=3).heartbeat_interval() == 3.0
    assert ConnectOptions(heartbeat=0).heartbeat_interval() == 0.0
    assert ConnectOptions(heartbeat=0.5).heartbeat_interval() == 0.5


def test_the_exec_text_carries_h_and_local_commands_get_none() -> None:
    assert Command.of("true").render(5, None, 2.5).text.endswith(" 5 2.5")
    assert Command.of("true").render(5).text.endswith(" 5 0")


def test_a_silent_controller_gets_the_command_and_its_group_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    proc = start_runner(Command.shell(f"sleep 300 & echo $! > {pidfile}; wait"), H)
    try:
        assert wait_for(lambda: pidfile.exists() and pidfile.read_text().strip().isdigit(), 10, 0.02) is not None
        started = time.monotonic()
        pid = int(pidfile.read_text())
        assert proc.wait(10) == 129  # as for EOF; nothing closed stdin: the heartbeats just never came
        took = time.monotonic() - started
        assert wait_for(lambda: not alive(pid), 5, 0.02) is not None
        assert took < 3 * H + 2, took
    finally:
        finish(proc)


def test_heartbeats_keep_a_long_command_alive() -> None:
    proc = start_runner(Command.shell("sleep 2; echo done"), H)
    assert proc.stdout is not None
    try:
        with beating(proc, H):
            out = proc.stdout.read()
            assert (proc.wait(10), out) == (0, b"done\n")
    finally:
        finish(proc)


def test_without_heartbeat_interval_silence_is_fine() -> None:
    proc = start_runner(Command.shell("sleep 1.5; echo done"), 0)
    assert proc.stdout is not None
    try:
        out = proc.stdout.read()  # stdin stays open and silent
        assert (proc.wait(10), out) == (0, b"done\n")
    finally:
        finish(proc)


def test_a_controller_silent_before_the_script_is_sent_leaves_no_runner() -> None:
    inv = Command.of("true").render(60, None, H)
    proc = subprocess.Popen(["/bin/sh", "-c", inv.text], stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(inv.stdin[:3])  # part of the script, then nothing
    proc.stdin.flush()
    try:
        assert proc.wait(3 * H + 5) == 125
    finally:
        finish(proc)


def locked(tmp_path: Path, heartbeat: float) -> subprocess.Popen[bytes]:
    proc = start_locker(tmp_path, f"hb-{os.getpid()}-{time.monotonic_ns()}", heartbeat, b"test holder")
    assert proc.stdout is not None and proc.stdout.readline() == b"locked\n"
    return proc


def test_the_run_lock_holder_lets_go_when_the_controller_goes_silent(tmp_path: Path) -> None:
    proc = locked(tmp_path, H)
    try:
        with beating(proc, H):
            time.sleep(5 * H)
            assert proc.poll() is None  # heartbeats: held
        started = time.monotonic()
        assert proc.wait(10) == 0
        assert time.monotonic() - started < 3 * H + 2
    finally:
        finish(proc)


def test_the_run_lock_holder_without_heartbeat_interval_waits_for_eof(tmp_path: Path) -> None:
    proc = locked(tmp_path, 0)
    try:
        time.sleep(5 * H)
        assert proc.poll() is None
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(10) == 0
    finally:
        finish(proc)


def start_agent(heartbeat: float) -> tuple[PythonAgent, subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        ["/bin/sh", "-c", PythonAgent.command(sys.executable, heartbeat).direct()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    return PythonAgent("local", _PipeStream(proc)), proc


def test_the_agent_skips_heartbeats_between_requests_and_exits_when_they_stop(tmp_path: Path) -> None:
    agent, proc = start_agent(H)
    try:
        with beating(proc, H / 3):  # a lot of them, between and during requests
            for _ in range(5):
                result = agent.call("file_state.py", ["stat"], b'{"paths": ["/"]}', 30)
                assert result.rc == 0, result.stderr
                time.sleep(H)
            agent.beat()  # what the connection's heartbeat thread calls
            assert agent.call("file_state.py", ["stat"], b'{"paths": ["/"]}', 30).rc == 0
            assert proc.poll() is None
        started = time.monotonic()
        assert proc.wait(10) == 0
        assert time.monotonic() - started < 3 * H + 2
    finally:
        agent.close()


def test_the_agent_takes_a_running_script_with_it_when_the_controller_goes_silent(tmp_path: Path) -> None:
    """A script is still running when the heartbeats stop: the agent does not wait for it to end."""
    pidfile = tmp_path / "child.pid"
    agent, proc = start_agent(H)
    assert proc.stdin is not None
    # a request whose script starts a child (in the agent's process group) and waits for it for a long time
    script = (
        "import subprocess, sys\n"
        "p = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "p.wait()\n"
    )
    request = json.dumps({"name": "long.py", "source": script, "args": [], "stdin": "", "timeout": 600}).encode()
    proc.stdin.write(b"%d\n" % len(request) + request)
    proc.stdin.flush()
    try:
        assert wait_for(lambda: pidfile.exists() and pidfile.read_text().isdigit(), 10, 0.02) is not None
        child = int(pidfile.read_text())
        assert proc.wait(3 * H + 5) == 0
        assert wait_for(lambda: not alive(child), 5, 0.02) is not None
    finally:
        agent.close()


@pytest.mark.parametrize("heartbeat", [0.0, H])
def test_the_agent_exits_at_the_end_of_its_stdin(heartbeat: float) -> None:
    agent, proc = start_agent(heartbeat)
    try:
        assert agent.call("file_state.py", ["stat"], b'{"paths": ["/"]}', 30).rc == 0
        if heartbeat == 0:
            time.sleep(5 * H)  # no heartbeats expected: silence is fine
            assert proc.poll() is None
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(5) == 0
    finally:
        agent.close()
