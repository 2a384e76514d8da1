"""Playbook loading: import_playbook, import_tasks, tags inheritance."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import PlaybookError
from provision.playbook import load_playbook


def test_import_tasks_expands_in_place_with_tags_when_and_vars(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "two.yml").write_text(
        "- name: inner one\n  debug: {msg: a}\n- name: inner two\n  debug: {msg: b}\n  when: y\n  tags: [own]\n"
    )
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  tags: [play]\n  tasks:\n    - name: first\n      debug: {msg: x}\n"
        "    - import_tasks: tasks/two.yml\n      tags: [imported]\n      when: x\n      vars: {v: 1}\n"
        "    - name: last\n      debug: {msg: z}\n"
    )
    tasks = load_playbook(tmp_path / "pb.yml")[0].tasks
    assert [t.name for t in tasks] == ["first", "inner one", "inner two", "last"]
    assert tasks[1].tags == {"play", "imported"} and tasks[2].tags == {"play", "imported", "own"}
    assert tasks[1].when == ["x"] and tasks[2].when == ["x", "y"]
    assert tasks[1].vars == {"v": 1}
    assert tasks[2].file.endswith("tasks/two.yml") and tasks[2].line == 3


def test_import_tasks_errors_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text("- hosts: all\n  tasks:\n    - import_tasks: missing.yml\n")
    with pytest.raises(PlaybookError, match=r"pb\.yml:3: import_tasks: .*missing\.yml does not exist"):
        load_playbook(tmp_path / "pb.yml")
    (tmp_path / "loop.yml").write_text("- import_tasks: loop.yml\n")
    (tmp_path / "pb.yml").write_text("- hosts: all\n  tasks:\n    - import_tasks: loop.yml\n")
    with pytest.raises(PlaybookError, match="loop"):
        load_playbook(tmp_path / "pb.yml")
    (tmp_path / "bad.yml").write_text("- name: x\n  nosuchmodule: {}\n")
    (tmp_path / "pb.yml").write_text("- hosts: all\n  tasks:\n    - import_tasks: bad.yml\n")
    with pytest.raises(PlaybookError, match=r"bad\.yml:1: unknown module"):
        load_playbook(tmp_path / "pb.yml")


def test_import_playbook_chain(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text("- hosts: all\n  tasks:\n    - debug: {msg: a}\n")
    (tmp_path / "site.yml").write_text("- import_playbook: a.yml\n- hosts: all\n  tasks:\n    - debug: {msg: b}\n")
    assert len(load_playbook(tmp_path / "site.yml")) == 2
