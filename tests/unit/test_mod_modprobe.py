"""``modprobe``'s host side against community.general's own ``Modprobe`` class, both run in-process on folders
of the test's own (the module's ``/etc/modules-load.d`` and ``/etc/modprobe.d`` moved by patching each side's
constants): the files ``persistent`` writes and comments out, and ``changed``. This machine has no ``modprobe``,
no ``/proc/modules`` and no ``/lib/modules``: loading a module is not compared; case ``mod_modprobe`` compares
the failures both tools give here."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from provision import remote

sys.path.insert(0, str(remote.REMOTE_DIR))
sys.path.insert(0, str(Path(sys.prefix) / "collections"))  # scripts/reference_collections.py
import modprobe  # the shipped script, imported as a host would run it
from ansible_collections.community.general.plugins.modules import modprobe as reference

SCENARIOS: list[tuple[str, str, str, dict[str, str]]] = [
    ("nvidia_peermem", "", "present", {}),
    ("nvidia_peermem", "", "present", {"load/gpu.conf": "# gpu\nnvidia_peermem # rdma\n"}),
    ("nvidia_peermem", "peerdirect_support=1", "present", {"load/nvidia_peermem.conf": "nvidia_peermem\n"}),
    ("nvidia_peermem", "a=1 b=2", "present",
     {"params/old.conf": "options nvidia_peermem a=0\noptions other x=1\n", "load/n.conf": "nvidia_peermem\n"}),
    ("nvidia_peermem", "a=1", "present", {"params/nvidia_peermem.conf": "options nvidia_peermem a=1\n",
                                          "load/x.conf": "  nvidia_peermem  \n"}),
    ("nvidia_peermem", "", "absent",
     {"load/a.conf": "nvidia_peermem\nibverbs\n", "params/b.conf": "options nvidia_peermem a=1\n"}),
    ("nvidia_peermem", "", "absent", {"load/a.conf": "ibverbs\n"}),
    ("br_netfilter", "", "disabled", {"load/a.conf": "ibverbs\n"}),
]  # fmt: skip


def _tree(root: Path, files: dict[str, str]) -> None:
    for sub in ("load", "params"):
        (root / sub).mkdir(parents=True)
    for rel, text in files.items():
        (root / rel).write_text(text)


def _read(root: Path) -> dict[str, list[str]]:
    # community.general's module joins the lines it comments out with "\n" although each keeps its own: the blank
    # lines that adds are not compared
    return {
        str(p.relative_to(root)): [x for x in p.read_text().splitlines() if x] for p in sorted(root.rglob("*.conf"))
    }


def _reference(name: str, params: str, persistent: str, check: bool) -> bool:
    module = SimpleNamespace(
        get_bin_path=lambda *a: "/sbin/modprobe", check_mode=check,
        params={"name": name, "params": params, "persistent": persistent, "state": "present"},
    )  # fmt: skip
    mod = reference.Modprobe(module)
    if persistent == "present" and not (mod.module_is_loaded_persistently and mod.params_is_set):
        mod.load_module_permanent()
    elif persistent == "absent" and (mod.module_is_loaded_persistently or mod.permanent_params):
        mod.unload_module_permanent()
    return mod.changed


@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize(("name", "params", "persistent", "files"), SCENARIOS)
def test_the_boot_files_as_community_general_writes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, params: str, persistent: str, files: dict[str, str],
    check: bool,
) -> None:  # fmt: skip
    theirs, ours = tmp_path / "reference", tmp_path / "provision"
    _tree(theirs, files)
    _tree(ours, files)
    monkeypatch.setattr(reference, "MODULES_LOAD_LOCATION", str(theirs / "load"))
    monkeypatch.setattr(reference, "PARAMETERS_FILES_LOCATION", str(theirs / "params"))
    monkeypatch.setattr(modprobe, "MODULES_LOAD", str(ours / "load"))
    monkeypatch.setattr(modprobe, "PARAMETERS", str(ours / "params"))
    changed = _reference(name, params, persistent, check)
    mod = modprobe.Modprobe({"name": name, "params": params, "persistent": persistent, "check": check})
    modprobe.persist(mod)
    assert mod.changed == changed
    assert _read(ours) == _read(theirs)
    if not check:  # converged: a second run changes nothing
        again = modprobe.Modprobe({"name": name, "params": params, "persistent": persistent})
        modprobe.persist(again)
        assert again.changed is False


def test_a_kernel_without_proc_modules_fails_as_the_module_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "modules"
    monkeypatch.setattr(modprobe, "PROC_MODULES", str(missing))
    mod = modprobe.Modprobe({"name": "nvidia_peermem", "state": "present"})
    with pytest.raises(modprobe.Failed) as err:
        mod.loaded()
    assert err.value.msg == f"[Errno 2] No such file or directory: '{missing}'"
    assert err.value.data == {"changed": False, "name": "nvidia_peermem", "params": "", "state": "present"}


def test_loaded_reads_proc_modules_then_the_builtin_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc, builtin = tmp_path / "modules", tmp_path / "modules.builtin"
    proc.write_text("nvidia_peermem 16384 0 - Live 0x0\n")
    builtin.write_text("kernel/net/bridge/br_netfilter.ko\n")
    monkeypatch.setattr(modprobe, "PROC_MODULES", str(proc))
    monkeypatch.setattr(modprobe, "builtin_path", lambda: str(builtin))
    found: dict[str, Any] = {
        n: modprobe.Modprobe({"name": n}).loaded() for n in ("nvidia-peermem", "br_netfilter", "ib_core")
    }
    assert found == {"nvidia-peermem": True, "br_netfilter": True, "ib_core": False}
