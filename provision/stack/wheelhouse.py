"""The controller's wheelhouse for air-gapped hosts (``provision wheelhouse``; install.yml's ``wheelhouse``).

Per host, what to download follows from ITS Python, platform and torch (:class:`Target`, read from the host
or declared with ``wheelhouse_target``): the SGLang release (``releases.choose``, as install.yml would pick
it), the NIXL variant for its CUDA, and ``wheelhouse_packages``. Hosts with the same target and requirements
form one group; each group is ONE ``pip download`` into ONE directory, so a wheel several hosts need is
downloaded once. ``manifest.json`` beside the wheels records every file's sha256 and size and, per host, its
target, the release and why, and its lock (the exact ``name==version`` of each of its files).

Two ways to resolve (``wheelhouse_deps``): ``true``: pip resolves the whole closure for the host's platform
(a host with no torch of its own: SGLang brings torch); ``false``: exactly the listed pins, each with
``--no-deps`` (a host that brings torch and the rest, e.g. a GPU image: the pins are what it lacks);
``auto``: false when the host has a torch, else true. Either way the host installs its lock with
``--no-index --no-deps`` (install.yml): what was resolved here is what goes in, nothing else is resolved there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..localfiles import replace_file
from .releases import choose, public, requirements

MANIFEST = "manifest.json"
WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")
SAVED = re.compile(r"^\s*(?:Saved|File was already downloaded)\s+(.+\.whl)\s*$")


class WheelhouseError(Exception):
    """One line for the user: what failed and what to do."""


# ------------------------------------------------------------------------------------------------ targets
_FIELDS = {  # what a target's values may be (a glibc minor of at most 3 digits: pip gets one tag per minor)
    "python": r"3\.\d{1,2}",
    "machine": r"x86_64|aarch64|ppc64le|s390x|armv7l|i686",
    "glibc": r"2\.\d{1,3}",
    "torch": r"\d{1,3}(\.\d{1,4}){1,3}([a-z0-9.+_-]{0,40})?",
    "cuda": r"\d{1,2}(\.\d{1,2}){0,2}",
}
_OPTIONAL = ("glibc", "torch", "cuda")
_WHAT = {"python": "Python version 3.X", "machine": "machine wheels are built for", "glibc": "glibc version 2.N",
         "torch": "torch version", "cuda": "CUDA version"}  # fmt: skip


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Target:
    """What decides which wheel files fit a host."""

    python: str  # "3.12"
    machine: str = "x86_64"
    glibc: str | None = "2.17"
    torch: str | None = None  # the torch the host brings (None: none)
    cuda: str | None = None  # the highest CUDA the driver supports (facts), None: no GPU

    def __post_init__(self) -> None:
        """Every field is checked: a host reports its own versions (or a user declares them), and a huge glibc
        minor, a python of the wrong type or a missing machine must fail that host alone, in one line."""
        for name, pattern in _FIELDS.items():
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            if not isinstance(value, str) or not re.fullmatch(pattern, value):
                raise WheelhouseError(f"{name} {_short(value)} is not a {_WHAT[name]}")

    @classmethod
    def of(cls, data: Any) -> Target:
        """A declared ``wheelhouse_target`` (a mapping: python, machine, glibc, torch, cuda)."""
        if not isinstance(data, dict):
            raise WheelhouseError(
                f"wheelhouse_target must be a mapping (python, machine, glibc, ...), not {_short(data)}"
            )
        python = ".".join(str(data.get("python", "")).split(".")[:2])
        if not re.fullmatch(r"3\.\d+", python):
            raise WheelhouseError(f"wheelhouse_target needs python: '3.X' (got {_short(data.get('python'))})")
        glibc, torch, cuda = data.get("glibc"), data.get("torch"), data.get("cuda")
        try:
            return cls(python, str(data.get("machine") or "x86_64"), str(glibc) if glibc else None,
                       str(torch) if torch else None, str(cuda) if cuda else None)  # fmt: skip
        except WheelhouseError as exc:
            raise WheelhouseError(f"wheelhouse_target: {exc}") from None

    def platforms(self) -> list[str]:
        """pip's ``--platform`` tags this host accepts (pip matches each tag exactly)."""
        major, minor = (int(p) for p in (self.glibc or "2.17").split(".")[:2])
        if major != 2:
            raise WheelhouseError(f"glibc {self.glibc} is not a glibc 2.x: set wheelhouse_target")
        tags = [f"manylinux_2_{n}_{self.machine}" for n in range(minor, 4, -1)]
        if minor >= 17 and self.machine in ("x86_64", "aarch64", "ppc64le", "s390x"):
            tags.append(f"manylinux2014_{self.machine}")
        if minor >= 12 and self.machine == "x86_64":
            tags.append("manylinux2010_x86_64")
        if minor >= 5 and self.machine == "x86_64":
            tags.append("manylinux1_x86_64")
        return tags

    def nixl_variant(self) -> str:
        """cu13 when the driver supports CUDA 13 (or, with no GPU, the host's torch is a cu13 build), else cu12."""
        if self.cuda:
            return "cu13" if int(self.cuda.split(".")[0]) >= 13 else "cu12"
        m = re.search(r"\+cu(\d+)", self.torch or "")
        if m:
            return "cu13" if int(m.group(1)) >= 130 else "cu12"
        return "cu13"


