"""Transport: one connection per host, reused by every task of a run.

``SSHConnection`` (in :mod:`provision.ssh`, imported only when a host needs SSH) is built on Fabric
(ssh_config: HostName, Port, User, IdentityFile, ProxyJump) over paramiko, with the safety Fabric lacks by default:

* host keys are verified against ``~/.ssh/known_hosts`` and every ``UserKnownHostsFile`` of ssh_config;
  an unknown key is refused unless ``accept_new_host_keys`` (then appended under a file lock); a changed key
  is always refused (:class:`HostKeyChanged`). Jump hosts get the same policy.
* timeouts on connect, banner, auth, channel open (also through a jump host) and on every command; a timed
  out command is killed on the host with its whole process group (see :mod:`provision.commands`).
* files are written atomically: SFTP to a temp file beside the target, chmod, then ``posix_rename``.

``LocalConnection`` (``ansible_connection: local``) runs the same commands on the controller.
paramiko/socket exceptions never leave this module: they become :class:`UnreachableError` and friends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import posixpath
import re
import select
import socket
import subprocess
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .commands import Command
from .errors import CommandTimeout, HostBusy, HostError, UnreachableError

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

    def heartbeat_interval(self) -> float:
        """H: how often the controller sends a heartbeat on the stdin of every command, run-lock holder and
        agent it has on an SSH host; each of them exits (killing what it started) after 3 H seconds without a
        byte: a frozen controller or a link that dropped silently. Default: the keepalive interval
        (``--connect-timeout``) capped at 10 s, at least 1 s: 30 s of silence by default."""
        if self.heartbeat is not None:
            return max(0.0, self.heartbeat)
        return min(max(self.keepalive or self.connect_timeout, 1.0), 10.0)


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
                value = json.loads(line)
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


def temp_path_beside(path: str) -> str:
    """A unique hidden temp name in the target's directory (same filesystem: the rename is atomic)."""
    directory, name = posixpath.split(path)
    return posixpath.join(directory or ".", f".{name}.provision-{uuid.uuid4().hex[:8]}")


def _expand(path: str, home: str) -> str:
    if path == "~":
        return home
    if path.startswith("~/"):
        return posixpath.join(home, path[2:])
    return path


class _LineFeed:
    """Cuts a byte stream into lines for a progress callback (partial lines wait for their end)."""

    def __init__(self, sink: Callable[[str], None] | None) -> None:
        self.sink = sink
        self.buf = b""

    def feed(self, data: bytes) -> None:
        if self.sink is None:
            return
        self.buf += data
        *done, self.buf = self.buf.replace(b"\r", b"\n").split(b"\n")
        for line in done:
            if line.strip():
                self.sink(line.decode(errors="replace"))


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
    lines = _LineFeed(on_output)
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


# ---------------------------------------------------------------------------------------------- run lock
# One run at a time per host: a run holds ``~/.provision/run-<inventory_hostname>.lock`` (flock) on the host
# for as long as it is connected. Over SSH the holder is this small process on its own channel
# (``python3 -c RUN_LOCKER NAME H``): it reads the holder's description (one line) from stdin, answers
# ``locked`` or ``busy <description of the holder>``, then waits for its stdin to end (the run closed the
# connection, or died: sshd closes it) or, when H > 0, for 3 H seconds without a heartbeat (a frozen
# controller, a silently dropped link), and exits, which releases the lock. A host without python3 gets no
# lock (it cannot run provision's helpers either).
RUN_LOCKER = """\
import os,sys,fcntl,select
b=float(sys.argv[2]) if len(sys.argv)>2 else 0
d=os.path.expanduser('~/.provision')
try:os.makedirs(d,0o700)
except OSError:pass
f=os.open(os.path.join(d,'run-%s.lock'%sys.argv[1]),os.O_RDWR|os.O_CREAT,0o600)
h=b''
while not h.endswith(b'\\n'):
 c=os.read(0,1)
 if not c:sys.exit(0)
 h+=c
try:fcntl.flock(f,fcntl.LOCK_EX|fcntl.LOCK_NB)
except OSError:
 os.write(1,b'busy '+os.pread(f,4096,0).split(b'\\n')[0]+b'\\n');sys.exit(1)
os.ftruncate(f,0);os.pwrite(f,h,0)
os.write(1,b'locked\\n')
while (b<=0 or select.select([0],[],[],3*b)[0]) and os.read(0,4096):pass
"""
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


class LocalConnection:
    """``ansible_connection: local``: the same commands, run on the controller."""

    def __init__(self, name: str, run_lock: bool = False) -> None:
        self.name = name
        self.run_lock = run_lock
        self._lock_path: str | None = None
        self.commands_run = 0
        self.agent_calls = 0
        self._agents: dict[str, Any] = {}
        self._running: set[subprocess.Popen[bytes]] = set()

    def python_agent(self, interpreter: str) -> Any:
        from .agent import AgentUnavailable, PythonAgent

        self._take_lock()
        agent = self._agents.get(interpreter)
        if agent is None or agent.dead:
            try:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", PythonAgent.command(interpreter).direct()],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as exc:
                raise AgentUnavailable(str(exc)) from None
            # no reference back to self (a cycle): a connection nobody closed is finalized (its agent killed and
            # reaped) as soon as it is dropped, never after the agent's Popen in a cyclic collection
            answered = weakref.WeakMethod(self._agent_answered)
            stream = _PipeStream(proc)
            try:
                agent = PythonAgent(self.name, stream, lambda: (answered() or _nothing)())
            except AgentUnavailable:
                stream.close()  # it died at once (no such interpreter): reaped here, not by a finalizer's warning
                raise
            self._agents[interpreter] = agent
        return agent

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
        return os.path.expanduser(path)

    def put(self, data: bytes, path: str, mode: int | None = None) -> None:
        """Atomic write: a new temp file beside the target, 0600 from creation (O_EXCL: never an existing file
        or a planted link), the exact final mode, then rename; the temp file is removed on any failure or
        interrupt. An OS error is a HostError with its reason (the task fails)."""
        self._take_lock()
        path = self.expand_path(path)
        tmp = temp_path_beside(path)
        try:
            if mode is None:
                try:
                    mode = os.stat(path).st_mode & 0o7777
                except FileNotFoundError:
                    mode = 0o644
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise HostError(self.name, f"cannot write {path}: {exc}") from None
            raise

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
        for agent in self._agents.values():
            agent.close()
        self._agents.clear()
        if self._lock_path is not None:
            _local_unlock(self._lock_path)
            self._lock_path = None

    def __del__(self) -> None:  # an agent process must not outlive a connection nobody closed
        self.close()


def _nothing() -> None:
    pass


def open_connection(name: str, variables: Mapping[str, Any], opts: ConnectOptions) -> Connection:
    """Make the connection object for a host (lazy: nothing is contacted until the first command)."""
    kind = str(variables.get("ansible_connection", "ssh"))
    if kind == "local":
        return LocalConnection(name, run_lock=opts.run_lock)
    if kind not in ("ssh", "paramiko", "smart"):
        raise UnreachableError(name, f"unsupported ansible_connection {kind!r} (use ssh or local)")
    from .ssh import SSHConnection  # Fabric/paramiko load only when a host needs SSH

    password = variables.get("ansible_password") or variables.get("ansible_ssh_pass")
    return SSHConnection(name, variables, opts, password=str(password) if password else None)
