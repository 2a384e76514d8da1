"""Engine behaviour through ansible_connection: local (fast; the lab tests cover SSH)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli

INVENTORY = "all:\n  vars:\n    ansible_connection: local\n  hosts:\n    one:\n    two:\n"


def test_run_once_registers_its_result_on_every_host(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - command: echo {{ inventory_hostname }}\n      run_once: true\n      register: first\n"
        "    - assert:\n        that: first.stdout == 'one'\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml"), "--json"])
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert list(doc["plays"][0]["tasks"][0]["hosts"]) == ["one"]  # ran once
    assert set(doc["plays"][0]["tasks"][1]["hosts"]) == {"one", "two"}  # both see its result


def test_loop_until_and_failed_when(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    counter = tmp_path / "n"
    (tmp_path / "pb.yml").write_text(
        "- hosts: one\n  gather_facts: false\n  tasks:\n"
        f"    - shell: echo x >> {counter}; wc -l < {counter}\n"
        "      register: r\n      until: r.stdout | int >= 3\n      retries: 5\n      delay: 0\n"
        "    - command: echo {{ item }}\n      loop: [a, b]\n      register: looped\n"
        "    - assert:\n        that: looped.results | map(attribute='stdout') | list == ['a', 'b']\n"
        "    - command: 'false'\n      failed_when: false\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")])
    assert result.code == 0, result.out + result.err
    assert counter.read_text().count("x") == 3


def test_what_a_task_returns_is_applied_before_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """set_fact in a loop: each item sees the facts of the items before it; a registered value wins over a fact
    of the same name; a notify name is rendered with the task's own registered value."""
    monkeypatch.setenv("HOME", str(tmp_path))  # the pending-handler file goes to ~/.provision
    marker = tmp_path / "handled"
    (tmp_path / "inv.yml").write_text(INVENTORY)
    (tmp_path / "pb.yml").write_text(
        "- hosts: one\n  gather_facts: false\n  tasks:\n"
        '    - set_fact:\n        seen: "{{ (seen | default([])) + [item] }}"\n      loop: [a, b, c]\n'
        "    - assert:\n        that: seen == ['a', 'b', 'c']\n"
        "    - set_fact:\n        r: from-a-fact\n      register: r\n"
        "    - assert:\n        that: r is mapping\n"
        "    - command: echo hi\n      register: said\n      changed_when: true\n"
        '      notify: "say {{ said.stdout }}"\n'
        f"  handlers:\n    - name: say hi\n      command: touch {marker}\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")])
    assert result.code == 0, result.out + result.err
    assert marker.exists()
