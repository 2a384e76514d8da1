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
PROBE = """\
import json, runpy, sys
sys.argv = ["provision", *sys.argv[1:]]
try:
    runpy.run_module("provision", run_name="__main__")
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
