"""``ping``, ``stat``, ``slurp`` and ``raw`` against ansible-core itself, on this machine.

The read-only modules look at the SAME files under both tools (one ``ansible-playbook`` run, connection local,
holds every case; provision's modules run through a ``LocalConnection``); their registered values must match,
except the access time (reading a file for its checksum may move it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provision.catalog import lookup
from provision.modules.base import ModuleContext
from provision.transport import LocalConnection
from tests.support.ansible_ref import ansible_results

VOLATILE = {"atime", "invocation", "failed", "changed", "delta", "start", "end", "msg", "skipped"}


def _cases(root: Path) -> list[tuple[str, Any]]:
    (root / "f.txt").write_text("hello\n")
    (root / "f.txt").chmod(0o640)
    (root / "d").mkdir()
    (root / "l").symlink_to("f.txt")
    (root / "x.sh").write_text("#!/bin/sh\n")
    (root / "x.sh").chmod(0o755)
    return [
        ("stat", {"path": str(root / "f.txt")}),
        ("stat", {"path": str(root / "f.txt"), "checksum_algorithm": "sha256"}),
        ("stat", {"path": str(root / "f.txt"), "get_checksum": False, "get_mime": False}),
        ("stat", {"path": str(root / "d")}),
        ("stat", {"path": str(root / "l")}),
        ("stat", {"path": str(root / "l"), "follow": True}),
        ("stat", {"path": str(root / "x.sh")}),
        ("stat", {"path": str(root / "missing")}),
        ("slurp", {"src": str(root / "f.txt")}),
        ("slurp", {"src": str(root / "missing")}),
        ("ping", {}),
        ("ping", {"data": "hi"}),
        ("ping", {"data": "crash"}),
        ("raw", "echo out; echo err >&2"),
        ("raw", "exit 3"),
    ]


def _ansible(root: Path, cases: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return ansible_results(root, [{module: args} for module, args in cases])


def _provision(cases: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for module, raw in cases:
        cls = lookup(module)
        assert cls is not None
        args = cls.coerce(cls.validate_static(cls.normalize(raw), lambda v: False))
        result = cls().run(ModuleContext(host="h", conn=LocalConnection("h"), variables={}), args)
        out.append({**result.data, "failed": result.failed, "changed": result.changed, "msg": result.msg})
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], list[Any], list[Any]]:
    root = tmp_path_factory.mktemp("info")
    cases = _cases(root)
    theirs = _ansible(root, cases)
    return cases, theirs, _provision(cases)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in VOLATILE}
    return value


@pytest.mark.parametrize("i", range(15))
def test_the_same_as_ansible(runs: Any, i: int) -> None:
    cases, theirs, ours = runs
    ref, got = theirs[i], ours[i]
    assert got["failed"] == bool(ref.get("failed")), (cases[i], ref, got)
    assert got["changed"] == bool(ref.get("changed")), (cases[i], ref, got)
    compared = {k: v for k, v in ref.items() if k not in VOLATILE and not k.startswith("_ansible")}
    if not ref.get("failed"):
        assert {k: _plain(got.get(k)) for k in compared} == _plain(compared), cases[i]
    elif cases[i][0] != "raw":
        assert ref["msg"].endswith(got["msg"]), (ref["msg"], got["msg"])  # Ansible prefixes "Task failed: ..."
