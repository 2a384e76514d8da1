"""A name provision does not know gets the nearest one it knows, in the one line the user sees: variables
(before the run and during it), modules (in a playbook and ad hoc), filters and tests, playbooks, and the
command line's words. One helper picks it (:func:`provision.errors.did_you_mean`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from provision.errors import did_you_mean
from tests.support.cli import CliResult, run_cli, run_cli_in

INVENTORY = "all:\n  hosts:\n    one: {ansible_connection: local}\n"


def test_the_nearest_known_name_or_none() -> None:
    assert (
        did_you_mean("sglang_devcie", ["sglang_device", "sglang_version", "tp"]) == " (did you mean 'sglang_device'?)"
    )
    assert did_you_mean("debgu", ["debug", "command"]) == " (did you mean 'debug'?)"
    assert did_you_mean("zzz", ["debug", "command"]) == ""
    assert did_you_mean("debug", ["debug"]) == ""  # the name itself is no suggestion
    assert did_you_mean("x", []) == ""


def _run(tmp_path: Path, playbook: str, *argv: str) -> CliResult:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    (tmp_path / "pb.yml").write_text(playbook)
    return run_cli_in(tmp_path, ["run", "pb.yml", "-i", "inv.yml", *argv])


def _one_line(result: CliResult, code: int) -> str:
    assert result.code == code, result.err
    assert "Traceback" not in result.err + result.out
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    return lines[0]


def test_an_undefined_variable_before_the_run_names_the_nearest(tmp_path: Path) -> None:
    line = _one_line(_run(tmp_path, "- hosts: all\n  gather_facts: false\n  tasks:\n"
                                    "    - debug: {msg: '{{ sglang_devcie }}'}\n"), 5)  # fmt: skip
    # sglang_device is a shipped default (the lowest precedence): known to every play
    assert re.match(r"ERROR: pb\.yml:4: undefined variable 'sglang_devcie' \(did you mean 'sglang_device'\?\) in", line)


def test_an_undefined_variable_during_the_run_names_the_nearest(tmp_path: Path) -> None:
    result = _run(tmp_path, "- hosts: all\n  gather_facts: false\n  vars: {release_name: r1}\n  tasks:\n"
                            "    - set_fact: {release_nam: x}\n      when: false\n"
                            "    - debug: {msg: '{{ release_nam }}'}\n")  # fmt: skip
    assert result.code == 2
    fatal = [line for line in result.out.splitlines() if line.startswith("fatal:")]
    assert fatal == [
        "fatal: [one]: FAILED! => undefined variable 'release_nam' (did you mean 'release_name'?) "
        "in task 'debug' (pb.yml:7)"
    ]  # and the place said once, not twice


def test_an_unknown_module_names_the_nearest(tmp_path: Path) -> None:
    line = _one_line(_run(tmp_path, "- hosts: all\n  tasks:\n    - debgu: {msg: hi}\n"), 5)
    assert line == "ERROR: pb.yml:3: unknown module 'debgu' (did you mean 'debug'?)"
    line = _one_line(_run(tmp_path, "- hosts: all\n  tasks:\n    - ansible.builtin.comand: 'true'\n"), 5)
    assert line == "ERROR: pb.yml:3: unknown module 'ansible.builtin.comand' (did you mean 'ansible.builtin.command'?)"
    line = _one_line(
        _run(tmp_path, "- hosts: all\n  tasks:\n    - name: x\n      debug: {msg: hi}\n      registr: r\n"), 5
    )
    assert line == "ERROR: pb.yml:3: unknown task key or module 'registr' (did you mean 'register'?)"


def test_an_unknown_module_ad_hoc_names_the_nearest(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    line = _one_line(run_cli(["task", "shel", "-a", "true", "-i", str(tmp_path / "inv.yml")]), 5)
    assert line == "ERROR: unknown module 'shel' (did you mean 'shell'?)"


@pytest.mark.parametrize(
    ("expr", "said"),
    [
        ("'a' | uppper", "unknown Jinja2 filter 'uppper' (did you mean 'upper'?)"),
        ("'a' is strign", "unknown Jinja2 test 'strign' (did you mean 'string'?)"),
        ("'a' | to_jsn", "unknown Jinja2 filter 'to_jsn' (did you mean 'to_json'?)"),  # Ansible's filters too
    ],
)
def test_an_unknown_filter_or_test_names_the_nearest(tmp_path: Path, expr: str, said: str) -> None:
    line = _one_line(_run(tmp_path, f'- hosts: all\n  tasks:\n    - debug: {{msg: "{{{{ {expr} }}}}"}}\n'), 5)
    assert line.startswith(f"ERROR: pb.yml:3: {said} in ")


def test_an_unknown_filter_found_at_render_time_names_the_nearest() -> None:
    from provision import templating
    from provision.errors import TemplateError

    with pytest.raises(TemplateError, match=r"No filter named 'uppper'\. \(did you mean 'upper'\?\)"):
        templating.render_text("{{ 'a' | uppper }}", {}, "t.j2")


def test_a_misspelled_shipped_playbook_names_it(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    line = _one_line(run_cli_in(tmp_path, ["run", "sitee.yml", "-i", "inv.yml"]), 5)
    assert line == "ERROR: sitee.yml: no such playbook (did you mean 'site.yml'?)"


def test_a_misspelled_local_playbook_names_the_file_beside_it(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    (tmp_path / "plays").mkdir()
    (tmp_path / "plays" / "deploy.yaml").write_text("- hosts: all\n  tasks: []\n")
    line = _one_line(run_cli_in(tmp_path, ["run", "plays/deplyo.yaml", "-i", "inv.yml"]), 5)
    assert line == "ERROR: plays/deplyo.yaml: no such playbook (did you mean 'plays/deploy.yaml'?)"
    line = _one_line(run_cli_in(tmp_path, ["run", "nothing_like_it.yml", "-i", "inv.yml"]), 5)
    assert line == "ERROR: nothing_like_it.yml: no such playbook"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["rnu", "site.yml"], "ERROR: No such command 'rnu' (did you mean 'run'?) (see provision --help)"),
        (["pd", "statsu"], "ERROR: No such command 'statsu' (did you mean 'status'?) (see provision pd --help)"),
        (["pd", "zzz"], "ERROR: No such command 'zzz' (see provision pd --help)"),
    ],
)
def test_a_misspelled_command_names_the_nearest(argv: list[str], said: str) -> None:
    assert _one_line(run_cli(argv), 3) == said


def test_a_misspelled_play_key_handler_or_host_pattern_names_the_nearest(tmp_path: Path) -> None:
    line = _one_line(_run(tmp_path, "- hsots: all\n  tasks: []\n"), 5)
    assert line.startswith("ERROR: pb.yml:1: unknown play key 'hsots' (did you mean 'hosts'?) (known: ")
    line = _one_line(_run(tmp_path, "- hosts: all\n  tasks:\n    - {debug: {msg: x}, notify: restart app}\n"
                                    "  handlers:\n    - {name: restart ap, debug: {msg: y}}\n"), 5)  # fmt: skip
    assert line == "ERROR: pb.yml:3: task 'debug' notifies unknown handler 'restart app' (did you mean 'restart ap'?)"
    line = _one_line(_run(tmp_path, "- hosts: all\n  tasks: []\n", "-l", "onw"), 5)
    assert line == "ERROR: host pattern 'onw' matches no host or group in inv.yml (did you mean 'one'?)"
