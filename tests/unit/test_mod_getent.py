"""``getent`` against ansible-core's own module, on this machine (connection local): the facts each case
defines, its failure and message; and what the run's masker makes of those facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provision.catalog import lookup
from provision.commands import is_secret_name
from provision.modules.base import ModuleContext
from provision.transport import LocalConnection
from tests.support.ansible_ref import ansible_results

CASES: list[dict[str, Any]] = [
    {"database": "passwd", "key": "root"},
    {"database": "group", "key": "root", "split": ":"},
    {"database": "ahosts", "key": "localhost"},  # one address on several lines: a list of its records
    {"database": "shadow", "key": "root"},
    {"database": "passwd", "key": "provision-no-such-user"},
    {"database": "passwd", "key": "provision-no-such-user", "fail_key": False},
    {"database": "nosuchdatabase"},
    {"database": "passwd", "key": "root", "split": "/"},
]


def test_the_same_facts_and_failures_as_ansible(tmp_path: Path) -> None:
    refs = ansible_results(tmp_path, [{"getent": case} for case in CASES])
    cls = lookup("getent")
    assert cls is not None
    for case, ref in zip(CASES, refs, strict=True):
        checked = cls.validate_static(case, lambda v: False)
        got = cls().run(ModuleContext(host="h", conn=LocalConnection("h"), variables={}), cls.coerce(checked))
        assert got.failed == bool(ref.get("failed")), (case, ref, got)
        assert got.msg == ref.get("msg", ""), (case, ref, got)
        assert got.data.get("ansible_facts") == ref.get("ansible_facts"), case
        assert got.facts == (ref.get("ansible_facts") or {}), case


def test_the_facts_planned_and_masked() -> None:
    cls = lookup("getent")
    assert cls is not None
    assert cls.facts_defined({"database": "group"}, lambda v: False) == {"getent_group"}
    assert cls.facts_defined({"database": "{{ db }}"}, lambda v: "{{" in str(v)) is None  # named at run time
    assert not is_secret_name("getent_passwd")  # world-readable: "root" is not hidden in every line
    assert is_secret_name("getent_shadow") and is_secret_name("getent_gshadow")  # the password hashes
    assert is_secret_name("db_passwd")
