"""provision/remote/process_ctl.py on this machine: start detached, idempotent start, restart on a changed
script, orphans of a dead leader, a reused pid, stop of the whole session, wait with a log tail, tail."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision import remote
from tests.support.processes import alive, ctl

HELPER = remote.path("process_ctl.py")


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    script = tmp_path / "svc.sh"
    script.write_text("#!/bin/sh\necho starting\nexec sleep 1000\n")
    script.chmod(0o700)
    base = {"name": "svc", "piddir": str(tmp_path / "run"), "script": str(script), "log": str(tmp_path / "svc.log")}
    yield base
    ctl("stop", **base, timeout=5)


def test_start_is_idempotent_and_detached(env: dict[str, str]) -> None:
    first = ctl("start", **env)
    assert first["ok"] and first["action"] == "started"
    pid = first["pid"]
    assert alive(pid) and os.getsid(pid) == pid  # its own session: the SSH session ending leaves it alone
    assert Path(env["piddir"], "svc.pid").read_text().strip() == str(pid)
    assert ctl("start", **env) == {"ok": True, "action": "none", "pid": pid, "sha256": first["sha256"]}
    (status,) = ctl("status", procs=[env])["procs"]
    assert status["running"] and status["pid"] == pid and status["uptime"] >= 0
    assert status["script_sha256"] == status["started_sha256"]
    assert "provision started svc" in Path(env["log"]).read_text()


def test_changed_script_restarts(env: dict[str, str]) -> None:
    old = ctl("start", **env)["pid"]
    Path(env["script"]).write_text("#!/bin/sh\nexec sleep 1001\n")
    stale = ctl("start", **env, restart_changed=False)
    assert stale["action"] == "none" and stale["stale"] is True
    (status,) = ctl("status", procs=[env])["procs"]
    assert status["script_sha256"] != status["started_sha256"]
    new = ctl("start", **env)
    assert new["action"] == "restarted" and new["pid"] != old
    assert not alive(old) and alive(new["pid"])
    forced = ctl("start", **env, force_restart=True)
    assert forced["action"] == "restarted" and not alive(new["pid"])


def test_check_mode_changes_nothing(env: dict[str, str]) -> None:
    assert ctl("start", **env, check=True) == {"ok": True, "action": "started", "pid": None}
    assert not Path(env["piddir"], "svc.json").exists()


def test_orphans_of_a_dead_leader_are_ended_on_start(env: dict[str, str]) -> None:
    Path(env["script"]).write_text("#!/bin/sh\nsleep 1002 &\necho $! > child.pid\nexec sleep 1003\n")
    leader = ctl("start", **env)["pid"]
    time.sleep(0.3)
    child = int((Path(env["script"]).parent / "child.pid").read_text())
    os.kill(leader, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive(leader) and time.monotonic() < deadline:
        time.sleep(0.05)
    (status,) = ctl("status", procs=[env])["procs"]
    assert not status["running"] and status["orphans"] == [child]
    again = ctl("start", **env)
    assert again["action"] == "started" and not alive(child)


def test_a_reused_pid_is_not_ours(env: dict[str, str]) -> None:
    ctl("start", **env)
    record_path = Path(env["piddir"], "svc.json")
    record = json.loads(record_path.read_text())
    record["starttime"] -= 1  # same pid, another start time: what a reused pid looks like
    record_path.write_text(json.dumps(record))
    (status,) = ctl("status", procs=[env])["procs"]
    assert status["running"] is False and status["orphans"] == []
    # start does not touch the process that "reused" the pid, and starts its own
    again = ctl("start", **env)
    assert again["action"] == "started" and alive(record["pid"])
    os.kill(record["pid"], signal.SIGKILL)


def test_stop_ends_the_session_and_is_idempotent(env: dict[str, str]) -> None:
    Path(env["script"]).write_text("#!/bin/sh\ntrap '' TERM\nsleep 1004 &\nwait\n")  # ignores TERM: KILL it
    pid = ctl("start", **env)["pid"]
    other = ctl("stop", **env, timeout=5, run_id="another-run")
    assert other == {"ok": True, "action": "none", "skipped": "started by another run"}
    stopped = ctl("stop", **env, timeout=1)
    assert stopped["action"] == "stopped" and len(stopped["killed"]) == 2 and stopped["seconds"] >= 1
    assert not alive(pid) and not Path(env["piddir"], "svc.pid").exists()
    assert ctl("stop", **env) == {"ok": True, "action": "none"}


def test_a_script_that_dies_at_once(env: dict[str, str]) -> None:
    Path(env["script"]).write_text("#!/bin/sh\necho 'bad flag --x' >&2\nexit 3\n")
    answer = ctl("start", **env)
    assert answer["ok"] is False and answer["rc"] == 3 and "exited at once" in answer["msg"]
    assert answer["log_tail"][-1] == "bad flag --x"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_wait_for_health_and_for_a_death(env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    Path(env["script"]).write_text(
        f"#!/bin/sh\nsleep 0.5\nexec {sys.executable} -m http.server {port} --bind 127.0.0.1\n"
    )
    ctl("start", **env)
    ok = ctl("wait", procs=[{**env, "url": f"http://127.0.0.1:{port}/"}], timeout=30, interval=0.1)
    assert ok["ok"] and 0 < ok["ready"]["svc"] < 10
    dying = {**env, "name": "dying", "script": str(tmp_path / "dying.sh"), "log": str(tmp_path / "dying.log")}
    Path(dying["script"]).write_text("#!/bin/sh\nsleep 0.6\necho 'Traceback: boom'\nexit 1\n")
    os.chmod(dying["script"], 0o700)
    assert ctl("start", **dying)["ok"]
    failed = ctl("wait", procs=[{**dying, "url": f"http://127.0.0.1:{free_port()}/"}], timeout=30, interval=0.1)
    assert failed["ok"] is False and failed["why"] == "exited" and failed["name"] == "dying"
    assert failed["elapsed"] < 10 and failed["log_tail"][-1] == "Traceback: boom"
    slow = ctl("wait", procs=[{**env, "url": f"http://127.0.0.1:{free_port()}/"}], timeout=0.5, interval=0.1)
    assert slow["why"] == "timeout" and slow["last_status"] is None


def test_tail(env: dict[str, str]) -> None:
    Path(env["log"]).write_text("".join(f"line {i}\n" for i in range(100)))
    (entry,) = ctl("tail", procs=[env], lines=3)["procs"]
    assert entry["lines"] == ["line 97", "line 98", "line 99"]
