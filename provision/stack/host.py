"""What a host needs before a stack can be installed on it: ``python_check`` (a Python that can build a
venv, installing the distro's venv package when ``become`` is allowed) and ``wheel_sync`` (a controller-side
wheel directory copied to an offline host; only missing or changed files travel). Also the pieces the stack
modules share: :class:`StackError` (one line that says what to do), :func:`explain` (why uv/pip failed),
:func:`remote` (run a ``remote/stack_*.py`` helper, parse its JSON) and :class:`Progress`.

``python_check`` probes with POSIX sh (``remote/stack_python.sh``): a host without any Python still gets
an answer that names the package to install. ``wheel_sync`` compares names, sizes and mtimes, as rsync does,
and sets each copied file's mtime to the controller's, so an unchanged directory costs one command.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ..commands import Command
from ..modules import progress as waiting
from ..modules.base import Arg, HelperError, Module, ModuleContext, ModuleResult, register
from ..remote import source as remote_source
from ..transport import CommandResult
from .wheelhouse import WheelhouseError, read_manifest

STATE, FS, PROBE = "stack_state.py", "stack_fs.py", "stack_python.sh"
PROGRESS_EVERY = 2.0  # seconds between two progress lines of a long install
CANDIDATES = ("python3.13", "python3.12", "python3.11", "python3.10")
NOT_FOUND = ("unable to locate package", "has no installation candidate", "no match for argument")


# ------------------------------------------------------------------------------------------------ errors
class StackError(Exception):
    """A failure with ONE line for the user: what went wrong and what to do."""


NETWORK = (
    "failed to fetch", "error sending request", "dns error", "tcp connect error", "connection refused",
    "operation timed out", "network is unreachable", "failed to establish a new connection",
    "temporary failure in name resolution", "name or service not known", "could not fetch url",
    "proxyerror", "max retries exceeded",
)  # fmt: skip
TLS = ("invalid peer certificate", "unknownissuer", "certificate_verify_failed", "certificate verify failed")
MISSING = (
    re.compile(r"there is no version of ([^\s,]+)"),
    re.compile(r"(\S+) was not found in the (?:package registry|provided package locations)"),
    re.compile(r"No matching distribution found for (\S+)"),
)


def explain(output: str, source: str) -> str:
    """The cause of a failed uv/pip run, as one line that says what to do."""
    low = output.lower()
    if "no space left on device" in low:
        return "the disk filled up (No space left on device): free space, or point venv_path at a bigger disk"
    if any(word in low for word in TLS):
        return (
            f"the TLS certificate of {source} is not trusted: add its CA to the host's store "
            "(uv then uses it: uv_system_certs=true) or to pip's cert setting"
        )
    if any(word in low for word in NETWORK):
        return (f"cannot reach {source}: check the host's network or proxy (index_url), or install offline "
                "from a wheel directory (pip_find_links + pip_no_index)")  # fmt: skip
    for pattern in MISSING:
        m = pattern.search(output)
        if m:
            name = m.group(1).strip("`'\",.")
            return f"{name} is not available from {source}: check the pinned version (nixl_version, ...)"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith(("error", "caused by"))]
    return (errors or lines or ["no output"])[-1][:300]


# ------------------------------------------------------------------------------------------ remote calls
def remote(
    ctx: ModuleContext, python: str, script: str, action: str, request: str, timeout: float = 600
) -> dict[str, Any]:
    """Run one action of a stack helper with the host's base Python, ``request`` (JSON text) on its stdin; its
    JSON answer, or StackError with the reason."""
    try:
        return ctx.call_helper(script, action, python=python, stdin=request.encode(), timeout=timeout)
    except HelperError as exc:
        if exc.no_python:
            raise StackError(
                f"no usable Python {python!r} on the host ({exc.result.tail(1)}): run playbooks/bootstrap.yml, "
                "or set python=/path/to/python3.X (3.10 or newer)"
            ) from None
        reason = exc.reason if exc.answer is not None else exc.result.tail(3)
        raise StackError(f"{script} failed on the host (rc={exc.rc}): {reason}") from None


def host_state(ctx: ModuleContext, python: str, **request: Any) -> dict[str, Any]:
    return remote(ctx, python, STATE, "state", json.dumps(request))


def version_tuple(text: str | None) -> tuple[int, ...]:
    parts = []
    for piece in (text or "").split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


_DOWNLOADING = re.compile(r"^\s*Downloading (\S+).*\((\d+(?:\.\d+)?) ?([KMGT]?i?B|kB)\)\s*$")
_DOWNLOADED = re.compile(r"^\s*Downloaded (\S+)")  # uv's end of one download (pip's ends with its next line)
_UNITS = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KiB": 2**10, "MiB": 2**20,
          "GiB": 2**30, "TiB": 2**40}  # fmt: skip


def human_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


class Downloads:
    """The running total of an installer's downloads, read from its output: uv's ``Downloading torch
    (766.4MiB)`` ... `` Downloaded torch`` (in parallel), pip's ``Downloading torch-...whl (906.4 MB)`` (one at a
    time: it is done when the next line comes)."""

    def __init__(self) -> None:
        self.pending: dict[str, float] = {}  # name -> bytes, announced and not yet done
        self.files = 0
        self.bytes = 0.0
        self._pip: str | None = None  # pip's download in flight

    def feed(self, line: str) -> None:
        if self._pip is not None:
            self._done(self._pip)
            self._pip = None
        started, ended = _DOWNLOADING.match(line), _DOWNLOADED.match(line)
        if started:
            name = started.group(1)
            self.pending[name] = float(started.group(2)) * _UNITS.get(started.group(3), 1)
            if "/" in name or name.endswith((".whl", ".tar.gz", ".zip")):  # pip names the file or its URL
                self._pip = name
        elif ended:
            self._done(ended.group(1))

    def _done(self, name: str) -> None:
        if name in self.pending:
            self.files += 1
            self.bytes += self.pending.pop(name)

    def total(self, seconds: float) -> str:
        """`` [3 files, 1.2 GB downloaded (28.0 MB/s), 1 in flight]``, or "" before the first download."""
        if not self.files and not self.pending:
            return ""
        rate = f" ({human_bytes(self.bytes / seconds)}/s)" if self.files and seconds > 0 else ""
        flight = f", {len(self.pending)} in flight" if self.pending else ""
        files = f"{self.files} file{'' if self.files == 1 else 's'}"
        return f" [{files}, {human_bytes(self.bytes)} downloaded{rate}{flight}]"


class Progress:
    """Feeds ``ctx.progress``: at most one line of the installer's output every PROGRESS_EVERY seconds, with the
    running total of its downloads; while it prints nothing, :meth:`quiet` says every WAIT_EVERY seconds
    what it is at and for how long (``step`` runs it in a :class:`~provision.modules.progress.Waiting`)."""

    def __init__(self, ctx: ModuleContext, stage: str) -> None:
        self.ctx, self.stage, self.last = ctx, stage, -PROGRESS_EVERY
        self.started = time.monotonic()
        self.downloads = Downloads()
        self.latest = ""

    def __call__(self, line: str) -> None:
        self.downloads.feed(line)
        self.latest = line.strip()[:160] or self.latest
        now = time.monotonic()
        if self.ctx.progress is not None and now - self.last >= PROGRESS_EVERY:
            self.last = now
            self.ctx.progress(f"{self.stage}: {self.latest}{self.downloads.total(now - self.started)}")

    def quiet(self, elapsed: float) -> str | None:
        """The line for a silent stretch (None when a line went out lately)."""
        if time.monotonic() - self.last < waiting.WAIT_EVERY:
            return None
        self.last = time.monotonic()
        at = f", last: {self.latest}" if self.latest else ""
        return f"waiting for {self.stage} ({elapsed:.0f}s{at}){self.downloads.total(elapsed)}"


# ------------------------------------------------------------------------------------------ python_check
@dataclass
class Probe:
    pythons: dict[str, tuple[str, str, bool]] = field(default_factory=dict)  # name -> (path, version, venv_ok)
    pm: str = ""  # apt-get | dnf | yum | ""
    root: bool = False
    sudo: bool = False

    @classmethod
    def parse(cls, text: str) -> Probe:
        probe = cls()
        for line in text.splitlines():
            parts = line.strip().split("|")
            if parts[0] == "py" and len(parts) == 5:
                probe.pythons[parts[1]] = (parts[2], parts[3], parts[4] == "1")
            elif parts[0] == "pm" and len(parts) == 2:
                probe.pm = parts[1]
            elif parts[0] == "uid" and len(parts) == 2:
                probe.root = parts[1] == "0"
            elif parts[0] == "sudo" and len(parts) == 2:
                probe.sudo = parts[1] == "1"
        return probe


def venv_packages(pm: str, short: str) -> list[str]:
    """The distro packages that give Python ``short`` (3.11) its venv + ensurepip, most specific first."""
    if pm == "apt-get":
        return [f"python{short}-venv", "python3-venv"]
    return [f"python{short}-pip-wheel", "python3-pip-wheel", "python-pip-wheel"]


def install_hint(pm: str, package: str) -> str:
    return f"sudo {pm or 'apt-get'} install -y {package}"


@register
class PythonCheck(Module):
    name = "python_check"
    args = {
        "python": Arg(default="python3"),
        "min_version": Arg(default="3.10"),
        "need_venv": Arg("bool", default=True),  # uv builds venvs without ensurepip; pip needs it
        "install": Arg("bool", default=False),  # become is allowed: install the distro package when missing
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        python, minimum = args["python"], version_tuple(args["min_version"])
        probe = self._probe(ctx, python)  # the one asked for: one interpreter start when all is well
        found = probe.pythons.get(python)
        if found is None or version_tuple(found[1]) < minimum:
            probe = self._probe(ctx, python, *CANDIDATES)  # the others, to say what the host does have
            return ModuleResult(failed=True, msg=self._no_python(python, found, probe, args["min_version"]))
        path, version, venv_ok = found
        short = ".".join(map(str, version_tuple(version)[:2]))
        data = {"python": path, "version": version, "venv_ok": venv_ok}
        if venv_ok:
            return ModuleResult(msg=f"{path} (Python {version}) can build venvs", data=data)
        packages = venv_packages(probe.pm, short)
        if not args["install"]:
            if not args["need_venv"]:
                return ModuleResult(msg=f"{path} (Python {version}) has no venv/ensurepip: fine for uv", data=data)
            return ModuleResult(
                failed=True,
                data=data,
                msg=f"{path} (Python {version}) cannot build venvs (no ensurepip): install {packages[0]} "
                f"({install_hint(probe.pm, packages[0])}), or rerun with -e become_allowed=true",
            )
        if ctx.check:
            return ModuleResult(changed=True, msg=f"would install {packages[0]}", data=data)
        try:
            installed = self._install(ctx, probe, packages)
        except StackError as exc:
            return ModuleResult(failed=True, msg=str(exc), data=data)
        found = self._probe(ctx, python).pythons.get(python)
        if not found or not found[2]:
            return ModuleResult(
                failed=True, msg=f"installed {installed}, but {path} still cannot build venvs", data=data
            )
        data["venv_ok"] = True
        return ModuleResult(
            changed=True, msg=f"installed {installed}: {path} (Python {version}) can build venvs", data=data
        )

    @staticmethod
    def _probe(ctx: ModuleContext, *pythons: str) -> Probe:
        script = remote_source(PROBE)
        names = list(dict.fromkeys(pythons))
        return Probe.parse(ctx.run(Command.of("sh", "-s", "--", *names), stdin=script, check_rc=True).stdout)

    @staticmethod
    def _no_python(python: str, found: tuple[str, str, bool] | None, probe: Probe, minimum: str) -> str:
        what = f"{python} is Python {found[1]}, older than {minimum}" if found else f"no {python} on the host"
        fits = [(n, v) for n, (_, v, _) in probe.pythons.items() if version_tuple(v) >= version_tuple(minimum)]
        if fits:
            name, version = max(fits, key=lambda f: version_tuple(f[1]))
            return f"{what}: set python={name} (Python {version} is there)"
        hint = install_hint(probe.pm, "python3.11")
        return f"{what}: install Python {minimum} or newer (e.g. {hint}) and set python"

    @staticmethod
    def _install(ctx: ModuleContext, probe: Probe, packages: list[str]) -> str:
        if not probe.pm:
            raise StackError(f"no apt-get/dnf/yum on the host: install {packages[0]} (or its equivalent) yourself")
        sudo = not probe.root and not ctx.become
        if sudo and not probe.sudo:
            raise StackError(f"become_allowed is set but `sudo -n` fails here; {install_hint(probe.pm, packages[0])}")
        env = {"DEBIAN_FRONTEND": "noninteractive"} if probe.pm == "apt-get" else {}
        updated = probe.pm != "apt-get"
        result: CommandResult | None = None
        queue = list(packages)
        while queue:
            cmd = Command.of(probe.pm, "install", "-y", queue[0], env=env, become=sudo)
            result = ctx.run(cmd, on_output=Progress(ctx, probe.pm))
            if result.rc == 0:
                return queue[0]
            text = (result.stdout + result.stderr).lower()
            if not any(n in text for n in NOT_FOUND):
                break
            if not updated:  # an apt cache never updated: update once, then retry the same package
                updated = True
                ctx.run(
                    Command.of("apt-get", "update", env=env, become=sudo),
                    on_output=Progress(ctx, "apt-get update"),
                )
                continue
            queue.pop(0)
        tail = result.tail(1) if result else ""
        raise StackError(f"could not install {packages[0]} ({tail}): {install_hint(probe.pm, packages[0])}")


@register
class WheelSync(Module):
    """A controller wheel directory copied to the host; only missing or changed files travel (name, size and
    mtime, as rsync compares: a host that holds them all costs ONE round trip). With ``manifest: true`` the
    directory is a ``provision wheelhouse``: only the files of THIS host's lock travel, each is checked
    against its sha256 on the host after the copy (a bad one is deleted and the task fails; a rerun sends
    only what is still missing: an interrupted sync resumes), and the answer carries the host's lock
    (``requirements``: what install.yml installs with ``--no-index --no-deps``)."""

    name = "wheel_sync"
    args = {
        "src": Arg("path", required=True),  # a directory on the controller
        "dest": Arg("path", default="~/.provision/wheels"),
        "python": Arg(default="python3"),
        "manifest": Arg("bool", default=False),  # src is a wheelhouse (manifest.json): this host's files only
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        src = os.path.expanduser(args["src"])
        if not os.path.isabs(src) and not os.path.isdir(src):
            src = os.path.join(ctx.controller_dir, src)
        src = os.path.abspath(src)
        if not os.path.isdir(src):
            return ModuleResult(
                failed=True,
                msg=f"wheel directory {src} does not exist on the controller (pip download -d {src} ...)",
            )
        try:
            local, sums, lock = self._local(ctx, src, args["manifest"])
        except StackError as exc:
            return ModuleResult(failed=True, msg=str(exc))
        if not local:
            return ModuleResult(failed=True, msg=f"wheel directory {src} is empty")
        dest = ctx.expand(args["dest"]).rstrip("/")
        try:
            there = remote(ctx, args["python"], FS, "list", json.dumps({"dir": dest}))["files"]
            send = sorted(n for n, meta in local.items() if there.get(n) != meta)
            data: dict[str, Any] = {"src": src, "dest": dest, "files": len(local), "sent": send}
            if lock is not None:
                data["requirements"] = lock
            if not send:
                return ModuleResult(msg=f"{dest} holds the {len(local)} files of {src}", data=data)
            size = sum(local[n][0] for n in send)
            data["bytes_sent"] = size
            if ctx.check:
                return ModuleResult(changed=True, msg=f"would send {len(send)} files ({size / 1e6:.0f} MB)", data=data)
            remote(ctx, args["python"], FS, "prepare", json.dumps({"dirs": [dest]}))
            for i, name in enumerate(send, 1):
                if ctx.progress:
                    ctx.progress(f"sending {name} ({i}/{len(send)})")
                with open(os.path.join(src, name), "rb") as fh:
                    ctx.put(fh.read(), posixpath.join(dest, name), 0o644)
            times = {n: local[n][1] for n in send}
            if sums:
                request = {"dir": dest, "sha256": {n: sums[n] for n in send}, "times": times}
                bad = remote(ctx, args["python"], FS, "verify", json.dumps(request))["bad"]
                if bad:
                    data["bad"] = bad
                    return ModuleResult(
                        failed=True, data=data,
                        msg=f"{len(bad)} files differ from their sha256 after the copy ({', '.join(bad[:3])}): "
                        "deleted on the host; rerun to send them again (check the controller's copy: "
                        "provision wheelhouse re-downloads a damaged file)",
                    )  # fmt: skip
            else:
                remote(ctx, args["python"], FS, "utime", json.dumps({"dir": dest, "times": times}))
        except StackError as exc:
            return ModuleResult(failed=True, msg=str(exc))
        checked = ", sha256 checked" if sums else ""
        return ModuleResult(
            changed=True,
            msg=f"sent {len(send)} of {len(local)} files ({size / 1e6:.0f} MB{checked}) to {dest}",
            data=data,
        )

    @staticmethod
    def _local(
        ctx: ModuleContext, src: str, manifest: bool
    ) -> tuple[dict[str, list[int]], dict[str, str], list[str] | None]:
        """name -> [size, mtime] of the files to hold, their sha256 (manifest only), the host's lock."""
        if not manifest:
            local = {}
            for entry in os.scandir(src):
                if entry.is_file():
                    st = entry.stat()
                    local[entry.name] = [st.st_size, int(st.st_mtime)]
            return local, {}, None
        try:
            doc = read_manifest(src)
        except WheelhouseError as exc:
            raise StackError(str(exc)) from None
        mine = doc["hosts"].get(ctx.host)
        if mine is None:
            raise StackError(
                f"{ctx.host} is not in the wheelhouse {src} (it has {', '.join(sorted(doc['hosts'])) or 'no host'}): "
                f"run provision wheelhouse -i INV -d {src} for it"
            )
        local, sums = {}, {}
        for name in mine["files"]:
            known = doc["files"].get(name)
            path = os.path.join(src, name)
            if known is None or not os.path.isfile(path) or os.stat(path).st_size != known["size"]:
                raise StackError(f"{name} is missing or damaged in the wheelhouse {src}: run provision wheelhouse")
            st = os.stat(path)
            local[name] = [st.st_size, int(st.st_mtime)]
            sums[name] = known["sha256"]
        return local, sums, list(mine["lock"])


__all__ = ["Probe", "PythonCheck", "WheelSync"]
