"""Shipped by provision for CPU mode: NIXL's "VRAM" relabelled "DRAM", a pause for NIXL's progress thread, and
a server's children forked (pinned: sglang 0.5.23, nixl 1.5.1).

SGLang's NIXL connector (``sglang/srt/disaggregation/nixl/conn.py``) labels every KV buffer "VRAM". On a CPU
host those buffers are host memory and UCX refuses to register host memory as VRAM (``NIXL_ERR_BACKEND``).
:func:`install` wraps ``nixl_agent.get_reg_descs``, ``get_xfer_descs`` and ``prep_xfer_dlist`` so that a
``mem_type`` of "VRAM" becomes "DRAM" (all three are needed: with only the first two the transfer hangs with
``no available backends for mem type 'VRAM_SEG'``). The agent class is patched when its module is first
imported (an import hook), or at once when it already is.

It also gives the agent's progress thread a pause: NIXL's Python API creates every agent with
``pthrDelay = 0``, and the UCX backend's progress thread then polls without sleeping, a whole core per server
(four CPU servers on a 2-core machine left the servers' own work, their ``/health`` answers and everything
beside them waiting for CPU). :func:`patch_bindings` wraps the bindings' ``nixlAgent`` so that a zero delay
becomes :data:`PROGRESS_DELAY_US` (the thread then uses about 2 % of a core while idle). GPU servers keep
NIXL's busy progress thread.

And it forks a server's children instead of spawning them: SGLang sets the ``spawn`` start method (a CUDA
context does not survive a fork), so its scheduler and detokenizer each start a new interpreter and import
SGLang again: 14 and 11 of a CPU decode server's 37.5 CPU-s to ``/health`` on a 2-core machine. No CUDA is
initialised on a CPU host, so :func:`fork_children` makes ``multiprocessing.set_start_method("spawn")`` choose
``fork``: the children inherit the launcher's imports (the same server: 16.8 CPU-s, 17.6 s instead of 27.3). The
launcher runs no other Python thread then; its only other threads are numpy's and scipy's OpenBLAS workers,
which OpenBLAS stops before a fork and starts again after it. A child started with an explicit
``get_context("spawn")`` is still spawned, and ``PROVISION_CPU_SPAWN=1`` keeps SGLang's ``spawn``.

And its model registry imports only the model's own module: SGLang's scheduler imports every module of
``sglang/srt/models`` (255 in 0.5.23) to find the one class it runs, 3.3 of a CPU scheduler's 5.1 CPU-s to
``/health``. In a server's launcher (``python -m sglang.launch_server --model-path DIR``), :func:`only_model_modules`
reads ``DIR/config.json``'s architectures and sets SGLang's own ``SGLANG_DISABLED_MODEL_ARCHS`` to every model module
whose ``EntryClass`` names none of them; the scheduler, a fork of the launcher, inherits it. Nothing is set when the
variable is already set (``pd_env``; empty: every module) or when no module names the first architecture.

Only for testing and trying provision without GPUs: never set ``PROVISION_CPU_COMPAT=1`` on a GPU server.
"""

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import sys

MODULES = ("nixl_cu13._api", "nixl_cu12._api", "nixl._api")
METHODS = ("get_reg_descs", "get_xfer_descs", "prep_xfer_dlist")
MARK = "_provision_dram_relabel"
FORKED = "provision cpu compat: the server's children are forked, not spawned"
SPAWN_ENV = "PROVISION_CPU_SPAWN"  # "1": keep SGLang's spawn (benchmarks/cpu_server_start.py compares the two)
PROGRESS_DELAY_US = 1000
MODELS_ENV = "SGLANG_DISABLED_MODEL_ARCHS"  # SGLang's own: model modules its registry does not import
ENTRY = re.compile(r"^EntryClass\s*=\s*(\[[^\]]*\]|\([^)]*\)|[^\n]*)", re.M)


def relabel(mem_type):
    return "DRAM" if isinstance(mem_type, str) and mem_type.upper() in ("VRAM", "VRAM_SEG") else mem_type


def _wrap(original):
    params = list(inspect.signature(original).parameters)
    if "mem_type" not in params:
        raise RuntimeError("%s has no mem_type parameter any more" % original.__qualname__)
    index = params.index("mem_type")

    def wrapper(*args, **kwargs):
        if "mem_type" in kwargs:
            kwargs["mem_type"] = relabel(kwargs["mem_type"])
        elif len(args) > index:
            args = args[:index] + (relabel(args[index]),) + args[index + 1 :]
        return original(*args, **kwargs)

    return functools.wraps(original)(wrapper)


