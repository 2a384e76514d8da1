"""``provision task`` shows each host's result as Ansible's ad hoc does: ``host | CHANGED | rc=0 >>`` and the
output for command/shell/raw, ``host | SUCCESS => {...}`` for other modules, compared with ansible-core's
``ansible`` on the same local host. A long output is cut for the terminal, with a line that says so; ``--json``
has all of it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import CliResult, run_cli_in

INVENTORY = "all:\n  hosts:\n    one: {ansible_connection: local}\n"


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    return tmp_path / "inv.yml"


def provision(inv: Path, module: str, args: str, *flags: str) -> CliResult:
    return run_cli_in(inv.parent, ["task", module, "-a", args, "-i", str(inv), *flags])


def ansible(inv: Path, module: str, args: str) -> str:
    env = {**os.environ, "ANSIBLE_LOCAL_TEMP": str(inv.parent / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_RETRY_FILES_ENABLED": "False"}  # fmt: skip
    command = [shutil.which("ansible") or "ansible", "-i", str(inv), "one", "-m", module, "-a", args]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.stdout


def test_a_command_shows_rc_and_output_as_ansible(inv: Path) -> None:
    result = provision(inv, "command", "echo hello")
    assert result.code == 0, result.err
    assert result.out.splitlines() == ansible(inv, "command", "echo hello").splitlines()
    assert result.out.splitlines() == ["one | CHANGED | rc=0 >>", "hello"]
    for banner in ("PLAY [", "TASK [", "PLAY RECAP"):  # Ansible's ad hoc shows none of them
        assert banner not in result.out


def test_a_failed_command_shows_rc_stdout_and_stderr(inv: Path) -> None:
    script = "echo out; echo err >&2; exit 3"
    result = provision(inv, "shell", script)
    assert result.code == 2
    lines = result.out.splitlines()
    reference = [line for line in ansible(inv, "shell", script).splitlines() if line.startswith("one |")]
    assert lines[0] == reference[0] == "one | FAILED | rc=3 >>"
    assert lines[1:3] == ["out", "err"]  # (Ansible glues its msg to stderr: "errnon-zero return code")
    assert result.err.strip() == "ERROR: failed hosts: one"


@pytest.mark.parametrize(
    ("module", "args"), [("ping", ""), ("debug", "msg=hello"), ("debug", "var=inventory_hostname")]
)
def test_another_module_shows_its_result_as_json_as_ansible(inv: Path, module: str, args: str) -> None:
    result = provision(inv, module, args)
    assert result.code == 0, result.err
    head, _, body = result.out.partition(" => ")
    ref_head, _, ref_body = ansible(inv, module, args).partition(" => ")
    assert head == ref_head == "one | SUCCESS"
    assert json.loads(body) == json.loads(ref_body)


def test_the_module_may_be_named_with_its_collection(inv: Path) -> None:
    result = provision(inv, "ansible.builtin.shell", "echo hi")
    assert result.out.splitlines() == ["one | CHANGED | rc=0 >>", "hi"]


def test_a_long_output_is_cut_for_humans_and_whole_in_json(inv: Path) -> None:
    script = "seq 1 100; seq 1 30 | sed 's/^/e/' >&2"
    result = provision(inv, "shell", script)
    lines = result.out.splitlines()
    assert lines[0] == "one | CHANGED | rc=0 >>"
    assert lines[1:41] == [str(n) for n in range(1, 41)]
    assert lines[41] == "[stdout: first 40 of 100 lines; --json shows all of it]"
    assert lines[42] == "[stderr: last 20 of 30 lines; --json shows all of it]"
    assert lines[43:] == [f"e{n}" for n in range(11, 31)]
    doc = json.loads(provision(inv, "shell", script, "--json").out)
    host = doc["plays"][0]["tasks"][0]["hosts"]["one"]
    assert host["stdout_lines"] == [str(n) for n in range(1, 101)] and host["rc"] == 0
    assert len(host["stderr_lines"]) == 30


def test_a_long_line_is_cut_too(inv: Path) -> None:
    result = provision(inv, "shell", "printf 'x%.0s' $(seq 1 2000)")
    lines = result.out.splitlines()
    assert lines[1] == "x" * 500 + " ..." and lines[2] == "[stdout: long lines cut; --json shows all of it]"


def test_an_unreachable_host_is_one_block(inv: Path) -> None:
    inv.write_text("all:\n  hosts:\n    gone: {ansible_host: 127.0.0.1, ansible_port: 1, ansible_user: nobody}\n")
    result = provision(inv, "command", "true")
    assert result.code == 4
    head, _, body = result.out.partition(" => ")
    assert head == "gone | UNREACHABLE!"
    shown = json.loads(body.split("\n}\n")[0] + "\n}")
    assert shown == {"changed": False, "msg": "cannot connect to nobody@127.0.0.1:1: Connection refused",
                     "unreachable": True}  # fmt: skip
    assert "NO MORE HOSTS LEFT" not in result.out


def test_a_command_that_did_not_run_says_why_as_ansible(inv: Path) -> None:
    result = provision(inv, "command", "echo hi creates=/etc/passwd")
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["one | SUCCESS | rc=0 >>", "Did not run command since '/etc/passwd' exists"]
    reference = ansible(inv, "command", "echo hi creates=/etc/passwd").splitlines()
    assert reference[0] == "one | SUCCESS | rc=0 >>" and reference[1].endswith(result.out.splitlines()[1])
