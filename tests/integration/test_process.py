"""The ``process`` module over real SSH (the lab): a detached process that outlives the SSH session, an
idempotent rerun (same pid), a changed script restarts it, check mode changes nothing, stop is idempotent."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import lab_ssh_config, run_cli

pytestmark = pytest.mark.lab

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: script
      copy:
        dest: ~/proc-test/svc.sh
        mode: "0700"
        content: |
          #!/bin/sh
          echo "svc {{ version }} starting"
          sleep 1000 &
          exec sleep {{ 2000 + version | int }}
    - name: svc
      process:
        name: svc
        script: ~/proc-test/svc.sh
        state: "{{ wanted | default('started') }}"
        pidfile_dir: ~/proc-test/run
"""


@pytest.fixture
def setup(lab: Any, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    with lab_ssh_config(lab):
        lab.run_as(0, ["mkdir", "-p", "proc-test"])
        playbook = tmp_path / "proc.yml"
        playbook.write_text(PLAYBOOK)
        yield lab.write_inventory(tmp_path / "inv.yml", names=[0]), playbook
        lab.run_as(0, ["sh", "-c", "kill -9 -$(cat proc-test/run/svc.pid) 2>/dev/null; rm -rf proc-test"])


def apply(playbook: Path, inv: Path, tmp_path: Path, *extra: str) -> dict[str, Any]:
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        result = run_cli(["run", str(playbook), "-i", str(inv), "--json", *extra])
    finally:
        os.chdir(old)
    assert result.code == 0, result.err[-3000:]
    doc: dict[str, Any] = json.loads(result.out)
    return doc["plays"][0]["tasks"][1]["hosts"]["lab0"]


def running(lab: Any, pid: int) -> bool:
    return lab.run_as(0, ["kill", "-0", str(pid)]).returncode == 0


def test_process_lifecycle(lab: Any, setup: tuple[Path, Path], tmp_path: Path) -> None:
    inv, playbook = setup
    first = apply(playbook, inv, tmp_path, "-e", "version=1")
    assert first["changed"] and first["action"] == "started"
    pid = first["pid"]
    # the CLI has exited and its SSH session is gone: the process lives on
    assert running(lab, pid)
    again = apply(playbook, inv, tmp_path, "-e", "version=1")
    assert not again["changed"] and again["pid"] == pid and "is running" in again["msg"]

    # check mode: a script edited on the host would restart the process, but nothing happens
    lab.run_as(0, ["sh", "-c", "echo '# edited' >> proc-test/svc.sh"])
    predicted = apply(playbook, inv, tmp_path, "-e", "version=1", "-C")
    assert predicted["changed"] and "would be restarted" in predicted["msg"] and running(lab, pid)

    changed = apply(playbook, inv, tmp_path, "-e", "version=2")
    assert changed["changed"] and changed["action"] == "restarted" and changed["pid"] != pid
    assert not running(lab, pid) and running(lab, changed["pid"])
    log = lab.run_as(0, ["cat", "proc-test/run/svc.log"]).stdout
    assert "svc 1 starting" in log and "svc 2 starting" in log and "provision restarted svc" in log

    stopped = apply(playbook, inv, tmp_path, "-e", "version=2", "-e", "wanted=stopped")
    assert stopped["changed"] and stopped["action"] == "stopped" and len(stopped["killed"]) == 2
    assert not running(lab, changed["pid"])
    left = lab.run_as(0, ["pgrep", "-u", lab.hosts[0].user, "sleep"]).stdout.split()
    assert left == []  # the background child of the script went with it
    assert not apply(playbook, inv, tmp_path, "-e", "version=2", "-e", "wanted=stopped")["changed"]
