"""The group watch under ``pd_supervisor: systemd`` on the lab's real-systemd host (``Lab.systemd_host``): the two
members of one multi-host server (two inventory names of one machine, as ``pd_instance_one_machine`` allows) are
units, each with its watch unit (``provision-pdwatch-NAME.service``, ``PartOf=`` it, pulled in by a ``Wants=``
drop-in); ``kill -9`` of the non-leader rank → systemd restarts it, and the leader's watch, seeing its server's
``/health`` fail for the grace, kills the leader so systemd restarts it too: the whole server went down and up,
counted (NRestarts, PIDDIR/NAME.group). A rerun reports 0 changes; a stop removes every file.

The members are STAND-INS, not SGLang (SGLang's CPU backend cannot run one server over several ranks:
docs/pd.md): the leader accepts its rank on a TCP port and answers ``/health`` 200 only while that group is
whole (a group that lost a member stays broken, as a torch.distributed group does); the rank dials the leader
and exits when the connection ends. What is tested is generic process supervision; nothing serves a generation.

The unit files are real files of this machine (/etc/systemd/system): the fixture removes them whatever happens.
Run it under ``flock /tmp/provision-sglang.lock``.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import lab_ssh_config, run_cli_in
from tests.support.processes import LEADER, RANK
from tests.support.waiting import free_port, until
from tests.support.waiting import http_status as health

pytestmark = pytest.mark.lab

HOST = 0
UNIT_DIR = Path("/etc/systemd/system")
POLICY = {"delay": 1, "max_delay": 4, "burst": 5, "interval": 120, "stop_timeout": 5}

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: the test's directories (pd up makes pd_pid_dir so)
      file: {path: "{{ item }}", state: directory, mode: "0700"}
      loop: [~/gw, ~/gw/run]
    - name: the stand-in members
      copy: {dest: "~/gw/{{ item.name }}.py", mode: "0700", content: "{{ item.code }}"}
      loop: "{{ members }}"
    - name: the members under systemd, each with its group watch
      process:
        name: "{{ item.name }}"
        script: "~/gw/{{ item.name }}.py"
        log: "~/gw/{{ item.name }}.log"
        pidfile_dir: ~/gw/run
        supervisor: systemd
        restart: "{{ policy }}"
        stop_timeout: 5
        state: "{{ state }}"
        group: {instance: g, health: "{{ health }}", grace: 2, interval: 0.25}
      become: true
      loop: "{{ members }}"
"""


class Group:
    def __init__(self, lab: Any, workdir: Path) -> None:
        self.lab, self.workdir = lab, workdir
        tag = secrets.token_hex(3)
        self.lead, self.rank = f"gw{tag}-lead", f"gw{tag}-rank"
        h = lab.hosts[HOST]
        self.home = Path(h.home)
        http_port, group_port = free_port(), free_port()
        self.health = f"http://{h.address}:{http_port}/health"
        leader = LEADER.replace('("127.0.0.1", http_port)', f'("{h.address}", http_port)')
        leader = leader.replace("sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])", f"1), {http_port}, {group_port}")
        rank = RANK.replace("int(sys.argv[1])", str(group_port))
        members = [{"name": self.lead, "code": leader}, {"name": self.rank, "code": rank}]
        conn = {"ansible_host": h.address, "ansible_port": h.port, "ansible_user": h.user,
                "ansible_ssh_private_key_file": str(lab.client_key), "become_allowed": True}  # fmt: skip
        self.inventory = workdir / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump({"all": {"hosts": {"gw": conn}}}))
        self.vars = workdir / "vars.yml"
        self.vars.write_text(yaml.safe_dump({"members": members, "policy": POLICY, "health": self.health}))
        self.playbook = workdir / "group.yml"
        self.playbook.write_text(PLAYBOOK)

    def apply(self, state: str = "started") -> dict[str, Any]:
        result = run_cli_in(self.workdir, ["run", str(self.playbook), "-i", str(self.inventory), "-e",
                                           f"@{self.vars}", "-e", f"state={state}", "--json"])  # fmt: skip
        assert result.code == 0, (result.out + result.err)[-4000:]
        doc: dict[str, Any] = json.loads(result.out)
        return doc

    def on_host(self, command: str) -> str:
        argv = ["ssh", "-F", str(self.lab.ssh_config_path), self.lab.hosts[HOST].name, command]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        return out.stdout.strip()

    def show(self, name: str) -> dict[str, str]:
        text = self.on_host(f"sudo -n systemctl show -p MainPID,NRestarts,ActiveState provision-pd-{name}.service")
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def active(self, unit: str) -> str:
        return self.on_host(f"sudo -n systemctl is-active {unit} || true")

    def files(self, name: str) -> list[Path]:
        unit = UNIT_DIR / f"provision-pd-{name}.service"
        return [unit, unit.with_name(unit.name + ".d"), UNIT_DIR / f"provision-pdwatch-{name}.service"]

    def remove_units(self) -> None:
        for name in (self.lead, self.rank):
            for path in self.files(name):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            (UNIT_DIR / "multi-user.target.wants" / f"provision-pd-{name}.service").unlink(missing_ok=True)


