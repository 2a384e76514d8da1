"""``async``/``poll`` and ``async_status``: the static refusals (exit 5, file:line, no host touched), and, through
``ansible_connection: local`` (the real runner and job helper on this machine), what the detached job does on
the host: it kills itself at its time limit, its record is private, and no secret is on a process list.
(The differential case against ansible-core over SSH is ``tests/compat/cases/async_poll``.)"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.support.bad_input import assert_one_line, inv, provision, task  # noqa: F401 (inv: a fixture)
from tests.support.cli import run_cli

ASYNC_CASES = {
    "copy": (task("async: 10\npoll: 0", "copy: {content: x, dest: /tmp/x}"),
             r"pb\.yml:4: async is not supported for the copy module \(only for: command, shell\)"),
    "async_status": (task("async: 5", "async_status: {jid: j1.2}"),
                     r"pb\.yml:4: async is not supported for the async_status module"),
    "template": (task("async: '{{ n }}'", "command: 'true'"),
                 r"pb\.yml:4: async must be a whole number >= 0 \(a template is not supported here\)"),
    "negative": (task("async: -1", "command: 'true'"), r"pb\.yml:4: async must be a whole number >= 0"),
    "fraction": (task("async: 1.5", "command: 'true'"), r"pb\.yml:4: async must be a whole number >= 0"),
    "poll_word": (task("async: 5\npoll: often", "shell: 'true'"), r"pb\.yml:4: poll must be a whole number >= 0"),
    "status_mode": (task("", "async_status: {jid: j1.2, mode: kill}"), r"pb\.yml:4: .*mode"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(ASYNC_CASES))
def test_async_refused_before_any_host(tmp_path: Path, inv: Path, case: str) -> None:  # noqa: F811
    text, pattern = ASYNC_CASES[case]
    (tmp_path / "pb.yml").write_text(text)
    assert_one_line(provision("run", "pb.yml", "-i", str(inv), cwd=tmp_path), 5, pattern)


SECRET = "s3cr3t-async-value"
PLAYBOOK = """\
- hosts: all
  gather_facts: false
  vars:
    api_token: "{secret}"
  tasks:
    - name: outlives its limit
      shell: sleep 3; touch {wd}/late
      async: 1
      poll: 0
      register: slow
    - name: a job with a secret in its environment
      shell: sleep 2
      environment:
        API_TOKEN: "{{{{ api_token }}}}"
      async: 20
      poll: 0
      register: quiet
    - name: process lists while the job runs
      shell: cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | rev
      register: ps
      changed_when: false
    - name: the slow job is killed at its limit
      async_status:
        jid: "{{{{ slow.ansible_job_id }}}}"
      register: slow_job
      until: slow_job.finished
      retries: 10
      delay: 1
      ignore_errors: true
    - name: wait past the point where it would have written
      pause:
        seconds: 3
    - name: late file
      stat:
        path: "{wd}/late"
      register: late
    - name: record
      stat:
        path: "{{{{ quiet.results_file }}}}"
      register: record
    - name: wait for the quiet job
      async_status:
        jid: "{{{{ quiet.ansible_job_id }}}}"
      register: quiet_job
      until: quiet_job.finished
      retries: 10
      delay: 1
    - name: clean up
      async_status:
        jid: "{{{{ item }}}}"
        mode: cleanup
      loop: ["{{{{ slow.ansible_job_id }}}}", "{{{{ quiet.ansible_job_id }}}}"]
"""


def test_detached_job_on_the_host(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(
        f"all:\n  hosts:\n    one: {{ansible_connection: local, ansible_python_interpreter: {sys.executable}}}\n"
    )
    (tmp_path / "pb.yml").write_text(PLAYBOOK.format(secret=SECRET, wd=tmp_path))
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml"), "--json"])
    report = json.loads(result.out)
    assert result.code == 0, result.out + result.err
    tasks = {t["task"]["name"]: t["hosts"]["one"] for play in report["plays"] for t in play["tasks"]}
    slow = tasks["the slow job is killed at its limit"]
    assert slow["failed"] is True and slow["msg"] == "Timeout exceeded" and slow["finished"] is True, slow
    assert tasks["late file"]["stat"]["exists"] is False  # the job's own kill reached the sleep
    rec = tasks["record"]["stat"]
    assert rec["exists"] and int(rec["mode"], 8) == 0o600, rec
    assert stat.S_IMODE(os.stat(os.path.dirname(rec["path"])).st_mode) == 0o700
    listed = tasks["process lists while the job runs"]["stdout"]
    assert "2 peels" in listed  # the job was running (and listed: `sleep 2`, reversed)
    assert SECRET[::-1] not in listed
    assert tasks["wait for the quiet job"]["rc"] == 0
    assert not os.path.exists(rec["path"])  # cleanup removed it
