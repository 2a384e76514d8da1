"""``provision pd``: the layout is validated before any host is touched (exit 5); status reads at a glance."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from provision.cli import cli
from provision.cli.pd import pd
from provision.pd.status import all_up, mark_unrouted, table, uptime_text
from tests.support.cli import run_cli
from tests.support.pd import inventory

if "pd" not in cli.commands:  # provision/cli/app.py registers it
    cli.add_command(pd)


def test_up_refuses_an_invalid_layout_before_touching_hosts(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_cli(["pd", "up", "-i", str(inventory(tmp_path, router_port=30000))])
    assert result.code == 5
    assert "ERROR: the PD deployment is not valid:" in result.err
    assert "port 30000 on localhost is used twice: prefill server port of p1 and router port of p1" in result.err
    assert "router and server both default to 30000 upstream: set router_port" in result.err
    assert "PLAY" not in result.out and time.monotonic() - started < 5


def test_status_of_unreachable_hosts(tmp_path: Path) -> None:
    result = run_cli(["pd", "status", "-i", str(inventory(tmp_path)), "--connect-timeout", "2"])
    assert result.code == 4
    lines = result.out.splitlines()
    assert lines[0].split() == ["HOST", "ROLE", "STATE", "PID", "UPTIME", "HEALTH", "PORT", "SUPERVISOR", "RESTARTS"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["p1", "prefill", "unreachable"], ["d1", "decode", "unreachable"], ["p1", "router", "unreachable"],
    ]  # fmt: skip


def test_down_of_unreachable_hosts_exits_4(tmp_path: Path) -> None:
    result = run_cli(["pd", "down", "-i", str(inventory(tmp_path)), "--connect-timeout", "2"])
    assert result.code == 4


@pytest.mark.parametrize(
    ("seconds", "text"), [(None, "-"), (5.9, "5s"), (65, "1m05s"), (3700, "1h01m"), (90000, "1d01h")]
)
def test_uptime_text(seconds: float | None, text: str) -> None:
    assert uptime_text(seconds) == text


def test_table() -> None:
    rows = [
        {"host": "lab0", "role": "prefill", "running": True, "pid": 41, "uptime": 75, "health": 200, "port": 30000},
        {"host": "lab1", "role": "decode", "running": False, "pid": 42, "orphans": [43], "port": 30000},
        {"host": "lab0", "role": "router", "running": True, "pid": 44, "uptime": 3, "health": 503, "port": 8000},
    ]
    assert table(rows).splitlines() == [
        "HOST  ROLE     STATE          PID  UPTIME  HEALTH    PORT   SUPERVISOR  RESTARTS",
        "lab0  prefill  up             41   1m15s   ok        30000  -           -",
        "lab1  decode   dead (1 left)  -    -       -         30000  -           -",
        "lab0  router   up             44   3s      HTTP 503  8000   -           -",
    ]
    assert not all_up(rows) and all_up(rows[:1]) and not all_up([])


def test_a_healthy_server_that_a_router_does_not_list_is_not_up() -> None:
    """A server that answers /health but that a router does not list (a rollout cut off between taking it out and
    putting it back) gets no request: HEALTH says so and the deployment is not up (``pd status`` exits 2). A
    router whose list could not be read, and a process that is not a router's worker, mark nothing."""
    rows = [
        {"host": "lab0", "role": "prefill", "name": "lab0-prefill", "running": True, "health": 200, "port": 30000},
        {"host": "lab1", "role": "decode", "name": "lab1-decode", "running": True, "health": 200, "port": 30000},
        {"host": "lab0", "role": "router", "name": "lab0-router", "running": True, "health": 200, "port": 8000,
         "workers": [{"url": "http://10.0.0.1:30000/", "healthy": True}]},
        {"host": "lab2", "role": "router", "name": "lab2-router", "running": True, "health": 200, "port": 8000,
         "workers_error": "GET http://127.0.0.1:8000/workers: no answer"},
    ]  # fmt: skip
    workers = {"lab0-prefill": "http://10.0.0.1:30000", "lab1-decode": "http://10.0.0.2:30000"}
    mark_unrouted(rows, workers)
    assert rows[1]["unrouted"] == ["lab0-router"] and all("unrouted" not in r for r in (rows[0], rows[2], rows[3]))
    assert table(rows).splitlines()[2].split()[:6] == ["lab1", "decode", "up", "-", "-", "ok,"]
    assert "ok, not routed" in table(rows).splitlines()[2]
    assert not all_up(rows) and all_up([rows[0], rows[2]])
    rows[1].pop("unrouted")
    rows[2]["workers"].append({"url": "http://10.0.0.2:30000", "healthy": False})
    mark_unrouted(rows, workers)
    assert "unrouted" not in rows[1] and all_up(rows[:3])


def test_status_table_shows_supervision() -> None:
    from provision.pd.status import table

    rows = [
        {"host": "p1", "role": "prefill", "running": True, "pid": 41, "uptime": 12, "health": 200, "port": 30000,
         "supervisor": "provision", "restarts": 2, "last_reason": "killed by SIGKILL after 41.2s",
         "last_exit": {"at": 1000.0}, "now": 1300.0},
        {"host": "d1", "role": "decode", "running": False, "port": 30000, "supervisor": "provision", "restarts": 5,
         "state": "failed", "crash_looping": True, "last_reason": "exit code 1 after 0.4s"},
        {"host": "d2", "role": "decode", "running": False, "port": 30000, "supervisor": "provision", "restarts": 1,
         "state": "backoff", "last_reason": "exit code 1 after 3s"},
        {"host": "r1", "role": "router", "running": True, "pid": 7, "health": 200, "supervisor": "none"},
    ]  # fmt: skip
    lines = table(rows).splitlines()
    assert "up" in lines[1].split() and lines[1].endswith(
        "provision   2 (last: killed by SIGKILL after 41.2s, 5m00s ago)"
    )
    assert "crash-looping" in lines[2].split() and lines[2].endswith("5 (last: exit code 1 after 0.4s)")
    assert "restarting" in lines[3].split()
    assert lines[4].split()[-2:] == ["none", "-"]
