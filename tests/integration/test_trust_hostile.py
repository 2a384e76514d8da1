"""Hosts that attack the controller with what they send back (the lab: real sshd, one Unix user per host,
whose login shell a test replaces): endless output, huge frames. One such host must neither stall the run for
the others nor grow the controller's memory without bound (issue 23, classes 1 and 2)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab import Lab

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 3 << 30  # address space of the controller under test: a leak dies here, not in the machine's OOM

SHELLS = {
    # no newline ever: the agent's length header, the lock holder's answer and every command's output flood
    "zeros": "exec cat /dev/zero\n",
    # endless short lines (a chatty .bashrc that never ends)
    "lines": "exec yes provision\n",
    # a frame header announcing a terabyte, then a stream
    "frame": "printf '999999999999\\n'; exec cat /dev/zero\n",
}
TWO_TASKS = """
- hosts: all
  gather_facts: false
  tasks:
    - name: one
      command: "true"
    - name: two
      file: {path: hostile-two, state: directory}
"""


@contextlib.contextmanager
def login_shell(lab: Lab, i: int, body: str) -> Iterator[None]:
    """Host i's login shell replaced by a script (every exec channel runs ``shell -c ...``; internal-sftp does
    not), put back after."""
    user = lab.hosts[i].user
    old = pwd.getpwnam(user).pw_shell
    script = lab.hosts[i].home / "hostile-shell"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    subprocess.run(["usermod", "-s", str(script), user], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["usermod", "-s", old, user], check=True, capture_output=True)
        script.unlink()


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_bounded(lab: Lab, tmp_path: Path, text: str, *extra: str, limit: float = 120) -> tuple[int, str, str, float]:
    playbook = tmp_path / "pb.yml"
    playbook.write_text(text)
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[0, 1])
    env = {**os.environ, "PYTHONPATH": str(REPO), "PROVISION_SSH_CONFIG": str(lab.ssh_config_path)}
    argv = [sys.executable, "-m", "provision", "run", str(playbook), "-i", str(inv), "--json", *extra]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_limit_memory,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=limit)
    finally:
        proc.kill()
        proc.communicate()
    return proc.returncode, out, err, time.monotonic() - started


@pytest.mark.parametrize("kind", sorted(SHELLS))
def test_a_flooding_host_is_cut_off_in_bounded_time_and_the_others_finish(lab: Lab, tmp_path: Path, kind: str) -> None:
    lab.run_as(1, ["rm", "-rf", "hostile-two"])
    with login_shell(lab, 0, SHELLS[kind]):
        rc, out, err, took = run_bounded(lab, tmp_path, TWO_TASKS, "-T", "5", "--connect-timeout", "2")
    print(f"\n{kind}: run ended after {took:.1f}s with exit {rc}: {err.strip().splitlines()[-3:]}")
    assert "Traceback" not in err and "internal error" not in err, err
    assert rc in (2, 4), err
    stats = json.loads(out)["stats"]
    assert stats["lab1"] == {**stats["lab1"], "ok": 2, "failed": 0, "unreachable": 0}, stats
    assert stats["lab0"]["ok"] == 0 and stats["lab0"]["failed"] + stats["lab0"]["unreachable"] == 1, stats
    assert lab.run_as(1, ["test", "-d", "hostile-two"]).returncode == 0  # the healthy host went on
    assert took < 60, took  # bounded: -T 5 plus margins, not "as long as the host talks"
