"""Inventory names made from host output (``add_host``) cannot steer controller paths (issue 23, class 13): a
non-flat ``fetch`` writes ``dest/<name>/<src>``, so a name with ``..`` wrote outside ``dest``; names with path
separators, line breaks (a second name in the retry file) or control characters are refused by ``add_host``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.modules import ArgError
from provision.modules.transfer import fetch_dest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("host", ["..", "../../etc", "a/../../b", "a/b", ".", ""])
def test_a_fetch_root_from_an_unsafe_name_is_refused(tmp_path: Path, host: str) -> None:
    with pytest.raises(ArgError):
        fetch_dest(str(tmp_path), host, "/etc/hostname", "fetched", False)


def test_a_fetch_root_from_a_plain_name_is_under_dest(tmp_path: Path) -> None:
    path = fetch_dest(str(tmp_path), "web-1.example", "/etc/hostname", "fetched", False)
    assert path == f"{tmp_path}/fetched/web-1.example/etc/hostname"


PLAYBOOK = r"""
- hosts: all
  gather_facts: false
  tasks:
    - name: the host names a new host
      shell: printf '{name}'
      register: r
    - name: add it
      add_host: {{name: "{{{{ r.stdout }}}}", groups: added, ansible_connection: local}}
- hosts: added
  gather_facts: false
  tasks:
    - name: fetch from it
      fetch: {{src: "{src}", dest: fetched}}
"""


@pytest.mark.parametrize("name", ["../../escaped", "evil\nlab0", "x/y"])
def test_add_host_refuses_names_that_steer_paths_or_the_retry_file(tmp_path: Path, name: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    src = tmp_path / "secret.txt"
    src.write_text("data\n")
    (work / "inv.yml").write_text(
        "all:\n  vars: {ansible_connection: local, ansible_python_interpreter: "
        + sys.executable
        + "}\n  hosts: {one: }\n"
    )
    (work / "pb.yml").write_text(PLAYBOOK.format(name=name.replace("\n", "\\n"), src=src))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "provision", "run", "pb.yml", "-i", "inv.yml", "--json"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    added = json.loads(run.stdout)["plays"][0]["tasks"][1]["hosts"]["one"]
    assert added["failed"] and "add_host: the name" in added["msg"], added
    assert not list(tmp_path.rglob("secret.txt"))[1:], list(tmp_path.rglob("*"))  # only the source itself
    retry = work / "pb.retry"
    assert not retry.exists() or retry.read_text().split() == ["one"]
