"""The transport contract: what every connection offers and returns.

``Connection`` (run a :class:`~provision.commands.Command`, put/get a file, expand ``~``, close), ``AgentHost``,
``CommandResult``, ``ConnectOptions``, ``finished`` (a runner's exit → result or :class:`CommandTimeout`), the
run lock's remote program (``RUN_LOCKER``) and its helpers, and the pieces both implementations share.
Imports only :mod:`provision.commands` and :mod:`provision.errors`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import posixpath
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, runtime_checkable

from .. import remote
from ..commands import Command
from ..errors import CommandTimeout, HostBusy, OutputTooLarge

if TYPE_CHECKING:
    from .agent import PythonAgent

OUTPUT_MAX = 64 << 20  # bytes of one command's output (stdout and stderr together) the controller keeps
LINE_MAX = 64 << 10  # bytes of one progress line: a longer one is cut into pieces of this size
TIMEOUT_RC = 124  # what the runner (and GNU timeout, its fallback) returns when it had to kill the command


@dataclass(frozen=True)
class ConnectOptions:
    connect_timeout: float = 10.0
    banner_timeout: float = 10.0
    auth_timeout: float = 10.0
    channel_timeout: float = 10.0
    accept_new_host_keys: bool = False
    ssh_config: str | None = None  # default: ~/.ssh/config (or $PROVISION_SSH_CONFIG)
    known_hosts: tuple[str, ...] = ()  # extra known_hosts files, checked before ssh_config's and ~/.ssh's
    run_lock: bool = False  # hold the host's run lock while connected (a playbook run: see RUN_LOCKER)
    keepalive: float | None = None  # seconds between keepalives with replies; None: connect_timeout
    heartbeat: float | None = None  # H, seconds between heartbeats (see heartbeat_interval); 0: none
    # SSH: run commands through the host's python agent (no channel and no interpreter start per command);
    # False: every command on a channel of its own, through the runner (as commands with streamed output are)
    agent_exec: bool = True
    persist: float = 0.0  # --persist: seconds the user's keeper keeps the connection after the run (transport.persist)
    # a local connection's working directory, where its relative paths start (its commands, writes, reads and
    # scripts alike): the playbook's directory in a run, as ansible-playbook has it; None: the process's own
    local_cwd: str | None = None

    def heartbeat_interval(self) -> float:
        """H: how often the controller sends a heartbeat on the stdin of every command, run-lock holder and
        agent it has on an SSH host; each of them exits (killing what it started) after 3 H seconds without a
        byte: a frozen controller or a link that dropped silently. Default: the keepalive interval
        (``--connect-timeout``) capped at 10 s, at least 1 s: 30 s of silence by default."""
        if self.heartbeat is not None:
            return max(0.0, self.heartbeat)
        return min(max(self.keepalive or self.connect_timeout, 1.0), 10.0)


HOST_JSON_DEPTH = 100  # nesting of a host's JSON answer: provision's helpers answer a few levels deep


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):  # 1e400 parses as inf
        raise ValueError("a number that is not finite")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a host may send")


def host_json(text: str | bytes) -> Any:
    """JSON a host sent (helper answers, agent answers, job records, stamps): ValueError unless it is plain JSON
    with finite numbers only (``NaN``, ``Infinity`` and ``1e400`` are refused: they crash arithmetic far from
    here, e.g. ``int(inf)``) nested at most :data:`HOST_JSON_DEPTH` levels (a deeper one would also overflow
    the recursion of whoever walks it)."""
    try:
        value = json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    stack = [(value, 0)]
    while stack:  # walked without recursion, in time linear in the number of values
        item, depth = stack.pop()
        if depth > HOST_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {HOST_JSON_DEPTH} levels")
        if isinstance(item, dict):
            stack += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            stack += [(v, depth + 1) for v in item]
    return value


@dataclass
class CommandResult:
    rc: int
    stdout: str
    stderr: str
    command: str  # display form (secrets masked)
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def last_json(self) -> dict[str, Any] | None:
        """The last stdout line that parses as a JSON object: how the remote helper scripts answer."""
        for line in reversed(self.stdout.strip().splitlines()):
            try:
                value = host_json(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
        return None

    def tail(self, lines: int = 20) -> str:
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return "\n".join(text[-lines:])


class Connection(Protocol):
    name: str
    commands_run: int

    def run(
        self,
        cmd: Command,
        timeout: float | None = None,
        stdin: bytes | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> CommandResult: ...
    def put(self, data: bytes, path: str, mode: int | None = None) -> None: ...
    def get(self, path: str) -> bytes | None: ...
    def expand_path(self, path: str) -> str: ...
    def close(self) -> None: ...


@runtime_checkable
class AgentHost(Connection, Protocol):
    """A connection that can give the host's persistent python agent for an interpreter (SSH and local
    connections: :class:`~provision.transport.agent.AgentPool`); callers test for it with ``isinstance``.
    ``python_agent`` raises :class:`~provision.transport.agent.AgentUnavailable` when none can start (the
    caller then runs a fresh process)."""

    def python_agent(self, interpreter: str) -> PythonAgent: ...


def has_agent(conn: object) -> TypeGuard[AgentHost]:
    """``isinstance(conn, AgentHost)`` without the runtime protocol check's cost (every attribute of the protocol
    looked up, per call: per quick helper call of every task on every host)."""
    return callable(getattr(conn, "python_agent", None))


@dataclass
class Counters:
    """Process-wide counters, read by benchmarks."""

    connections_opened: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def opened(self) -> None:
        with self.lock:
            self.connections_opened += 1


COUNTERS = Counters()


def finished(
    host: str, cmd: Command, timeout: float | None, rc: int, out: bytes, err: bytes, started: float
) -> CommandResult:
    """The result of a command that ended; CommandTimeout when it was killed at its deadline: rc 124 from the
    runner; 137 or -1 (no exit status: killed by a signal) from the GNU timeout fallback after its KILL."""
    elapsed = time.monotonic() - started
    if timeout and rc in (TIMEOUT_RC, 137, -1) and elapsed >= timeout * 0.98:
        raise CommandTimeout(host, cmd.display(), timeout)
    return CommandResult(rc, _text(out), _text(err), cmd.display(), elapsed)


def _text(data: bytes) -> str:
    return data.decode(errors="replace")


NAME_MAX = 255  # bytes in one path component (Linux filesystems)


def temp_path_beside(path: str) -> str:
    """A unique hidden temp name in the target's directory (same filesystem: the rename is atomic). The
    target's name is shortened in the temp name when the whole would pass NAME_MAX, so every name that is
    legal for the target can be written."""
    directory, name = posixpath.split(path)
    suffix = f".provision-{uuid.uuid4().hex[:8]}"
    room = NAME_MAX - 1 - len(suffix)
    short = name.encode()[:room].decode(errors="ignore")  # never a split UTF-8 sequence
    return posixpath.join(directory or ".", f".{short}{suffix}")


class FileOps(Protocol):
    """The filesystem primitives one transport offers :func:`atomic_put` (paths already expanded)."""

    def mode_of(self, path: str) -> int | None: ...  # the permission bits, None when there is no such file
    def create_private(self, path: str, data: bytes) -> None: ...  # O_EXCL, 0600 from creation
    def chmod(self, path: str, mode: int) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...  # atomic, replaces dst
    def remove(self, path: str) -> None: ...  # best effort: errors are ignored by the caller


def atomic_put(ops: FileOps, data: bytes, path: str, mode: int | None, tmp: str | None = None) -> None:
    """THE atomic write, for both transports: a NEW temp file beside the target, private from its first
    byte (never an existing file or a planted link), the exact final mode (the replaced file's, else 0644),
    then a rename over the target. On any failure or interrupt the temp file is removed and the exception
    goes on (each transport turns OS/protocol errors into its HostError)."""
    if len(posixpath.basename(path).encode()) > NAME_MAX:  # what the host's filesystem would say, said plainly
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), path)
    tmp = tmp or temp_path_beside(path)
    try:
        if mode is None:
            found = ops.mode_of(path)
            mode = 0o644 if found is None else found
        ops.create_private(tmp, data)
        ops.chmod(tmp, mode)
        ops.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            ops.remove(tmp)
        raise


def expand_home(path: str, home: str) -> str:
    if path == "~":
        return home
    if path.startswith("~/"):
        return posixpath.join(home, path[2:])
    return path


class LineFeed:
    """Cuts a byte stream into lines for a progress callback (partial lines wait for their end, up to
    :data:`LINE_MAX` bytes: a longer line is passed on in pieces, so an endless line costs no memory)."""

    def __init__(self, sink: Callable[[str], None] | None) -> None:
        self.sink = sink
        self.buf = b""

    def feed(self, data: bytes) -> None:
        if self.sink is None:
            return
        self.buf += data
        *done, self.buf = self.buf.replace(b"\r", b"\n").split(b"\n")
        while len(self.buf) > LINE_MAX:
            done.append(self.buf[:LINE_MAX])
            self.buf = self.buf[LINE_MAX:]
        for line in done:
            if line.strip():
                self.sink(line.decode(errors="replace"))


class Collected:
    """A command's stdout and stderr as they arrive, at most :data:`OUTPUT_MAX` bytes together
    (:class:`~provision.errors.OutputTooLarge` past it); chunks in lists, joined once: linear."""

    def __init__(self, host: str, sink: Callable[[str], None] | None) -> None:
        self.host = host
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.size = 0
        self.lines = LineFeed(sink)

    def add(self, chunk: bytes, *, stderr: bool = False) -> None:
        self.size += len(chunk)
        if self.size > OUTPUT_MAX:
            raise OutputTooLarge(self.host, self.size, OUTPUT_MAX)
        (self.err if stderr else self.out).append(chunk)
        self.lines.feed(chunk)

    def joined(self) -> tuple[bytes, bytes]:
        return b"".join(self.out), b"".join(self.err)


# ---------------------------------------------------------------------------------------------- run lock
# One run at a time per host: a run holds ``~/.provision/run-<inventory_hostname>.lock`` (flock) on the host
# for as long as it is connected. Over SSH the holder is this small process on its own channel
# (``python3 -c RUN_LOCKER NAME H``): it reads the holder's description (one line) from stdin, answers
# ``locked`` or ``busy <description of the holder>``, then waits for its stdin to end (the run closed the
# connection, or died: sshd closes it) or, when H > 0, for 3 H seconds without a heartbeat (a frozen
# controller, a silently dropped link), and exits, which releases the lock. A host without python3 gets no
# lock (it cannot run provision's helpers either).
def __getattr__(name: str) -> str:
    """``RUN_LOCKER``: ``provision/remote/programs/run_lock.py``, minified on first use (not at import)."""
    if name == "RUN_LOCKER":
        return remote.program("run_lock.py")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_STARTED = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def lock_name(host: str) -> str:
    """The host's inventory name as a safe file name part."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", host)[:100] or "_"


def lock_holder() -> str:
    """Who holds a lock: this controller process (shown to a second run that finds the host busy)."""
    return f"provision pid {os.getpid()} on {socket.gethostname()}, started {_STARTED}"


def busy(host: str, answer: str) -> HostBusy:
    holder = answer.removeprefix("busy").strip() or "a holder that has not said who it is yet"
    return HostBusy(host, f"host is busy: another provision run holds its run lock ({holder}); rerun when it ends")
