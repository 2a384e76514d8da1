"""Conditionals have boolean results, as in ansible-core 2.19 (issue 23, class 8): ``when: hf_token is defined
and hf_token`` evaluated to the token itself, a non-empty string that was read as false, so with
``-e hf_token=...`` BOTH token tasks of ``pd up`` were skipped and gated models failed to load. A non-boolean
result now fails the task in one line; the shipped token tasks compare lengths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.data import roles_dir
from provision.errors import TemplateError
from provision.templating import condition

ROOT = Path(__file__).resolve().parents[2]


def token_tasks() -> tuple[Any, Any]:
    tasks = yaml.safe_load((roles_dir() / "provision.sglang_pd" / "tasks" / "prepare.yml").read_text())
    write = next(t for t in tasks if t.get("name", "").startswith("HF token file"))
    remove = next(t for t in tasks if t.get("name", "").startswith("No HF token file"))
    return write["when"], remove["when"]


@pytest.mark.parametrize(("variables", "writes"), [
    ({"hf_token": "hf_abcdefghijklmnop"}, True),
    ({"hf_token": ""}, False),
    ({"hf_token": None}, False),
    ({}, False),
])  # fmt: skip
def test_exactly_one_token_task_runs(variables: dict[str, Any], writes: bool) -> None:
    write, remove = token_tasks()
    assert condition(write, variables) is writes
    assert condition(remove, variables) is not writes


@pytest.mark.parametrize("expr", ["'yes'", "'x'", "r.rc", "none", "[1]", "hf_token"])
def test_a_non_boolean_result_is_an_error_not_false(expr: str) -> None:
    with pytest.raises(TemplateError, match="boolean result"):
        condition(expr, {"r": {"rc": 1}, "hf_token": "hf_abc"})


PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: truthy string
      debug: {msg: never}
      when: hf_token
      ignore_errors: true
    - name: after
      debug: {msg: after}
"""


def test_a_non_boolean_when_fails_its_task_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text("all:\n  vars: {ansible_connection: local}\n  hosts: {one: }\n")
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "provision", "run", "pb.yml", "-i", "inv.yml", "--json", "-e", "hf_token=hf_abcdef"]
    run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    tasks = json.loads(run.stdout)["plays"][0]["tasks"]
    first = tasks[0]["hosts"]["one"]
    assert first["failed"] and "boolean result" in first["msg"] and "\n" not in first["msg"], first
    assert "hf_abcdef" not in run.stdout  # the secret is masked in the message too
    assert tasks[1]["hosts"]["one"]["msg"] == "after"
