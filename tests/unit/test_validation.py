"""Bad input: one clear line naming file:line (or the variable/host/module), exit 5, no traceback, no host
touched. The inventory points at a host that does not exist: touching it would fail differently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bad_input import UNREACHABLE_INVENTORY
from tests.support.cli import run_cli


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(UNREACHABLE_INVENTORY.format(marker=tmp_path / "touched"))
    return path


CASES = {
    "yaml": ("- hosts: all\n  tasks:\n    - name: x\n      command: [unclosed\n", r"pb\.yml:4: YAML syntax error"),
    "unknown_module": ("- hosts: all\n  tasks:\n    - name: x\n      nosuchmodule: {}\n", r"pb\.yml:3: unknown"),
    "bad_argument": ("- hosts: all\n  tasks:\n    - copy:\n        dest: /x\n        colour: red\n",
                     r"pb\.yml:3: copy: unknown argument 'colour'"),
    "missing_argument": ("- hosts: all\n  tasks:\n    - file:\n        state: touch\n",
                         r"pb\.yml:3: file: missing required argument 'path'"),
    "bad_choice": ("- hosts: all\n  tasks:\n    - file:\n        path: /x\n        state: melted\n",
                   r"pb\.yml:3: file: state='melted' is not one of"),
    "undefined_var": ("- hosts: all\n  gather_facts: false\n  tasks:\n    - name: use it\n"
                      "      debug:\n        msg: '{{ not_defined_anywhere }}'\n",
                      r"pb\.yml:4: undefined variable 'not_defined_anywhere' in task 'use it' for host ghost"),
    "unknown_pattern": ("- hosts: nosuchgroup\n  tasks:\n    - debug:\n        msg: hi\n", r"nosuchgroup"),
    "unknown_play_key": ("- hosts: all\n  colour: red\n  tasks: []\n", r"pb\.yml:1: unknown play key 'colour'"),
    "unknown_handler": ("- hosts: all\n  tasks:\n    - command: 'true'\n      notify: restart it\n",
                        r"pb\.yml:3: task 'command' notifies unknown handler 'restart it'"),
    "jinja_syntax": ("- hosts: all\n  tasks:\n    - debug:\n        msg: '{{ 1 + }}'\n", r"pb\.yml:3: .*syntax"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_playbook_exits_5_with_file_and_line(tmp_path: Path, inv: Path, case: str) -> None:
    text, pattern = CASES[case]
    playbook = tmp_path / "pb.yml"
    playbook.write_text(text)
    result = run_cli(["run", str(playbook), "-i", str(inv)])
    assert result.code == 5, result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err + result.out
    import re

    assert re.search(pattern, lines[0]), lines[0]
    assert not (tmp_path / "touched").exists()


def test_guarded_undefined_names_are_allowed(tmp_path: Path, inv: Path) -> None:
    playbook = tmp_path / "pb.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - debug:\n        msg: \"{{ maybe | default('x') }}\"\n"
        "      when: other is not defined\n"
    )
    result = run_cli(["run", str(playbook), "-i", str(inv), "--list-tasks"])
    assert result.code == 0, result.err


@pytest.mark.parametrize(
    "text",
    [
        "{% if flag %}{{ other }}{% endif %}x",  # an `if`'s branch
        "{% if flag %}a{% elif more %}{{ other }}{% else %}{{ other }}{% endif %}",  # elif test, elif and else
        "{{ other if flag else 'b' }}",  # a ternary's other value
        "{{ flag and other }}",  # the right side of `and` (and of `or`)
        "{{ not flag or other }}",
        "{% for i in [] %}{{ other }}{% endfor %}",  # a loop's body
    ],
)
def test_names_a_template_may_not_render_are_not_refused_up_front(tmp_path: Path, inv: Path, text: str) -> None:
    """ansible-core renders lazily: a name used only where the template may not render it needs no definition
    before the run (the task fails when it runs if it does reach it); a name the template always renders is
    still refused before any host is touched."""
    playbook = tmp_path / "pb.yml"
    play = "- hosts: all\n  gather_facts: false\n  vars: {{flag: false}}\n  tasks:\n    - debug:\n        msg: {}\n"
    playbook.write_text(play.format(json.dumps(text)))
    result = run_cli(["run", str(playbook), "-i", str(inv), "--list-tasks"])
    assert result.code == 0, result.err
    playbook.write_text(play.format(json.dumps(text + "{{ other }}")))  # rendered on every path as well
    result = run_cli(["run", str(playbook), "-i", str(inv), "--list-tasks"])
    assert result.code == 5 and "undefined variable 'other'" in result.err, result.err


def test_unknown_limit_pattern_exits_5(tmp_path: Path, inv: Path) -> None:
    playbook = tmp_path / "pb.yml"
    playbook.write_text("- hosts: all\n  tasks:\n    - debug:\n        msg: hi\n")
    result = run_cli(["run", str(playbook), "-i", str(inv), "-l", "nobody"])
    assert result.code == 5
    assert "nobody" in result.err


def test_unknown_start_at_task_exits_5(tmp_path: Path, inv: Path) -> None:
    playbook = tmp_path / "pb.yml"
    playbook.write_text("- hosts: all\n  tasks:\n    - name: one\n      debug:\n        msg: hi\n")
    result = run_cli(["run", str(playbook), "-i", str(inv), "--start-at-task", "two"])
    assert result.code == 5
    assert "'two'" in result.err


def test_bad_inventory_exits_5(tmp_path: Path) -> None:
    bad = tmp_path / "inv.yml"
    bad.write_text("all:\n  hosts:\n    a: [\n")
    playbook = tmp_path / "pb.yml"
    playbook.write_text("- hosts: all\n  tasks: []\n")
    result = run_cli(["run", str(playbook), "-i", str(bad)])
    assert result.code == 5
    assert "inv.yml:" in result.err


def test_bad_flag_exits_3(tmp_path: Path, inv: Path) -> None:
    result = run_cli(["run", "x.yml", "-i", str(inv), "--no-such-flag"])
    assert result.code == 3
    assert "no-such-flag" in result.err


def test_list_tasks_and_hosts(tmp_path: Path, inv: Path) -> None:
    playbook = tmp_path / "pb.yml"
    playbook.write_text(
        "- hosts: all\n  tasks:\n    - name: one\n      debug: {msg: a}\n      tags: [x]\n"
        "    - name: two\n      debug: {msg: b}\n"
    )
    result = run_cli(["run", str(playbook), "-i", str(inv), "--list-tasks", "--list-hosts", "-t", "x"])
    assert result.code == 0
    assert "one" in result.out and "two" not in result.out and "ghost" in result.out


@pytest.mark.parametrize("after_hostname", [True, False])
def test_facts_a_module_returns_are_known_to_the_planner(tmp_path: Path, inv: Path, after_hostname: bool) -> None:
    """``hostname`` defines ansible_hostname & co. (its module's ``returned_facts``): a later task may use them
    without facts gathered; without that task the same name is refused before any host is touched."""
    first = "    - hostname:\n        name: gpu-01\n" if after_hostname else ""
    playbook = tmp_path / "pb.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n" + first + "    - debug:\n        msg: '{{ ansible_fqdn }}'\n"
    )
    result = run_cli(["run", str(playbook), "-i", str(inv), "--list-tasks"])
    if after_hostname:
        assert result.code == 0, result.err
    else:
        assert result.code == 5 and "'ansible_fqdn' in task 'debug'" in result.err, result.err
