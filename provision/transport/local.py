"""``LocalConnection`` (``ansible_connection: local``): the same commands, run on the controller.

The runner is started as a local process whose stdin the connection keeps open until the command ends, so the
tie to the controller holds here too; the run lock is a ``flock`` held in this process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import subprocess
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..commands import Command
from ..errors import CommandTimeout, HostError
from .agent import AgentPool, AgentUnavailable, PythonAgent
from .base import (
    CommandResult,
    LineFeed,
    atomic_put,
    busy,
    finished,
    lock_holder,
    lock_name,
)


def _exchange(
    proc: subprocess.Popen[bytes], payload: bytes, deadline: float | None, on_output: Callable[[str], None] | None
) -> tuple[bytes, bytes]:
    """Send ``payload`` to a local runner WITHOUT closing its stdin (EOF would mean "controller gone"), and
    collect stdout/stderr until both end; TimeoutError after ``deadline``."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin = proc.stdin

    def feed() -> None:
        with contextlib.suppress(OSError, ValueError):
            stdin.write(payload)

    threading.Thread(target=feed, daemon=True, name="provision-stdin").start()
    chunks: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    lines = LineFeed(on_output)
    while True:
        open_fds = [fd for fd, parts in chunks.items() if not parts or parts[-1]]
        if not open_fds:
            break
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise TimeoutError()
        ready, _, _ = select.select(open_fds, [], [], remaining)
        for fd in ready:
            data = os.read(fd, 65536)
            chunks[fd].append(data)
            lines.feed(data)
    proc.wait()
    return b"".join(chunks[proc.stdout.fileno()]), b"".join(chunks[proc.stderr.fileno()])


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Close our ends; a runner still going sees its stdin end and kills its command; then wait for it."""
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
        proc.wait()


_local_locks: dict[str, list[Any]] = {}  # path -> [fd, users]: flock is per open file, so one fd per process
_local_locks_guard = threading.Lock()


def _local_lock(host: str) -> str:
    path = os.path.expanduser(f"~/.provision/run-{lock_name(host)}.lock")
    with _local_locks_guard:
        held = _local_locks.get(path)
        if held is not None:
            held[1] += 1
            return path
        os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            answer = os.pread(fd, 4096, 0).decode(errors="replace").split("\n")[0]
            os.close(fd)
            raise busy(host, answer) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, (lock_holder() + "\n").encode(), 0)
        _local_locks[path] = [fd, 1]
        return path


def _local_unlock(path: str) -> None:
    with _local_locks_guard:
        held = _local_locks.get(path)
        if held is None:
            return
        held[1] -= 1
        if held[1] <= 0:
            del _local_locks[path]
            os.close(held[0])


# ------------------------------------------------------------------------------------------------- local
class _PipeStream:
    """The agent's stream for a local process: its stdin and stdout pipes."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def recv(self, n: int, deadline: float | None) -> bytes:
        assert self.proc.stdout is not None
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([self.proc.stdout], [], [], remaining)
        if not ready:
            raise TimeoutError()
        return os.read(self.proc.stdout.fileno(), n)

    def close(self) -> None:
        with contextlib.suppress(OSError, ProcessLookupError):
            os.killpg(self.proc.pid, 9)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class _LocalFiles:
    """:class:`~provision.transport.base.FileOps` on the controller's own filesystem."""

    def mode_of(self, path: str) -> int | None:
        try:
            return os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            return None

    def create_private(self, path: str, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(path, mode)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.unlink(path)


class LocalConnection:
    """``ansible_connection: local``: the same commands, run on the controller."""

    def __init__(self, name: str, run_lock: bool = False, cwd: str | None = None) -> None:
        self.name = name
        self.run_lock = run_lock
        self.cwd = cwd  # where relative paths start (ConnectOptions.local_cwd); None: this process's cwd
        self._lock_path: str | None = None
        self.commands_run = 0
        self.agent_calls = 0
        self._agents = AgentPool()
        self._running: set[subprocess.Popen[bytes]] = set()

    def python_agent(self, interpreter: str) -> PythonAgent:
        self._take_lock()
        return self._agents.get(interpreter, self._start_agent)

    def _start_agent(self, interpreter: str, dead: PythonAgent | None) -> PythonAgent:
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", PythonAgent.command(interpreter).direct()],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
                cwd=self.cwd,
                env={**os.environ, "PROVISION_AGENT_HERE": "1"},  # it stays in cwd, as the commands and writes
            )  # do (over SSH an agent starts in the login's home)
        except OSError as exc:
            raise AgentUnavailable(str(exc)) from None
        # no reference back to self (a cycle): a connection nobody closed is finalized (its agent killed and
        # reaped) as soon as it is dropped, never after the agent's Popen in a cyclic collection
        answered = weakref.WeakMethod(self._agent_answered)
        stream = _PipeStream(proc)
        try:
            return PythonAgent(self.name, stream, lambda: (answered() or _nothing)())
        except AgentUnavailable:
            stream.close()  # it died at once (no such interpreter): reaped here, not by a finalizer's warning
            raise

    def _agent_answered(self) -> None:
        self.agent_calls += 1  # a round trip like a command: counted in both
        self.commands_run += 1

    def run(
        self,
        cmd: Command,
        timeout: float | None = None,
        stdin: bytes | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        self._take_lock()
        inv = cmd.render(timeout, stdin)
        started = time.monotonic()
        proc = subprocess.Popen(
            ["/bin/sh", "-c", inv.text],
            bufsize=0,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            cwd=self.cwd,
        )
        self._running.add(proc)
        try:
            out, err = _exchange(proc, inv.stdin, None if timeout is None else started + timeout + 15.0, on_output)
        except TimeoutError:
            raise CommandTimeout(self.name, cmd.display(), timeout or 0) from None
        finally:
            self._running.discard(proc)
            _reap(proc)  # also on KeyboardInterrupt: closing its stdin makes the runner kill the command
        self.commands_run += 1
        return finished(self.name, cmd, timeout, proc.returncode, out, err, started)

    def _take_lock(self) -> None:
        if self.run_lock and self._lock_path is None:
            self._lock_path = _local_lock(self.name)

    def expand_path(self, path: str) -> str:
        path = os.path.expanduser(path)
        return path if self.cwd is None or os.path.isabs(path) else os.path.join(self.cwd, path)

    def put(self, data: bytes, path: str, mode: int | None = None) -> None:
        """Atomic write (:func:`~provision.transport.base.atomic_put` over :class:`_LocalFiles`). An OS error
        is a HostError with its reason (the task fails)."""
        self._take_lock()
        path = self.expand_path(path)
        try:
            atomic_put(_LocalFiles(), data, path, mode)
        except OSError as exc:
            raise HostError(self.name, f"cannot write {path}: {exc.strerror or exc}") from None

    def get(self, path: str) -> bytes | None:
        self._take_lock()
        try:
            return Path(self.expand_path(path)).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HostError(self.name, f"cannot read {path}: {exc}") from None

    def close(self) -> None:
        for proc in list(self._running):  # their runners see stdin end and kill the commands
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()  # type: ignore[union-attr]
        self._agents.close()
        if self._lock_path is not None:
            _local_unlock(self._lock_path)
            self._lock_path = None

    def __del__(self) -> None:  # an agent process must not outlive a connection nobody closed
        self.close()


def _nothing() -> None:
    pass
