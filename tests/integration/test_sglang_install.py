"""The full pinned stack, once per session: sglang==0.5.23, sglang-router, nixl-cu13==1.5.1 and nixl==1.5.1
installed by install.yml with uv on one lab host (~11 GB; about a minute from a cold uv cache, seconds from
the shared warm one), then ``python -m sglang.launch_server --help`` run there.

The ``sglang_stack`` session fixture is meant for the PD tests too: they get the host, its venv and an
inventory that points at it, and pay for the install once per session (see :func:`install_sglang_stack`
to put the same stack on more lab hosts: from the warm cache that takes seconds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.stack import SglangStack, provision, task_result, versions

pytestmark = pytest.mark.lab


def test_full_stack_installs_and_sglang_starts(lab: Any, sglang_stack: SglangStack) -> None:
    i = sglang_stack.host
    found = versions(lab, i, "sglang", "sglang-router", "nixl-cu13", "nixl", venv=sglang_stack.venv)
    assert found == ["0.5.23", "0.3.2", "1.5.1", "1.5.1"]
    assert lab.run_as(i, [f"{sglang_stack.venv}/bin/python", "-c", "import nixl_cu12"]).returncode != 0
    helped = lab.run_as(i, [f"{sglang_stack.venv}/bin/python", "-m", "sglang.launch_server", "--help"], timeout=600)
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert "--disaggregation-transfer-backend" in helped.stdout


def test_full_stack_rerun_is_ok_without_resolving(
    lab: Any, sglang_stack: SglangStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(*next(iter(lab.ssh_env().items())))
    result, report = provision("install.yml", sglang_stack.inventory, cwd=tmp_path)
    assert result.code == 0, result.err
    assert report["stats"][sglang_stack.name]["changed"] == 0
    again = task_result(report, "Venv with the pinned stack", sglang_stack.name)
    assert again["actions"] == [] and again["packages"][:2] == ["sglang==0.5.23", "sglang-router==0.3.2"]
