"""A new user's own inventory against real (lab) hosts, from an empty directory (issue 10): two hosts in
``prefill``/``decode``, no ``router`` group, no ``group_vars/``, the shipped playbooks by name."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CliResult, run_cli


@pytest.fixture
def own(lab: Any, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(inventory, empty working directory); the lab's ssh_config for the run."""
    fleet, empty = tmp_path / "fleet", tmp_path / "empty"
    fleet.mkdir()
    empty.mkdir()
    cpu = {"sglang_device": "cpu"}
    inventory = lab.write_inventory(
        fleet / "gpu.yml", extra_host_vars={"lab0": cpu, "lab1": cpu}, groups={"prefill": ["lab0"], "decode": ["lab1"]}
    )
    old_cwd = Path.cwd()
    os.chdir(empty)
    try:
        with lab.pointed_at():
            yield inventory, empty
    finally:
        os.chdir(old_cwd)


def cli(*argv: str) -> CliResult:
    return run_cli(list(argv))


def test_pd_status_and_pd_down_by_name_with_no_group_vars(own: tuple[Path, Path]) -> None:
    inventory, empty = own
    assert list(empty.iterdir()) == []
    status = cli("pd", "status", "-i", str(inventory), "--json")
    assert status.code == 2, status.err  # nothing runs yet: reachable, not up
    procs = json.loads(status.out)["procs"]
    assert sorted((p["host"], p["role"]) for p in procs) == [
        ("lab0", "prefill"),
        ("lab0", "router"),
        ("lab1", "decode"),
    ]
    assert not any(p.get("unreachable") for p in procs), procs
    down = cli("run", "pd-down.yml", "-i", str(inventory), "--json")
    assert down.code == 0, down.err[-3000:]
    assert "playbook: the shipped pd-down.yml" in down.err and json.loads(down.out)["stats"]["lab1"]["failed"] == 0
    assert list(empty.iterdir()) == []  # no retry file, nothing copied here


def test_a_users_playbook_gets_the_defaults_on_the_host(own: tuple[Path, Path]) -> None:
    inventory, empty = own
    (empty / "mine.yml").write_text(
        "- hosts: prefill\n  gather_facts: false\n  tasks:\n"
        "    - name: where the venv goes\n      command: {argv: [echo, '{{ venv_path }}', '{{ sglang_device }}']}\n"
    )
    result = cli("run", "mine.yml", "-i", str(inventory), "--json")
    assert result.code == 0, result.err[-3000:]
    out = json.loads(result.out)["plays"][0]["tasks"][0]["hosts"]["lab0"]["stdout"]
    # the default reached the host; `command` expands ~ in its arguments there, as Ansible's does
    assert re.fullmatch(r"/home/[^/]+/\.provision/venv cpu", out), out
    assert "playbook:" not in result.err  # mine.yml is no shipped name: nothing to say
