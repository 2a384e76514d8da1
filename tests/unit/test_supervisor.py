"""The provision supervisor (provision/remote/process_ctl.py with ``"supervisor": "provision"``) on this machine,
with real processes: a start leaves a detached supervisor that restarts a process killed with SIGKILL (its
signal, uptime and log tail recorded, the restart counted), with delays that grow and a start limit after which
the process stays down as a crash loop; a stop leaves nothing running and the supervisor exits; a dead
supervisor is started again by ``status`` and adopts what runs; a restart stays on the env the process was
started with (the venv link switched under it), a new start moves it."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provision import remote
from tests.support import waiting
from tests.support.processes import alive, ctl  # the helper run here as on a host, and /proc's view

SOURCE = remote.source("process_ctl.py").decode()
FAST = {"delay": 0.5, "max_delay": 4.0, "burst": 2, "interval": 60.0, "stop_timeout": 5.0}


def until(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    return waiting.until(what, check, timeout, interval=0.05)  # this file's waits: 30 s, polled every 50 ms


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[dict[str, Any]]:
    script = tmp_path / "svc.sh"
    script.write_text('#!/bin/sh\necho "starting on ${PROVISION_PD_VENV:-no venv}"\nexec sleep 1000\n')
    script.chmod(0o700)
    base = {"name": "svc", "piddir": str(tmp_path / "run"), "script": str(script), "log": str(tmp_path / "svc.log"),
            "supervisor": "provision", "supervisor_source": SOURCE, "policy": FAST}  # fmt: skip
    yield base
    ctl("stop", **base, timeout=5)
    sup = supervisor(base)
    if sup and alive(sup["pid"]):
        os.kill(sup["pid"], signal.SIGKILL)


def supervisor(req: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return dict(json.loads(Path(req["piddir"], "supervisor.json").read_text()))
    except (OSError, ValueError):
        return None


def status(req: dict[str, Any]) -> dict[str, Any]:
    (row,) = ctl("status", procs=[req])["procs"]
    return dict(row)


def test_a_killed_process_comes_back_with_growing_delays_then_stays_down(svc: dict[str, Any]) -> None:
    first = ctl("start", **svc)
    assert first["ok"] and first["action"] == "started", first
    sup = supervisor(svc)
    assert sup and alive(sup["pid"]) and os.getsid(sup["pid"]) == sup["pid"]  # detached: its own session
    assert ctl("start", **svc)["action"] == "none"  # converged

    pid, downtimes = first["pid"], []
    for restart in (1, 2):
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        row = until("the restart", lambda p=pid: (r := status(svc))["running"] and r["pid"] != p and r)  # type: ignore[misc]
        downtimes.append(time.monotonic() - killed)
        assert row["supervisor"] == "provision" and row["state"] == "running" and row["restarts"] == restart
        assert row["last_exit"]["signal"] == "SIGKILL" and row["last_exit"]["code"] is None
        assert row["last_reason"].startswith("killed by SIGKILL after ")
        pid = row["pid"]
    assert downtimes[0] >= FAST["delay"] and downtimes[1] >= 2 * FAST["delay"], downtimes  # the delay doubled

    os.kill(pid, signal.SIGKILL)  # a third crash within the interval: past the start limit (burst 2)
    row = until("the crash loop", lambda: (r := status(svc))["state"] == "failed" and r)
    assert row["crash_looping"] and not row["running"] and row["restarts"] == 2 and row["crashes"] == 3
    time.sleep(3 * FAST["max_delay"] / 2)
    assert status(svc)["state"] == "failed"  # stays down
    log = Path(svc["log"]).read_text()
    assert "over the start limit" in log and log.count("provision supervisor: restarted svc") == 2

    again = ctl("start", **svc)  # a new start (pd up) clears the crash loop
    assert again["ok"] and again["action"] == "started"
    row = status(svc)
    assert row["state"] == "running" and row["restarts"] == 0 and not row["crash_looping"]


def test_a_script_that_dies_at_once_fails_the_start(svc: dict[str, Any]) -> None:
    Path(svc["script"]).write_text("#!/bin/sh\necho 'boom: no model' >&2\nexit 3\n")
    answer = ctl("start", **svc)
    assert not answer["ok"] and answer["rc"] == 3, answer
    assert answer["msg"] == "svc exited at once (rc=3)"  # as without the supervisor
    assert any("boom: no model" in line for line in answer["log_tail"])


def test_stop_leaves_nothing_and_the_supervisor_exits(svc: dict[str, Any]) -> None:
    started = ctl("start", **svc)
    sup = supervisor(svc)
    assert sup is not None
    stopped = ctl("stop", **svc, timeout=5)
    assert stopped["action"] == "stopped" and not alive(started["pid"])
    until("the supervisor to exit", lambda: not alive(sup["pid"]), 10)
    assert not Path(svc["piddir"], "svc.want.json").exists() and not Path(svc["piddir"], "svc.json").exists()
    time.sleep(2 * FAST["delay"])
    assert not alive(started["pid"]) and status(svc)["running"] is False  # nothing respawned
    assert ctl("stop", **svc, timeout=5)["action"] == "none"


def test_a_dead_supervisor_is_started_again_by_status_and_adopts(svc: dict[str, Any]) -> None:
    started = ctl("start", **svc)
    old = supervisor(svc)
    assert old is not None
    os.kill(old["pid"], signal.SIGKILL)
    until("the supervisor to die", lambda: not alive(old["pid"]), 10)
    row = status(svc)
    assert row["supervisor_restarted"] and row["running"] and row["pid"] == started["pid"]  # adopted, not restarted
    new = supervisor(svc)
    assert new is not None and new["pid"] != old["pid"] and alive(new["pid"])
    os.kill(started["pid"], signal.SIGKILL)  # the adopted process is supervised: its exit code is unknown
    row = until("the restart", lambda: (r := status(svc))["running"] and r["pid"] != started["pid"] and r)
    assert row["restarts"] == 1 and row["last_exit"]["code"] is None and row["last_exit"]["signal"] is None


def test_a_changed_script_is_a_new_start_not_a_crash(svc: dict[str, Any]) -> None:
    first = ctl("start", **svc)
    Path(svc["script"]).write_text("#!/bin/sh\necho v2\nexec sleep 999\n")
    second = ctl("start", **svc)
    assert second["action"] == "restarted" and second["pid"] != first["pid"] and not alive(first["pid"])
    row = status(svc)
    assert row["restarts"] == 0 and row["last_exit"] is None  # a planned restart is no crash


def test_restarts_stay_on_the_env_they_were_started_with(svc: dict[str, Any], tmp_path: Path) -> None:
    envs = tmp_path / "venv.envs"
    (envs / "A").mkdir(parents=True)
    (envs / "B").mkdir()
    link = tmp_path / "venv"
    link.symlink_to(envs / "A")
    started = ctl("start", **svc, venv=str(link))
    assert status(svc)["venv"] == str(envs / "A")
    tmp = tmp_path / "venv.new"
    tmp.symlink_to(envs / "B")
    tmp.rename(link)  # install.yml switched the link under the running process
    os.kill(started["pid"], signal.SIGKILL)
    row = until("the restart", lambda: (r := status(svc))["running"] and r["pid"] != started["pid"] and r)
    assert row["venv"] == str(envs / "A")  # came back on the env it was started and verified with
    until("its banner", lambda: f"starting on {envs / 'A'}" in Path(svc["log"]).read_text().split("restarted svc")[-1])
    moved = ctl("start", **svc, venv=str(link), force_restart=True)  # pd rollout restarts it: it moves
    assert moved["action"] == "restarted"
    assert status(svc)["venv"] == str(envs / "B")
