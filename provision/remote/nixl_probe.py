"""The NIXL smoke gate, run ON the host by the venv's Python (stdlib + nixl only).

Usage: ``VENV_PYTHON - probe`` with a JSON request on stdin (the host library's envelope, ``hostlib.serve``):
``backends`` (the plugins that must be usable, a list or ``"UCX,POSIX"``; default ``["UCX"]``),
``require_vram`` (a GPU host: the backends must do VRAM).

Times ``import nixl._api``, creates an agent with no backends, lists the plugins NIXL found and the memory
types of each required backend, and answers:

    {"ok", "error", "hint", "nixl_version", "variants": {"nixl-cu13": "1.5.1"}, "variant", "plugins",
     "mem_types": {"UCX": [...]}, "import_seconds", "nixl_plugin_dir_env", "plugin_dir", "bundled_plugin_dir",
     "ucx_libs", "ld_library_path", "nixl_config_files", "cuda_driver"}

Where the wheels keep their plugins (nixl-cu13 1.5.1): ``site-packages/.nixl_cu13.mesonpy.libs/plugins/
libplugin_UCX.so`` (and the other backends); the UCX it links (``libucp-<hash>.so``) and UCX's transport
modules sit in ``site-packages/nixl_cu13.libs/`` and ``nixl_cu13.libs/ucx/`` (with NIXL_LOG_LEVEL=DEBUG NIXL
logs ``Loading plugins from: .../nixl_cu13/../.nixl_cu13.mesonpy.libs/plugins``). ``NIXL_PLUGIN_DIR``, from
the environment or from a NIXL config file (``$NIXL_CONFIG_FILE``, ``~/.nixl.cfg``, ``/etc/nixl.cfg``),
REPLACES the bundled plugin directory. A plugin is LISTED by its file name even when it cannot be loaded, so
the probe requires each backend's memory types too (empty = the library did not load).

Nothing but the answer reaches stdout (NIXL's logger writes to stdout: it is sent to stderr). A failed gate is
a failure answer with the same fields (``failed``, ``msg``: the ``error``; exit 1) and an actionable ``hint``.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

import hostlib

VARIANTS = ("nixl-cu13", "nixl-cu12")


def version_of(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def bundled_plugin_dir(dist: str) -> str | None:
    """The plugin directory a variant's wheel installed, read from its RECORD (no guessing of names)."""
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in files:
        if entry.name.startswith("libplugin_") and entry.parent.name == "plugins":
            return str(Path(str(entry.locate())).parent.resolve())
    return None


def loaded_ucx_libs() -> list[str]:
    """Paths of the UCX core libraries mapped into this process (after the UCX plugin was loaded)."""
    found: list[str] = []
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.split()[-1] if line.count("/") else ""
                name = os.path.basename(path)
                if name.startswith(("libucp", "libucs", "libuct")) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def nixl_config_files() -> list[str]:
    """NIXL config files that exist: they can set NIXL_PLUGIN_DIR too."""
    candidates = [os.environ.get("NIXL_CONFIG_FILE") or "", "~/.nixl.cfg", "/etc/nixl.cfg"]
    return [p for c in candidates if c and os.path.isfile(p := os.path.expanduser(c))]


