"""No test module imports another: what tests share lives in ``tests/support/`` (a package), so a test file
can be read, run, moved or deleted on its own, and importing it never collects (or runs the module code of)
another file's tests. Any file under ``tests/`` counts as the importer, support modules included; an import
inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_test_modules(path: Path) -> list[str]:
    """``line: module`` for each import in ``path`` of a test module (``tests.<...>.test_*`` or a conftest)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom):  # relative: from . import test_x, from .test_x import y
            names = [node.module or ""] + [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            relative = isinstance(node, ast.ImportFrom) and node.level > 0
            if (relative or parts[0] == "tests") and any(p.startswith("test_") or p == "conftest" for p in parts):
                found.append(f"{node.lineno}: {name}")
                break
    return found


def _cached(path: Path) -> bool:
    """A file under a hidden or cache folder of ``tests/`` (a tool's cache, a venv a test built: a NIXL venv under
    ``tests/.cache`` held numpy, pip and setuptools, ~1,300 files, and made this test 11-80 s long): not test code."""
    return any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(TESTS).parts[:-1])


def test_no_test_module_imports_another() -> None:
    offenders = {
        str(path.relative_to(TESTS.parent)): hits
        for path in sorted(TESTS.rglob("*.py"))
        if not _cached(path) and (hits := imported_test_modules(path))
    }
    assert not offenders, f"move what these share to tests/support/: {offenders}"


def test_the_guard_sees_each_form_of_import(tmp_path: Path) -> None:
    planted = tmp_path / "test_planted.py"
    unit, integration, compat = "tests.unit", "tests.integration", "tests.compat"  # a grep for such imports: quiet
    planted.write_text(
        f"from {unit}.test_process import ctl\n"
        f"import {integration}.test_engine\n"
        f"from {unit} import test_stack\n"
        "from .test_wheelhouse import H200\n"
        "def later():\n"
        f"    from {unit}.test_pd_cli import inventory\n"
        "from tests.support.processes import alive\n"
        f"from {compat}.harness import Case\n"
    )
    assert [hit.split(":")[0] for hit in imported_test_modules(planted)] == ["1", "2", "3", "4", "6"]


def test_the_walk_skips_caches_not_test_folders() -> None:
    skipped = [".cache/nixl-venv/lib/python3.11/site-packages/numpy/core.py", "unit/__pycache__/test_x.py"]
    kept = ["unit/test_x.py", "compat/cases/custom_plugins/library/own.py", "support/stack.py"]
    assert [_cached(TESTS / p) for p in skipped + kept] == [True, True, False, False, False]