def changes(doc: dict[str, Any]) -> int:
    return sum(int(h.get("changed", 0)) for h in doc["stats"].values())


@pytest.fixture(scope="module")
def group(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    if shutil.which("unshare") is None or not Path("/lib/systemd/systemd").exists():
        pytest.skip("the lab's systemd host needs unshare and systemd")
    g = Group(lab, tmp_path_factory.mktemp("pd-systemd-group"))
    lab.grant_sudo(HOST)
    try:
        with lab_ssh_config(lab), lab.systemd_host(HOST):
            try:
                yield g
            finally:
                g.remove_units()
    finally:
        g.remove_units()
        lab.revoke_sudo(HOST)
        lab.run_as(HOST, ["rm", "-rf", "gw"])


def test_a_killed_rank_restarts_the_whole_server_under_systemd(group: Group) -> None:
    first = group.apply()
    assert changes(first) >= 2
    drop = (UNIT_DIR / f"provision-pd-{group.rank}.service.d" / "group.conf").read_text()
    assert f"Wants=provision-pdwatch-{group.rank}.service" in drop.splitlines(), drop
    watch = (UNIT_DIR / f"provision-pdwatch-{group.lead}.service").read_text()
    assert f"PartOf=provision-pd-{group.lead}.service" in watch.splitlines() and "User=" in watch, watch
    assert f'"{group.health}"' in watch, watch
    again = group.apply()
    assert changes(again) == 0, json.dumps(again["stats"])
    for name in (group.lead, group.rank):
        assert group.active(f"provision-pdwatch-{name}.service") == "active"
    until("the stand-in server healthy", lambda: health(group.health) == 200)
    before = {name: group.show(name) for name in (group.lead, group.rank)}
    assert all(s["NRestarts"] == "0" and s["ActiveState"] == "active" for s in before.values()), before

    killed = time.monotonic()
    assert group.on_host(f"kill -9 {before[group.rank]['MainPID']} && echo killed") == "killed"
    lead = until(
        "the leader restarted by its group watch",
        lambda: (s := group.show(group.lead))["MainPID"] not in ("0", before[group.lead]["MainPID"]) and s,
    )
    until("the server healthy again", lambda: health(group.health) == 200)
    print(f"the whole server back {time.monotonic() - killed:.1f}s after the rank's kill -9")
    rank = group.show(group.rank)
    assert lead["NRestarts"] == "1" and int(rank["NRestarts"]) >= 1, (lead, rank)
    assert rank["MainPID"] != before[group.rank]["MainPID"] and rank["ActiveState"] == "active", rank
    restarts = (group.home / "gw" / "run" / f"{group.lead}.group").read_text().splitlines()
    assert len(restarts) == 1 and f"{group.health} answered HTTP 503 for 2s" in restarts[0], restarts
    log = (group.home / "gw" / f"{group.lead}.log").read_text()
    assert "provision group watch: " + group.lead + ": its multi-host server: " in log, log[-2000:]
    time.sleep(4)  # whole again: nothing restarts any more
    assert group.show(group.lead)["MainPID"] == lead["MainPID"] and group.show(group.rank)["NRestarts"] == rank[
        "NRestarts"]  # fmt: skip

    group.apply("stopped")
    for name in (group.lead, group.rank):
        assert not any(path.exists() for path in group.files(name)), name
        assert group.active(f"provision-pdwatch-{name}.service") in ("inactive", "unknown")
    assert health(group.health) is None
