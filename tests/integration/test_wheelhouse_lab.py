"""``provision wheelhouse`` against real lab hosts (read over SSH: Python, glibc, machine, no torch), then
install.yml from it on hosts that may reach no index: each host gets its lock, sha256-checked; a rerun sends
nothing (one listing per host); a wheel lost on a host is the only one sent again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.stack import LAB_VARS, clean, provision, stack_inventory, task_result, versions

pytestmark = pytest.mark.lab
SYNC = "Wheel directory synced to the host (offline install)"


def test_wheelhouse_for_two_lab_hosts_installs_offline_and_resumes(
    lab_env: Any,
    wheel_dir: Path,
    tmp_path: Path,
) -> None:
    lab = lab_env
    clean(lab, 1, 2)
    numpy = next(wheel_dir.glob("numpy-*.whl")).name.split("-")[1]
    offline = {
        "wheelhouse_deps": False,
        "wheelhouse_packages": [f"numpy=={numpy}"],
        "pip_index_url": "http://127.0.0.1:9/simple",  # an index that does not answer: it must not be asked
        "uv_cache_dir": None,
    }
    inv = stack_inventory(lab, tmp_path / "inv", [1, 2], **LAB_VARS, **offline)
    house = tmp_path / "house"
    made = run_cli(["wheelhouse", "-i", str(inv), "-d", str(house), "--find-links", str(wheel_dir), "--no-index"])
    assert made.code == 0, made.err
    manifest = json.loads((house / "manifest.json").read_text())
    assert manifest["groups"] == 1  # the two hosts need the same files: downloaded once
    one = manifest["hosts"]["lab1"]
    assert one["target"]["python"] == "3.11" and one["target"]["machine"] == "x86_64" and one["target"]["glibc"]
    assert one["target"]["torch"] is None and len(one["files"]) == 3
    assert sorted(one["lock"]) == sorted(["nixl-cu13==1.5.1", "nixl==1.5.1", f"numpy=={numpy}"])

    result, report = provision("install.yml", inv, "-e", f"wheelhouse={house}", cwd=tmp_path)
    assert result.code == 0, result.err
    for host in ("lab1", "lab2"):
        synced = task_result(report, SYNC, host)
        assert synced["changed"] and len(synced["sent"]) == 3 and "sha256 checked" in synced["msg"]
    assert versions(lab, 1, "nixl-cu13", "nixl", "numpy") == ["1.5.1", "1.5.1", numpy]

    result, report = provision("install.yml", inv, "-e", f"wheelhouse={house}", cwd=tmp_path)
    assert result.code == 0 and all(report["stats"][h]["changed"] == 0 for h in ("lab1", "lab2")), report["stats"]
    assert task_result(report, SYNC, "lab1")["sent"] == []

    lost = sorted(one["files"])[0]
    lab.run_as(1, ["rm", "-f", f".provision/wheels/{lost}"])  # an interrupted sync: one file never arrived
    result, report = provision("install.yml", inv, "-e", f"wheelhouse={house}", cwd=tmp_path)
    assert result.code == 0, result.err
    assert task_result(report, SYNC, "lab1")["sent"] == [lost] and task_result(report, SYNC, "lab2")["sent"] == []
