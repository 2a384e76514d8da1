"""Python stacks in venvs: ``venv_stack`` (pinned packages installed with uv or pip, switched in atomically)
and ``nixl_variant`` (which NIXL wheel a host needs: cu12 or cu13).

``venv_stack`` reads first, in ONE command (``remote/stack_state.py`` run by the host's Python, which asks
the venv's Python for ``importlib.metadata`` versions: ~0.1 s). When every requirement is met it reports
``ok`` and runs nothing else: no resolver, no uv, no pip. Otherwise it builds a NEW environment and only
switches to it once it is complete and verified, so a failed install never breaks the live one::

    <venv>                  -> <venv>.envs/<id>      a symlink: the live environment
    <venv>.envs/<id>        the live env, and the previous one (kept for rollback; older ones deleted)
    ~/.provision/bin/uv     uv, copied from the controller when missing or different (sha256)

A plain directory at ``<venv>`` (a manual install) is left alone until the new env is ready, then moved
aside into ``<venv>.envs/manual-<time>``. Every failure is ONE line that says what to do: no Python, a
Python that is too old, too little disk (checked before installing), an index that cannot be reached, a
version that does not exist.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import posixpath
import shlex
import threading
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..commands import Command
from ..errors import HostError
from ..modules.base import Arg, ArgError, Module, ModuleContext, ModuleResult, register
from ..modules.progress import Waiting
from ..remote.pip_state import canonical, evaluate, parse
from .host import FS, Progress, StackError, explain, host_state, remote, version_tuple
from .releases import TorchMismatch, choose, requirements

GB = 10**9
MIN_PYTHON = (3, 10)


# ------------------------------------------------------------------------------------------ what we want
@dataclass
class Wanted:
    install: list[str]  # resolved with their dependencies
    no_deps: list[str]  # installed afterwards with --no-deps
    absent: list[str]  # must not be installed (the other NIXL variant)

    @property
    def reqs(self) -> list[str]:
        return self.install + self.no_deps

    @property
    def names(self) -> list[str]:
        found = [canonical(parse(r)[0]) for r in self.reqs]
        return list(dict.fromkeys(found + [canonical(a) for a in self.absent]))

    @classmethod
    def of(cls, args: dict[str, Any]) -> Wanted:
        lists = [[str(p) for p in args[k] or []] for k in ("packages", "no_deps_packages", "absent")]
        wanted = cls(*lists)
        for req in wanted.reqs:
            if parse(req) is None:
                raise ArgError(
                    f"venv_stack: {req!r} is not a 'name==version' requirement (wheel files: use find_links)"
                )
        if not wanted.reqs:
            raise ArgError("venv_stack: packages and no_deps_packages are both empty")
        return wanted

    def drift(self, venv: dict[str, Any] | None, python_version: str) -> list[str]:
        """Why the environment is not what we want (empty: it is)."""
        if not venv or venv["kind"] == "absent":
            return ["no venv yet"]
        if venv["kind"] == "other":
            return [f"{venv['path']} is not a directory"]
        if not venv["python_ok"]:
            return [f"its python does not run ({venv.get('error') or 'missing bin/python'})"]
        if version_tuple(venv["version"])[:2] != version_tuple(python_version)[:2]:
            return [f"it runs Python {venv['version']}, the host's python is {python_version}"]
        installed = {canonical(k): v for k, v in venv["installed"].items() if v}
        reasons = []
        for res in evaluate(self.reqs, installed):
            if not res["satisfied"]:
                have = res["installed"] or "missing"
                reasons.append(f"{res['name']} {have} (want {res['req']})")
        reasons += [
            f"{a} {installed[canonical(a)]} must not be installed" for a in self.absent if canonical(a) in installed
        ]
        return reasons


# ------------------------------------------------------------------------------------------------ uv
@lru_cache(maxsize=4)
def _read_uv(path: str, mtime_ns: int, size: int) -> tuple[bytes, str]:
    with open(path, "rb") as fh:
        data = fh.read()
    return data, hashlib.sha256(data).hexdigest()


LOCK_WAIT = 3600  # seconds a build waits for another build of the same venv on the same machine


@lru_cache(maxsize=1)
def _own_uv() -> str:
    """The controller's uv binary (the ``uv`` Python package). Cached, and so looked up once: find_uv_bin()
    reads sysconfig, whose first initialisation races when several hosts' install threads do it at once."""
    try:
        import uv

        return str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError):
        raise StackError("uv is not installed on the controller: pip install uv, or set installer=pip") from None


