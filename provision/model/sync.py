"""The sync of a model directory to a fleet (``provision model sync``, :func:`provision.api.model_sync`).

1. The source's manifest (path, size, sha256 per file): the controller's (cached) or the seed host's.
2. Each target's plan, all hosts in parallel, ONE helper call each (``model_sync.py plan``): synced (nothing to
   do: a converged fleet costs one round trip per host and sends nothing), short of disk (refused with the
   shortfall before a byte is written), or the files still to send and from which offset (a partial file
   continues, files already right in an older copy are hard-linked into the staged copy).
3. Transfers, ``slots`` at a time per source: from the controller, chunks over the host's SSH connection
   (``recv``); from a host (the seed of ``--src HOST:DIR``, or, with fan-out, every target that completed), a
   pull by the target (``fetch``) from the source's ``serve``: a TCP server on the source's fleet address that
   serves only the model's files, only to a peer that presents the one-time token the controller made for it
   (sent to both on their SSH stdin: in no argv, on no disk, never printed) and only while the sync runs.
   Every file is hashed on arrival against the controller's manifest: a peer can delay a sync, not change it.
4. The commit: the staged copy checked complete, then one rename onto ``model_path``.

Scheduling: a target waits for a free slot at any source; the source with the most free slots is taken, a host
before the controller on a tie (the controller's link is the one to spare). A transfer from a peer that fails is
retried once from the origin; files that arrive damaged are planned and sent again once.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..commands import MASKER
from ..errors import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, HostError, ModuleError, ProvisionError, UnreachableError
from ..modules.base import HelperError, ModuleContext
from .source import Source, SourceError, local_manifest

SCRIPT = "model_sync.py"
CHUNK = 64 << 20
SERVE_START = 30.0  # seconds for a serve to report its port
FETCH_BATCH = 4 << 30  # bytes per fetch call (a 600 GB model from a peer is ~150 calls, each bounded)
SERVE_LIFETIME = 86400.0  # a serve ends with the sync or its SSH channel; at the latest after this
Manifest = dict[str, list[Any]]


class SyncFailure(Exception):
    """One line for one host."""


@dataclass
class Target:
    name: str
    ctx: ModuleContext
    model_path: str  # as the inventory gives it (expanded on the host)
    address: str  # where peers reach it (model_sync_address, else ansible_host, else its name)
    reserve: int = 0  # bytes to leave free
    path: str = ""  # expanded


@dataclass
class HostOutcome:
    host: str
    status: str  # ok | changed | failed | unreachable
    msg: str = ""
    sent: int = 0  # bytes written onto this host by this run
    source: str = ""  # where its files came from: "controller" or a host name
    commands: int = 0  # round trips to this host
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SyncResult:
    source: str
    files: int
    size: int
    digest: str
    hosts: dict[str, HostOutcome] = field(default_factory=dict)
    seconds: float = 0.0
    fanout: bool = True

    @property
    def exit_code(self) -> int:
        states = {h.status for h in self.hosts.values()}
        if "failed" in states:
            return EXIT_FAILED
        return EXIT_UNREACHABLE if "unreachable" in states else EXIT_OK

    @property
    def sent(self) -> int:
        return sum(h.sent for h in self.hosts.values())

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "files": self.files, "size": self.size, "digest": self.digest,
                "seconds": round(self.seconds, 3), "sent": self.sent, "fanout": self.fanout,
                "hosts": {n: h.as_dict() for n, h in self.hosts.items()}}  # fmt: skip


def call(ctx: ModuleContext, op: str, req: dict[str, Any], payload: bytes = b"", timeout: float = 600) -> Any:
    """One ``model_sync.py OP`` on the host: the request on stdin (never in argv), its answer."""
    data = json.dumps(req).encode() + b"\n" + payload
    try:
        return ctx.call_helper(SCRIPT, op, stdin=data, timeout=timeout, what=f"model_sync {op}")
    except HelperError as exc:
        raise SyncFailure(exc.reason if exc.answer else exc.msg) from None


def counted(ctx: ModuleContext) -> int:
    return int(getattr(ctx.conn, "commands_run", 0))


# ------------------------------------------------------------------------------------------------ serving
class Server:
    """``model_sync.py serve`` on a host, for as long as the sync needs it."""

    def __init__(self, name: str, ctx: ModuleContext, path: str, address: str, files: list[str], slots: int,
                 lifetime: float) -> None:  # fmt: skip
        self.name, self.ctx, self.address = name, ctx, address
        self.token = secrets.token_urlsafe(32)
        MASKER.add(self.token)
        self.dir, self.stop_tag = path, secrets.token_hex(6)
        self.port: int | None = None
        self.error: str | None = None
        self._ready = threading.Event()
        req = {"dir": path, "token": self.token, "files": files, "address": address, "slots": slots,
               "stop": self.stop_tag, "lifetime": lifetime}  # fmt: skip
        self._thread = threading.Thread(target=self._run, args=(req, lifetime), daemon=True)
        self._thread.start()
        if not self._ready.wait(SERVE_START) or self.port is None:
            self.error = self.error or f"no port reported within {SERVE_START:g}s"
            raise SyncFailure(f"{name} cannot serve the model: {self.error}")

    def _line(self, line: str) -> None:
        if self.port is None and line.startswith("{"):
            try:
                answer = json.loads(line)
            except ValueError:
                return
            if isinstance(answer, dict) and isinstance(answer.get("port"), int):
                self.port = answer["port"]
                self._ready.set()

    def _run(self, req: dict[str, Any], lifetime: float) -> None:
        data = json.dumps(req).encode() + b"\n"
        try:
            result = self.ctx.run_script(SCRIPT, "serve", stdin=data, timeout=lifetime + 30, on_output=self._line)
            if self.port is None:
                self.error = result.tail(2)
        except (ProvisionError, OSError) as exc:  # the connection lost too: the serve ended with it
            self.error = str(exc)
        finally:
            self._ready.set()

    def stop(self) -> None:
        try:
            call(self.ctx, "stop", {"dir": self.dir, "stop": self.stop_tag}, timeout=30)
        except (SyncFailure, ProvisionError):
            return  # the serve ends with its lifetime, or with the connection
        self._thread.join(10)


@dataclass
class Origin:
    """A place files come from: the controller (push) or a serving host (pull)."""

    name: str
    slots: int
    server: Server | None = None  # None: the controller
    busy: int = 0


# ------------------------------------------------------------------------------------------------ one host
class Transfer:
    def __init__(self, sync: Sync, target: Target, todo: dict[str, int]) -> None:
        self.sync, self.target, self.todo = sync, target, todo
        self.sent = 0

    def run(self, origin: Origin) -> None:
        for attempt in range(2):
            bad = self._push(self.todo) if origin.server is None else self._fetch(origin.server, self.todo)
            if not bad:
                return
            if attempt:
                raise SyncFailure(f"{len(bad)} files arrived damaged twice ({', '.join(bad[:3])}) from {origin.name}")
            self.todo = self.sync.plan(self.target)["todo"]

    def _progress(self, rel: str) -> None:
        self.sync.say(f"{self.target.name}: {rel} ({self.sent / 1e6:.0f} MB so far)")

    def _push(self, todo: dict[str, int]) -> list[str]:
        want, bad = self.sync.manifest, []
        for rel, offset in sorted(todo.items()):
            size, sha = want[rel]
            with open(f"{self.sync.source.path}/{rel}", "rb") as fh:
                fh.seek(offset)
                while True:
                    payload = fh.read(min(self.sync.chunk, size - offset))
                    req = {"dir": self.target.path, "path": rel, "offset": offset, "size": size, "sha256": sha}
                    answer = call(self.target.ctx, "recv", req, payload)
                    offset += len(payload)
                    self.sent += len(payload)
                    if answer.get("bad"):
                        bad.append(rel)
                    if offset >= size or not payload:
                        break
            self._progress(rel)
        return bad

    def _fetch(self, server: Server, todo: dict[str, int]) -> list[str]:
        """Pulls of at most FETCH_BATCH bytes each: every call ends well within the command timeout."""
        want, bad = self.sync.manifest, []
        batches: list[dict[str, list[Any]]] = [{}]
        size = 0
        for rel, off in sorted(todo.items()):
            need = int(want[rel][0]) - off
            if batches[-1] and size + need > FETCH_BATCH:
                batches.append({})
                size = 0
            batches[-1][rel] = [off, want[rel][0], want[rel][1]]
            size += need
        for batch in batches:
            req = {"dir": self.target.path, "address": server.address, "port": server.port, "token": server.token,
                   "files": batch, "timeout": 60}  # fmt: skip
            answer = call(self.target.ctx, "fetch", req, timeout=self.sync.timeout)
            self.sent += int(answer.get("bytes", 0))
            bad += list(answer.get("bad", []))
            self._progress(sorted(batch)[-1])
        return bad


# ------------------------------------------------------------------------------------------------ the fleet
class Sync:
    def __init__(
        self, source: Source, targets: list[Target], *, seed: ModuleContext | None = None, fanout: bool = True,
        slots: int = 2, chunk: int = CHUNK, check: bool = False, forks: int = 20, timeout: float = 3600,
        on_line: Callable[[str], None] | None = None, seed_address: str = "",
    ) -> None:  # fmt: skip
        self.source, self.targets, self.seed, self.seed_address = source, targets, seed, seed_address
        self.fanout, self.slots, self.chunk, self.check = fanout, max(1, slots), max(1 << 16, chunk), check
        self.forks, self.timeout, self.on_line = forks, timeout, on_line
        self.manifest: Manifest = {}
        self.outcomes: dict[str, HostOutcome] = {}
        self._cond = threading.Condition()
        self._servers: list[Server] = []
        self._waiting = 0  # targets not started yet: a completed host serves only when some wait

    def say(self, line: str) -> None:
        if self.on_line:
            self.on_line(MASKER.mask(line))

    def plan(self, target: Target, create: bool = True) -> dict[str, Any]:
        req = {"dir": target.path, "want": self.manifest, "reserve": target.reserve, "create": create}
        return dict(call(target.ctx, "plan", req))

    def source_manifest(self) -> tuple[Manifest, str]:
        from ..remote.model_sync import digest_of

        if self.seed is None:
            files = local_manifest(self.source.path)
            return files, digest_of(files)
        answer = call(self.seed, "manifest", {"dir": self.source.path}, timeout=self.timeout)
        if not answer.get("exists"):
            raise SyncFailure(f"{self.source.describe()} does not exist")
        if not answer.get("files"):
            raise SyncFailure(f"{self.source.describe()} holds no model files")
        return dict(answer["files"]), str(answer["digest"])

    def run(self) -> SyncResult:
        started = time.monotonic()
        try:
            self.manifest, digest = self.source_manifest()
        except (SourceError, SyncFailure, HostError) as exc:  # no source: every host fails with that line
            why = exc.msg if isinstance(exc, HostError) else str(exc)
            failed = SyncResult(self.source.describe(), 0, 0, "", fanout=self.fanout)
            failed.hosts = {t.name: HostOutcome(t.name, "failed", f"the source: {why}") for t in self.targets}
            failed.seconds = time.monotonic() - started
            return failed
        size = sum(int(v[0]) for v in self.manifest.values())
        result = SyncResult(self.source.describe(), len(self.manifest), size, digest, fanout=self.fanout)
        with ThreadPoolExecutor(max_workers=max(1, min(self.forks, len(self.targets)))) as pool:
            plans = dict(zip((t.name for t in self.targets), pool.map(self._first_plan, self.targets), strict=True))
        pending = [(t, plan) for t in self.targets if isinstance(plan := plans[t.name], dict)]
        try:
            if pending and not self.check:
                self._transfer_all(pending)
        finally:
            for server in self._servers:
                server.stop()
        result.hosts = {t.name: self.outcomes[t.name] for t in self.targets}
        result.seconds = time.monotonic() - started
        return result

    def _first_plan(self, target: Target) -> dict[str, Any] | None:
        """The target's plan; its outcome when it needs nothing (synced, short, failed), else the plan."""
        t0 = time.monotonic()
        name = target.name
        try:
            target.path = target.ctx.expand(target.model_path).rstrip("/")
            if not target.path.startswith("/"):
                raise SyncFailure(f"model_path {target.model_path} is not a directory path")
            plan = self.plan(target, create=not self.check)
        except UnreachableError as exc:
            self.outcomes[name] = HostOutcome(name, "unreachable", exc.msg)
            return None
        except (SyncFailure, HostError) as exc:
            self.outcomes[name] = HostOutcome(name, "failed", str(exc.msg if isinstance(exc, HostError) else exc))
            return None
        done = HostOutcome(name, "ok", commands=counted(target.ctx), seconds=time.monotonic() - t0)
        if plan["state"] == "synced":
            done.msg = f"{target.path} holds the {len(self.manifest)} files (manifest matches): nothing sent"
        elif plan["state"] == "short":
            done.status = "failed"
            done.msg = (f"{target.path}: not enough free disk on {plan.get('fs')}: the sync needs "
                        f"{plan['need']:,} bytes, {plan['free']:,} are free{' (less model_sync_reserve_gb)' if target.reserve else ''}: "  # noqa: E501
                        f"{plan['shortfall']:,} bytes short; nothing was written")  # fmt: skip
        elif self.check:
            done.status = "changed"
            done.msg = f"would send {plan['need']:,} bytes ({len(plan['todo'])} files) to {target.path}"
        else:
            return plan
        self.outcomes[name] = done
        return None

    # -- scheduling
    def _origin(self) -> Origin:
        if self.seed is None:
            return Origin("controller", self.slots)
        server = Server(self.source.host or "seed", self.seed, self.source.path, self.seed_address,
                        sorted(self.manifest), self.slots, max(self.timeout, SERVE_LIFETIME))  # fmt: skip
        self._servers.append(server)
        return Origin(self.source.host or "seed", self.slots, server)

    def _transfer_all(self, pending: list[tuple[Target, dict[str, Any]]]) -> None:
        try:
            origin = self._origin()
        except SyncFailure as exc:
            for target, _ in pending:
                self.outcomes[target.name] = HostOutcome(target.name, "failed", str(exc))
            return
        origins = [origin]
        queue = list(pending)
        self._waiting = len(queue)
        running: list[threading.Thread] = []
        with self._cond:
            while queue or any(t.is_alive() for t in running):
                free = [o for o in origins if o.busy < o.slots]
                while queue and free:
                    pick = max(free, key=lambda o: (o.slots - o.busy, o.server is not None))
                    target, plan = queue.pop(0)
                    self._waiting = len(queue)
                    pick.busy += 1
                    thread = threading.Thread(target=self._job, args=(target, plan, pick, origin, origins),
                                              daemon=True)  # fmt: skip
                    running.append(thread)
                    thread.start()
                    free = [o for o in origins if o.busy < o.slots]
                self._cond.wait(1.0)
        for thread in running:
            thread.join()

    def _serve_from(self, target: Target, origins: list[Origin]) -> None:
        """A completed target becomes a source (fan-out); one that cannot serve is simply not one."""
        try:
            server = Server(target.name, target.ctx, target.path, target.address, sorted(self.manifest),
                            self.slots, max(self.timeout, SERVE_LIFETIME))  # fmt: skip
        except (SyncFailure, ModuleError) as exc:
            self.say(f"{target.name}: not a source for the others ({exc})")
            return
        with self._cond:
            self._servers.append(server)
            origins.append(Origin(target.name, self.slots, server))

    def _job(self, target: Target, plan: dict[str, Any], via: Origin, origin: Origin, origins: list[Origin]) -> None:
        t0 = time.monotonic()
        name = target.name
        job = Transfer(self, target, dict(plan["todo"]))
        used = via
        outcome = HostOutcome(name, "changed")
        try:
            self.say(f"{name}: {plan['need'] / 1e6:.0f} MB to send from {via.name}")
            try:
                job.run(via)
            except (SyncFailure, HostError) as exc:
                if via is origin or isinstance(exc, UnreachableError):
                    raise
                self.say(f"{name}: from {via.name} failed ({exc}): again from {origin.name}")
                used = origin
                job.todo = self.plan(target)["todo"]
                job.run(origin)
            call(target.ctx, "commit", {"dir": target.path, "want": self.manifest}, timeout=self.timeout)
            outcome.msg = f"{target.path}: {job.sent:,} bytes from {used.name}, {len(self.manifest)} files verified"
            if self.fanout and self._waiting:
                self._serve_from(target, origins)
        except UnreachableError as exc:
            outcome.status, outcome.msg = "unreachable", exc.msg
        except HostError as exc:
            outcome.status, outcome.msg = "failed", exc.msg
        except (SyncFailure, OSError) as exc:
            outcome.status, outcome.msg = "failed", str(exc)
        finally:
            outcome.sent, outcome.source = job.sent, used.name
            outcome.commands = counted(target.ctx)
            outcome.seconds = time.monotonic() - t0
            with self._cond:
                via.busy -= 1
                self.outcomes[name] = outcome
                self._cond.notify_all()


__all__ = ["CHUNK", "HostOutcome", "Server", "Sync", "SyncFailure", "SyncResult", "Target", "call"]
