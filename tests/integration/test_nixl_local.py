"""The NIXL helpers and modules against the REAL wheels (nixl-cu13 1.5.1, no mocks), on this machine.

The venv comes from ``tests/support/nixl_env.py`` (built once, cached). Both "hosts" are LocalConnections: the
target and the initiator are two processes here, exchanging metadata through files, as over SSH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from provision import remote
from provision.modules.base import ModuleContext, ModuleResult
from provision.nixl.modules import NixlSmoke, NixlTransfer
from provision.nixl.ucx import parse_proto_info
from provision.transport import LocalConnection
from tests.support.nixl_env import nixl_python

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def python() -> str:
    return nixl_python()


@pytest.fixture(scope="module")
def venv(python: str) -> str:
    return str(Path(python).parent.parent)


@pytest.fixture(scope="module")
def plugin_dir(python: str) -> Path:
    report = probe(python)
    assert report["ok"], report
    return Path(report["bundled_plugin_dir"])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The modules put their temp files under ~/.provision: a private HOME shows what they leave."""
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def probe(python: str, request: dict[str, Any] | None = None, env: dict[str, str] | None = None,
          action: str = "probe") -> dict[str, Any]:  # fmt: skip
    """``nixl_probe.py probe`` (run as a file of the package: hostlib beside it) with ``request`` on stdin."""
    proc = subprocess.run(
        [python, str(remote.path("nixl_probe.py")), action],
        input=json.dumps(request or {}),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    (line,) = proc.stdout.splitlines()  # ONE JSON object, nothing else (NIXL logs to stdout otherwise)
    answer: dict[str, Any] = json.loads(line)
    assert proc.returncode == (0 if answer["ok"] else 1), (proc.returncode, answer, proc.stderr)
    return answer


# ------------------------------------------------------------------------------------------------ probe
def test_probe_lists_ucx(python: str) -> None:
    report = probe(python, {"backends": ["UCX"]})
    assert report["ok"] is True, report
    assert "UCX" in report["plugins"]
    assert "DRAM_SEG" in report["mem_types"]["UCX"]
    assert report["variant"] == "nixl-cu13"
    assert report["variants"] == {"nixl-cu13": "1.5.1"}
    assert report["nixl_version"] == "1.5.1"
    assert 0 < report["import_seconds"] < 30
    # the wheel's real layout: site-packages/.nixl_cu13.mesonpy.libs/plugins/libplugin_UCX.so
    plugins = Path(report["plugin_dir"])
    assert plugins.name == "plugins" and plugins.parent.name == ".nixl_cu13.mesonpy.libs"
    assert (plugins / "libplugin_UCX.so").exists()
    assert report["nixl_plugin_dir_env"] is None
    assert all("nixl_cu13.libs" in lib for lib in report["ucx_libs"])  # the bundled UCX, not a system one


def test_probe_bad_request_is_a_failure_answer(python: str) -> None:
    for action, request in (("--nope", {}), ("probe", {"backends": []}), ("probe", {"backends": " , "})):
        report = probe(python, request, action=action)
        assert report["ok"] is False and report["failed"] is True, report
        assert report["msg"].startswith("bad request: "), report


def test_probe_with_empty_plugin_dir_fails_actionably(python: str, tmp_path: Path) -> None:
    empty = tmp_path / "plugins"
    empty.mkdir()
    report = probe(python, env={"NIXL_PLUGIN_DIR": str(empty)})
    assert report["ok"] is False and report["failed"] is True and report["msg"] == report["error"]  # exit 1
    assert "No plugins available" in report["error"]
    hint = report["hint"]
    assert str(empty) in hint and "NIXL_PLUGIN_DIR" in hint
    assert report["bundled_plugin_dir"] in hint  # where the real plugins are
    assert "LD_LIBRARY_PATH" in hint and "libucp" in hint


def test_probe_with_unloadable_ucx_plugin_names_the_loader_error(python: str, plugin_dir: Path, tmp_path: Path) -> None:
    """A plugin dir whose libplugin_UCX.so cannot find its UCX (what a shadowed/missing libucp looks like):
    NIXL still LISTS UCX (by file name) but cannot load it — the probe must not call that ok."""
    broken = tmp_path / "plugins"
    broken.mkdir()
    for name in ("libplugin_UCX.so", "libplugin_POSIX.so"):
        shutil.copy(plugin_dir / name, broken / name)
    report = probe(python, env={"NIXL_PLUGIN_DIR": str(broken)})
    assert report["ok"] is False
    assert "UCX" in report["plugins"] and not report["mem_types"].get("UCX")
    assert "did not load" in report["hint"] and "libucp" in report["hint"]
    assert "system UCX" in report["hint"] and "LD_LIBRARY_PATH" in report["hint"]


def test_probe_require_vram_without_a_gpu(python: str) -> None:
    if probe(python)["cuda_driver"] is not None:
        pytest.skip("this machine has a CUDA driver")
    report = probe(python, {"require_vram": True})
    assert report["ok"] is False and "libcuda" in report["error"]


# --------------------------------------------------------------------------------------- raw transfer
def test_two_process_dram_transfer(python: str, tmp_path: Path) -> None:
    meta, result, log = tmp_path / "meta.json", tmp_path / "result.json", tmp_path / "target.log"
    size, script = 16 * MiB, str(remote.path("nixl_transfer.py"))
    common = {"size": size, "iters": 3, "timeout": 60}
    files = {"meta_out": str(meta), "result_out": str(result), "log": str(log)}
    launched = subprocess.run(
        [python, script, "target"],
        input=json.dumps({**files, **common, "detach": True}),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert launched.returncode == 0, launched.stderr
    pid = json.loads(launched.stdout)["pid"]
    wait_for(meta.exists, 30)
    assert json.loads(meta.read_text())["pid"] == pid
    proc = subprocess.run(
        [python, script, "initiator"],
        input=json.dumps({"meta_in": str(meta), **common}),
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "UCX_PROTO_INFO": "y"},
    )
    report = json.loads(proc.stdout)
    assert report["ok"] is True, (report, proc.stderr[-3000:])
    assert report["verified"] is True and len(report["iterations"]) == 3
    assert all(it["verified"] for it in report["iterations"])
    assert report["gbps_best"] > 0 and report["gbps_median"] > 0
    assert report["gbps_best"] >= report["gbps_median"]
    assert parse_proto_info(proc.stderr)  # UCX printed its choice of transport
    wait_for(result.exists, 30)
    target = json.loads(result.read_text())
    assert target == {"ok": True, "verified": True, "iterations": target["iterations"], "errors": []}
    assert [it["i"] for it in target["iterations"]] == [0, 1, 2]


def wait_for(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------- modules
def context(host: str = "lab0", **kw: Any) -> ModuleContext:
    return ModuleContext(host=host, conn=LocalConnection(host), variables={}, peer=LocalConnection, **kw)


def run(module: type[NixlSmoke | NixlTransfer], ctx: ModuleContext, **args: Any) -> ModuleResult:
    return module().run(ctx, module.coerce(args))


def test_nixl_smoke_module(venv: str) -> None:
    result = run(NixlSmoke, context(), venv=venv)
    assert not result.failed and not result.changed, result.msg
    assert result.data["nixl_version"] == "1.5.1" and result.data["variant"] == "nixl-cu13"
    assert "UCX" in result.data["plugins"] and "DRAM_SEG" in result.data["mem_types"]["UCX"]
    assert result.data["import_seconds"] > 0
    # check mode is read-only: it runs the same way
    assert not run(NixlSmoke, context(check=True), venv=venv).failed


def test_nixl_smoke_module_failures(venv: str, tmp_path: Path) -> None:
    result = run(NixlSmoke, context(environment={"NIXL_PLUGIN_DIR": str(tmp_path)}), venv=venv)
    assert result.failed and "NIXL_PLUGIN_DIR" in result.msg and str(tmp_path) in result.msg
    result = run(NixlSmoke, context(), venv=venv, backends=["UCX", "NOPE"])
    assert result.failed and "NOPE" in result.msg
    result = run(NixlSmoke, context(), venv=str(tmp_path / "no-venv"))
    assert result.failed and "is the venv there" in result.msg


def test_nixl_transfer_module(venv: str, home: Path) -> None:
    ctx = context()
    result = run(NixlTransfer, ctx, venv=venv, target="lab1", size_mb=16, iters=3)
    assert not result.failed and not result.changed, result.msg
    d = result.data
    assert d["verified"] is True and d["size_bytes"] == 16 * MiB and d["mem"] == "dram"
    assert d["gbps_best"] > 0 and d["gbps_median"] > 0
    assert d["transports"], "UCX_PROTO_INFO output was not parsed"
    assert d["link"] == "loopback" and d["floor"] == 0.05 and d["same_host"] is True
    assert "16 MiB DRAM→DRAM lab0→lab1: best " in result.msg and "bytes verified" in result.msg
    assert f"over {d['transports'][0]}" in result.msg
    # temp files removed on both sides; what stays is the remembered pass (private)
    assert [p.name for p in (home / ".provision").iterdir()] == ["preflight"]
    stamp = home / ".provision" / "preflight" / "lab1.json"
    assert stamp.stat().st_mode & 0o777 == 0o600 and json.loads(stamp.read_text())["msg"] == result.msg


LOW = {"min_gbps": 0.0001}  # a floor any working transfer meets


def test_nixl_transfer_remembers_a_pass_for_the_same_inputs(venv: str, home: Path) -> None:
    """What is remembered, not how fast: the passes run with a floor any working transfer meets (the loopback
    default, 0.05 GB/s, failed a 2 MiB run on the 2 cores shared with three other test workers)."""
    first = run(NixlTransfer, context(), venv=venv, target="lab1", size_mb=4, iters=2, **LOW)
    assert not first.failed and "not measured again" not in first.msg, first.msg
    again = run(NixlTransfer, context(), venv=venv, target="lab1", size_mb=4, iters=2, **LOW)
    assert not again.failed and not again.changed
    assert again.msg.startswith(first.msg) and "not measured again" in again.msg and "preflight_force" in again.msg
    assert again.data["cached"] is True and again.data["gbps_best"] == first.data["gbps_best"]
    assert not list((home / ".provision").glob("nixl-*"))  # nothing ran: no temp dirs were made either
    # any input that changes measures again: the size, the UCX settings, cache off, an old pass, the stack
    for changed in ({"size_mb": 2}, {"ucx_net_devices": "lo"}, {"cache": False}, {"max_age_hours": 0.0}):
        result = run(NixlTransfer, context(), venv=venv, target="lab1", **{"size_mb": 4, "iters": 2, **LOW, **changed})
        assert not result.failed and "not measured again" not in result.msg, (changed, result.msg)
    # a failed measurement is not remembered, and does not replace the pass remembered before it
    failed = run(NixlTransfer, context(), venv=venv, target="lab1", size_mb=4, iters=2, min_gbps=1e6)
    assert failed.failed and "not measured again" not in failed.msg
    assert "not measured again" in run(NixlTransfer, context(), venv=venv, target="lab1", size_mb=4, iters=2, **LOW).msg
    site = next(Path(venv).glob("lib/python*/site-packages"))
    before = site.stat()
    os.utime(site, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # a package changed in the venv
    try:
        result = run(NixlTransfer, context(), venv=venv, target="lab1", size_mb=4, iters=2, **LOW)
        assert not result.failed and "not measured again" not in result.msg, result.msg
    finally:
        os.utime(site, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_nixl_transfer_below_the_floor_fails(venv: str, home: Path) -> None:
    result = run(NixlTransfer, context(), venv=venv, target="lab1", size_mb=4, iters=2, min_gbps=1e6)
    assert result.failed and "below the floor of 1e+06 GB/s" in result.msg
    assert result.data["verified"] is True
    assert list((home / ".provision").iterdir()) == []


def test_nixl_transfer_refuses_a_ucx_tls_without_tcp(venv: str, home: Path) -> None:
    result = run(NixlTransfer, context(), venv=venv, target="lab1", ucx_tls="sm,cuda_ipc,cuda_copy")
    assert result.failed and "lacks tcp" in result.msg and "NIXL_ERR_BACKEND" in result.msg
    assert not (home / ".provision").exists()  # failed BEFORE running anything
    result = run(NixlTransfer, context(), venv=venv, target="lab1", mem="vram", ucx_tls=["cuda_copy", "tcp"])
    assert result.failed and "cuda_ipc" in result.msg


def test_nixl_transfer_reports_a_target_that_cannot_start(venv: str, home: Path) -> None:
    """UCX_NET_DEVICES naming no real device: the target's backend creation fails; the module says so."""
    result = run(NixlTransfer, context(), venv=venv, target="lab1", size_mb=1, ucx_net_devices="nosuchdev0", timeout=60)
    assert result.failed, result.msg
    assert "lab1" in result.msg and "NIXL_ERR_BACKEND" in result.msg
    assert "network device 'nosuchdev0' is not available" in result.msg  # UCX's own words, not a traceback
    assert "Traceback" not in result.msg
    assert list((home / ".provision").iterdir()) == []
