"""``pd_supervisor: systemd`` on the lab's real-systemd host (``Lab.systemd_host``), its user with passwordless
sudo (``Lab.grant_sudo``; provision becomes root for the unit steps only), with a fake server (a small Python
HTTP server answering ``/health``) as the decode and the router of a one-host deployment: the unit files as
written, ``auto`` picks systemd, a converged rerun reports 0 changes (its held-port check finds the ports held
by the units themselves), ``kill -9`` → systemd starts it again (on
the env it was started with, the venv link switched meanwhile), the restart delay (growing where the host's
systemd has ``RestartSteps``), the start limit → crash-looping in ``pd status`` (exit 2) until the next
``pd up``, the host's systemd restarted (a simulated reboot) brings both back with no provision command and the
next run is a no-op, with ``pd_serial_start``'s start gate in their scripts they come back one after the other,
and ``pd down`` leaves nothing running, enabled or written 30 s later.

The unit files are real files of this machine (/etc/systemd/system): the fixture removes them whatever happens.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import lab_ssh_config, run_cli_in
from tests.support.waiting import until

pytestmark = pytest.mark.lab

HOST = 0
UNIT_DIR = Path("/etc/systemd/system")
WANTS = UNIT_DIR / "multi-user.target.wants"
POLICY = {"pd_restart_delay": 2, "pd_restart_max_delay": 8, "pd_start_limit_burst": 3,
          "pd_start_limit_interval": 120, "pd_stop_timeout": 5}  # fmt: skip

# the fake server: the launch script itself; it says which env it runs on, then answers /health (and /readiness)
FAKE = r"""#!/usr/bin/python3
import http.server, os, sys
venv = os.environ.get("PROVISION_PD_VENV")
print("fake {{ item.name }} starting on venv=%s pid=%d" % (venv, os.getpid()), flush=True)
{% if fake_gate | default(false) %}
import subprocess, time
subprocess.run([sys.executable, "{{ pd.start_gate.script }}", "{{ fake_gate_key | default('') }}", "{{ item.name }}",
                str(os.getpid()), "{{ item.health_url }}", "60"])  # as a launch script runs it, with its $$