def cuda_driver_version() -> int | None:
    """CUDA version the driver supports (e.g. 13000 for 13.0), via libcuda; None without a driver."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        out = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(out)) == 0:
            return out.value
    except (OSError, AttributeError):
        pass
    return None


def dlopen_error(path: str) -> str | None:
    """Why the dynamic loader refuses a plugin (NIXL itself only says NIXL_ERR_NOT_FOUND)."""
    try:
        ctypes.CDLL(path)
    except OSError as exc:
        return str(exc)
    return None


def missing_plugin_hint(report: dict[str, Any], missing: list[str]) -> str:
    searched = report["plugin_dir"]
    env = report["nixl_plugin_dir_env"]
    parts = [
        f"NIXL could not load the {'/'.join(missing)} plugin from {searched}",
        f"NIXL_PLUGIN_DIR={env!r}" if env else "NIXL_PLUGIN_DIR is unset (the wheel's bundled dir is used)",
    ]
    if report["nixl_config_files"]:
        parts.append(f"NIXL config file(s) {', '.join(report['nixl_config_files'])} may set NIXL_PLUGIN_DIR")
    bundled = report["bundled_plugin_dir"]
    if env and bundled and os.path.realpath(env) != bundled:
        parts.append(f"unset NIXL_PLUGIN_DIR to use the wheel's own plugins in {bundled}")
    files = [os.path.join(searched or "", f"libplugin_{b}.so") for b in missing]
    present = [f for f in files if searched and os.path.exists(f)]
    if present:
        reason = dlopen_error(present[0])
        foreign = [p for p in report["ucx_libs"] if not bundled or not p.startswith(os.path.dirname(bundled))]
        parts.append(
            f"{os.path.basename(present[0])} is there but did not load"
            + (f" ({reason})" if reason else "")
            + ": usually a system UCX shadowing the bundled one"
            + f" (LD_LIBRARY_PATH={report['ld_library_path']!r}"
            + (f"; loaded {', '.join(foreign)}" if foreign else "")
            + "): drop UCX from LD_LIBRARY_PATH / remove the system libucp, or reinstall the wheel"
        )
    else:
        parts.append(
            f"{os.path.basename(files[0])} is not there; the usual causes: NIXL_PLUGIN_DIR pointing "
            "elsewhere, a broken or partial wheel install (reinstall the nixl variant), or a system UCX "
            "shadowing the bundled one (check LD_LIBRARY_PATH and a system libucp)"
        )
    return "; ".join(parts)


def import_hint(variants: dict[str, str], driver: int | None) -> str:
    names = ", ".join(f"{k}=={v}" for k, v in variants.items()) or "no nixl-cu12/nixl-cu13 variant"
    hint = f"installed: {names}; check that the CUDA version the driver supports matches the variant"
    if driver:
        hint += f" (this driver supports CUDA {driver // 1000}.{driver % 1000 // 10})"
    if len(variants) > 1:
        hint += "; both variants are installed (the `nixl` meta package pulls both): pin the one the driver runs"
    if not variants:
        hint = "no nixl variant installed: pip install nixl-cu13 (or nixl-cu12) matching the driver's CUDA"
    return hint


def fail(report: dict[str, Any], error: str, hint: str) -> NoReturn:
    """The failed gate: the report with its ``error`` and ``hint``, as a failure answer (``msg``: the error)."""
    report.update(error=error, hint=hint)
    raise hostlib.Failed(error, **report)


def probe(backends: list[str], require_vram: bool) -> dict[str, Any]:
    """The report of a usable NIXL; ``hostlib.Failed`` with the report's fields when the gate fails."""
    variants = {d: v for d in VARIANTS if (v := version_of(d))}
    variant = next(iter(variants), None)
    bundled = bundled_plugin_dir(variant) if variant else None
    env_dir = os.environ.get("NIXL_PLUGIN_DIR")
    report: dict[str, Any] = {
        "error": "",
        "hint": "",
        "python": sys.executable,
        "nixl_version": version_of("nixl"),
        "variants": variants,
        "variant": variant,
        "plugins": [],
        "mem_types": {},
        "import_seconds": None,
        "nixl_plugin_dir_env": env_dir,
        "bundled_plugin_dir": bundled,
        "plugin_dir": env_dir or bundled,
        "ucx_libs": [],
        "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""),
        "nixl_config_files": nixl_config_files(),
        "cuda_driver": cuda_driver_version(),
    }
    started = time.monotonic()
    try:
        from nixl._api import nixl_agent, nixl_agent_config
    except Exception as exc:
        traceback.print_exc()
        hint = import_hint(variants, report["cuda_driver"])
        fail(report, f"import nixl._api failed: {type(exc).__name__}: {exc}", hint)
    report["import_seconds"] = round(time.monotonic() - started, 4)
    mod = sys.modules.get("nixl._api")
    if mod is not None and mod.__name__ != "nixl._api":
        report["variant"] = mod.__name__.split(".")[0].replace("_", "-")  # the variant nixl really picked

    try:
        agent = nixl_agent("provision-probe", nixl_agent_config(backends=[]))
        report["plugins"] = sorted(agent.get_plugin_list())
        for backend in backends:
            if backend in report["plugins"]:
                report["mem_types"][backend] = list(agent.get_plugin_mem_types(backend))
    except Exception as exc:  # "No plugins available for NIXL" when the plugin dir is empty
        traceback.print_exc()
        report["error"] = f"creating a NIXL agent failed: {type(exc).__name__}: {exc}"
    report["ucx_libs"] = loaded_ucx_libs()

    # a plugin is listed by file name; an empty mem-type list means it was found but failed to load
    missing = [b for b in backends if not report["mem_types"].get(b)]
    if missing:
        fail(report, report["error"] or f"NIXL plugin(s) not usable: {', '.join(missing)}",
             missing_plugin_hint(report, missing))  # fmt: skip
    if report["error"]:
        fail(report, report["error"], import_hint(variants, report["cuda_driver"]))
    if require_vram and (problem := vram_problem(report, backends)):
        fail(report, *problem)
    report["ok"] = True
    return report


