"""The group watch of provision's supervisor over real SSH (the lab): the two members of one multi-host server on
two lab hosts, each under its host's supervisor, started by the ``process`` module with its ``group`` (the
leader's ``/health`` as each host reaches it); the playbook run twice (0 changes the second time); ``kill -9``
of the rank on its host → the rank restarted by its supervisor, the leader restarted by its group watch on the
other host, the server healthy again, counted (``group_restarts``); a stop leaves nothing running.

The members are STAND-INS, not SGLang (tests/unit/test_group_watch.py says why and what they do): what is
tested is generic process supervision across hosts; nothing serves a generation.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import lab_ssh_config, run_cli
from tests.support.processes import LEADER, RANK
from tests.support.waiting import free_port, until
from tests.support.waiting import http_status as health

pytestmark = pytest.mark.lab

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: the member's directories
      file: {path: "{{ item }}", state: directory, mode: "0700"}
      loop: [~/gw-test, ~/gw-test/run]
    - name: the stand-in member
      copy: {dest: ~/gw-test/member.py, mode: "0700", content: "{{ members[inventory_hostname].code }}"}
    - name: the member under provision's supervisor, with its group watch
      process:
        name: "{{ members[inventory_hostname].name }}"
        script: ~/gw-test/member.py
        log: ~/gw-test/member.log
        pidfile_dir: ~/gw-test/run
        supervisor: provision
        restart: {delay: 0.5, max_delay: 2, burst: 6, interval: 120, stop_timeout: 5}
        state: "{{ state }}"
        group: {instance: g, health: "{{ health }}", grace: 2, interval: 0.25}
"""


class Pair:
    def __init__(self, lab: Any, workdir: Path) -> None:
        self.lab, self.workdir = lab, workdir
        lead = lab.hosts[0].address
        http_port, group_port = free_port(), free_port()
        self.health = f"http://{lead}:{http_port}/health"
        leader = LEADER.replace('("127.0.0.1", http_port)', f'("{lead}", http_port)')
        leader = leader.replace('("127.0.0.1", group_port)', f'("{lead}", group_port)')
        leader = leader.replace("sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])", f"1), {http_port}, {group_port}")
        rank = RANK.replace('("127.0.0.1", port)', f'("{lead}", port)').replace("int(sys.argv[1])", str(group_port))
        self.inventory = lab.write_inventory(workdir / "inv.yml", names=[0, 1])
        members = {"lab0": {"name": "gw-lead", "code": leader}, "lab1": {"name": "gw-rank", "code": rank}}
        self.vars = workdir / "vars.yml"
        self.vars.write_text(yaml.safe_dump({"members": members, "health": self.health}))
        self.playbook = workdir / "group.yml"
        self.playbook.write_text(PLAYBOOK)

    def apply(self, state: str = "started") -> dict[str, Any]:
        old = Path.cwd()
        os.chdir(self.workdir)
        try:
            result = run_cli(["run", str(self.playbook), "-i", str(self.inventory), "-e", f"@{self.vars}", "-e",
                              f"state={state}", "--json"])  # fmt: skip
        finally:
            os.chdir(old)
        assert result.code == 0, (result.out + result.err)[-4000:]
        doc: dict[str, Any] = json.loads(result.out)
        return doc

    def record(self, i: int) -> dict[str, Any]:
        name = "gw-lead" if i == 0 else "gw-rank"
        path = Path(self.lab.hosts[i].home) / "gw-test" / "run" / f"{name}.json"
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return {}


def changes(doc: dict[str, Any]) -> int:
    return sum(int(h.get("changed", 0)) for h in doc["stats"].values())


@pytest.fixture
def pair(lab: Any, tmp_path: Path) -> Iterator[Pair]:
    with lab_ssh_config(lab):
        p = Pair(lab, tmp_path)
        try:
            yield p
        finally:
            p.apply("stopped")
            for i in (0, 1):
                lab.run_as(i, ["rm", "-rf", "gw-test"])


def test_a_killed_rank_restarts_the_whole_server_across_hosts(pair: Pair) -> None:
    assert changes(pair.apply()) >= 2
    until("the stand-in server healthy", lambda: health(pair.health) == 200)
    again = pair.apply()
    assert changes(again) == 0, json.dumps(again["stats"])
    lead, rank = pair.record(0), pair.record(1)
    killed = time.monotonic()
    pair.lab.run_as(1, ["kill", "-9", str(rank["pid"])])
    until("the leader restarted by its group watch", lambda: pair.record(0).get("pid") not in (None, lead["pid"]))
    until("the server healthy again", lambda: health(pair.health) == 200)
    print(f"the whole server back {time.monotonic() - killed:.1f}s after the rank's kill -9")
    now_lead, now_rank = pair.record(0), pair.record(1)
    assert now_lead["group_restarts"] == 1 and now_lead["restarts"] == 1, now_lead
    assert now_lead["last_exit"]["reason"] == "group" and pair.health in now_lead["last_exit"]["why"], now_lead
    assert now_rank["pid"] != rank["pid"] and now_rank["restarts"] >= 1, now_rank
    time.sleep(3)  # whole again: left alone
    assert pair.record(0)["pid"] == now_lead["pid"] and pair.record(1)["pid"] == now_rank["pid"]
    pair.apply("stopped")
    assert health(pair.health) is None and not pair.record(0) and not pair.record(1)
