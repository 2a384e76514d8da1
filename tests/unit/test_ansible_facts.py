"""Ansible's fact names, as provision gathers them, against ansible-core's ``setup`` on this machine.

Both gather the same machine (provision through a ``LocalConnection``, in its single round trip; Ansible with
connection local and this interpreter); every key provision offers must have Ansible's value, except the ones
that move between two reads (free memory) and the environment (two different processes).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from provision import remote
from provision.facts import ANSIBLE_FACT_NAMES, gather
from provision.transport import LocalConnection

MOVING = {"memfree_mb", "swapfree_mb", "env"}


def _ansible_setup(tmp: Path) -> dict[str, Any]:
    # the interpreter provision's facts run with on this host (python3 on PATH: in a venv, the venv's python3,
    # whose path differs from sys.executable's python): both tools then describe the same Python
    python = shutil.which("python3") or sys.executable
    env = {**os.environ, "ANSIBLE_LOCAL_TEMP": str(tmp), "ANSIBLE_PYTHON_INTERPRETER": python}
    command = [shutil.which("ansible") or "ansible", "localhost", "-i", "localhost,", "-c", "local", "-m", "setup"]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300).stdout
    facts: dict[str, Any] = json.loads(out[out.index("{") :])["ansible_facts"]
    return facts


def test_ansible_fact_names_have_ansibles_values(tmp_path: Path) -> None:
    ours = gather(LocalConnection("here"), str(tmp_path))
    theirs = _ansible_setup(tmp_path)
    offered = [k for k in ours if f"ansible_{k}" in theirs]
    assert len(offered) >= 44, offered  # the common names: distribution, os_family, python, user, hardware, ...
    for key in ("distribution", "os_family", "hostname", "fqdn", "python_version", "user_id", "default_ipv4",
                "processor_vcpus", "memtotal_mb", "pkg_mgr", "service_mgr", "all_ipv4_addresses"):  # fmt: skip
        assert key in offered, key
    differ = {
        k: (ours[k], theirs[f"ansible_{k}"]) for k in offered if k not in MOVING and ours[k] != theirs[f"ansible_{k}"]
    }
    assert not differ, differ
    assert ours["env"]["HOME"] == theirs["ansible_env"]["HOME"]
    # provision's own facts keep their names beside Ansible's
    assert {"gpus", "topology", "pythons", "disk", "nics", "os"} <= set(ours)


def test_the_names_the_planner_accepts_are_the_names_the_host_script_gives() -> None:
    """``facts.ANSIBLE_FACT_NAMES`` (what the planner and the magic vars accept) and the keys
    ``remote/ansible_facts.py`` prints are two lists of one set: on this machine the script gives every one."""
    out = subprocess.run([sys.executable, str(remote.path("ansible_facts.py")), "gather"], capture_output=True,
                         text=True, stdin=subprocess.DEVNULL)  # fmt: skip
    assert set(json.loads(out.stdout)["facts"]) == ANSIBLE_FACT_NAMES
