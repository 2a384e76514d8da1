"""YAML alias bombs in every YAML reader (issue 23, class 3): a few hundred bytes whose aliases expand to a
billion nodes are refused in bounded time and memory — by the playbook, inventory, vars-file, ``include_vars``
and ``-e @file`` readers with one line and exit 5 before any host, by the ``from_yaml`` filters over host output
with a failed task; ``-e @/dev/zero`` is refused after ``yamlsafe.BYTES_MAX`` bytes instead of read for ever."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision import yamlsafe

ROOT = Path(__file__).resolve().parents[2]
LOCAL = "all:\n  vars:\n    ansible_connection: local\n  hosts:\n    one:\n"


def bomb(levels: int = 9, indent: str = "") -> str:
    """``levels`` anchors, each a list of ten aliases of the previous one: 10**levels nodes expanded."""
    lines = [f"{indent}a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"{indent}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "provision", *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=60, preexec_fn=_limit_memory,
    )  # fmt: skip


def one_error_line(run: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, run.stderr
    return errors[0]


def test_the_budget_counts_aliases_expanded_and_linear_in_the_text() -> None:
    assert yamlsafe.load(bomb(5)) is not None  # 10**5 nodes: fine
    with pytest.raises(yamlsafe.YAMLTooLarge, match="alias"):
        yamlsafe.load(bomb(40))  # 10**40 nodes, counted without being built
    with pytest.raises(yamlsafe.YAMLTooLarge, match="own anchor"):
        yamlsafe.load("&a [1, *a]")
    with pytest.raises(yamlsafe.YAMLTooLarge):  # the budget is shared by the documents of one stream
        yamlsafe.load_all("\n---\n".join([bomb(6)] * 30))
    assert yamlsafe.load("a: &x {b: 1}\nc: *x\n") == {"a": {"b": 1}, "c": {"b": 1}}


def test_a_bomb_in_the_playbook_vars_files_or_inventory_is_exit_5(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(LOCAL)
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  vars:\n" + bomb(indent="    ") + "  tasks: []\n"
    )
    run = cli(tmp_path, "run", "pb.yml", "-i", "inv.yml")
    assert run.returncode == 5 and "pb.yml:" in one_error_line(run) and "alias" in run.stderr, run.stderr

    (tmp_path / "bomb.yml").write_text(bomb())
    (tmp_path / "vf.yml").write_text("- hosts: all\n  gather_facts: false\n  vars_files: [bomb.yml]\n  tasks: []\n")
    run = cli(tmp_path, "run", "vf.yml", "-i", "inv.yml")
    assert run.returncode == 5 and "bomb.yml" in one_error_line(run), run.stderr

    (tmp_path / "ok.yml").write_text("- hosts: all\n  gather_facts: false\n  tasks: []\n")
    (tmp_path / "binv.yml").write_text(LOCAL + "  vars:\n" + bomb(indent="    "))
    run = cli(tmp_path, "run", "ok.yml", "-i", "binv.yml")
    assert run.returncode == 5 and "binv.yml" in one_error_line(run), run.stderr

    run = cli(tmp_path, "run", "ok.yml", "-i", "inv.yml", "-e", "@bomb.yml")
    assert run.returncode == 5 and "bomb.yml" in one_error_line(run), run.stderr


def test_extra_vars_from_a_device_that_never_ends_is_refused(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(LOCAL)
    (tmp_path / "ok.yml").write_text("- hosts: all\n  gather_facts: false\n  tasks: []\n")
    run = cli(tmp_path, "run", "ok.yml", "-i", "inv.yml", "-e", "@/dev/zero")
    assert run.returncode == 5 and "/dev/zero" in one_error_line(run) and "MiB" in run.stderr, run.stderr


HOST_BOMB = """
- hosts: all
  gather_facts: false
  tasks:
    - name: the host answers with a bomb
      shell: cat bomb.yml
      register: r
    - name: {name}
      set_fact: {{parsed: "{{{{ r.stdout | {flt} }}}}"}}
      ignore_errors: true
    - name: include it
      include_vars: {{file: bomb.yml}}
      ignore_errors: true
    - name: still running
      debug: {{msg: after}}
"""


@pytest.mark.parametrize("flt", ["from_yaml", "from_yaml_all"])
def test_a_bomb_from_a_host_fails_its_task_and_the_run_goes_on(tmp_path: Path, flt: str) -> None:
    (tmp_path / "inv.yml").write_text(LOCAL)
    (tmp_path / "bomb.yml").write_text(bomb())
    (tmp_path / "pb.yml").write_text(HOST_BOMB.format(name=flt, flt=flt))
    run = cli(tmp_path, "run", "pb.yml", "-i", "inv.yml")
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    assert run.returncode == 0, run.stderr  # both failures ignored
    shown = run.stdout + run.stderr
    assert shown.count("alias") >= 2 and "after" in shown, shown


def test_yaml_errors_stay_yaml_errors() -> None:
    assert issubclass(yamlsafe.YAMLTooLarge, yaml.YAMLError)