def patch_agent(cls):
    """Patch the three methods of a ``nixl_agent`` class once; returns the patched names."""
    if getattr(cls, MARK, False):
        return []
    missing = [name for name in METHODS if not hasattr(cls, name)]
    if missing:
        raise RuntimeError("nixl_agent lacks %s: the DRAM relabel no longer fits this NIXL" % ", ".join(missing))
    for name in METHODS:
        setattr(cls, name, _wrap(getattr(cls, name)))
    setattr(cls, MARK, True)
    sys.stderr.write("provision cpu compat: NIXL mem type VRAM relabelled DRAM in %s\n" % ", ".join(METHODS))
    return list(METHODS)


def patch_bindings(bindings):
    """Make the bindings' ``nixlAgent`` give a zero ``pthrDelay`` :data:`PROGRESS_DELAY_US` instead, once."""
    original = getattr(bindings, "nixlAgent", None)
    if original is None or getattr(original, MARK, False):
        return False
    if "pthrDelay" not in dir(bindings.nixlAgentConfig()):
        raise RuntimeError("nixlAgentConfig has no pthrDelay any more: the progress thread pause no longer fits")

    def agent(name, config, *rest):
        if config.pthrDelay == 0:
            config.pthrDelay = PROGRESS_DELAY_US
        return original(name, config, *rest)

    setattr(agent, MARK, True)
    bindings.nixlAgent = agent
    sys.stderr.write("provision cpu compat: NIXL progress thread pauses %d us between polls\n" % PROGRESS_DELAY_US)
    return True


def _patch_module(module):
    cls = getattr(module, "nixl_agent", None)
    if cls is not None:
        patch_agent(cls)
    bindings = getattr(module, "nixlBind", None)
    if bindings is not None:
        patch_bindings(bindings)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _patch_module(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


def fork_children(mp):
    """Make ``mp.set_start_method("spawn", ...)`` set ``fork`` (once; says so on stderr when it does)."""
    original = mp.set_start_method
    if getattr(original, MARK, False):
        return False

    def set_start_method(method, force=False):
        if method == "spawn":
            sys.stderr.write(FORKED + "\n")
            method = "fork"
        return original(method, force=force)

    setattr(set_start_method, MARK, True)
    mp.set_start_method = set_start_method
    return True


def launch_model_path(argv):
    """The ``--model-path`` of a ``python -m sglang.launch_server`` command line (``sys.orig_argv``), else None."""
    if "-m" not in argv or argv[argv.index("-m") + 1 :][:1] != ["sglang.launch_server"]:
        return None
    for i, word in enumerate(argv):
        if word == "--model-path" and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("--model-path="):
            return word.split("=", 1)[1]
    return None


def entry_classes(models_dir):
    """Each module of SGLang's model registry (``sglang/srt/models/NAME.py``) -> the names its ``EntryClass`` lists."""
    found = {}
    for name in sorted(os.listdir(models_dir)):
        if name.endswith(".py") and name != "__init__.py":
            with open(os.path.join(models_dir, name), encoding="utf-8", errors="replace") as fh:
                match = ENTRY.search(fh.read())
            found[name[:-3]] = set(re.findall(r"[A-Za-z_]\w*", match.group(1))) if match else set()
    return found


def only_model_modules(argv, environ):
    """In a server's launcher: ``SGLANG_DISABLED_MODEL_ARCHS`` in ``environ`` = every model module whose
    ``EntryClass`` names none of the model's architectures (``config.json``); the kept modules, or None when
    nothing was set (not a launcher, the variable already set, no local config, no module for the model)."""
    path = launch_model_path(argv)
    if path is None or MODELS_ENV in environ:
        return None
    try:
        with open(os.path.join(os.path.expanduser(path), "config.json"), encoding="utf-8") as fh:
            archs = json.load(fh).get("architectures") or []
        spec = importlib.util.find_spec("sglang")  # found, not imported
        if spec is None or not spec.origin:
            return None
        modules = entry_classes(os.path.join(os.path.dirname(spec.origin), "srt", "models"))
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        return None
    keep = sorted(name for name, classes in modules.items() if classes & set(archs))
    if not any(archs[0] in modules[name] for name in keep):
        return None
    environ[MODELS_ENV] = ",".join(name for name in modules if name not in keep)
    sys.stderr.write(
        "provision cpu compat: SGLang's model registry imports only %s (of %d model modules)\n"
        % (", ".join(keep), len(modules))
    )
    return keep


def install():
    """Patch now if NIXL is already imported, and on import otherwise; fork the server's children; in a server's
    launcher, only the model's own module for SGLang's registry."""
    import multiprocessing

    if os.environ.get(SPAWN_ENV) != "1":
        fork_children(multiprocessing)
    only_model_modules(getattr(sys, "orig_argv", sys.argv), os.environ)
    for name in MODULES:
        if name in sys.modules:
            _patch_module(sys.modules[name])
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
