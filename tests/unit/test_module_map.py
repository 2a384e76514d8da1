"""docs/architecture.md's module map is the one scripts/module_map.py makes from the docstrings: adding a module,
moving one or changing the first sentence of its docstring without regenerating the map fails here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "scripts" / "module_map.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("module_map", module)
    spec.loader.exec_module(module)
    return module


def test_the_module_map_in_the_architecture_doc_is_current() -> None:
    script = _script()
    text = script.DOC.read_text(encoding="utf-8")
    assert script.rewritten(text) == text, "docs/architecture.md's module map is stale: run scripts/module_map.py"


def test_the_map_has_every_module_file_and_notices_a_new_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script()
    rows = script.render().splitlines()
    assert "| `templating/templar.py` |" in "\n".join(rows)
    assert sum(1 for r in rows if r.startswith("| `")) == len(script.files())
    # a new module with a docstring changes the map (so the doc above would be stale)
    package = tmp_path / "provision"
    (package / "fresh").mkdir(parents=True)
    (package / "fresh" / "__init__.py").write_text('"""A fresh package. More text."""\n')
    (package / "fresh" / "thing.py").write_text('"""The thing: it does one job. Details."""\n')
    (package / "plain.py").write_text("x = 1\n")
    monkeypatch.setattr(script, "PACKAGE", package)
    assert script.render().splitlines()[3:-1] == [
        "| `plain.py` | (no docstring) |",
        "| `fresh/` | A fresh package. |",
        "| `fresh/thing.py` | The thing: it does one job. |",
    ]
