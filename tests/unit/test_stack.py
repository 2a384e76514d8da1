"""The stack modules (venv_stack, nixl_variant, python_check, wheel_sync) and their remote helpers, run for
real through LocalConnection in tmp dirs. Installs are offline: tiny wheels built here, uv from the
controller, ``--no-index --find-links`` — no network, a second or so each."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision import templating
from provision.data import defaults as shipped_defaults
from provision.modules.base import ModuleContext, ModuleResult, lookup
from provision.nixl.pairing import Pair, choose_pair
from provision.playbook import load_playbook
from provision.stack import host as stack_host
from provision.stack import modules as stack
from provision.transport import LocalConnection
from tests.support.wheels import wheel

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


# ------------------------------------------------------------------------------------------------ helpers
def make_wheel(directory: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal, valid pure-Python wheel: ``import <name>`` gives ``VERSION``."""
    return wheel(directory, name, version, requires=requires, purelib=True)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """stk-alpha 1.0/2.0 (needs stk-beta), stk-beta 1.0, and stk-meta 1.0 that needs a package nobody has
    (like the nixl meta package: it only works with --no-deps)."""
    d = tmp_path_factory.mktemp("wheels")
    make_wheel(d, "stk-alpha", "1.0", ("stk-beta",))
    make_wheel(d, "stk-alpha", "2.0", ("stk-beta",))
    make_wheel(d, "stk-beta", "1.0")
    make_wheel(d, "stk-meta", "1.0", ("stk-unobtainable==1.0",))
    make_wheel(d, "stk-other", "1.0")
    return d


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One uv copy and one uv cache for every test of this file."""
    d = tmp_path_factory.mktemp("uvshared")
    return {"uv_path": str(d / "bin" / "uv"), "uv_cache_dir": str(d / "cache")}


def ctx_for(tmp_path: Path, **kw: Any) -> tuple[ModuleContext, list[str]]:
    lines: list[str] = []
    ctx = ModuleContext(
        host="local", conn=LocalConnection("local"), variables={"ansible_python_interpreter": PY},
        controller_dir=str(tmp_path), progress=lines.append, **kw,
    )  # fmt: skip
    return ctx, lines


def run(ctx: ModuleContext, name: str, raw: dict[str, Any]) -> ModuleResult:
    cls = lookup(name)
    assert cls is not None
    args = cls.validate_static(cls.normalize(raw), lambda v: False)
    return cls().run(ctx, cls.coerce(args))


def stack_args(tmp_path: Path, wheels: Path, shared: dict[str, str], **over: Any) -> dict[str, Any]:
    args = {
        "venv": str(tmp_path / "venv"),
        "python": PY,
        "packages": ["stk-alpha==1.0"],
        "no_deps_packages": ["stk-meta==1.0"],
        "absent": ["stk-other"],
        "find_links": str(wheels),
        "no_index": True,
        "verify_imports": ["stk_alpha", "stk_meta"],
        **shared,
    }
    args.update(over)
    return args


def venv_version(tmp_path: Path, module: str = "stk_alpha") -> str:
    python = tmp_path / "venv" / "bin" / "python"
    out = subprocess.run(
        [str(python), "-c", f"import {module}; print({module}.VERSION)"], capture_output=True, text=True
    )
    return out.stdout.strip() or out.stderr.strip()


# ------------------------------------------------------------------------------------------------ venv_stack
def test_fresh_install_then_rerun_is_ok_without_running_an_installer(
    tmp_path: Path, wheels: Path, shared: dict[str, str]
) -> None:
    ctx, progress = ctx_for(tmp_path)
    first = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared))
    assert first.changed and not first.failed, first.msg
    assert first.data["installed"] == {"stk-alpha": "1.0", "stk-meta": "1.0"}
    assert (tmp_path / "venv").is_symlink()
    assert os.readlink(tmp_path / "venv") == first.data["env"]
    assert venv_version(tmp_path) == "1.0"
    assert any(line.startswith("creating the venv with uv") for line in progress)

    commands_before = ctx.conn.commands_run
    again = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared))
    assert not again.changed and not again.failed, again.msg
    assert again.data["actions"] == []
    assert ctx.conn.commands_run - commands_before == 1  # one state check: no resolver, no uv


def test_drift_is_fixed_in_a_new_env_and_the_previous_one_is_kept(
    tmp_path: Path, wheels: Path, shared: dict[str, str]
) -> None:
    ctx, _ = ctx_for(tmp_path)
    first = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared))
    second = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared, packages=["stk-alpha==2.0"]))
    assert second.changed, second.msg
    assert "stk-alpha 1.0 (want stk-alpha==2.0)" in second.data["reasons"]
    assert second.data["previous"] == first.data["env"] and Path(first.data["env"]).is_dir()
    assert venv_version(tmp_path) == "2.0"
    third = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared))
    assert third.changed and third.data["removed"] == [first.data["env"]]
    assert sorted(os.listdir(tmp_path / "venv.envs")) == sorted(
        Path(p).name for p in (second.data["env"], third.data["env"])
    )


def test_a_forbidden_package_counts_as_drift(tmp_path: Path, wheels: Path, shared: dict[str, str]) -> None:
    ctx, _ = ctx_for(tmp_path)
    run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared, packages=["stk-alpha==1.0", "stk-other"], absent=[]))
    again = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared))
    assert again.changed and "stk-other 1.0 must not be installed" in again.data["reasons"]


def test_missing_version_fails_in_one_line_and_keeps_the_live_venv(
    tmp_path: Path, wheels: Path, shared: dict[str, str]
) -> None:
    ctx, _ = ctx_for(tmp_path)
    first = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared))
    bad = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared, packages=["stk-alpha==9.9"]))
    assert bad.failed and "\n" not in bad.msg
    assert "stk-alpha==9.9 is not available from" in bad.msg and "left as it was" in bad.msg
    assert os.readlink(tmp_path / "venv") == first.data["env"]
    assert os.listdir(tmp_path / "venv.envs") == [Path(first.data["env"]).name]  # the failed build is gone
    assert venv_version(tmp_path) == "1.0"


def test_too_little_disk_fails_before_building(tmp_path: Path, wheels: Path, shared: dict[str, str]) -> None:
    ctx, _ = ctx_for(tmp_path)
    res = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared, min_free_gb=10**9))
    assert res.failed and "GB free at" in res.msg and "nothing was installed" in res.msg
    assert not (tmp_path / "venv.envs").exists() and not (tmp_path / "venv").exists()


def test_check_mode_predicts_without_changing(tmp_path: Path, wheels: Path, shared: dict[str, str]) -> None:
    ctx, _ = ctx_for(tmp_path, check=True)
    res = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared))
    assert res.changed and res.msg.startswith("would rebuild") and not (tmp_path / "venv").exists()


def test_a_manual_venv_directory_is_moved_aside_when_replaced(
    tmp_path: Path, wheels: Path, shared: dict[str, str]
) -> None:
    subprocess.run([PY, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    (tmp_path / "venv" / "mine.txt").write_text("manual")
    ctx, _ = ctx_for(tmp_path)
    res = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared))
    assert res.changed, res.msg
    moved = Path(res.data["previous"])
    assert moved.name.startswith("manual-") and (moved / "mine.txt").read_text() == "manual"
    assert (tmp_path / "venv").is_symlink()


def test_no_python_is_one_clear_line(tmp_path: Path, wheels: Path, shared: dict[str, str]) -> None:
    ctx, _ = ctx_for(tmp_path)
    res = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared, python="/nonexistent/python3"))
    assert res.failed and "no usable Python '/nonexistent/python3'" in res.msg and "bootstrap.yml" in res.msg


def test_pip_installer_builds_the_same_venv(tmp_path: Path, wheels: Path, shared: dict[str, str]) -> None:
    ctx, _ = ctx_for(tmp_path)
    res = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared, installer="pip"))
    assert res.changed, res.msg
    assert res.data["installed"] == {"stk-alpha": "1.0", "stk-meta": "1.0"}
    assert not run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared, installer="pip")).changed


def test_requirements_must_be_names_with_versions(tmp_path: Path, wheels: Path, shared: dict[str, str]) -> None:
    ctx, _ = ctx_for(tmp_path)
    res = run(ctx, "venv_stack", stack_args(tmp_path, wheels, shared, packages=["./x.whl"]))
    assert res.failed and "not a 'name==version' requirement" in res.msg


def test_uv_is_copied_only_when_missing_or_different(tmp_path: Path) -> None:
    ctx, _ = ctx_for(tmp_path)
    dest = str(tmp_path / "uv")
    _, _, sha = stack.controller_uv(None)
    state = {"uv": {"exists": False, "sha256": None}, "system": "Linux", "machine": os.uname().machine}
    assert stack.bring_uv(ctx, state, None, dest)
    assert hashlib.sha256(Path(dest).read_bytes()).hexdigest() == sha and os.access(dest, os.X_OK)
    assert not stack.bring_uv(ctx, {**state, "uv": {"exists": True, "sha256": sha}}, None, dest)
    with pytest.raises(stack_host.StackError, match=r"is for Linux/.*the host is Linux/riscv64"):
        stack.bring_uv(ctx, {**state, "machine": "riscv64"}, None, dest)


# ---------------------------------------------------------------------------------------- explain / drift
@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("  \u00d7 No solution found when resolving dependencies:\n  Because there is no version of nixl-cu13==9.9.9 "
         "and you require nixl-cu13==9.9.9, we can conclude that your requirements are unsatisfiable.",
         "nixl-cu13==9.9.9 is not available from IDX"),
        ("ERROR: Could not find a version that satisfies the requirement nixl-cu13==9.9.9 (from versions: 1.5.1)\n"
         "ERROR: No matching distribution found for nixl-cu13==9.9.9", "nixl-cu13==9.9.9 is not available from IDX"),
        ("  \u00d7 Because nixl-cu13 was not found in the provided package locations and you require nixl-cu13==1.5.1",
         "nixl-cu13 is not available from IDX"),
        ("error: Request failed after 3 retries\n  Caused by: Failed to fetch: `http://x/simple/numpy/`\n"
         "  Caused by: tcp connect error: Connection refused (os error 111)", "cannot reach IDX"),
        ("WARNING: Retrying ... NewConnectionError: Failed to establish a new connection: [Errno 111]\n"
         "ERROR: No matching distribution found for numpy", "cannot reach IDX"),
        ("error: failed to write to file: No space left on device (os error 28)", "the disk filled up"),
        ("something odd\nerror: the real reason\n", "error: the real reason"),
    ],
)  # fmt: skip
def test_explain_turns_installer_output_into_one_line(output: str, expected: str) -> None:
    text = stack_host.explain(output, "IDX")
    assert text.startswith(expected) and "\n" not in text


def test_drift_reasons() -> None:
    wanted = stack.Wanted(["sglang==0.5.23", "numpy"], ["nixl==1.5.1"], ["nixl-cu12"])
    venv = {"path": "/v", "kind": "link", "python_ok": True, "version": "3.11.2",
            "installed": {"sglang": "0.5.23", "numpy": "2.0", "nixl": "1.5.1", "nixl-cu12": None}}  # fmt: skip
    assert wanted.drift(venv, "3.11.7") == []
    assert wanted.drift(venv, "3.12.1") == ["it runs Python 3.11.2, the host's python is 3.12.1"]
    drifted = {**venv, "installed": {"sglang": "0.5.22", "numpy": None, "nixl": "1.5.1", "nixl-cu12": "1.4.0"}}
    assert wanted.drift(drifted, "3.11.2") == [
        "sglang 0.5.22 (want sglang==0.5.23)", "numpy missing (want numpy)", "nixl-cu12 1.4.0 must not be installed",
    ]  # fmt: skip
    assert wanted.drift(None, "3.11.2") == ["no venv yet"]
    assert wanted.drift({**venv, "python_ok": False, "error": "boom"}, "3.11.2") == ["its python does not run (boom)"]


def test_progress_is_throttled(tmp_path: Path) -> None:
    ctx, lines = ctx_for(tmp_path)
    feed = stack_host.Progress(ctx, "installing")
    for i in range(100):
        feed(f"line {i}")
    assert lines == ["installing: line 0"]


# ------------------------------------------------------------------------------------------- nixl_variant
@pytest.mark.parametrize(("cuda", "variant"), [("13.0", "cu13"), ("13.1", "cu13"), ("12.8", "cu12"), ("12.0", "cu12")])
def test_nixl_variant_follows_the_driver(tmp_path: Path, cuda: str, variant: str) -> None:
    ctx, _ = ctx_for(tmp_path)
    res = run(ctx, "nixl_variant", {"cuda_version": cuda, "venv": str(tmp_path / "none")})
    assert res.data["variant"] == variant and not res.changed
    assert res.data["other"] == ("cu12" if variant == "cu13" else "cu13")


def test_nixl_variant_refuses_an_old_driver_and_honours_a_fixed_choice(tmp_path: Path) -> None:
    ctx, _ = ctx_for(tmp_path)
    assert run(ctx, "nixl_variant", {"cuda_version": "11.8"}).failed
    assert run(ctx, "nixl_variant", {"variant": "cu12", "cuda_version": "13.0"}).data["variant"] == "cu12"


@pytest.mark.parametrize(("torch_cuda", "variant"), [("'12.8'", "cu12"), ("'13.0'", "cu13"), ("None", "cu13")])
def test_nixl_variant_without_gpu_follows_the_venvs_torch(tmp_path: Path, torch_cuda: str, variant: str) -> None:
    venv = tmp_path / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text(f"__version__ = '2.14.1'\ncuda: Optional[str] = {torch_cuda}\n")
    (site / "torch-2.14.1.dist-info").mkdir()
    (site / "torch-2.14.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.14.1\n")
    ctx, _ = ctx_for(tmp_path)
    res = run(ctx, "nixl_variant", {"cuda_version": None, "venv": str(venv), "python": PY})
    assert res.data["variant"] == variant, res.msg


def test_nixl_variant_defaults_to_cu13_without_gpu_or_venv(tmp_path: Path) -> None:
    ctx, _ = ctx_for(tmp_path)
    res = run(ctx, "nixl_variant", {"venv": str(tmp_path / "nothing"), "python": PY})
    assert res.data["variant"] == "cu13" and "default" in res.msg


# ------------------------------------------------------------------------------------------- python_check
def test_python_check_accepts_a_python_that_builds_venvs(tmp_path: Path) -> None:
    ctx, _ = ctx_for(tmp_path)
    res = run(ctx, "python_check", {"python": PY})
    assert not res.failed and not res.changed and res.data["venv_ok"], res.msg


def test_python_check_names_what_to_do(tmp_path: Path) -> None:
    ctx, _ = ctx_for(tmp_path)
    missing = run(ctx, "python_check", {"python": "python2.99"})
    assert missing.failed and missing.msg.startswith("no python2.99 on the host: set python=python3.")
    old = run(ctx, "python_check", {"python": PY, "min_version": "3.99"})
    assert old.failed and "older than 3.99" in old.msg and "install Python 3.99 or newer" in old.msg


def probe_text(venv_ok: str, pm: str = "apt-get", root: bool = False, sudo: bool = False) -> str:
    return (f"py|python3|/usr/bin/python3|3.11.2|{venv_ok}\npm|{pm}\nuid|{0 if root else 1000}\n"
            f"sudo|{int(sudo)}\n")  # fmt: skip


def test_python_check_without_ensurepip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx, _ = ctx_for(tmp_path)
    monkeypatch.setattr(
        stack_host.PythonCheck, "_probe", staticmethod(lambda c, p: stack_host.Probe.parse(probe_text("0")))
    )
    res = run(ctx, "python_check", {"python": "python3"})
    assert res.failed and "install python3.11-venv (sudo apt-get install -y python3.11-venv)" in res.msg
    assert "become_allowed=true" in res.msg
    assert not run(ctx, "python_check", {"python": "python3", "need_venv": False}).failed
    no_sudo = run(ctx, "python_check", {"python": "python3", "install": True})
    assert no_sudo.failed and "sudo -n` fails" in no_sudo.msg
    dnf = stack_host.Probe.parse(probe_text("0", pm="dnf"))
    monkeypatch.setattr(stack_host.PythonCheck, "_probe", staticmethod(lambda c, p: dnf))
    assert "python3.11-pip-wheel" in run(ctx, "python_check", {"python": "python3"}).msg


def test_python_check_installs_the_venv_package_when_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """apt-get first says the package is unknown: the cache is updated once, then the package installs."""
    probes = iter([probe_text("0", root=True), probe_text("1", root=True)])
    monkeypatch.setattr(
        stack_host.PythonCheck, "_probe", staticmethod(lambda c, p: stack_host.Probe.parse(next(probes)))
    )
    ran: list[tuple[object, ...]] = []
    installs = iter(["E: Unable to locate package python3.11-venv", ""])

    def fake_run(self: ModuleContext, cmd: Any, **kw: Any) -> Any:
        ran.append(cmd.argv)
        out = next(installs) if "install" in cmd.argv else ""
        return type("R", (), {"rc": 100 if out else 0, "stdout": out, "stderr": "", "tail": lambda s, n=1: out})()

    monkeypatch.setattr(ModuleContext, "run", fake_run)
    ctx, _ = ctx_for(tmp_path)
    res = run(ctx, "python_check", {"python": "python3", "install": True})
    assert res.changed and not res.failed, res.msg
    assert ran == [("apt-get", "install", "-y", "python3.11-venv"), ("apt-get", "update"),
                   ("apt-get", "install", "-y", "python3.11-venv")]  # fmt: skip


# -------------------------------------------------------------------------------------------- wheel_sync
def test_wheel_sync_sends_only_missing_or_changed_files(tmp_path: Path, wheels: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(wheels, src)
    ctx, _ = ctx_for(tmp_path)
    args = {"src": str(src), "dest": str(tmp_path / "dest"), "python": PY}
    first = run(ctx, "wheel_sync", args)
    assert first.changed and len(first.data["sent"]) == len(os.listdir(src))
    assert not run(ctx, "wheel_sync", args).changed
    (src / "stk_beta-1.0-py3-none-any.whl").write_bytes(b"changed")
    third = run(ctx, "wheel_sync", args)
    assert third.data["sent"] == ["stk_beta-1.0-py3-none-any.whl"]
    assert (tmp_path / "dest" / "stk_beta-1.0-py3-none-any.whl").read_bytes() == b"changed"
    assert run(ctx, "wheel_sync", {**args, "src": str(tmp_path / "nope")}).failed


# ------------------------------------------------------------------------------------------ the playbooks
def install_task_args(**overrides: Any) -> dict[str, Any]:
    """install.yml's venv_stack arguments, rendered with the shipped defaults and ``overrides``."""
    defaults = shipped_defaults()
    play = load_playbook(REPO / "playbooks" / "install.yml")[0]  # the provision.stack role resolved
    task = next(t for t in play.tasks if t.module == "venv_stack")
    magic = {
        "nixl_choice": {"variant": "cu13", "other": "cu12"},
        "ansible_facts": {"cuda_version": None},
        "sglang_choice": {"version": "0.5.23", "router_version": "0.3.2"},  # sglang_release's answer
        "wheels_synced": {"requirements": ["sglang==0.5.17", "nixl-cu13==1.5.1"]},  # wheel_sync's, with a manifest
    }
    variables = templating.Vars(defaults, play.vars, task.vars, magic, overrides)  # task.vars: the role's vars
    return templating.render(task.args, variables)


