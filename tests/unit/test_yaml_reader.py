"""THE YAML reader (provision/yamlfile.py) through every entry point: a playbook's vars, a task file, vars_files,
include_vars, an inventory, group_vars, host_vars and ``-e @file`` all read the same files the same way:
``!unsafe`` keeps a value unrendered, a duplicate key is refused naming file:line, a syntax error names
file:line (before any host is touched, except include_vars, which reads its file when its task runs)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from provision import yamlfile
from tests.support.cli import run_cli

LOCAL = "ansible_connection: local"


@dataclass
class Layout:
    """Where one entry point reads a YAML snippet of variables (``x: ...`` lines) from."""

    file: str  # the file the snippet lands in, relative to the work dir
    at_run_time: bool  # its errors are a task's failure (include_vars), not exit 5 before the run


def _play(tmp: Path, *, vars_block: str = "", pre: str = "", vars_files: str = "") -> None:
    (tmp / "pb.yml").write_text(
        "- hosts: one\n  gather_facts: false\n"
        + vars_block
        + vars_files
        + "  tasks:\n"
        + pre
        + f"    - copy:\n        content: '{{{{ x }}}}'\n        dest: {tmp / 'out'}\n"
    )


def _inventory(tmp: Path, host_vars: str = "") -> None:
    (tmp / "inv.yml").write_text(f"all:\n  vars:\n    {LOCAL}\n  hosts:\n    one:\n{host_vars}")


def _indent(snippet: str, n: int) -> str:
    return "".join(" " * n + line + "\n" for line in snippet.splitlines())


def playbook_vars(tmp: Path, snippet: str) -> Layout:
    _inventory(tmp)
    _play(tmp, vars_block="  vars:\n" + _indent(snippet, 4))
    return Layout("pb.yml", False)


def task_file(tmp: Path, snippet: str) -> Layout:
    _inventory(tmp)
    (tmp / "tasks.yml").write_text("- set_fact:\n" + _indent(snippet, 4))
    _play(tmp, pre="    - import_tasks: tasks.yml\n")
    return Layout("tasks.yml", False)


def vars_files(tmp: Path, snippet: str) -> Layout:
    _inventory(tmp)
    (tmp / "vars.yml").write_text(snippet + "\n")
    _play(tmp, vars_files="  vars_files: [vars.yml]\n")
    return Layout("vars.yml", False)


def include_vars(tmp: Path, snippet: str) -> Layout:
    _inventory(tmp)
    (tmp / "vars.yml").write_text(snippet + "\n")
    _play(tmp, pre="    - include_vars: vars.yml\n")
    return Layout("vars.yml", True)


def inventory(tmp: Path, snippet: str) -> Layout:
    _inventory(tmp, _indent(snippet, 6))
    _play(tmp)
    return Layout("inv.yml", False)


def group_vars(tmp: Path, snippet: str) -> Layout:
    _inventory(tmp)
    (tmp / "group_vars").mkdir()
    (tmp / "group_vars" / "all.yml").write_text(snippet + "\n")
    _play(tmp)
    return Layout("group_vars/all.yml", False)


def host_vars(tmp: Path, snippet: str) -> Layout:
    _inventory(tmp)
    (tmp / "host_vars").mkdir()
    (tmp / "host_vars" / "one.yml").write_text(snippet + "\n")
    _play(tmp)
    return Layout("host_vars/one.yml", False)


def extra_vars_file(tmp: Path, snippet: str) -> Layout:
    _inventory(tmp)
    (tmp / "extra.yml").write_text(snippet + "\n")
    _play(tmp)
    return Layout("extra.yml", False)


ENTRY_POINTS: dict[str, Callable[[Path, str], Layout]] = {
    "playbook vars": playbook_vars,
    "task file": task_file,
    "vars_files": vars_files,
    "include_vars": include_vars,
    "inventory": inventory,
    "group_vars": group_vars,
    "host_vars": host_vars,
    "-e @file": extra_vars_file,
}


def _run(tmp: Path, entry: str) -> tuple[int, str]:
    argv = ["run", str(tmp / "pb.yml"), "-i", str(tmp / "inv.yml")]
    if entry == "-e @file":
        argv += ["-e", f"@{tmp / 'extra.yml'}"]
    result = run_cli(argv)
    return result.code, result.out + result.err


def _line_of(path: Path, needle: str, nth: int) -> int:
    hits = [i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line]
    return hits[nth]


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # ~/.provision (run state) inside the test's directory
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_unsafe_keeps_a_value_unrendered(entry: str, tmp_path: Path) -> None:
    ENTRY_POINTS[entry](tmp_path, 'x: !unsafe "{{ never_rendered }}"')
    code, output = _run(tmp_path, entry)
    assert code == 0, output
    assert (tmp_path / "out").read_text() == "{{ never_rendered }}"


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_a_duplicate_key_is_refused_with_its_file_and_line(entry: str, tmp_path: Path) -> None:
    layout = ENTRY_POINTS[entry](tmp_path, "x: first\nx: second")
    code, output = _run(tmp_path, entry)
    line = _line_of(tmp_path / layout.file, "x: second", 0)
    assert "Traceback" not in output
    assert not (tmp_path / "out").exists()
    where = re.escape(layout.file)
    if layout.at_run_time:
        assert re.search(rf"{where}: not valid YAML/JSON: duplicate key 'x' \(line {line}\)", output), output
    else:
        assert re.search(rf"{where}:{line}: .*duplicate key 'x'", output), output
    if layout.at_run_time:
        assert code == 2, output  # the include_vars task failed
    else:
        assert code == 5, output
        assert len([x for x in output.splitlines() if x.strip()]) == 1, output


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_a_syntax_error_names_its_file_and_line(entry: str, tmp_path: Path) -> None:
    layout = ENTRY_POINTS[entry](tmp_path, "x: [unclosed")
    code, output = _run(tmp_path, entry)
    line = _line_of(tmp_path / layout.file, "x: [unclosed", 0)
    assert "Traceback" not in output and not (tmp_path / "out").exists()
    where = re.escape(layout.file)
    if layout.at_run_time:
        assert re.search(rf"{where}: not valid YAML/JSON: .* \(line {line}\)", output), output
    else:
        assert re.search(rf"{where}:{line}: ", output), output
    assert code == (2 if layout.at_run_time else 5), output


def test_merge_keys_may_be_overridden_but_own_keys_not_twice() -> None:
    data = yamlfile.loads("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  x: 3\n", "f.yml")
    assert data["m"] == {"x": 3, "y": 2}
    assert data["m"].key_lines["x"] == 4 and data["m"].line == 3
    with pytest.raises(yamlfile.YAMLFileError, match=r"f\.yml:3: duplicate key 'x'"):
        yamlfile.loads("m:\n  x: 1\n  x: 2\n", "f.yml")


def test_the_tags_are_registered_in_one_place() -> None:
    """Every constructor the reader adds is in yamlfile.TAGS (a new tag is one entry there)."""
    added = {
        tag
        for tag in yamlfile.Loader.yaml_constructors
        if tag not in yamlfile.yamlsafe.FastSafeLoader.yaml_constructors
    }
    assert added <= set(yamlfile.TAGS)
    assert {"!unsafe", "!vault"} <= added