@dataclass
class HostPlan:
    host: str
    target: Target
    release: str
    reason: str
    requirements: list[str]  # resolved (deps) or taken as they are (no deps)
    no_deps: list[str]  # always --no-deps: the nixl meta package requires both NIXL variants
    deps: bool
    files: list[str] = field(default_factory=list)

    def key(self) -> str:
        text = json.dumps([asdict(self.target), self.requirements, self.no_deps, self.deps], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def plan_host(host: str, target: Target, values: dict[str, Any]) -> HostPlan:
    """What ``host`` needs. ``values``: its sglang_version, sglang_router_version, sglang_allow_torch_change,
    nixl_version, nixl_variant, install_sglang, wheelhouse_packages, wheelhouse_deps. Raises
    ``releases.TorchMismatch`` as install.yml would fail."""
    reqs: list[str] = []
    release, reason = "", "install_sglang=false"
    if _bool(values.get("install_sglang", True)):
        choice = choose(str(values["sglang_version"]), target.torch,
                        allow_torch_change=_bool(values.get("sglang_allow_torch_change")))  # fmt: skip
        release, reason = choice.version, choice.reason
        reqs += requirements(choice, values.get("sglang_router_version"))
    variant = values.get("nixl_variant") or "auto"
    variant = target.nixl_variant() if variant == "auto" else str(variant)
    nixl = values.get("nixl_version") or "1.5.1"
    reqs.append(f"nixl-{variant}=={nixl}")
    reqs += [str(p) for p in values.get("wheelhouse_packages") or []]
    deps = values.get("wheelhouse_deps", "auto")
    resolve = target.torch is None if deps in (None, "auto") else _bool(deps)
    return HostPlan(host, target, release, reason, reqs, [f"nixl=={nixl}"], resolve)


def _bool(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "yes", "1", "on")


# ------------------------------------------------------------------------------------------------ download
def pip_download(
    target: Target, reqs: list[str], dest: Path, *, deps: bool, find_links: Iterable[str] = (), no_index: bool = False,
    on_line: Callable[[str], None] | None = None,
) -> list[str]:  # fmt: skip
    """One ``pip download`` for ``target`` into ``dest``; the wheel file names it saved or found there."""
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--progress-bar", "off",
           "--only-binary=:all:", "--python-version", target.python, "--implementation", "cp",
           "-d", str(dest)]  # fmt: skip
    for tag in [*target.platforms(), "any"]:
        cmd += ["--platform", tag]
    for link in find_links:
        cmd += ["--find-links", link]
    if no_index:
        cmd.append("--no-index")
    if not deps:
        cmd.append("--no-deps")
    files, lines = [], []
    with subprocess.Popen(cmd + reqs, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            m = SAVED.match(line)
            if m:
                files.append(os.path.basename(m.group(1).strip()))
            if on_line:
                on_line(line.rstrip())
    if proc.returncode != 0:
        errors = [x for x in lines if x.startswith("ERROR")] or lines[-1:] or ["no output"]
        raise WheelhouseError(f"pip download for Python {target.python} on {target.machine} failed: {errors[-1][:300]}")
    return files


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def lock_of(files: Iterable[str]) -> list[str]:
    """``name==version`` of each wheel file (the host installs exactly these)."""
    out = []
    for name in files:
        m = WHEEL.match(name)
        if not m:
            raise WheelhouseError(f"{name} is not a wheel file name")
        out.append(f"{m.group('name').replace('_', '-').lower()}=={m.group('version')}")
    return sorted(set(out))


def build(
    plans: list[HostPlan], dest: Path, *, find_links: Iterable[str] = (), no_index: bool = False,
    on_line: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Download what every host needs (once per group) and write ``dest/manifest.json``; the manifest."""
    dest.mkdir(parents=True, exist_ok=True)
    recorded = read_manifest(dest)["files"] if (dest / MANIFEST).exists() else {}
    strays = sorted(p.name for p in dest.glob("*.whl") if p.name not in recorded)
    if strays:  # pip would take such a file as already downloaded, and the manifest would vouch for it
        raise WheelhouseError(
            f"{dest} holds {len(strays)} wheel(s) its manifest does not record ({', '.join(strays[:3])}): remove "
            "them, or use a directory only provision writes to"
        )
    links = [str(Path(f).resolve()) if "://" not in f else f for f in find_links]
    groups: dict[str, list[HostPlan]] = {}
    for plan in plans:
        groups.setdefault(plan.key(), []).append(plan)
    downloads = 0
    for members in groups.values():
        first = members[0]
        files = pip_download(first.target, first.requirements, dest, deps=first.deps, find_links=links,
                             no_index=no_index, on_line=on_line)  # fmt: skip
        files += pip_download(first.target, first.no_deps, dest, deps=False, find_links=links, no_index=no_index,
                              on_line=on_line)  # fmt: skip
        downloads += 1
        for plan in members:
            plan.files = sorted(set(files))
    manifest: dict[str, Any] = {"version": 1, "files": {}, "hosts": {}}
    if (dest / MANIFEST).exists():
        manifest = read_manifest(dest)
    for plan in plans:
        for name in plan.files:
            path = dest / name
            known = manifest["files"].get(name)
            if not known or known["size"] != path.stat().st_size:
                manifest["files"][name] = {"sha256": sha256(path), "size": path.stat().st_size}
        manifest["hosts"][plan.host] = {
            "target": asdict(plan.target), "release": plan.release, "reason": plan.reason, "deps": plan.deps,
            "requirements": plan.requirements, "files": plan.files, "lock": lock_of(plan.files),
        }  # fmt: skip
    manifest["groups"] = downloads
    replace_file(dest / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")  # never through a link
    return manifest


def read_manifest(directory: Path | str) -> dict[str, Any]:
    path = Path(directory) / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise WheelhouseError(f"{path} does not exist: make it with provision wheelhouse -i INV -d DIR") from None
    except ValueError as exc:
        raise WheelhouseError(f"{path} is not valid JSON ({exc}): make it again with provision wheelhouse") from None
    if not isinstance(doc, dict) or doc.get("version") != 1 or "hosts" not in doc or "files" not in doc:
        raise WheelhouseError(f"{path} is not a provision wheelhouse manifest (version 1)")
    return doc


def target_of(state: Any, torch: Any, cuda: Any) -> Target:
    """A host's target from ``stack_state.py``'s answer (with ``base_packages``) and its facts' CUDA: what the
    host reported, checked (:meth:`Target.__post_init__`) — WheelhouseError naming the value that is wrong."""
    python = state.get("python") if isinstance(state, dict) else None
    version = python.get("version") if isinstance(python, dict) else None
    if not isinstance(version, str):
        raise WheelhouseError(f"the host reported no Python version (got {_short(version)})")
    base = state.get("base") if isinstance(state.get("base"), dict) else {}
    return Target(".".join(version.split(".")[:2]), state.get("machine"), base.get("glibc"), torch, cuda)


__all__ = ["MANIFEST", "HostPlan", "Target", "WheelhouseError", "build", "lock_of", "plan_host", "public",
           "read_manifest", "sha256", "target_of"]  # fmt: skip