def test_install_playbook_composes_the_stack() -> None:
    full = install_task_args()
    assert full["packages"] == ["sglang==0.5.23", "sglang-router==0.3.2", "nixl-cu13==1.5.1"]
    assert full["no_deps_packages"] == ["nixl==1.5.1"] and full["absent"] == ["nixl-cu12"]
    assert full["min_free_gb"] == 12 and full["find_links"] is None and full["installer"] == "uv"
    lab = install_task_args(install_sglang="false", nixl_no_deps="true")
    assert lab["packages"] == ["numpy"] and lab["no_deps_packages"] == ["nixl-cu13==1.5.1", "nixl==1.5.1"]
    assert lab["min_free_gb"] == 1 and lab["verify_imports"] == ["nixl._api"]
    offline = install_task_args(pip_find_links="/srv/wheels", pip_no_index=True)
    assert offline["find_links"] == "~/.provision/wheels" and offline["no_index"] is True
    assert install_task_args(pip_find_links="https://x/wheels/")["find_links"] == "https://x/wheels/"
    skipped = {"skipped": True, "changed": False}  # sglang_release does not run with a wheelhouse
    house = install_task_args(wheelhouse="/srv/house", sglang_choice=skipped)  # the host's lock, from wheel_dir
    assert house["packages"] == [] and house["no_deps_packages"] == ["sglang==0.5.17", "nixl-cu13==1.5.1"]
    assert house["find_links"] == "~/.provision/wheels" and house["no_index"] is True