def vram_problem(report: dict[str, Any], backends: list[str]) -> tuple[str, str] | None:
    no_vram = [b for b in backends if "VRAM_SEG" not in report["mem_types"].get(b, [])]
    if no_vram:
        return (
            f"backend(s) {', '.join(no_vram)} cannot register GPU memory (no VRAM_SEG)",
            "this NIXL build has no CUDA support: install the nixl-cuXX variant matching the driver",
        )
    driver = report["cuda_driver"]
    if driver is None:
        return "no CUDA driver (libcuda.so.1 did not load)", "install the NVIDIA driver, or drop require_vram"
    variant = report["variant"] or ""
    need = int(variant[-2:]) if variant[-2:].isdigit() else None
    if need and driver // 1000 < need:
        return (
            f"{variant} needs CUDA {need}; the driver supports only {driver // 1000}.{driver % 1000 // 10}",
            f"upgrade the driver or install nixl-cu{driver // 1000} instead of {variant}",
        )
    return None


def answer_on_a_copy_of_stdout() -> None:
    """NIXL's logger and its C++ code write to fd 1: in a process of its own, fd 1 becomes stderr for good and
    ``sys.stdout`` (where ``hostlib.serve`` prints the answer) a copy of the real stdout. Run in-process (the
    agent's way: ``sys.stdout`` is not fd 1) nothing is moved."""
    try:
        if sys.stdout.fileno() != 1:
            return
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: not a file descriptor
        return
    sys.stdout.flush()
    sys.stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)


def probe_action(req: dict[str, Any]) -> dict[str, Any]:
    named = req.get("backends", ["UCX"])
    names = named.split(",") if isinstance(named, str) else list(named)
    backends = [str(b).strip() for b in names if str(b).strip()]
    if not backends:
        raise ValueError("backends needs at least one name")
    require_vram = bool(req.get("require_vram", False))
    answer_on_a_copy_of_stdout()
    answer_stream, sys.stdout = sys.stdout, sys.stderr  # what NIXL's Python prints goes to stderr too
    try:
        return probe(backends, require_vram)
    except hostlib.Failed:
        raise
    except Exception as exc:  # never a traceback on stdout
        traceback.print_exc()
        fail({}, f"probe crashed: {type(exc).__name__}: {exc}", "")
    finally:
        sys.stdout = answer_stream


ACTIONS = {"probe": probe_action}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
