"""Connections kept between runs (``--persist SECONDS``): a per-user keeper process holds each host's SSH
connection, so the next run within the window skips the TCP and SSH handshakes and the authentication.

The keeper (:mod:`provision.transport.keeper`) listens on ``keeper-2.sock`` (:data:`SOCKET`, mode 0600) in a private
directory (:func:`keeper_dir`: 0700, owned by the user, never a link; anything else is refused). A run asks it, per
host, for ONE stream to an agent of its own. The keeper keeps, per connection and interpreter, a *resident* agent on
the host (:mod:`.resident`: started once, on a channel of its own, with the quick scripts compiled once), and the
run's agent is a fork of it: no channel to open, no interpreter to start, no source to send. When there is no usable
resident (it cannot start; a kept link went stale) the run's agent is a new session channel on the kept connection
with the run's agent command exec'd on it, as before. Either way the keeper only relays bytes between the run's Unix
socket and that agent, so:

* a remote command dies with the run that started it: when the run ends or is killed (``kill -9`` included)
  its socket closes, the keeper ends the run's agent's input (``c ID`` to the resident, or the channel closed),
  the agent sees the end of its stdin (or 3 H seconds without a heartbeat) and kills what it started; the keeper
  runs no command of its own, and the resident only forks agents;
* the run lock is per run: the run's own agent (the fork) takes it and holds it while the run lives;
* host keys are checked when the connection is made (the keeper opens it with :class:`~.ssh.SSHConnection`,
  the same checks as a run's, known_hosts and options as the run gave them);
* a connection is keyed by everything that defines it (:func:`connection_key`: address, port, user, key file
  and its identity, password-less only, ssh_config path and content, known_hosts files, host-key policy and
  timeouts): a changed inventory or config never reuses a connection made for another;
* the keeper exits after ``SECONDS`` without a stream open (the last run's ``--persist``), and on
  ``provision persist stop``; a resident exits when its connection closes, or 30 s after the keeper's idle
  time without a run (a link that dropped without a word).

Only the agent's stream goes through the keeper: file writes up to 4 MiB go through the agent too; what needs a
channel of its own (``become``, a larger file's SFTP write, streamed output) opens a direct connection in the
run, as without ``--persist``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import select
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import HostKeyChanged, HostKeyUnknown, UnreachableError
from .base import ConnectOptions

PROTOCOL = 2  # in the socket's and the lock's names: a keeper of another protocol (an older provision) is not asked
SOCKET = f"keeper-{PROTOCOL}.sock"
LOCK = f"keeper-{PROTOCOL}.lock"  # held by the keeper for its life: one per user and protocol
START_WAIT = 10.0  # seconds for a keeper to start listening
ANSWER_WAIT = 60.0  # seconds for the keeper's answer to an open (it may be making the connection)
LINE_MAX = 64 << 10
CONNECTION_VARS = ("ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file")
ERRORS: dict[str, type[UnreachableError] | type[HostKeyUnknown] | type[HostKeyChanged]] = {
    "HostKeyUnknown": HostKeyUnknown,
    "HostKeyChanged": HostKeyChanged,
    "UnreachableError": UnreachableError,
}


class KeeperUnsafe(Exception):
    """The keeper's directory or socket is not private to the user: no keeper is used."""


def seconds(opts: ConnectOptions, variables: Mapping[str, Any]) -> float:
    """How long to keep connections after a run: ``--persist``, else the host's ``provision_persist``, else
    ``$PROVISION_PERSIST``; 0: not kept."""
    for value in (opts.persist, variables.get("provision_persist"), os.environ.get("PROVISION_PERSIST")):
        if value not in (None, "", 0, 0.0):
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                return 0.0
    return 0.0


def keeper_dir() -> Path:
    """The user's private keeper directory (made 0700), or :class:`KeeperUnsafe`."""
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    path = Path(base) / f"provision-persist-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise KeeperUnsafe(f"{path} is not a directory private to this user (0700, not a link)")
    return path