def test_preflight_picks_gpus_and_link_from_facts() -> None:
    role = REPO / "provision" / "data" / "roles" / "provision.nixl_preflight"
    task = yaml.safe_load((role / "tasks" / "main.yml").read_text())[0]
    assert task["nixl_transfer"]["mem"] == "auto" and "vars" not in task  # the choice is made in code
    gpus = [{"index": 0}, {"index": 1}]
    topo = [{"a": "GPU0", "b": "GPU1", "kind": "NV18"}, {"a": "GPU1", "b": "GPU0", "kind": "NV18"}]
    me = {"ansible_facts": {"gpus": gpus, "topology": topo}, "base_gpu_id": 0, "tp": 1}
    assert choose_pair(me, me, same_inventory_host=True) == Pair("vram", 0, 1, "nvlink")
    pcie = {**me, "ansible_facts": {"gpus": gpus, "topology": [{"a": "GPU0", "b": "GPU1", "kind": "PIX"}]}}
    assert choose_pair(pcie, pcie, same_inventory_host=True) == Pair("vram", 0, 1, "pcie")
    assert choose_pair({**me, "tp": "2"}, me, same_inventory_host=True) == Pair("vram", 0, 2, "pcie")
    other = {**me, "base_gpu_id": 3}
    assert choose_pair(me, other, same_inventory_host=False) == Pair("vram", 0, 3, None)
    cpu = {"ansible_facts": {"gpus": [], "topology": []}, "base_gpu_id": 0, "tp": 1}
    assert choose_pair(cpu, cpu, same_inventory_host=False) == Pair("dram", 0, 0, None)
    assert choose_pair(me, cpu, same_inventory_host=False).mem == "dram"  # both sides need GPUs
