"""The systemd supervisor's pure parts: the unit and drop-ins process_ctl.py writes (checked by systemd's own
``systemd-analyze verify`` where it is installed), the restart policy per systemd version, an exit record read
back, and ``pd_supervisor`` resolved from what the host says."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from provision import remote
from provision.pd.flags import PlanError
from provision.pd.spec import resolve_supervisor


def ctl() -> ModuleType:
    if str(remote.REMOTE_DIR) not in sys.path:  # it imports the host library by its plain name, as on a host
        sys.path.insert(0, str(remote.REMOTE_DIR))
    spec = importlib.util.spec_from_file_location("process_ctl_under_test", remote.path("process_ctl.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


P = ctl()
POLICY = {"delay": 5.0, "max_delay": 300.0, "burst": 5, "interval": 900.0, "stop_timeout": 20.0}


def test_the_unit_runs_the_script_as_its_owner_with_the_log_appended(tmp_path: Path) -> None:
    req = {"name": "h1-decode", "log": "/home/u/.provision/pd/logs/h1-decode.log", "piddir": "/home/u/.provision/run"}
    lines = P.render_unit(req, "/home/u/.provision/pd/h1-decode.sh", "u").splitlines()
    for line in ("User=u", 'ExecStart="/home/u/.provision/pd/h1-decode.sh"', "WorkingDirectory=/home/u/.provision/pd",
                 "StandardOutput=append:/home/u/.provision/pd/logs/h1-decode.log", "StandardError=inherit",
                 "Restart=on-failure", "KillMode=control-group", "After=network-online.target",
                 "WantedBy=multi-user.target"):  # fmt: skip
        assert line in lines, line
    stop_post = next(line for line in lines if line.startswith("ExecStopPost="))
    assert '"/home/u/.provision/run/h1-decode.exits"' in stop_post and "$$SERVICE_RESULT" in stop_post


def test_a_multi_host_members_watch_unit() -> None:
    """The group watch of a member: a Wants= drop-in on its unit, a watch unit PartOf= it, run as the same user,
    the watch's words quoted (a $ in a path doubled, as systemd wants it)."""
    req = {"name": "h1-prefill", "log": "/home/u/logs/h1.log", "piddir": "/home/u/$run",
           "group": {"instance": "p", "health": "http://10.0.0.1:30000/health", "grace": 30, "interval": 2},
           "group_source": "# the helper\n"}  # fmt: skip
    texts = P.render_group(req, "u", "/usr/bin/python3")
    assert texts["group"].splitlines()[-2:] == ["[Unit]", "Wants=provision-pdwatch-h1-prefill.service"]
    lines = texts["watch"].splitlines()
    for line in ("PartOf=provision-pd-h1-prefill.service", "After=provision-pd-h1-prefill.service", "User=u",
                 "StandardOutput=append:/home/u/logs/h1.log", "Restart=always"):  # fmt: skip
        assert line in lines, (line, lines)
    start = next(line for line in lines if line.startswith("ExecStart="))
    assert start == ('ExecStart="/usr/bin/python3" '
                     '"/etc/systemd/system/provision-pd-h1-prefill.service.d/group-watch.py" "watch" "h1-prefill" '
                     '"/home/u/$$run" "http://10.0.0.1:30000/health" "30" "2" "/home/u/logs/h1.log"')  # fmt: skip
    assert texts["watch_py"] == "# the helper\n"


def test_words_are_quoted_for_systemd() -> None:
    assert P.quoted('/a b/"x"%i$HOME\\') == '"/a b/\\"x\\"%%i$$HOME\\\\"'
    assert P.plain("/logs/50%.log") == "/logs/50%%.log"
    with pytest.raises(ValueError):
        P.quoted("a\nb")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_what_is_written(tmp_path: Path) -> None:
    """``systemd-analyze verify`` on the unit with its drop-ins, paths with a space, % and $ included."""
    home = tmp_path / "a home %i $x"
    (home / "run").mkdir(parents=True)
    script = home / "svc.sh"
    script.write_text("#!/bin/sh\nexec sleep 1\n")
    script.chmod(0o755)
    req = {"name": "h1-decode", "log": str(home / "svc.log"), "piddir": str(home / "run")}
    unit = tmp_path / "provision-pd-h1-decode.service"
    unit.write_text(P.render_unit(req, str(script), "root"))
    drop = tmp_path / "provision-pd-h1-decode.service.d"
    drop.mkdir()
    (drop / "policy.conf").write_text(P.render_policy(POLICY, 252))
    (drop / "start.conf").write_text(P.render_start({"PROVISION_PD_VENV": str(home / "venv"), "A": 'q"%$'}, "ab", "r"))
    env = dict(os.environ, SYSTEMD_UNIT_PATH=f"{tmp_path}:")
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, env=env, check=False)
    problems = [line for line in (out.stdout + out.stderr).splitlines() if "h1-decode" in line]
    assert out.returncode == 0 and not problems, out.stdout + out.stderr


def test_the_restart_delay_grows_only_where_systemd_can() -> None:
    old = P.render_policy(POLICY, 252).splitlines()
    assert "RestartSec=5s" in old and not any(line.startswith("RestartSteps") for line in old)
    assert "StartLimitBurst=6" in old and "StartLimitIntervalSec=900s" in old and "TimeoutStopSec=20s" in old
    new = P.render_policy(POLICY, 254).splitlines()
    assert "RestartSteps=6" in new and "RestartMaxDelaySec=300s" in new  # 5 s doubled 6 times reaches 300 s


def test_an_exit_record_reads_back_as_provisions_last_exit() -> None:
    assert P.exit_of("1796160830 signal killed KILL")["signal"] == "SIGKILL"
    assert P.exit_of("1796160830 exit-code exited 3")["code"] == 3
    assert P.exit_text(P.exit_of("1796160830 signal killed KILL")) == "killed by SIGKILL"
    start = P.render_start({}, "abc", "run-1")
    assert P.x_provision(start) == {"ScriptSha256": "abc", "RunId": "run-1", "StartedAt": start.split("StartedAt=")[1]
                                    .split()[0]}  # fmt: skip


@pytest.mark.parametrize(
    ("wanted", "probe", "expected"),
    [
        ("auto", {"systemd": True, "uid": 0}, ("systemd", False)),
        ("auto", {"systemd": True, "uid": 1000, "sudo": True}, ("systemd", True)),
        ("auto", {"systemd": True, "uid": 1000, "sudo": False}, ("provision", False)),
        ("auto", {"systemd": False, "uid": 0}, ("provision", False)),
        ("provision", {"systemd": True, "uid": 0}, ("provision", False)),
        ("systemd", {"systemd": True, "uid": 1000, "sudo": True}, ("systemd", True)),
    ],
)
def test_auto_is_systemd_where_the_host_allows_it(wanted: str, probe: dict[str, object], expected: object) -> None:
    assert resolve_supervisor("h1", wanted, probe) == expected


def test_systemd_where_it_cannot_be_says_why() -> None:
    with pytest.raises(PlanError, match="systemd does not run this host"):
        resolve_supervisor("h1", "systemd", {"systemd": False, "uid": 0})
    with pytest.raises(PlanError, match="become_allowed"):
        resolve_supervisor("h1", "systemd", {"systemd": True, "uid": 1000, "sudo": False})
