"""The keeper's side of a host's resident agent (``--persist``, :mod:`provision.transport.keeper`).

The keeper starts the agent once per kept connection and interpreter, in resident mode (``remote/agent.py``
``_resident``), on a channel of its own; each run's agent is then a fork of it on the host: no channel to open,
no interpreter to start, no source to send. The channel carries the runs' bytes in frames (the protocol is in
``_resident``'s docstring); a run's stream through the keeper is exactly what it was on a channel of its own:
its agent's answers, nothing else, and the end of the run's socket ends its agent (``c ID``), which takes its
commands with it.

What the host sends is not trusted: a frame header is at most 256 bytes (``programs/frames.py``), a frame's data
at most :data:`CHUNK_MAX`, anything else closes the resident (every run on it sees its stream end; the next run starts
a new one). A run that does not read its answers (a stopped CLI) is dropped after :data:`SEND_WAIT` seconds
rather than stall the other runs on the host.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from typing import Any

from .. import remote
from ..commands import HEARTBEAT

CHUNK_MAX = 1 << 20  # bytes of a frame's data (a resident sends at most 64 KiB)
SEND_WAIT = 60.0  # seconds a run's socket may refuse its answers


class _Run:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.ready = False  # the run was told "ok": its bytes go straight to it
        self.pending: list[bytes] = []  # its agent's first bytes, held until then
        self.answered = threading.Event()


class Resident:
    """One host's resident agent on ``channel`` (exec'd already): runs opened on it, their bytes relayed."""

    def __init__(self, conn: Any, channel: Any) -> None:
        self.conn = conn  # the kept connection it lives on
        self.channel = channel
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._runs: dict[int, _Run] = {}
        self._next = 1
        self.started = threading.Event()  # its "r PID": it runs
        self.pid: int | None = None  # its pid on the host (what it says: for tests and status only)
        self.readied: dict[str, str] = {}  # scripts its runs have compiled already: name -> sha256 of the source
        self._offered: dict[str, str] = {}
        self.dead = threading.Event()
        threading.Thread(target=self._demux, name="provision-resident", daemon=True).start()

    def alive(self) -> bool:
        return not self.dead.is_set() and not self.channel.closed

    def close(self) -> None:
        self.dead.set()
        with contextlib.suppress(Exception):
            self.channel.close()

    def preload(self, sources: dict[str, tuple[str, str]]) -> None:
        """Ready ``sources`` (script name -> its source and the source's sha256, as
        :func:`~.agent.script_source` gives them) for every run: the resident compiles them once; it says which
        (``p NAME,...``), and :attr:`readied` then has them, each with its digest."""
        self._offered = {name: digest for name, (_, digest) in sources.items()}
        data = json.dumps({name: text for name, (text, _) in sources.items()}).encode()
        self._send(b"p %d\n" % len(data) + data)

    def open(self, sock: socket.socket, beat: float, idle: float, first: bytes) -> int:
        """A run begins: its agent is forked, ``first`` (a framed request) is its first input."""
        with self._lock:
            rid = self._next
            self._next += 1
            self._runs[rid] = _Run(sock)
        self._send(b"o %d %g %g\n" % (rid, idle, beat) + b"d %d %d\n" % (rid, len(first)) + first)
        return rid

    def first_answer(self, rid: int, timeout: float, beat: float = 0.0) -> bool:
        """Whether the run's agent answered its first request within ``timeout`` (else the link is stale, or
        the resident is gone: the caller drops the run and goes another way). Meanwhile the agent gets a
        heartbeat every ``beat`` seconds (> 0), as the run would send it: the first request takes the run lock,
        and a held lock is waited for (its grace, longer than 3 beats of silence may be)."""
        run = self._runs[rid]
        end = time.monotonic() + timeout
        while not self.dead.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return False
            if run.answered.wait(min(left, beat) if beat > 0 else left):
                return not self.dead.is_set()
            with contextlib.suppress(Exception):
                self._send(b"d %d %d\n" % (rid, len(HEARTBEAT)) + HEARTBEAT)
        return False

    def hand_over(self, rid: int, said: bytes) -> None:
        """Send the run ``said`` (the keeper's "ok"), then what its agent answered so far; from then on its
        bytes go straight to it."""
        run = self._runs[rid]
        with run.lock:
            run.sock.sendall(said)
            for data in run.pending:
                run.sock.sendall(data)
            run.pending.clear()
            run.ready = True

    def relay(self, rid: int) -> None:
        """The run's bytes to its agent until the run's socket ends; then its agent's input ends."""
        sock = self._runs[rid].sock
        try:
            while not self.dead.is_set():
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                self._send(b"d %d %d\n" % (rid, len(data)) + data)
        except Exception:
            pass
        finally:
            self.drop(rid)

    def drop(self, rid: int) -> None:
        """The run is over (or was not handed over): its agent's input ends; a run that was handed over sees its
        stream end (one that was not is the keeper's still, to go another way)."""
        with self._lock:
            run = self._runs.pop(rid, None)
        if run is None:
            return
        with contextlib.suppress(Exception):
            self._send(b"c %d\n" % rid)
        _end(run)

    def _send(self, data: bytes) -> None:
        with self._send_lock:
            self.channel.sendall(data)

    def _deliver(self, rid: int, data: bytes) -> None:
        run = self._runs.get(rid)
        if run is None:
            return
        with run.lock:
            if not run.ready:
                run.pending.append(data)
                run.answered.set()
                return
        try:
            run.sock.sendall(data)
        except OSError:  # a run that went away, or stopped reading: dropped, the others go on
            self.drop(rid)

    def _ended(self, rid: int) -> None:
        """The run's agent is gone: the run sees its stream end."""
        run = self._runs.get(rid)
        if run is not None:
            _end(run)

    def _frames(self, buf: bytearray) -> None:
        """Act on each whole frame in ``buf`` (and take it out): ``frames``, THE reader of this channel's frames
        (the resident's too); ValueError on anything but a resident's frames."""
        for words, data in remote.host_library("frames").frames(buf, {b"d": (3, CHUNK_MAX)}):
            kind = words[0]
            if kind == b"d" and data is not None:
                self._deliver(int(words[1]), data)
            elif kind == b"e" and len(words) == 2 and words[1].isdigit():
                self._ended(int(words[1]))
            elif kind == b"r" and len(words) == 2 and words[1].isdigit():
                self.pid = int(words[1])
                self.started.set()
            elif kind == b"p" and len(words) <= 2:
                names = words[1].decode("ascii", "replace").split(",") if len(words) == 2 else []
                self.readied = {name: self._offered[name] for name in names if name in self._offered}
            else:
                raise ValueError("not a resident agent's frame")

    def _demux(self) -> None:
        buf = bytearray()
        try:
            while True:
                chunk = self.channel.recv(65536)
                if not chunk:
                    break
                buf += chunk
                self._frames(buf)
        except Exception:
            pass
        finally:
            self.close()
            with self._lock:
                runs = list(self._runs.values())
            for run in runs:
                _end(run)


def _end(run: _Run) -> None:
    """The run's agent is gone: a run that was handed over sees its stream end; one that was not is woken."""
    run.answered.set()
    with run.lock:
        if run.ready:
            with contextlib.suppress(OSError):
                run.sock.shutdown(socket.SHUT_RDWR)