print("fake {{ item.name }} passed the gate at %.3f" % time.time(), flush=True)
time.sleep(3)  # a server's start: its /health answers only after it
print("fake {{ item.name }} serving at %.3f" % time.time(), flush=True)
{% endif %}
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("{{ item.bind }}", {{ item.port }}), H).serve_forever()
"""

PLAYBOOK = """
- hosts: decode:router
  gather_facts: false
  tasks:
    - name: pd
      pd_config:
      register: pd
    - name: dirs
      file: {path: "{{ item }}", state: directory, mode: "0700"}
      loop: "{{ pd.dirs }}"
    - name: two envs and the venv link (as install.yml leaves them)
      shell: >-
        mkdir -p ~/pd-systemd-test/env-a ~/pd-systemd-test/env-b &&
        { [ -L ~/pd-systemd-test/venv ] || ln -s env-a ~/pd-systemd-test/venv; }
      changed_when: false
    - name: the start gate (pd_serial_start's), for the fake scripts that run it
      pd_start_gate: {dest: "{{ pd.dir }}"}
      when: fake_gate | default(false)
    - name: fake launch scripts
      copy:
        dest: "{{ item.script }}"
        mode: "0700"
        content: "FAKE"
      loop: "{{ pd.procs }}"
    - name: the planned ports are free or held by these very units (their cgroup)
      pd_rollout_step: {action: ports, request: {ports: "{{ pd.ports }}"}, timeout: 30}
    - name: running
      process:
        name: "{{ item.name }}"
        script: "{{ item.script }}"
        log: "{{ item.log }}"
        pidfile_dir: "{{ pd.pid_dir }}"
        supervisor: "{{ pd.supervisor }}"
        restart: "{{ pd.restart }}"
        venv: ~/pd-systemd-test/venv  # a link of this test's own: the lab host's ~/.provision/venv may be a real one
        stop_timeout: "{{ pd.restart.stop_timeout }}"
      become: "{{ pd.become }}"
      loop: "{{ pd.procs }}"
""".replace("FAKE", json.dumps(FAKE)[1:-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Deployment:
    def __init__(self, lab: Any, workdir: Path) -> None:
        self.lab, self.workdir = lab, workdir
        self.host = f"sd{secrets.token_hex(3)}"  # the unit names hold it: unique on this machine
        self.names = [f"{self.host}-decode", f"{self.host}-router"]
        h = lab.hosts[HOST]
        self.home = Path(h.home)
        conn = {"ansible_host": h.address, "ansible_port": h.port, "ansible_user": h.user,
                "ansible_ssh_private_key_file": str(lab.client_key), "sglang_device": "cpu",
                "server_port": free_port(), "router_port": free_port(), "become_allowed": True,
                "pd_supervisor": "auto", **POLICY}  # fmt: skip
        groups = {"prefill": {}, "decode": {"hosts": {self.host: conn}}, "router": {"hosts": {self.host: {}}}}
        inventory = {"all": {"children": groups}}
        self.inventory = workdir / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump(inventory))
        self.playbook = workdir / "fake.yml"
        self.playbook.write_text(PLAYBOOK)

    def cli(self, *argv: str) -> Any:
        return run_cli_in(self.workdir, list(argv))

    def up(self, *extra: str) -> dict[str, Any]:
        result = self.cli("run", str(self.playbook), "-i", str(self.inventory), "--json", *extra)
        assert result.code == 0, (result.out + result.err)[-4000:]
        doc: dict[str, Any] = json.loads(result.out)
        return doc

    def status(self) -> tuple[int, dict[str, dict[str, Any]]]:
        result = self.cli("pd", "status", "-i", str(self.inventory), "--json")
        assert result.out.startswith("{"), (result.out + result.err)[-3000:]
        rows = json.loads(result.out)["procs"]
        if not all("supervisor" in r or r.get("unreachable") for r in rows):
            more = self.cli("pd", "status", "-i", str(self.inventory), "-vvv")
            raise AssertionError((more.out + more.err)[-5000:])
        return result.code, {r["role"]: r for r in rows}

    def on_host(self, command: str) -> subprocess.CompletedProcess[str]:
        """A command in a session on the host (inside its namespaces: its pids, its systemd)."""
        argv = ["ssh", "-F", str(self.lab.ssh_config_path), self.lab.hosts[HOST].name, command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    def unit(self, role: str) -> Path:
        return UNIT_DIR / f"provision-pd-{self.host}-{role}.service"

    def log(self, role: str) -> str:
        return (self.home / f".provision/pd/logs/{self.host}-{role}.log").read_text()

    def remove_units(self) -> None:
        for name in self.names:
            unit = UNIT_DIR / f"provision-pd-{name}.service"
            (WANTS / unit.name).unlink(missing_ok=True)
            unit.unlink(missing_ok=True)
            shutil.rmtree(unit.with_name(unit.name + ".d"), ignore_errors=True)


def changes(doc: dict[str, Any]) -> int:
    return sum(int(h.get("changed", 0)) for h in doc["stats"].values())


@pytest.fixture(scope="module")
def dep(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    if shutil.which("unshare") is None or not Path("/lib/systemd/systemd").exists():
        pytest.skip("the lab's systemd host needs unshare and systemd")
    d = Deployment(lab, tmp_path_factory.mktemp("pd-systemd"))
    lab.grant_sudo(HOST)
    try:
        with lab_ssh_config(lab), lab.systemd_host(HOST):
            try:
                yield d
            finally:
                d.remove_units()  # before the namespace goes: nothing of ours is left in /etc, whatever happened
    finally:
        d.remove_units()
        lab.revoke_sudo(HOST)
        lab.run_as(HOST, ["rm", "-rf", ".provision"])


def kill9(d: Deployment, role: str) -> tuple[int, float]:
    """SIGKILL the role's process (as its user); its pid and when."""
    pid = int(d.status()[1][role]["pid"])
    assert d.on_host(f"kill -9 {pid}").returncode == 0
    return pid, time.monotonic()


def test_up_writes_enabled_units_and_converges(dep: Deployment) -> None:
    first = dep.up()
    assert changes(first) >= 2
    text = dep.unit("decode").read_text()
    user = dep.lab.hosts[HOST].user
    home = str(dep.home)
    for line in (f"User={user}", f'ExecStart="{home}/.provision/pd/{dep.host}-decode.sh"', "Restart=on-failure",
                 "KillMode=control-group", f"StandardOutput=append:{home}/.provision/pd/logs/{dep.host}-decode.log",
                 "After=network-online.target", "WantedBy=multi-user.target"):  # fmt: skip
        assert line in text.splitlines(), (line, text)
    policy = (dep.unit("decode").with_name(dep.unit("decode").name + ".d") / "policy.conf").read_text()
    for line in ("RestartSec=2s", "StartLimitBurst=4", "StartLimitIntervalSec=120s", "TimeoutStopSec=5s"):
        assert line in policy.splitlines(), (line, policy)
    assert (WANTS / dep.unit("decode").name).is_symlink()  # enabled: started at boot
    assert not dep.unit("decode").is_symlink() and dep.unit("decode").stat().st_uid == 0

    again = dep.up()  # the held-port check passes: the ports are the units' own
    assert changes(again) == 0, json.dumps(again["stats"])

    code, rows = dep.status()
    assert code == 0, json.dumps(rows, indent=1)
    for role in ("decode", "router"):
        row = rows[role]
        assert (row["supervisor"], row["running"], row["health"], row["restarts"]) == ("systemd", True, 200, 0), row
        assert row["pid"] and row["uptime"] is not None and row["crash_looping"] is False
    drop = dep.unit("decode").with_name(dep.unit("decode").name + ".d")
    start = (drop / "start.conf").read_text()
    assert f'Environment="PROVISION_PD_VENV={home}/pd-systemd-test/env-a"' in start.splitlines(), start
    assert "starting on venv=" + home + "/pd-systemd-test/env-a" in dep.log("decode")

    # pd_wait follows the units' MainPIDs; pd logs reads the log systemd appends to
    wait = dep.workdir / "wait.yml"
    wait.write_text("- hosts: decode:router\n  gather_facts: false\n  tasks:\n    - pd_wait: {timeout: 30}\n")
    waited = dep.cli("run", str(wait), "-i", str(dep.inventory), "-v")
    assert waited.code == 0 and "ready after" in waited.out, waited.out + waited.err
    logs = dep.cli("pd", "logs", "-i", str(dep.inventory))
    assert logs.code == 0 and f"fake {dep.host}-router starting" in logs.out, logs.out + logs.err


def test_kill9_is_restarted_by_systemd_on_its_env(dep: Deployment) -> None:
    dep.up()
    dep.lab.run_as(HOST, ["ln", "-sfn", "env-b", "pd-systemd-test/venv"])  # install.yml switched the link meanwhile
    old, killed = kill9(dep, "decode")

    def back() -> dict[str, Any] | None:
        row = dep.status()[1]["decode"]
        return row if row["running"] and row["pid"] != old and row["health"] == 200 else None

    row = until("the decode restarted by systemd", back, timeout=30)
    took = time.monotonic() - killed
    assert 2.0 <= took < 15, took  # RestartSec=2s first
    assert (
        row["restarts"] == 1 and row["supervisor"] == "systemd" and row["venv"] == f"{dep.home}/pd-systemd-test/env-a"
    )
    assert row["last_reason"] == "killed by SIGKILL", row
    log = dep.log("decode")
    assert log.count(f"starting on venv={dep.home}/pd-systemd-test/env-a") == 2, (
        log
    )  # not env-b: only a new start moves
    assert "systemd: " + f"{dep.host}-decode ended: signal killed KILL" in log, log[-2000:]
    dep.lab.run_as(HOST, ["ln", "-sfn", "env-a", "pd-systemd-test/venv"])


def delays(dep: Deployment, kills: int) -> list[float]:
    """Kill the decode ``kills`` times, each time once it is back; the seconds from each kill to the next pid."""
    out = []
    for _ in range(kills):
        old, killed = kill9(dep, "decode")
        until("a new decode pid", lambda old=old: (r := dep.status()[1]["decode"])["running"] and r["pid"] != old,
              timeout=60, interval=0.1)  # fmt: skip
        out.append(time.monotonic() - killed)
    return out


def test_delays_then_start_limit_crash_loop(dep: Deployment) -> None:
    dep.up()
    found = re.search(r"systemd (\d+)", dep.on_host("systemctl --version").stdout)
    assert found, "systemctl --version"
    version = int(found[1])
    before = dep.status()[1]["decode"]["restarts"]
    seen = delays(dep, 2)
    if version >= 254:  # RestartSteps: 2 s, then about 4 s
        assert seen[1] > seen[0] + 1.0, seen
    else:  # a fixed RestartSec
        assert all(1.8 <= s < 8 for s in seen), seen
    # the next crashes go past the start limit (3 restarts within 120 s): the unit stays failed
    for _ in range(6):
        if dep.status()[1]["decode"]["crash_looping"]:
            break
        old, _ = kill9(dep, "decode")
        until("the decode back or failed",
              lambda old=old: (r := dep.status()[1]["decode"])["crash_looping"] or (r["running"] and r["pid"] != old),
              timeout=30, interval=0.1)  # fmt: skip
    row = until("crash-looping", lambda: (r := dep.status()[1]["decode"])["crash_looping"] and r, timeout=30)
    assert row["state"] == "failed" and not row["running"] and row["restarts"] >= before, row
    time.sleep(4)  # past RestartSec: still down
    code, rows = dep.status()
    assert code == 2 and rows["decode"]["crash_looping"] and not rows["decode"]["running"], rows["decode"]
    shown = dep.cli("pd", "status", "-i", str(dep.inventory))
    assert "crash-looping" in shown.out, shown.out
    # the next start provision makes ends the crash loop
    doc = dep.up()
    assert changes(doc) >= 1
    assert dep.status()[1]["decode"]["running"]


def reboot_and_wait(dep: Deployment, timeout: float) -> float:
    """The host's systemd restarted (a simulated reboot), then both processes waited for, each started since;
    when the reboot began (monotonic)."""
    dep.lab.reboot_systemd_host(HOST)
    rebooted = time.monotonic()

    def both_back() -> bool:  # (a new PID namespace counts from 1 again: the pids may be the old ones)
        code, rows = dep.status()
        since = time.monotonic() - rebooted + 1
        return code == 0 and all(rows[r]["running"] and rows[r]["uptime"] < since for r in rows)

    until("both processes back after the host's restart", both_back, timeout=timeout)
    return rebooted


def test_host_restart_brings_them_back_and_up_is_a_no_op(dep: Deployment) -> None:
    dep.up()
    starts = dep.log("decode").count("starting on")
    rebooted = reboot_and_wait(dep, timeout=60)
    print(f"back {time.monotonic() - rebooted:.1f}s after the simulated reboot")
    assert dep.log("decode").count("starting on") == starts + 1
    doc = dep.up()
    assert changes(doc) == 0, json.dumps(doc["stats"])


def test_after_a_host_restart_the_start_gate_orders_the_units(dep: Deployment) -> None:
    """``pd_serial_start``'s start gate under systemd: the host's systemd starts both units at once at boot, and
    their scripts' gate (``start_gate.py``, a lock of this test's own name) lets one start, the other only once
    the first answers ``/health`` (3 s after it passed the gate, as a server's start). Its holder lives in the
    unit's cgroup and does not keep the unit from being up."""
    key = f"{dep.host}-start"  # not the real lock's name: a lab test with SGLang may run beside this one
    gated = ("-e", json.dumps({"fake_gate": True, "fake_gate_key": key}))
    dep.up(*gated)
    again = dep.up(*gated)  # the gate shipped (pd_start_gate) and the units converged: nothing changes
    assert changes(again) == 0, json.dumps(again["stats"])
    reboot_and_wait(dep, timeout=90)
    stamps = {}
    for role in ("decode", "router"):
        log = dep.log(role)
        passed = [float(x) for x in re.findall(rf"fake {dep.host}-{role} passed the gate at ([\d.]+)", log)]
        serving = [float(x) for x in re.findall(rf"fake {dep.host}-{role} serving at ([\d.]+)", log)]
        assert passed and serving, log[-2000:]
        stamps[role] = (passed[-1], serving[-1])
    print(
        f"after the simulated reboot (gate passed, serving; s since the first): "
        f"{ {r: tuple(round(t - min(p for p, _ in stamps.values()), 2) for t in v) for r, v in stamps.items()} }"
    )
    first, then = sorted(stamps, key=lambda r: stamps[r][0])
    assert stamps[then][0] >= stamps[first][1], stamps  # the second passed the gate once the first served
    assert f"waiting for the start lock: {dep.host}-{first} is starting" in dep.log(then), dep.log(then)[-2000:]
    assert "start lock released" in dep.log(first)


def test_down_stops_disables_and_removes(dep: Deployment) -> None:
    dep.up()
    pids = [row["pid"] for row in dep.status()[1].values()]
    result = dep.cli("pd", "down", "-i", str(dep.inventory))
    assert result.code == 0, (result.out + result.err)[-3000:]
    for role in ("decode", "router"):
        assert not dep.unit(role).exists() and not (WANTS / dep.unit(role).name).exists()
        assert not dep.unit(role).with_name(dep.unit(role).name + ".d").exists()
    time.sleep(30)
    for pid in pids:
        assert dep.on_host(f"kill -0 {pid}").returncode != 0, pid
    ps = dep.on_host(f"pgrep -a -f '[{dep.host[0]}]{dep.host[1:]}-' || true")  # [s]d..: not this shell
    assert ps.stdout.strip() == "", ps.stdout
    code, rows = dep.status()
    assert code == 2 and not any(r["running"] for r in rows.values()), rows
    again = dep.cli("pd", "down", "-i", str(dep.inventory), "--json")
    assert again.code == 0
