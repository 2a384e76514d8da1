"""pip, for real: a virtualenv in tmp_path and a tiny package from PyPI (six)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.modules import pip_mod
from provision.modules.base import ModuleContext, ModuleResult, lookup
from provision.remote.pip_state import evaluate
from provision.transport import LocalConnection

SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def make_ctx(**kw: Any) -> ModuleContext:
    return ModuleContext(host="local", conn=LocalConnection("local"), variables={}, **kw)


def run(ctx: ModuleContext, raw: Any) -> ModuleResult:
    cls = lookup("pip")
    assert cls is not None
    args = cls.validate_static(cls.normalize(raw), lambda v: False)
    return cls().run(ctx, cls.coerce(args))


@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs GNU timeout")
def test_pip_virtualenv_install_then_converged(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    args = {"name": "six==1.16.0", "virtualenv": str(venv), "virtualenv_command": f"{SYSTEM_PYTHON} -m venv"}

    check = make_ctx(check=True)
    predicted = run(check, args)
    assert predicted.changed and not venv.exists() and check.conn.commands_run == 1

    ctx = make_ctx()
    result = run(ctx, args)
    assert result.changed and not result.failed, result.msg
    assert list((venv / "lib").glob("python3*/site-packages/six.py"))
    assert ctx.conn.commands_run == 3  # read state, create venv, pip install

    again = make_ctx()
    result = run(again, args)
    assert not result.changed and not result.failed and again.conn.commands_run == 1  # pip did not run
    assert result.data["installed"] == {"six": "1.16.0"}

    other = run(make_ctx(check=True), {**args, "name": ["six>=1.0,<2"]})
    assert not other.changed

    removed = run(make_ctx(), {**args, "state": "absent", "name": "six"})
    assert removed.changed and not list((venv / "lib").glob("python3*/site-packages/six.py"))
    gone = make_ctx()
    assert not run(gone, {**args, "state": "absent", "name": "six"}).changed and gone.conn.commands_run == 1


def test_pip_needs_name_or_requirements() -> None:
    cls = lookup("pip")
    assert cls is not None
    with pytest.raises(ValueError, match="name or requirements"):
        cls.validate_static({"virtualenv": "/x"}, lambda v: False)


def test_requirement_evaluation() -> None:
    installed = {"six": "1.16.0", "my-pkg": "2.0"}
    got = {r["req"]: r["satisfied"] for r in evaluate(["six==1.16.0", "My_Pkg>=2", "six<1", "nope", "./a"], installed)}
    assert got == {"six==1.16.0": True, "My_Pkg>=2": True, "six<1": False, "nope": False, "./a": None}


def test_names_split_at_specifier_commas_are_rejoined() -> None:
    args = pip_mod.Pip.coerce({"name": "six>=1.0,<2, requests"})
    assert pip_mod.Pip.wanted(args) == ["six>=1.0,<2", "requests"]
    assert pip_mod.Pip.wanted({**args, "name": ["six"], "version": "1.16.0"}) == ["six==1.16.0"]
