"""An ``async: N, poll: 0`` job over real SSH (the lab) outlives the run that started it: the run ends (its
channels, its agent and its run lock are gone), the job still finishes, and a LATER run's ``async_status``
reads its record and cleans it up. A job past its limit is killed on the host though no run is connected."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import lab_ssh_config, run_cli

pytestmark = pytest.mark.lab

START = """
- hosts: all
  gather_facts: false
  tasks:
    - name: start
      shell: while [ ! -e ~/async-test/go ]; do sleep 0.1; done; echo finished; echo done > ~/async-test/done
      async: 30
      poll: 0
      register: job
    - name: too long
      shell: sleep 4; echo late > ~/async-test/late
      async: 1
      poll: 0
      register: slow
"""
STATUS = """
- hosts: all
  gather_facts: false
  tasks:
    - name: status
      async_status: {jid: "{{ jid }}"}
      register: st
    - name: slow status
      async_status: {jid: "{{ slow }}"}
      register: slow_st
      ignore_errors: true
    - name: cleanup
      async_status: {jid: "{{ item }}", mode: cleanup}
      loop: ["{{ jid }}", "{{ slow }}"]
"""


@pytest.fixture
def inv(lab: Any, tmp_path: Path) -> Iterator[Path]:
    with lab_ssh_config(lab):
        lab.run_as(0, ["mkdir", "-p", "async-test"])
        yield lab.write_inventory(tmp_path / "inv.yml", names=[0])
        lab.run_as(0, ["rm", "-rf", "async-test"])


def _run(tmp_path: Path, text: str, inv: Path, *extra: str) -> dict[str, dict[str, Any]]:
    playbook = tmp_path / "pb.yml"
    playbook.write_text(text)
    result = run_cli(["run", str(playbook), "-i", str(inv), "--json", *extra])
    assert result.code == 0, result.out + result.err
    report = json.loads(result.out)
    return {t["task"]["name"]: next(iter(t["hosts"].values())) for p in report["plays"] for t in p["tasks"]}


def test_poll_zero_job_outlives_its_run(lab: Any, inv: Path, tmp_path: Path) -> None:
    started = _run(tmp_path, START, inv)
    jid, slow = started["start"]["ansible_job_id"], started["too long"]["ansible_job_id"]
    assert started["start"]["finished"] is False and started["start"]["changed"] is True
    assert lab.run_as(0, ["test", "-e", "async-test/done"]).returncode != 0  # it waits for `go`
    lab.run_as(0, ["touch", "async-test/go"])  # given only now that the run (its channels, its agent) is over
    for _ in range(100):  # bounded
        if lab.run_as(0, ["test", "-e", "async-test/done"]).returncode == 0:
            break
        time.sleep(0.2)
    time.sleep(4)  # past the point where the slow job would have written, had it not been killed
    tasks = _run(tmp_path, STATUS, inv, "-e", f"jid={jid}", "-e", f"slow={slow}")
    st = tasks["status"]
    assert st["finished"] is True and st["rc"] == 0 and st["stdout"] == "finished", st
    assert tasks["slow status"]["failed"] is True and tasks["slow status"]["msg"] == "Timeout exceeded"
    assert lab.run_as(0, ["test", "-e", "async-test/late"]).returncode != 0
    assert lab.run_as(0, ["sh", "-c", f"ls ~/.provision/async/ | grep -c {jid}"]).stdout.strip() == "0"
