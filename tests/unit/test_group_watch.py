"""The group watch of provision's supervisor (provision/remote/process_ctl.py ``group``): the members of one
multi-host server, each under the supervisor of its own "host" (its own pid directory here, as on two hosts),
go down and up together when one of them dies.

The members are STAND-INS, not SGLang: SGLang's CPU backend cannot run one server over several ranks
(docs/pd.md), and what is tested is generic process supervision. The stand-in leader accepts its ranks on a
TCP port (as torch.distributed's store does) and answers ``/health`` 200 only while the group it formed is
whole; a group that lost a member stays broken (a torch.distributed group cannot be rejoined). A rank dials the
leader and exits when the connection ends. Nothing here serves a generation."""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision import remote
from tests.support.processes import LEADER, RANK, alive, ctl
from tests.support.waiting import free_port, http_status
from tests.support.waiting import until as _until

SOURCE = remote.source("process_ctl.py").decode()
POLICY = {"delay": 0.5, "max_delay": 2.0, "burst": 6, "interval": 120.0, "stop_timeout": 5.0}

health = http_status
until = functools.partial(_until, interval=0.1)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A two-member group: ``leader`` (its /health) and ``rank``, each under its own pid directory's supervisor."""
    http_port, group_port = free_port(), free_port()
    url = f"http://127.0.0.1:{http_port}/health"
    members = {}
    for name, code, args in (("leader", LEADER, f"1 {http_port} {group_port}"), ("rank", RANK, str(group_port))):
        program = tmp_path / f"{name}.py"
        program.write_text(code)
        script = tmp_path / f"{name}.sh"
        script.write_text(f"#!/bin/sh\nexec python3 {program} {args}\n")
        script.chmod(0o700)
        members[name] = {"name": f"g-{name}", "piddir": str(tmp_path / f"host-{name}"), "script": str(script),
                         "log": str(tmp_path / f"{name}.log"), "supervisor": "provision", "supervisor_source": SOURCE,
                         "policy": POLICY,
                         "group": {"instance": "g", "health": url, "grace": 1.5, "interval": 0.2}}  # fmt: skip
    yield {"url": url, **members}
    for req in members.values():
        ctl("stop", **req, timeout=5)
        sup = _json(Path(req["piddir"], "supervisor.json"))
        if sup and alive(sup.get("pid")):
            os.kill(sup["pid"], signal.SIGKILL)


def _json(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def status(req: dict[str, Any]) -> dict[str, Any]:
    (row,) = ctl("status", procs=[req])["procs"]
    return dict(row)


def up(group: dict[str, Any]) -> dict[str, int]:
    for name in ("leader", "rank"):
        assert ctl("start", **group[name])["ok"]
    until("the group healthy", lambda: health(group["url"]) == 200)
    return {name: status(group[name])["pid"] for name in ("leader", "rank")}


def test_a_killed_rank_takes_the_whole_group_down_and_up(group: dict[str, Any]) -> None:
    before = up(group)
    os.kill(before["rank"], signal.SIGKILL)
    # the rank's own supervisor restarts it (a crash); the leader's sees its group broken for the grace: restarts
    leader = until("the leader restarted with its group", lambda: (r := status(group["leader"]))["pid"] != before[
        "leader"] and r["running"] and r)  # fmt: skip
    until("the group healthy again", lambda: health(group["url"]) == 200)
    leader, rank = status(group["leader"]), status(group["rank"])
    assert leader["group_restarts"] == 1 and leader["restarts"] == 1, leader
    assert leader["last_reason"].startswith("restarted with its multi-host server (" + group["url"]), leader
    assert rank["restarts"] >= 1 and rank["pid"] != before["rank"] and rank["running"], rank
    assert rank["last_exit"]["signal"] == "SIGKILL" or rank["restarts"] > 1, rank  # killed, then maybe left
    log = Path(group["leader"]["log"]).read_text()
    assert "its multi-host server g: " + group["url"] + " answered HTTP 503 for 1.5s: restarting this rank" in log
    # the group stays whole now: nobody restarts again
    time.sleep(3)
    assert status(group["leader"])["pid"] == leader["pid"] and status(group["rank"])["pid"] == rank["pid"]


def test_a_killed_leader_takes_the_ranks_down_and_up(group: dict[str, Any]) -> None:
    before = up(group)
    os.kill(before["leader"], signal.SIGKILL)
    until("the rank restarted", lambda: status(group["rank"])["pid"] != before["rank"])
    until("the group healthy again", lambda: health(group["url"]) == 200)
    assert status(group["leader"])["restarts"] >= 1 and status(group["rank"])["restarts"] >= 1


def test_a_group_that_never_was_healthy_is_left_starting(group: dict[str, Any]) -> None:
    """Only a group that answered 200 since the member started is watched: a server still starting is no
    failure (the leader alone, its rank never started, stays 503 and is left running)."""
    assert ctl("start", **group["leader"])["ok"]
    pid = until("the leader running", lambda: status(group["leader"])["pid"])
    until("the stand-in answering 503", lambda: health(group["url"]) == 503)
    time.sleep(3)  # twice the grace
    row = status(group["leader"])
    assert row["pid"] == pid and row["restarts"] == 0 and row["group_restarts"] == 0, row
