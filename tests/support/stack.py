"""The full pinned SGLang stack on a lab host, shared by the whole test session.

``sglang_stack`` (registered in tests/conftest.py) installs sglang==0.5.23, sglang-router, nixl-cu13==1.5.1 and
nixl==1.5.1 with install.yml and uv on lab host 0, once per session (~11 GB; about a minute from a cold uv cache,
seconds from the shared warm one). The install tests and the PD tests use the same venv.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_install import provision, shared_dir, stack_inventory

VENV = "~/sglang-stack/venv"  # outside ~/.provision, which the NIXL-only tests wipe between tests
FULL_VARS = {"python": "/usr/bin/python3", "venv_path": VENV, "install_sglang": True, "nixl_no_deps": False}


@dataclass
class SglangStack:
    host: int  # lab host index
    name: str  # its inventory name
    venv: str  # absolute path of the venv on that host
    inventory: Path  # an inventory of that host whose vars point at the venv
    seconds: float  # what the install took in this session


def install_sglang_stack(lab: Any, hosts: list[int], directory: Path) -> tuple[Path, dict[str, Any], float]:
    """install.yml with the full stack on ``hosts``; (inventory, JSON report, seconds). Fails the test on error."""
    inv = stack_inventory(lab, directory, hosts, uv_cache_dir=str(shared_dir("uv")), **FULL_VARS)
    started = time.monotonic()
    with lab.pointed_at():
        result, report = provision("install.yml", inv, cwd=directory)
    assert result.code == 0, result.err[-4000:]
    return inv, report, time.monotonic() - started


@pytest.fixture(scope="session")
def sglang_stack(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SglangStack]:
    host = 0
    inv, _, seconds = install_sglang_stack(lab, [host], tmp_path_factory.mktemp("sglang-stack"))
    venv = str(lab.hosts[host].home / VENV.removeprefix("~/"))
    yield SglangStack(host, lab.hosts[host].name, venv, inv, seconds)
