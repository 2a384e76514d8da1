"""Real CPU-mode SGLang servers under ``pd_supervisor: systemd``: a prefill (with the router) and a decode as two
inventory names on the lab's real-systemd host (``Lab.systemd_host``; its user has passwordless sudo), brought up
by ``provision pd up`` (a rerun changes nothing); under a client's load the decode, then the prefill, then the
router is killed with SIGKILL, systemd starts it again, and the deployment serves again through the router with
no provision command. The
recovery times (kill → healthy, kill → a request succeeds again) and the requests that failed meanwhile are
printed; the requests after recovery all succeed.

Two CPU servers (~10 GB): run under ``flock /tmp/provision-sglang.lock``. The unit files are real files of this
machine (/etc/systemd/system): the fixture removes them whatever happens.
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import lab_ssh_config, run_cli_in
from tests.support.stack import VENV, SglangStack

pytestmark = pytest.mark.lab

UNIT_DIR = Path("/etc/systemd/system")
POLICY = {"pd_restart_delay": 1, "pd_restart_max_delay": 8, "pd_start_limit_burst": 3, "pd_start_limit_interval": 900}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Load:
    """A client sending greedy generations through the router, one after the other, each one's outcome timed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.results: list[tuple[float, float, bool]] = []  # (sent, done, ok) per request
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        body = json.dumps({"text": "Hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}).encode()
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                req = urllib.request.Request(f"{self.url}/generate", body, {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=15) as resp:
                    ok = resp.status == 200 and bool(json.loads(resp.read()).get("text") is not None)
            except (OSError, ValueError):
                ok = False
            self.results.append((sent, time.monotonic(), ok))
            if not ok:
                time.sleep(0.2)


@pytest.fixture(scope="module")
def deployment(lab: Any, sglang_stack: SglangStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if shutil.which("unshare") is None or not Path("/lib/systemd/systemd").exists():
        pytest.skip("the lab's systemd host needs unshare and systemd")
    i = sglang_stack.host
    h = lab.hosts[i]
    token = secrets.token_hex(2)
    prefill, decode = f"sp{token}", f"sd{token}"
    conn = {"ansible_host": h.address, "ansible_port": h.port, "ansible_user": h.user,
            "ansible_ssh_private_key_file": str(lab.client_key), "sglang_device": "cpu", "venv_path": VENV,
            "python": "/usr/bin/python3", "become_allowed": True, "pd_supervisor": "systemd", **POLICY}  # fmt: skip
    # two inventory names on one home: each its own ports, tiny model and compat dir (made at the same time)
    ports = {n: {"server_port": free_port(), "bootstrap_port": free_port(), "pd_tiny_model_dir": f"~/.provision/m-{n}",
                 "pd_compat_dir": f"~/.provision/pd/compat-{n}"} for n in (prefill, decode)}  # fmt: skip
    router = free_port()
    groups = {
        "prefill": {"hosts": {prefill: {**conn, **ports[prefill], "router_port": router}}},
        "decode": {"hosts": {decode: {**conn, **ports[decode]}}},
        "router": {"hosts": {prefill: {}}},
    }
    workdir = tmp_path_factory.mktemp("pd-systemd-sglang")
    inventory = workdir / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": groups}}))
    names = [f"{prefill}-prefill", f"{decode}-decode", f"{prefill}-router"]

    def remove_units() -> None:
        for name in names:
            unit = UNIT_DIR / f"provision-pd-{name}.service"
            (UNIT_DIR / "multi-user.target.wants" / unit.name).unlink(missing_ok=True)
            unit.unlink(missing_ok=True)
            shutil.rmtree(unit.with_name(unit.name + ".d"), ignore_errors=True)

    def cli(*argv: str) -> Any:
        return run_cli_in(workdir, [*argv, "-i", str(inventory)])

    lab.grant_sudo(i)
    try:
        with lab_ssh_config(lab), lab.systemd_host(i):
            try:
                yield {"cli": cli, "lab": lab, "host": i, "router": f"http://{h.address}:{router}",
                       "names": names}  # fmt: skip
            finally:
                cli("pd", "down")
                remove_units()
    finally:
        remove_units()
        lab.revoke_sudo(i)


def logs(dep: dict[str, Any], lines: int = 25) -> str:
    """The last lines of each process's log (what a failed recovery shows)."""
    out = []
    for name in dep["names"]:
        text = dep["lab"].run_as(dep["host"], ["tail", "-n", str(lines), f".provision/pd/logs/{name}.log"]).stdout
        out.append(f"--- {name}.log\n{text}")
    return "\n".join(out)


def rows(dep: dict[str, Any]) -> tuple[int, dict[str, dict[str, Any]]]:
    result = dep["cli"]("pd", "status", "--json")
    return result.code, {r["role"]: r for r in json.loads(result.out)["procs"]}


def test_up_is_supervised_by_systemd_and_a_rerun_changes_nothing(deployment: dict[str, Any]) -> None:
    up = deployment["cli"]("pd", "up", "--json")
    assert up.code == 0, (up.out + up.err)[-4000:]
    code, status = rows(deployment)
    assert code == 0, status
    assert {r["supervisor"] for r in status.values()} == {"systemd"}, status
    assert {r["enabled"] for r in status.values()} == {"enabled"}, status
    again = deployment["cli"]("pd", "up", "--json")
    assert again.code == 0, (again.out + again.err)[-4000:]
    assert {h: s["changed"] for h, s in json.loads(again.out)["stats"].items()} == dict.fromkeys(
        json.loads(again.out)["stats"], 0
    )
    assert {role: r["pid"] for role, r in rows(deployment)[1].items()} == {role: r["pid"] for role, r in status.items()}


@pytest.mark.parametrize("role", ["decode", "prefill", "router"])
def test_kill9_under_load_comes_back_serving(deployment: dict[str, Any], role: str) -> None:
    """kill -9 of one process (the decode, then the prefill, then the router) under a client's load: systemd
    starts it again, and the deployment serves through the router again with no provision command (after a
    prefill restart the decode reconnects by itself; a restarted router re-learns its workers from its flags)."""
    code, status = rows(deployment)
    assert code == 0, status
    load = Load(deployment["router"])
    load.thread.start()
    try:
        deadline = time.monotonic() + 60
        while sum(ok for *_, ok in load.results) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sum(ok for *_, ok in load.results) >= 3, load.results[-5:]
        pid = status[role]["pid"]
        argv = ["ssh", "-F", str(deployment["lab"].ssh_config_path), deployment["lab"].hosts[deployment["host"]].name]
        subprocess.run([*argv, f"kill -9 {pid}"], check=True, timeout=60)
        killed = time.monotonic()
        deadline = killed + 400
        healthy: float | None = None  # when pd status first shows the new process up and healthy
        while time.monotonic() < deadline:
            if healthy is None:
                row = rows(deployment)[1][role]
                if row["running"] and row["pid"] != pid and row["health"] == 200:
                    healthy = time.monotonic() - killed
            after = [r for r in load.results if r[0] > killed]
            if healthy is not None and after and sum(ok for *_, ok in after[-3:]) == 3:
                break
            time.sleep(0.5)
        after = [r for r in load.results if r[1] > killed]
        first_ok = next((done for sent, done, ok in after if ok and sent > killed), None)
        assert first_ok is not None, (
            f"no request succeeded within 400 s of the kill (healthy after {healthy}s): {after[-5:]}\n"
            f"{rows(deployment)}\n{logs(deployment)}"
        )
        recovery = first_ok - killed
        failed = sum(1 for *_, ok in after if not ok)
        code, status = rows(deployment)
        row = status[role]
        assert row["running"] and row["pid"] != pid and row["restarts"] == 1, row
        assert row["last_reason"] == "killed by SIGKILL", row
        assert code == 0, status
        mark = len(load.results)
        time.sleep(10)
    finally:
        load.stop.set()
        load.thread.join(timeout=90)
    later = load.results[mark:]
    assert later and all(ok for *_, ok in later), later
    assert healthy is not None
    print(f"\nsystemd: {role} killed -9 under load → healthy again after {healthy:.1f}s, serving again after "
          f"{recovery:.1f}s; {failed} of {len(after)} requests failed meanwhile (15 s client timeout); "
          f"{len(later)} requests in the 10 s after recovery all succeeded")  # fmt: skip


def generate(url: str) -> bool:
    body = json.dumps({"text": "Hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}).encode()
    try:
        req = urllib.request.Request(f"{url}/generate", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status == 200
    except OSError:
        return False


def test_the_host_restarted_serves_again_without_provision(deployment: dict[str, Any]) -> None:
    """The host's systemd namespace killed and booted again (a power cut and a reboot): the three enabled units
    start by themselves, the router serves again, ``pd verify`` passes, and ``pd up`` then changes nothing."""
    deployment["lab"].reboot_systemd_host(deployment["host"])
    booted = time.monotonic()
    deadline = booted + 400
    healthy = serving = None
    while time.monotonic() < deadline and serving is None:
        if healthy is None and rows(deployment)[0] == 0:
            healthy = time.monotonic() - booted
        if healthy is not None and generate(deployment["router"]):
            serving = time.monotonic() - booted
        time.sleep(1)
    assert healthy is not None and serving is not None, rows(deployment)[1]
    assert all(generate(deployment["router"]) for _ in range(5))
    print(f"\nsystemd: the host restarted → all healthy after {healthy:.1f}s, serving through the router after "
          f"{serving:.1f}s, with no provision command")  # fmt: skip
    verify = deployment["cli"]("pd", "verify")
    assert verify.code == 0, (verify.out + verify.err)[-3000:]
    up = deployment["cli"]("pd", "up", "--json")
    assert up.code == 0, (up.out + up.err)[-4000:]
    stats = json.loads(up.out)["stats"]
    assert stats and all(s["changed"] == 0 for s in stats.values()), stats
