"""``provision wheelhouse`` and ``wheel_sync`` with a manifest, for real: pip resolves from a local
find-links directory of small but valid wheels (offline), for hosts declared with ``wheelhouse_target``
(another Python, another platform), and the sync runs through LocalConnection."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from provision.modules.base import ModuleResult
from provision.stack.wheelhouse import Target, lock_of
from provision.testing import run_module
from tests.support import wheels
from tests.support.cli import run_cli
from tests.support.wheels import H200

PY = sys.executable
links = wheels.links  # the fixture: small valid wheels, offline


def inventory(tmp_path: Path, hosts: dict[str, dict[str, Any]]) -> Path:
    common = {"ansible_connection": "local", "sglang_version": "auto", "wheelhouse_packages": ["numpy==2.2.0"]}
    doc = {"all": {"vars": common, "hosts": hosts}}
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def make(tmp_path: Path, links: Path, hosts: dict[str, dict[str, Any]], *more: str) -> tuple[Any, Path]:
    house = tmp_path / "house"
    argv = ["wheelhouse", "-i", str(inventory(tmp_path, hosts)), "-d", str(house), "--find-links", str(links)]
    return run_cli([*argv, "--no-index", *more]), house


def test_platform_tags_follow_the_hosts_glibc() -> None:
    tags = Target("3.12", "x86_64", "2.35").platforms()
    assert tags[0] == "manylinux_2_35_x86_64" and "manylinux_2_17_x86_64" in tags and "manylinux2014_x86_64" in tags
    assert "manylinux_2_36_x86_64" not in tags
    assert Target("3.12", "aarch64", "2.28").platforms()[-1] == "manylinux2014_aarch64"
    assert Target("3.12", torch="2.11.0+cu128").nixl_variant() == "cu12"
    assert Target("3.12", torch="2.11.0+cu128", cuda="13.0").nixl_variant() == "cu13"  # the driver decides


def test_each_host_gets_its_platforms_files_once_with_hashes(tmp_path: Path, links: Path) -> None:
    arm = {**H200, "machine": "aarch64"}
    hosts = {"gpu-a": {"wheelhouse_target": H200}, "gpu-b": {"wheelhouse_target": H200},
             "arm": {"wheelhouse_target": arm}, "py311": {"wheelhouse_target": {**H200, "python": "3.11"}}}  # fmt: skip
    result, house = make(tmp_path, links, hosts)
    assert result.code == 0, result.err
    manifest = json.loads((house / "manifest.json").read_text())
    assert manifest["groups"] == 3  # gpu-a and gpu-b need the same: one download for both
    a, b = manifest["hosts"]["gpu-a"], manifest["hosts"]["gpu-b"]
    assert a["files"] == b["files"] and a["release"] == "0.5.17" and "torch==2.11.0" in a["reason"]
    assert "sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl" in a["files"]
    assert "sglang-0.5.17-cp312-cp312-manylinux_2_34_aarch64.whl" in manifest["hosts"]["arm"]["files"]
    assert "sglang-0.5.17-cp311-cp311-manylinux_2_34_x86_64.whl" in manifest["hosts"]["py311"]["files"]
    assert "nixl_cu13-1.5.1-cp312-cp312-manylinux_2_28_x86_64.whl" in a["files"]  # the driver's CUDA 13
    assert not any(f.startswith("nixl_cu12") for f in a["files"])
    assert "sglang==0.5.17" in a["lock"] and "nixl==1.5.1" in a["lock"] and "numpy==2.2.0" in a["lock"]
    assert a["deps"] is False  # the host brings torch: its pins, nothing resolved around them
    for name, meta in manifest["files"].items():
        data = (house / name).read_bytes()
        assert meta == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    assert sorted(os.listdir(house)) == sorted([*manifest["files"], "manifest.json"])
    assert "gpu-a: Python 3.12 x86_64 glibc 2.39, torch 2.11.0+cu130: sglang 0.5.17" in result.out


def test_a_host_whose_glibc_is_too_old_for_the_release_fails_in_one_line(tmp_path: Path, links: Path) -> None:
    result, house = make(tmp_path, links, {"old": {"wheelhouse_target": {**H200, "glibc": "2.31"}}})
    assert result.code == 2 and "pip download for Python 3.12 on x86_64 failed" in result.err
    assert "sglang==0.5.17" in result.err and not (house / "manifest.json").exists()


def test_a_release_that_would_replace_the_hosts_torch_is_refused_before_downloading(
    tmp_path: Path, links: Path
) -> None:
    result, house = make(tmp_path, links, {"gpu": {"wheelhouse_target": H200, "sglang_version": "0.5.23"}})
    assert result.code == 2 and "gpu: sglang 0.5.23 pins torch==2.14.1" in result.err
    assert not house.exists()


def sync_args(house: Path, dest: Path) -> dict[str, Any]:
    return {"src": str(house), "dest": str(dest), "python": PY, "manifest": True}


def sync(tmp_path: Path, args: dict[str, Any]) -> ModuleResult:
    """wheel_sync run as one task runs it, on this machine as the host called "local"."""
    return run_module("wheel_sync", args, variables={"ansible_python_interpreter": PY}, controller_dir=str(tmp_path))


def test_wheel_sync_sends_the_hosts_lock_checks_it_and_resumes(tmp_path: Path, links: Path) -> None:
    arm = {**H200, "machine": "aarch64"}
    result, house = make(tmp_path, links, {"local": {"wheelhouse_target": H200}, "arm": {"wheelhouse_target": arm}})
    assert result.code == 0, result.err
    mine = json.loads((house / "manifest.json").read_text())["hosts"]["local"]
    dest = tmp_path / "host-wheels"
    first = sync(tmp_path, sync_args(house, dest))
    assert first.changed and sorted(first.data["sent"]) == sorted(mine["files"]), first.msg
    assert sorted(os.listdir(dest)) == sorted(mine["files"])  # not the aarch64 host's files
    assert first.data["requirements"] == mine["lock"] == lock_of(mine["files"]) and "sha256 checked" in first.msg
    again = sync(tmp_path, sync_args(house, dest))
    assert not again.changed and again.data["sent"] == [] and again.data["requirements"] == mine["lock"]
    gone = sorted(mine["files"])[0]
    (dest / gone).unlink()  # an interrupted sync: one file never arrived
    assert sync(tmp_path, sync_args(house, dest)).data["sent"] == [gone]


def test_wheel_sync_deletes_a_file_that_does_not_match_its_hash(tmp_path: Path, links: Path) -> None:
    result, house = make(tmp_path, links, {"local": {"wheelhouse_target": H200}})
    assert result.code == 0, result.err
    name = next(n for n in os.listdir(house) if n.startswith("numpy"))
    data = bytearray((house / name).read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: the controller's copy went bad after the manifest was written
    (house / name).write_bytes(bytes(data))
    res = sync(tmp_path, sync_args(house, tmp_path / "dest"))
    assert res.failed and res.data["bad"] == [name] and "differ from their sha256" in res.msg
    assert not (tmp_path / "dest" / name).exists()


def test_wheel_sync_refuses_a_host_the_wheelhouse_was_not_made_for(tmp_path: Path, links: Path) -> None:
    result, house = make(tmp_path, links, {"elsewhere": {"wheelhouse_target": H200}})
    assert result.code == 0, result.err
    res = sync(tmp_path, sync_args(house, tmp_path / "dest"))
    assert res.failed and "local is not in the wheelhouse" in res.msg and "provision wheelhouse" in res.msg