_OWN_UV_LOCK = threading.Lock()


def controller_uv(source: str | None) -> tuple[str, bytes, str]:
    """The uv binary to copy to hosts: ``source``, or the controller's own (the ``uv`` Python package)."""
    path = source
    if not path:
        with _OWN_UV_LOCK:
            path = _own_uv()
    path = os.path.expanduser(path)
    try:
        st = os.stat(path)
        data, sha = _read_uv(path, st.st_mtime_ns, st.st_size)
    except OSError as exc:
        raise StackError(f"cannot read the uv binary {path}: {exc.strerror}") from None
    return path, data, sha


def bring_uv(ctx: ModuleContext, state: dict[str, Any], source: str | None, dest: str) -> bool:
    """Copy uv to the host when it is missing there or differs; True when copied."""
    path, data, sha = controller_uv(source)
    if state["uv"] and state["uv"]["sha256"] == sha:
        return False
    mine = (platform.system(), platform.machine())
    theirs = (state["system"], state["machine"])
    if not source and mine != theirs:
        raise StackError(
            f"the controller's uv ({path}) is for {'/'.join(mine)}, the host is {'/'.join(theirs)}: "
            "set uv_source to a uv binary for the host, or installer=pip"
        )
    ctx.put(data, dest, 0o755)
    return True


# ------------------------------------------------------------------------------------------- installers
@dataclass
class Installer:
    kind: str  # uv | pip
    uv: str | None
    python: str  # the host's base interpreter (absolute)
    options: list[str]  # index/find-links/no-index and extra args
    env: dict[str, str]
    system_site_packages: bool = False  # the venv sees the base interpreter's packages (a GPU image's torch)

    def create(self, new: str) -> Command:
        site = ["--system-site-packages"] if self.system_site_packages else []
        if self.kind == "uv":
            return Command.of(self.uv, "venv", "--no-project", *site, "--python", self.python, new, env=self.env)
        return Command.of(self.python, "-m", "venv", *site, new, env=self.env)

    def install(self, new: str, reqs: list[str], no_deps: bool) -> Command:
        flags = ["--no-deps"] if no_deps else []
        py = posixpath.join(new, "bin", "python")
        if self.kind == "uv":
            return Command.of(self.uv, "pip", "install", "--python", py, *self.options, *flags, *reqs, env=self.env)
        pip = [
            py,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--progress-bar",
            "off",
        ]
        return Command.of(*pip, *self.options, *flags, *reqs, env=self.env)


def installer_for(args: dict[str, Any], python: str, uv: str | None) -> Installer:
    options: list[str] = []
    if args["index_url"]:
        options += ["--index-url", args["index_url"]]
    if args["find_links"]:
        options += ["--find-links", args["find_links"]]
    if args["no_index"]:
        options.append("--no-index")
    extra = args["extra_args"]
    options += shlex.split(extra) if isinstance(extra, str) else [str(e) for e in extra or []]
    env: dict[str, str] = {}
    if args["installer"] == "uv":
        env["UV_PYTHON_DOWNLOADS"] = "never"  # the host's interpreter, never one uv would download
        if args["system_certs"]:  # trust the host's CA store (a corporate proxy's root), as pip/curl do
            env.update(UV_SYSTEM_CERTS="1", UV_NATIVE_TLS="1")  # uv >= 0.10 / older uv
        if args["uv_cache_dir"]:
            env["UV_CACHE_DIR"] = args["uv_cache_dir"]
    return Installer(args["installer"], uv, python, options, env, bool(args.get("system_site_packages")))


def step(ctx: ModuleContext, cmd: Command, stage: str, source: str) -> float:
    """Run one build step with progress; its seconds, or StackError with the cause and what to do."""
    started = time.monotonic()
    progress = Progress(ctx, stage)
    with Waiting(ctx.progress, stage, line=progress.quiet):  # a long download prints nothing for a while
        result = ctx.run(cmd, on_output=progress)
    if result.rc != 0:
        raise StackError(f"{stage} failed: {explain(result.stdout + result.stderr, source)}")
    return time.monotonic() - started