def _file_id(path: str | None) -> list[Any]:
    if not path:
        return []
    p = os.path.expanduser(path)
    try:
        info = os.stat(p)
    except OSError:
        return [p]
    return [p, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns]


def _content(path: str | None) -> str:
    if not path:
        return ""
    try:
        return hashlib.sha256(Path(os.path.expanduser(path)).read_bytes()).hexdigest()
    except OSError:
        return ""


def connection_doc(name: str, variables: Mapping[str, Any], opts: ConnectOptions) -> dict[str, Any]:
    """What the keeper needs to make the connection (no secret: password logins are never kept)."""
    ssh_config = opts.ssh_config or os.environ.get("PROVISION_SSH_CONFIG") or None
    kept = dataclasses.replace(opts, ssh_config=ssh_config, run_lock=False, persist=0.0)
    return {
        "name": name,
        "vars": {k: variables[k] for k in CONNECTION_VARS if variables.get(k) not in (None, "")},
        "opts": {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(kept).items()},
    }


def connection_key(doc: Mapping[str, Any]) -> str:
    """Everything that defines a connection, hashed: the doc, the key file's and the ssh_config's identity and
    content, the known_hosts files' content (a key removed from them is not trusted through a kept link)."""
    opts = doc["opts"]
    parts = [
        doc,
        _file_id(doc["vars"].get("ansible_ssh_private_key_file")),
        _content(opts.get("ssh_config")),
        [_content(p) for p in opts.get("known_hosts") or []],
        _content("~/.ssh/known_hosts"),
    ]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------- the client
class KeptStream:
    """The agent's stream through the keeper (the :class:`~.agent.Stream` protocol) over a Unix socket."""

    def __init__(self, sock: socket.socket, scripts: Mapping[str, str] | None = None) -> None:
        self.sock = sock
        self.scripts = dict(scripts or {})  # on the host already (a resident's): name -> sha256 of the source

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, n: int, deadline: float | None) -> bytes:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise TimeoutError()
        ready, _, _ = select.select([self.sock], [], [], remaining)
        if not ready:
            raise TimeoutError()
        return self.sock.recv(n)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


SUN_PATH_MAX = 107  # bytes of a Unix socket's path (108 with its NUL on Linux; macOS has 104)


@contextlib.contextmanager
def socket_address(path: Path) -> Iterator[str]:
    """The address to bind or connect ``path`` by: the path itself, or, when it is longer than a Unix socket's
    path may be (a deep ``$XDG_RUNTIME_DIR``), the same file through ``/proc/self/fd/N`` of its folder (Linux)."""
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        yield str(path)
        return
    if not os.path.isdir("/proc/self/fd"):
        raise KeeperUnsafe(f"{path} is longer than a socket path may be ({SUN_PATH_MAX} bytes)")
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(START_WAIT)
        with socket_address(path) as address:
            sock.connect(address)
    except OSError:
        sock.close()
        return None
    return sock


def _check_socket(path: Path) -> None:
    info = os.lstat(path)
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise KeeperUnsafe(f"{path} is not a socket private to this user (0600)")


