"""Installing the stack on lab hosts: the install tests' helpers (an inventory of some lab hosts, the playbook
run in-process with its JSON report, a task's result, a venv's versions, the shared uv cache directory), and the
full pinned SGLang stack on a lab host, shared by the whole test session.

``sglang_stack`` (registered in tests/conftest.py) installs sglang==0.5.23, sglang-router, nixl-cu13==1.5.1 and
nixl==1.5.1 with install.yml and uv on lab host 0, once per session (~11 GB; about a minute from a cold uv cache,
seconds from the shared warm one). The install tests and the PD tests use the same venv.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CliResult, run_cli, task

REPO = Path(__file__).resolve().parents[2]
CACHE_ROOT = Path("/var/cache/provision-test")
VENV_TASK = "Venv with the pinned stack"
CHECK = "import importlib.metadata as m, sys; print(*(m.version(n) for n in sys.argv[1:]))"
LAB_VARS = {"python": "/usr/bin/python3", "install_sglang": False, "nixl_no_deps": True}


# --------------------------------------------------------------------------------------- shared helpers
def shared_dir(name: str) -> Path:
    """A directory every lab user can read and write, and whose new files and subdirectories are too
    (a default POSIX ACL of rwx for all overrides the users' umask): a uv cache the lab hosts share."""
    path = CACHE_ROOT / name
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(CACHE_ROOT, 0o755)
    os.chmod(path, 0o777)
    entries = b"".join(struct.pack("<HHI", tag, 7, 0xFFFFFFFF) for tag in (0x01, 0x04, 0x20))
    os.setxattr(path, "system.posix_acl_default", struct.pack("<I", 2) + entries)
    return path


def stack_inventory(lab: Any, directory: Path, hosts: list[int], per_host: dict[int, dict[str, Any]] | None = None,
                    **common: Any) -> Path:  # fmt: skip
    """An inventory of some lab hosts, no group_vars/: the defaults ship with provision (data/defaults.yml)."""
    directory.mkdir(parents=True, exist_ok=True)
    extra = {lab.hosts[i].name: {**common, **(per_host or {}).get(i, {})} for i in hosts}
    return lab.write_inventory(directory / "hosts.yml", names=hosts, extra_host_vars=extra)


def provision(playbook: str, inventory: Path, *args: str, cwd: Path) -> tuple[CliResult, dict[str, Any]]:
    """``provision run playbooks/PLAYBOOK -i INVENTORY ARGS --json`` in-process; (result, JSON report)."""
    old = Path.cwd()
    os.chdir(cwd)  # the retry file of a failed run lands here
    try:
        result = run_cli(["run", str(REPO / "playbooks" / playbook), "-i", str(inventory), *args, "--json"])
    finally:
        os.chdir(old)
    try:
        report = json.loads(result.out)
    except ValueError:
        pytest.fail(f"no JSON report (exit {result.code}): {result.err[-3000:]}")
    return result, report


task_result = task  # (the install tests' name for it)


def versions(lab: Any, i: int, *names: str, venv: str = ".provision/venv") -> list[str]:
    """Installed versions of ``names`` in host i's venv, read as its user."""
    out = lab.run_as(i, [f"{venv}/bin/python", "-c", CHECK, *names])
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def uv_as(lab: Any, i: int, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run the uv that provision brought to host i, as its user, on its live venv."""
    env = ["env", f"UV_CACHE_DIR={CACHE_ROOT / 'uv'}", "UV_SYSTEM_CERTS=1"]
    out = lab.run_as(i, [*env, ".provision/bin/uv", *argv, "--python", ".provision/venv/bin/python"], timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def clean(lab: Any, *hosts: int) -> None:
    for i in hosts:
        lab.run_as(i, ["rm", "-rf", ".provision", ".cache/uv"])


# ---------------------------------------------------------------------------- the full stack, once per session
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