# ------------------------------------------------------------------------------------------------ module
@register
class VenvStack(Module):
    name = "venv_stack"
    show_msg = True
    args = {
        "venv": Arg("path", required=True),
        "python": Arg(default="python3"),
        "packages": Arg("list", default=[]),
        "no_deps_packages": Arg("list", default=[]),
        "absent": Arg("list", default=[]),
        "installer": Arg(default="uv", choices=("uv", "pip")),
        "find_links": Arg(),
        "no_index": Arg("bool", default=False),
        "index_url": Arg(),
        "extra_args": Arg("raw"),
        "min_free_gb": Arg("float", default=1.0),
        "uv_cache_dir": Arg(),
        "uv_path": Arg("path", default="~/.provision/bin/uv"),
        "uv_source": Arg("path"),
        "system_certs": Arg("bool", default=True),
        "verify_imports": Arg("list", default=[]),
        "system_site_packages": Arg("bool", default=False),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        try:
            return self._run(ctx, args)
        except (StackError, ArgError) as exc:
            return ModuleResult(failed=True, msg=str(exc))

    def _run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        wanted, python = Wanted.of(args), args["python"]
        for key in ("find_links", "uv_cache_dir"):  # installers do not expand ~ themselves
            if str(args[key] or "").startswith("~"):
                args[key] = ctx.expand(args[key])
        venv = ctx.expand(args["venv"]).rstrip("/")
        uv_path = ctx.expand(args["uv_path"]) if args["installer"] == "uv" else None
        state = host_state(
            ctx,
            python,
            venv=venv,
            packages=wanted.names,
            uv=uv_path,
            need_venv=not uv_path,
            disk=venv + ".envs",
        )
        py = state["python"]
        if version_tuple(py["version"]) < MIN_PYTHON:
            raise StackError(
                f"{python} is Python {py['version']}; the stack needs 3.10 or newer: install one "
                "(e.g. python3.11) and set python=python3.11 (playbooks/bootstrap.yml checks this)"
            )
        reasons = wanted.drift(state["venv"], py["version"])
        data: dict[str, Any] = {"venv": venv, "installer": args["installer"], "packages": wanted.install}
        data.update(no_deps_packages=wanted.no_deps, reasons=reasons, actions=[])
        if not reasons:
            data["installed"] = {k: v for k, v in state["venv"]["installed"].items() if v}
            return ModuleResult(msg=f"{len(wanted.reqs)} requirements met in {venv}", data=data)
        if ctx.check:
            return ModuleResult(changed=True, msg=f"would rebuild {venv}: {'; '.join(reasons)}", data=data)
        if not uv_path and not py["venv_ok"]:
            short = ".".join(map(str, version_tuple(py["version"])[:2]))
            raise StackError(
                f"{py['path']} ({py['version']}) cannot create venvs (no ensurepip): install "
                f"python{short}-venv (bootstrap.yml with become_allowed=true does), or use installer=uv"
            )
        self._check_disk(state, args["min_free_gb"])  # before anything is written to the host
        lock = json.dumps({"path": venv + ".lock", "wait": LOCK_WAIT, "stale": LOCK_WAIT * 2})
        remote(ctx, python, FS, "prepare", json.dumps({"dirs": [posixpath.dirname(venv)]}))
        if remote(ctx, python, FS, "lock", lock, timeout=LOCK_WAIT + 60)["waited"]:
            # another inventory host on this machine (same user) held the lock: it may have built the venv
            state["venv"] = host_state(ctx, python, venv=venv, packages=wanted.names)["venv"]
            if not wanted.drift(state["venv"], py["version"]):
                remote(ctx, python, FS, "unlock", lock)
                data["installed"] = {k: v for k, v in state["venv"]["installed"].items() if v}
                return ModuleResult(msg=f"{len(wanted.reqs)} requirements met in {venv} (built meanwhile)", data=data)
        try:
            return self._build_and_switch(ctx, args, wanted, state, venv, uv_path, data)
        finally:
            with contextlib.suppress(StackError, HostError):
                remote(ctx, python, FS, "unlock", lock)

    def _build_and_switch(
        self, ctx: ModuleContext, args: dict[str, Any], wanted: Wanted, state: dict[str, Any], venv: str,
        uv_path: str | None, data: dict[str, Any],
    ) -> ModuleResult:  # fmt: skip
        python = args["python"]
        new = self._build(ctx, args, wanted, state, venv, uv_path, data)
        request = {"venv": venv, "new": new, "envs": venv + ".envs"}
        switched = remote(ctx, python, FS, "switch", json.dumps(request))
        data.update(env=new, previous=switched["previous"], removed=switched["removed"])
        pins = ", ".join(f"{k} {v}" for k, v in data["installed"].items())
        took = sum(data["seconds"].values())
        msg = f"{venv} -> {new}: {pins} ({args['installer']}, {took:.1f}s)"
        return ModuleResult(changed=True, msg=msg, data=data)

    def _build(
        self, ctx: ModuleContext, args: dict[str, Any], wanted: Wanted, state: dict[str, Any], venv: str,
        uv_path: str | None, data: dict[str, Any],
    ) -> str:  # fmt: skip
        """Build and verify a new env beside the live one; its path. On failure it is deleted again."""
        python, envs = args["python"], venv + ".envs"
        new = posixpath.join(envs, time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
        dirs = [envs] + ([posixpath.dirname(uv_path)] if uv_path else [])
        remote(ctx, python, FS, "prepare", json.dumps({"dirs": dirs}))
        if uv_path and bring_uv(ctx, state, args["uv_source"], uv_path):
            data["actions"].append(f"copied uv to {uv_path}")
        installer = installer_for(args, state["python"]["path"], uv_path)
        source = args["find_links"] if args["no_index"] else (args["index_url"] or "the package index")
        try:
            seconds = {"venv": step(ctx, installer.create(new), f"creating the venv with {installer.kind}", source)}
            if installer.system_site_packages:
                remote(ctx, python, FS, "inherit", json.dumps({"new": new}))
            if wanted.install:
                cmd = installer.install(new, wanted.install, False)
                seconds["install"] = step(ctx, cmd, "installing", source)
            if wanted.no_deps:
                cmd = installer.install(new, wanted.no_deps, True)
                seconds["no_deps"] = step(ctx, cmd, "installing (no deps)", source)
            data.update(seconds=seconds)
            data["actions"].append(f"built {new}")
            found = host_state(ctx, python, venv=new, packages=wanted.names, imports=args["verify_imports"])["venv"]
            still = wanted.drift(found, state["python"]["version"])
            if still or found["import_error"]:
                raise StackError(f"the new venv does not verify: {'; '.join(still) or found['import_error']}")
        except (StackError, HostError) as exc:
            with contextlib.suppress(StackError, HostError):  # best effort: the next switch prunes it
                remote(ctx, python, FS, "discard", json.dumps({"path": new, "envs": envs}))
            msg = exc.msg if isinstance(exc, HostError) else str(exc)
            raise StackError(f"{msg} (the previous venv at {venv} is left as it was)") from None
        data["installed"] = {k: v for k, v in found["installed"].items() if v}
        return new

    @staticmethod
    def _check_disk(state: dict[str, Any], min_free_gb: float) -> None:
        disk = state.get("disk")
        if disk and disk["free"] < min_free_gb * GB:
            raise StackError(
                f"only {disk['free'] / GB:.1f} GB free at {disk['path']}, the install needs "
                f"{min_free_gb:g} GB (min_free_gb): free space there or point venv_path at a bigger disk; "
                "nothing was installed"
            )


@register
class NixlVariant(Module):
    """Which NIXL wheel a host needs: ``cu13`` when the driver supports CUDA 13 or newer, ``cu12`` below;
    on a host without a GPU the one matching the CUDA of the torch in the venv, else ``cu13``."""

    name = "nixl_variant"
    args = {
        "variant": Arg(default="auto", choices=("auto", "cu12", "cu13")),
        "cuda_version": Arg(),  # ansible_facts.cuda_version: the highest CUDA the driver supports
        "venv": Arg("path"),
        "python": Arg(default="python3"),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        variant, reason = args["variant"], "set by nixl_variant"
        cuda = version_tuple(args["cuda_version"])
        if variant == "auto" and cuda:
            if cuda[0] < 12:
                msg = f"the driver supports CUDA {args['cuda_version']} only; NIXL needs 12+: upgrade it"
                return ModuleResult(failed=True, msg=msg)
            variant = "cu13" if cuda[0] >= 13 else "cu12"
            reason = f"the driver supports CUDA {args['cuda_version']}"
        elif variant == "auto":
            variant, reason = "cu13", "no GPU and no CUDA torch in the venv (default)"
            torch_cuda = self._torch_cuda(ctx, args)
            if torch_cuda:
                variant = "cu13" if version_tuple(torch_cuda)[0] >= 13 else "cu12"
                reason = f"no GPU; the venv's torch is built for CUDA {torch_cuda}"
        other = "cu12" if variant == "cu13" else "cu13"
        data = {"variant": variant, "other": other, "package": f"nixl-{variant}", "reason": reason}
        return ModuleResult(msg=f"nixl-{variant}: {reason}", data=data)

    @staticmethod
    def _torch_cuda(ctx: ModuleContext, args: dict[str, Any]) -> str | None:
        if not args["venv"]:
            return None
        try:
            path = ctx.expand(args["venv"]).rstrip("/")
            venv = host_state(ctx, args["python"], venv=path, packages=[])["venv"]
        except StackError:
            return None  # no Python yet: the install step says so, with what to do
        return venv.get("torch_cuda") if venv else None


@register
class SglangRelease(Module):
    """Which SGLang release this host gets (``releases.py``): ``auto`` picks the newest release that pins the
    host's own torch (the base Python's, seen through system site packages, or the torch of a plain venv
    provision did not build); a version that would replace that torch is refused unless allowed."""

    name = "sglang_release"
    show_msg = True
    args = {
        "version": Arg(required=True),  # sglang_version: auto or a version
        "router_version": Arg(),  # sglang_router_version (null: the table's)
        "default": Arg(default="0.5.23"),  # the pinned default for auto without a host torch
        "venv": Arg("path", required=True),
        "python": Arg(default="python3"),
        "system_site_packages": Arg("bool", default=False),
        "allow_torch_change": Arg("bool", default=False),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        try:
            torch, where = self._host_torch(ctx, args)
        except StackError as exc:
            return ModuleResult(failed=True, msg=str(exc))
        try:
            choice = choose(
                str(args["version"]), torch, allow_torch_change=args["allow_torch_change"], default=args["default"]
            )
        except TorchMismatch as exc:
            return ModuleResult(failed=True, msg=str(exc), data={"torch": torch, "torch_from": where})
        release = choice.release
        router = args["router_version"] or (release.router if release else None)
        data = {
            "version": choice.version,
            "router_version": router,
            "reason": choice.reason,
            "torch": torch,
            "torch_from": where,
            "pins": release.pins() if release else {"sglang": choice.version},
            "requirements": requirements(choice, router),
            "manylinux": release.manylinux if release else None,
        }
        return ModuleResult(msg=f"sglang {choice.version}: {choice.reason}", data=data)

    @staticmethod
    def _host_torch(ctx: ModuleContext, args: dict[str, Any]) -> tuple[str | None, str | None]:
        return host_torch(ctx, args["python"], args["venv"], args["system_site_packages"])[:2]


def host_torch(
    ctx: ModuleContext, python: str, venv: str, system_site_packages: bool
) -> tuple[str | None, str | None, dict[str, Any]]:
    """The torch the host brings (its version, where it is, and the state read): the base Python's with
    system site packages, or that of a plain venv directory provision did not build; else None."""
    path = ctx.expand(venv).rstrip("/")
    state = host_state(ctx, python, venv=path, packages=["torch"], base_packages=["torch"])
    if system_site_packages and (state.get("base") or {}).get("installed", {}).get("torch"):
        return state["base"]["installed"]["torch"], "the base Python (venv_system_site_packages)", state
    found = state.get("venv") or {}
    if found.get("kind") == "dir" and (found.get("installed") or {}).get("torch"):
        return found["installed"]["torch"], f"the venv at {path} (not built by provision)", state
    return None, None, state


__all__ = ["NixlVariant", "SglangRelease", "VenvStack", "Wanted", "controller_uv", "host_state", "host_torch"]
