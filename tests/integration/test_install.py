"""install.yml, bootstrap.yml, smoke.yml and preflight.yml against the lab: real sshd hosts, real venvs with
real nixl-cu13 1.5.1 + nixl 1.5.1 + numpy (install_sglang=false, nixl_no_deps=true: no torch), uv brought
from the controller. The uv cache is shared by every lab user (a world-writable dir with a default ACL), so
each wheel is downloaded once per machine, not once per host and test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import named
from tests.support.stack import (
    CHECK,
    LAB_VARS,
    VENV_TASK,
    clean,
    provision,
    stack_inventory,
    task_result,
    uv_as,
    versions,
)

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------- tests
def test_bootstrap_finds_a_python_that_builds_venvs(lab_env: Any, tmp_path: Path) -> None:
    inv = stack_inventory(lab_env, tmp_path / "inv", [0, 1], python="/usr/bin/python3")
    result, report = provision("bootstrap.yml", inv, "-e", "installer=pip", cwd=tmp_path)
    assert result.code == 0, result.err
    for host in ("lab0", "lab1"):
        res = task_result(report, "Python 3.10+ with venv/ensurepip", host)
        assert res["venv_ok"] and res["python"] == "/usr/bin/python3" and not res["changed"]


def test_install_on_two_hosts_then_rerun_changes_nothing(lab_env: Any, uv_cache: Path, tmp_path: Path) -> None:
    lab = lab_env
    clean(lab, 0, 1)
    inv = stack_inventory(lab, tmp_path / "inv", [0, 1], uv_cache_dir=str(uv_cache), **LAB_VARS)
    result, report = provision("install.yml", inv, cwd=tmp_path)
    assert result.code == 0, result.err
    assert report["stats"]["lab0"]["changed"] == report["stats"]["lab1"]["changed"] == 1
    for i in (0, 1):
        assert versions(lab, i, "nixl-cu13", "nixl", "numpy")[:2] == ["1.5.1", "1.5.1"]
        assert lab.run_as(i, [".provision/venv/bin/python", "-c", CHECK, "nixl-cu12"]).returncode != 0
        assert lab.run_as(i, ["test", "-L", ".provision/venv"]).returncode == 0
        done = task_result(report, VENV_TASK, f"lab{i}")
        assert any(a.startswith("copied uv to") for a in done["actions"]), done
        assert done["packages"] == ["numpy"] and done["no_deps_packages"] == ["nixl-cu13==1.5.1", "nixl==1.5.1"]

    result, report = provision("install.yml", inv, cwd=tmp_path)
    assert result.code == 0, result.err
    for host in ("lab0", "lab1"):
        assert report["stats"][host]["changed"] == 0, report["stats"]
        again = task_result(report, VENV_TASK, host)
        assert again["actions"] == [] and "requirements met" in again["msg"]  # one version check, no resolver


def test_smoke_lists_ucx(lab_env: Any, uv_cache: Path, tmp_path: Path) -> None:
    inv = stack_inventory(lab_env, tmp_path / "inv", [0, 1], uv_cache_dir=str(uv_cache), **LAB_VARS)
    assert provision("install.yml", inv, cwd=tmp_path)[0].code == 0
    result, report = provision("smoke.yml", inv, cwd=tmp_path)
    assert result.code == 0, result.err
    for host in ("lab0", "lab1"):
        smoke = task_result(report, "NIXL loads its plugins", host)
        assert "UCX" in smoke["plugins"] and smoke["nixl_version"] == "1.5.1", smoke
        assert not smoke["changed"]


def test_preflight_writes_from_prefill_into_decode(lab_env: Any, uv_cache: Path, tmp_path: Path) -> None:
    lab = lab_env
    inv = stack_inventory(lab, tmp_path / "inv", [0, 1], uv_cache_dir=str(uv_cache), **LAB_VARS)
    assert provision("install.yml", inv, cwd=tmp_path)[0].code == 0
    roles = {lab.hosts[0].name: {**LAB_VARS, "uv_cache_dir": str(uv_cache)}}
    lab.write_inventory(inv, extra_host_vars={**roles, lab.hosts[1].name: roles[lab.hosts[0].name]},
                        groups={"prefill": ["lab0"], "decode": ["lab1"]})  # fmt: skip
    result, report = provision("preflight.yml", inv, cwd=tmp_path)
    assert result.code == 0, result.err
    transfer = task_result(report, "NIXL WRITE prefill -> decode, verified and timed", "lab0")
    assert transfer["results"][0]["verified"], transfer
    assert report["stats"]["lab0"]["changed"] == report["stats"]["lab1"]["changed"] == 0


def test_drift_is_changed_and_fixed(lab_env: Any, uv_cache: Path, tmp_path: Path) -> None:
    lab = lab_env
    inv = stack_inventory(lab, tmp_path / "inv", [0, 1], uv_cache_dir=str(uv_cache), **LAB_VARS)
    assert provision("install.yml", inv, cwd=tmp_path)[0].code == 0
    uv_as(lab, 0, "pip", "install", "--no-deps", "nixl-cu13==1.5.0")  # by hand, in the live venv
    uv_as(lab, 1, "pip", "uninstall", "numpy")
    assert versions(lab, 0, "nixl-cu13") == ["1.5.0"]

    result, report = provision("install.yml", inv, cwd=tmp_path)
    assert result.code == 0, result.err
    assert report["stats"]["lab0"]["changed"] == report["stats"]["lab1"]["changed"] == 1
    assert "nixl-cu13 1.5.0 (want nixl-cu13==1.5.1)" in task_result(report, VENV_TASK, "lab0")["reasons"]
    assert "numpy missing (want numpy)" in task_result(report, VENV_TASK, "lab1")["reasons"]
    assert versions(lab, 0, "nixl-cu13", "nixl") == ["1.5.1", "1.5.1"]
    assert len(versions(lab, 1, "numpy")) == 1
    result, report = provision("install.yml", inv, cwd=tmp_path)
    assert report["stats"]["lab0"]["changed"] == report["stats"]["lab1"]["changed"] == 0


def test_missing_version_fails_that_host_only_and_keeps_its_venv(lab_env: Any, uv_cache: Path, tmp_path: Path) -> None:
    lab = lab_env
    common = {"uv_cache_dir": str(uv_cache), **LAB_VARS}
    inv = stack_inventory(lab, tmp_path / "inv", [0, 1], **common)
    assert provision("install.yml", inv, cwd=tmp_path)[0].code == 0
    live = lab.run_as(0, ["readlink", ".provision/venv"]).stdout.strip()

    inv = stack_inventory(lab, tmp_path / "bad", [0, 1], per_host={0: {"nixl_version": "9.9.9"}}, **common)
    result, report = provision("install.yml", inv, cwd=tmp_path)
    assert result.code == 2
    assert report["stats"]["lab0"]["failed"] == 1 and report["stats"]["lab1"]["failed"] == 0
    msg = task_result(report, VENV_TASK, "lab0")["msg"]
    assert "\n" not in msg and "nixl-cu13==9.9.9 is not available from the package index" in msg, msg
    assert "left as it was" in msg
    assert lab.run_as(0, ["readlink", ".provision/venv"]).stdout.strip() == live
    works = lab.run_as(0, [".provision/venv/bin/python", "-c", "import nixl._api"])
    assert works.returncode == 0, works.stderr
    envs = lab.run_as(0, ["ls", ".provision/venv.envs"]).stdout.split()
    assert envs == [Path(live).name] or (Path(live).name in envs and len(envs) <= 2)  # the failed build is gone


def test_no_disk_space_fails_before_installing(lab_env: Any, uv_cache: Path, tmp_path: Path) -> None:
    lab = lab_env
    clean(lab, 2)
    inv = stack_inventory(lab, tmp_path / "inv", [2], uv_cache_dir=str(uv_cache), min_free_gb=100000, **LAB_VARS)
    result, report = provision("install.yml", inv, cwd=tmp_path)
    assert result.code == 2
    msg = task_result(report, VENV_TASK, "lab2")["msg"]
    assert "GB free at" in msg and "needs 100000 GB (min_free_gb)" in msg and "nothing was installed" in msg
    left = lab.run_as(2, ["sh", "-c", "ls -A .provision 2>/dev/null"]).stdout.split()
    assert all(n.startswith("run-") and n.endswith(".lock") for n in left), left  # not even uv: only the run lock


def test_offline_install_from_a_controller_wheel_dir(lab_env: Any, wheel_dir: Path, tmp_path: Path) -> None:
    lab = lab_env
    clean(lab, 3)
    offline = {
        "pip_find_links": str(wheel_dir),
        "pip_no_index": True,
        "pip_index_url": "http://127.0.0.1:9/simple",  # an index that does not answer: it must not be asked
        "uv_cache_dir": None,  # the user's own, empty cache: nothing can come from a previous test
    }
    inv = stack_inventory(lab, tmp_path / "inv", [3], **LAB_VARS, **offline)
    result, report = provision("install.yml", inv, cwd=tmp_path)
    assert result.code == 0, result.err
    synced = task_result(report, "Wheel directory synced to the host (offline install)", "lab3")
    assert synced["changed"] and len(synced["sent"]) == len(list(wheel_dir.iterdir()))
    assert versions(lab, 3, "nixl-cu13", "nixl")[:2] == ["1.5.1", "1.5.1"]
    result, report = provision("install.yml", inv, cwd=tmp_path)
    assert result.code == 0 and report["stats"]["lab3"]["changed"] == 0, report["stats"]


def test_rollout_goes_batch_by_batch_and_stops_at_a_failed_batch(lab_env: Any, uv_cache: Path, tmp_path: Path) -> None:
    lab = lab_env
    clean(lab, 0, 1, 2)
    inv = stack_inventory(lab, tmp_path / "inv", [0, 1, 2], uv_cache_dir=str(uv_cache), **LAB_VARS)
    result, report = provision("rollout.yml", inv, cwd=tmp_path)
    assert result.code == 0, result.err
    batches = [sorted(e["hosts"]) for p in report["plays"] for e in p["tasks"] if named(e["task"]["name"], VENV_TASK)]
    assert batches == [["lab0"], ["lab1"], ["lab2"]]  # a canary, then 25% of 3 hosts (at least one) at a time
    gates = [e for p in report["plays"] for e in p["tasks"] if e["task"]["name"].startswith("Health gate")]
    assert all("UCX" in r["plugins"] for e in gates for r in e["hosts"].values())
    again, report = provision("rollout.yml", inv, cwd=tmp_path)
    assert again.code == 0 and all(s["changed"] == 0 for s in report["stats"].values()), report["stats"]

    # a version that does not exist on lab1: its batch fails, the rollout stops before lab2, lab1 keeps its venv
    broken = stack_inventory(lab, tmp_path / "broken", [0, 1, 2], per_host={1: {"nixl_version": "0.0.1"},
                             2: {"nixl_version": "0.0.1"}}, uv_cache_dir=str(uv_cache), **LAB_VARS)  # fmt: skip
    failed, report = provision("rollout.yml", broken, cwd=tmp_path)
    assert failed.code == 2 and "max_fail_percentage" in failed.err
    assert report["stats"]["lab1"]["failed"] == 1
    assert report["stats"].get("lab2", {}).get("ok", 0) == 0  # never started
    assert versions(lab, 1, "nixl")[0] == "1.5.1"  # the previous venv is untouched
    assert (tmp_path / "rollout.retry").read_text() == "lab1\n"


def test_smoke_fails_clearly_when_the_plugin_dir_was_emptied(lab_env: Any, uv_cache: Path, tmp_path: Path) -> None:
    lab = lab_env
    inv = stack_inventory(lab, tmp_path / "inv", [3], uv_cache_dir=str(uv_cache), **LAB_VARS)
    assert provision("install.yml", inv, cwd=tmp_path)[0].code == 0
    find = "import glob; print(glob.glob('.provision/venv/lib/python3*/site-packages/.nixl_cu13*.libs/plugins')[0])"
    plugins = lab.run_as(3, ["/usr/bin/python3", "-c", find]).stdout.strip()
    assert plugins, "no NIXL plugin dir in the venv"
    lab.run_as(3, ["sh", "-c", f"mkdir -p emptied && mv {plugins}/* emptied/"])
    try:
        result, report = provision("smoke.yml", inv, cwd=tmp_path)
    finally:
        lab.run_as(3, ["sh", "-c", f"mv emptied/* {plugins}/ && rmdir emptied"])
    assert result.code == 2
    msg = task_result(report, "NIXL loads its plugins", "lab3")["msg"]
    assert "UCX" in msg and "plugins" in msg and "NIXL_PLUGIN_DIR" in msg, msg
    assert provision("smoke.yml", inv, cwd=tmp_path)[0].code == 0  # restored: the gate passes again