def keeper_socket(start: bool = True) -> socket.socket | None:
    """A connection to the user's keeper, started if there is none (``start``)."""
    folder = keeper_dir()
    path = folder / SOCKET
    if path.exists():
        _check_socket(path)
        sock = _connect(path)
        if sock is not None or not start:
            return sock
    elif not start:
        return None
    with open(folder / "start.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one keeper, however many runs start at once
        sock = _connect(path) if path.exists() else None
        if sock is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            subprocess.Popen(
                [sys.executable, "-m", "provision.transport.keeper", "serve", str(folder)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
            )  # fmt: skip
            deadline = time.monotonic() + START_WAIT
            while sock is None and time.monotonic() < deadline:
                time.sleep(0.02)
                sock = _connect(path) if path.exists() else None
    if sock is not None:
        _check_socket(path)
    return sock


def _request(sock: socket.socket, doc: Mapping[str, Any]) -> dict[str, Any]:
    sock.sendall(json.dumps(doc).encode() + b"\n")
    return _answer(sock)


def _line(sock: socket.socket) -> bytes:
    """One line (at most :data:`LINE_MAX` bytes) and not a byte more: what follows it on the socket is the
    stream's. Peeked, then read up to the newline (a byte at a time, a run's request, 20-30 kB with the agent's
    source, cost the keeper a syscall and a copy of the whole line per byte: seconds of CPU at 64 hosts)."""
    got = bytearray()
    while len(got) <= LINE_MAX:
        peek = sock.recv(LINE_MAX + 1 - len(got), socket.MSG_PEEK)
        if not peek:
            break
        end = peek.find(b"\n")
        want = len(peek) if end < 0 else end + 1
        while want:
            chunk = sock.recv(want)
            if not chunk:
                raise OSError("the keeper closed the connection")
            got += chunk
            want -= len(chunk)
        if end >= 0:
            return bytes(got)
    raise OSError("the keeper closed the connection" if len(got) <= LINE_MAX else "a line longer than the limit")


def _answer(sock: socket.socket) -> dict[str, Any]:
    sock.settimeout(ANSWER_WAIT)
    got = _line(sock)
    sock.settimeout(None)
    answer = json.loads(got)
    if not isinstance(answer, dict):
        raise OSError("the keeper's answer is not an object")
    return answer


def open_stream(name: str, variables: Mapping[str, Any], opts: ConnectOptions, keep: float,
                agent: Mapping[str, Any]) -> KeptStream:  # fmt: skip
    """A stream to an agent of the run's own on ``name``, through the keeper: ``agent`` says which (its
    ``interpreter``, heartbeat ``beat``, and ``first`` request, whose answer is the stream's first bytes). The
    keeper gives a fork of the host's resident agent (:mod:`.resident`), else an agent started on a channel of
    its own (``PythonAgent.command``, made by the keeper). Raises the host's error (host key, unreachable) as a
    run's own connection would, or OSError/KeeperUnsafe when there is no usable keeper."""
    sock = keeper_socket()
    if sock is None:
        raise OSError("the keeper did not start")
    doc = connection_doc(name, variables, opts)
    try:
        answer = _request(sock, {"op": "open", **doc, "key": connection_key(doc), "agent": dict(agent), "idle": keep})
    except (OSError, ValueError):
        sock.close()
        raise
    if not answer.get("ok"):
        sock.close()
        error = ERRORS.get(str(answer.get("error")), UnreachableError)
        raise error(name, str(answer.get("message") or "the keeper could not connect"))
    scripts = answer.get("scripts")
    return KeptStream(sock, {str(k): str(v) for k, v in scripts.items()} if isinstance(scripts, dict) else None)


_SAID: set[str] = set()


def unusable(exc: BaseException) -> None:
    """Say on stderr, once per reason and process (a CLI run is one), that ``--persist`` could not use a keeper
    (the run goes on)."""
    reason = str(exc) or type(exc).__name__
    if reason not in _SAID:
        _SAID.add(reason)
        print(f"[WARNING]: --persist: no keeper ({reason}); this run connects on its own", file=sys.stderr)


def stop() -> bool:
    """End the user's keeper (its kept connections close): True when one was running."""
    sock = keeper_socket(start=False)
    if sock is None:
        return False
    with contextlib.closing(sock), contextlib.suppress(OSError, ValueError):
        _request(sock, {"op": "stop"})
    return True


def status() -> dict[str, Any] | None:
    sock = keeper_socket(start=False)
    if sock is None:
        return None
    with contextlib.closing(sock):
        try:
            return _request(sock, {"op": "status"})
        except (OSError, ValueError):
            return None  # it is just stopping
