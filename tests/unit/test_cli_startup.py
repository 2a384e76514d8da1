"""`provision --help` and `provision --version` import no engine module (issue 14: a light start): the command
group, its options and help come from click and the light modules (errors, data, localfiles); a command imports
the engine when it runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENGINE = ("provision.api", "provision.executor", "provision.templating", "provision.commands",
          "provision.inventory", "provision.playbook", "provision.transport", "provision.modules", "jinja2",
          "paramiko", "fabric", "yaml")  # fmt: skip
# main() with its arguments returns through SystemExit (the command line's own main() ends the process at once)
PROBE = """\
import json, sys
from provision.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _loaded(*argv: str) -> tuple[int, str, list[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)  # fmt: skip
    out, _, last = proc.stdout.rstrip("\n").rpartition("\n")
    doc = json.loads(last)
    return doc["code"], out, doc["modules"]


@pytest.mark.parametrize("argv", [("--help",), ("--version",), ("pd", "--help"), ("run", "--help")])
def test_help_and_version_import_no_engine(argv: tuple[str, ...]) -> None:
    code, out, modules = _loaded(*argv)
    assert code in (0, None)
    assert "Usage: provision" in out or "provision, version" in out
    engine = [m for m in modules if any(m == e or m.startswith(e + ".") for e in ENGINE)]
    assert engine == []


def test_a_command_still_imports_what_it_needs(tmp_path: Path) -> None:
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all:\n  hosts:\n    h1: {ansible_connection: local}\n")
    code, out, modules = _loaded("inventory", "--graph", "-i", str(inventory))
    assert code == 0 and "h1" in out
    assert "provision.api" in modules and "yaml" in modules


def test_the_command_line_ends_with_all_its_output_and_its_code(tmp_path: Path) -> None:
    """`provision` (main() of the process's own command line) ends the process without the interpreter's
    teardown: what it wrote is flushed first (the --json document is written unflushed, after the recap) and the
    exit code is the command's."""
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all:\n  hosts:\n    h1: {ansible_connection: local}\n    h2: {ansible_connection: local}\n")
    (tmp_path / "pb.yml").write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: {msg: hi}\n")
    run = [sys.executable, "-m", "provision", "run", "-i", str(inventory)]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    ran = subprocess.run([*run, str(tmp_path / "pb.yml"), "--json"], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=120)  # fmt: skip
    assert ran.returncode == 0 and set(json.loads(ran.stdout)["stats"]) == {"h1", "h2"}
    missing = subprocess.run([*run, str(tmp_path / "none.yml")], capture_output=True, text=True, cwd=tmp_path,
                             env=env, timeout=120)  # fmt: skip
    assert missing.returncode == 5 and "none.yml: no such playbook" in missing.stderr
