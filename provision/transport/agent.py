"""Controller side of the persistent Python helper (``remote/agent.py``).

Modules run small helper scripts on hosts for nearly every task (``file``/``copy``/``template`` state, pip
state). Starting a Python interpreter for each costs 30-100 ms of host CPU; with one interpreter per host kept
for the whole run, a converged task costs one round trip and about a millisecond. Only scripts listed in
:data:`QUICK_SCRIPTS` go through the agent (short, read-mostly, no long-lived children); everything else, and
anything under ``become`` or a task ``environment``, runs as a fresh process.

If the agent cannot start or dies, callers fall back to a fresh process (:class:`AgentUnavailable`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .. import remote
from ..commands import HEARTBEAT, Command
from ..errors import CommandTimeout, OutputTooLarge
from .base import OUTPUT_MAX, CommandResult, host_json
from .trace import Phases

QUICK_SCRIPTS = frozenset({"file_state.py", "pip_state.py", "info.py", "transfer.py"})
HEADER_MAX = 32  # bytes of an answer's length line (digits); a host that sends more is not an agent
FRAME_MAX = OUTPUT_MAX * 4 // 3 + (64 << 10)  # an answer: a command's output, base64, in JSON


def bootstrap() -> str:
    """Starts the agent: its source from argv (zlib, base64: with the first request, see PythonAgent.command),
    else from stdin (``provision/remote/programs/agent_boot.py``, minified)."""
    return remote.program("agent_boot.py")


@remote.once
def agent_source() -> bytes:
    """The agent as it travels: ``provision/remote/agent.py`` with the spawn core, minified (on first use: a run
    whose agents are all a resident's forks never needs it)."""
    return remote.program("agent.py").encode("utf-8")


@remote.once
def _packed() -> str:
    return base64.b64encode(zlib.compress(agent_source(), 9)).decode()


@remote.once
def script_source(name: str) -> tuple[str, str]:
    """A quick script as it travels (:func:`provision.remote.source`) and its sha256: read once per process (a
    run sends it to every host)."""
    text = remote.source(name).decode("utf-8")
    return text, hashlib.sha256(text.encode()).hexdigest()


class AgentUnavailable(Exception):
    """The agent could not be started or stopped answering: run the script as a fresh process."""


class Stream(Protocol):
    """A duplex byte stream to a remote process (an SSH channel, or pipes to a local process)."""

    def send(self, data: bytes) -> None: ...
    def recv(self, n: int, deadline: float | None) -> bytes: ...  # b"" at EOF; raises TimeoutError
    def close(self) -> None: ...


class PythonAgent:
    def __init__(
        self, host: str, stream: Stream, on_answer: Callable[[], None] | None = None, preloaded: bool = False
    ) -> None:
        self.host = host
        self._on_answer = on_answer
        self._stream = stream
        self._sent: set[str] = set()
        self._lock = threading.Lock()  # one call at a time
        self._send_lock = threading.Lock()  # a heartbeat never lands inside a request
        self._buf = bytearray()
        self.dead = False
        self.preread: dict[str, bytes | None] = {}  # files read with the run lock (see lock)
        self.phases: Phases | None = None  # the connection's round-trip trace (provision.transport.trace)
        if preloaded:  # source and first request came with the command: see command(first=...)
            return
        source = agent_source()
        try:
            stream.send(b"%d\n" % len(source) + source)
        except OSError as exc:
            self.dead = True
            raise AgentUnavailable(str(exc)) from None

    def has_scripts(self, scripts: Mapping[str, str]) -> None:
        """The agent has these scripts (name -> sha256 of the source) compiled already (a fork of a resident
        agent): those whose source is ours are never sent."""
        self._sent.update(name for name, digest in scripts.items()
                          if name in QUICK_SCRIPTS and script_source(name)[1] == digest)  # fmt: skip

    @staticmethod
    def command(interpreter: str, heartbeat: float = 0.0, first: dict[str, Any] | None = None) -> Command:
        """``heartbeat``: H > 0 when :meth:`beat` will be called every H seconds (the agent exits after 3 H
        seconds without a byte); 0: the agent waits for the end of its stdin only. ``first``: the agent's
        source (compressed) and this first request travel in the command line itself, so its answer comes
        back one round trip after the exec, with no wait for sshd's window to open the channel's stdin (a
        session channel's window is 0 until the command runs); nothing secret goes there (the run lock's
        request: a lock name, the holder's line, paths). The agent is then made with ``preloaded=True``."""
        beat = f"{heartbeat:g}" if heartbeat > 0 else "0"
        # -S: no site at start (~3 ms of a host's CPU each run); the agent runs it before a script that may
        # need site-packages (remote/agent.py, _site)
        if first is None:
            return Command.of(interpreter, "-S", "-c", bootstrap(), beat)
        request = base64.b64encode(json.dumps(first).encode()).decode()
        return Command.of(interpreter, "-S", "-c", bootstrap(), beat, _packed(), request)

    @staticmethod
    def lock_request(name: str, holder: str, reads: tuple[str, ...] = (), limit: int = 0) -> dict[str, Any]:
        request: dict[str, Any] = {"op": "lock", "name": name, "holder": holder}
        if reads:
            request.update(read=list(reads), max=limit)
        return request

    def beat(self) -> None:
        """Send a heartbeat (a bare newline, which the agent skips between requests); skipped while a request
        is being sent (those bytes are a sign of life too). Called by the connection's heartbeat thread."""
        if self.dead or not self._send_lock.acquire(blocking=False):
            return
        try:
            self._stream.send(HEARTBEAT)
        finally:
            self._send_lock.release()

    def _fill(self, deadline: float | None) -> None:
        """One more chunk into the buffer. The deadline is checked on EVERY chunk: a host that never stops
        talking runs out of time like one that never answers."""
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError()
        chunk = self._stream.recv(65536, deadline)
        if not chunk:
            raise AgentUnavailable("agent closed its stream")
        self._buf += chunk  # a bytearray: appending is amortized O(1), reading a frame of N bytes is O(N)

    def _read(self, n: int, deadline: float | None) -> bytes:
        while len(self._buf) < n:
            self._fill(deadline)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _read_line(self, deadline: float | None) -> bytes:
        while (end := self._buf.find(b"\n")) < 0:
            if len(self._buf) > HEADER_MAX:
                raise AgentUnavailable(f"the host sent a frame header longer than {HEADER_MAX} bytes")
            self._fill(deadline)
        if end > HEADER_MAX:
            raise AgentUnavailable(f"the host sent a frame header longer than {HEADER_MAX} bytes")
        line = bytes(self._buf[:end])
        del self._buf[: end + 1]
        return line

    def _read_frame(self, deadline: float | None) -> bytes:
        header = self._read_line(deadline)
        if not header.isdigit():
            raise AgentUnavailable("the host sent a malformed frame header")
        size = int(header)
        if size > FRAME_MAX:
            self.close()  # the rest of the stream cannot be resynchronised
            raise OutputTooLarge(self.host, size, FRAME_MAX)
        return self._read(size, deadline)

    def call(self, script: str, args: list[str], stdin: bytes | None, timeout: float | None) -> CommandResult:
        """Run the shipped helper ``script`` in the agent (:class:`AgentUnavailable` when it is busy with another
        call: the caller runs the script as a fresh process)."""
        if not self._lock.acquire(blocking=False):
            raise AgentUnavailable("the agent is busy")
        try:
            request = {
                "name": script,
                "source": None if script in self._sent else script_source(script)[0],
                "args": args,
                "stdin": base64.b64encode(stdin or b"").decode(),
                "timeout": timeout,
            }
            answer, elapsed = self._exchange(request, timeout, f"python {script}")
            self._sent.add(script)
            if answer["rc"] == 124 and timeout:
                raise CommandTimeout(self.host, f"python {script}", timeout)
            out, err = _decoded(answer)
            text = (out.decode(errors="replace"), err.decode(errors="replace"))
            return CommandResult(answer["rc"], *text, f"python - {script}", elapsed)
        finally:
            self._lock.release()

    def batch(self, calls: list[tuple[str, list[str], bytes | None]], timeout: float) -> list[CommandResult | None]:
        """Several quick script calls (``script``, ``args``, ``stdin``) in ONE round trip, run one after the other
        by the agent, each with ``timeout``: their results in order (None for one that ran out of time). Raises
        :class:`AgentUnavailable` when the agent is busy or gone."""
        if not self._lock.acquire(blocking=False):
            raise AgentUnavailable("the agent is busy")
        try:
            requests = []
            for script, args, stdin in calls:
                source = None if script in self._sent else script_source(script)[0]
                requests.append({"name": script, "source": source, "args": args,
                                 "stdin": base64.b64encode(stdin or b"").decode(), "timeout": timeout})  # fmt: skip
                self._sent.add(script)  # sent once per batch: the agent caches it for the later requests too
            answer, elapsed = self._exchange({"op": "batch", "requests": requests}, timeout * len(calls), "batch")
            if len(answer["answers"]) != len(calls):
                self.close()
                raise AgentUnavailable("the agent's answer is malformed (not one answer per call)")
            results: list[CommandResult | None] = []
            for (script, _, _), one in zip(calls, answer["answers"], strict=True):
                out, err = _decoded(one)
                text = (out.decode(errors="replace"), err.decode(errors="replace"))
                done = CommandResult(one["rc"], *text, f"python - {script}", elapsed)
                results.append(None if one["rc"] == 124 else done)
            return results
        finally:
            self._lock.release()

    def try_exec(self, script: bytes, data: bytes, timeout: float | None) -> tuple[int, bytes, bytes] | None:
        """Run a command's script (:meth:`provision.commands.Command.script_text`) as the runner would, in the
        agent's own process tree: no channel, no interpreter start. None when the agent is busy with another
        call (the caller then uses a channel of its own). rc 124: killed at its deadline."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            request = {
                "op": "exec",
                "script": base64.b64encode(script).decode(),
                "stdin": base64.b64encode(data).decode(),
                "timeout": timeout,
            }
            answer, _ = self._exchange(request, timeout, "a command")
            out, err = _decoded(answer)
            return int(answer["rc"]), out, err
        finally:
            self._lock.release()

    def lock(
        self, name: str, holder: str, reads: tuple[str, ...] = (), limit: int = 0, sent: bool = False
    ) -> tuple[str, str]:
        """Take the host's run lock in the agent (held until it exits): (``locked`` or ``busy ...``, home).
        ``reads``: files read in the same round trip (at most ``limit`` bytes each), kept in :attr:`preread`.
        ``sent``: the request went with the command (:meth:`command` ``first``): only its answer is read."""
        with self._lock:
            request = self.lock_request(name, holder, reads, limit)
            answer, _ = self._exchange(request, 30.0, "the run lock", send=not sent)
            self.preread = _files(answer.get("files"), reads)
            return _decoded(answer)[0].decode(errors="replace").strip(), str(answer.get("home") or "")

    def read(self, path: str, limit: int) -> bytes | bool | None:
        """A file's bytes; None when there is none; False when it is larger than ``limit`` or could not be read
        (the caller then uses SFTP, which reports the error as it does for every read)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            answer, _ = self._exchange({"op": "read", "path": path, "max": limit}, 60.0, f"read {path}")
        finally:
            self._lock.release()
        if answer["rc"] == 2:
            return None
        if answer["rc"] != 0:
            return False
        return _decoded(answer)[0]

    def _exchange(
        self, request: dict[str, Any], timeout: float | None, what: str, send: bool = True
    ) -> tuple[dict[str, Any], float]:
        """One request and its answer (the caller holds ``_lock``); ``send`` False: it was sent already."""
        if self.dead:
            raise AgentUnavailable("agent is gone")
        data = json.dumps(request).encode()
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout + 15.0
        try:
            if send:
                with self._send_lock:
                    self._stream.send(b"%d\n" % len(data) + data)
            answer = _checked(host_json(self._read_frame(deadline)), request.get("op"))
        except TimeoutError:
            self.close()
            raise CommandTimeout(self.host, what, timeout or 0) from None
        except (OSError, ValueError, AgentUnavailable) as exc:
            self.close()
            raise AgentUnavailable(str(exc)) from None
        if self._on_answer is not None:
            self._on_answer()
        if self.phases is not None:
            self.phases.add(f"agent-{request.get('op') or 'call'}", started)
        return answer, time.monotonic() - started

    def close(self) -> None:
        self.dead = True
        with contextlib.suppress(OSError):
            self._stream.close()


class AgentPool:
    """The python agents of one connection, one per interpreter, for SSH and local connections alike: a live one
    is reused; a dead one (or none) is replaced on the next ask by the connection's ``start(interpreter,
    dead)`` (``dead``: the agent it replaces, or None), which raises :class:`AgentUnavailable` when none can
    start; all are closed with the connection. One start at a time: two threads asking get the same agent.
    ``start`` is passed on each ask, never kept: the pool holds no reference back to its connection."""

    def __init__(self) -> None:
        self._agents: dict[str, PythonAgent] = {}
        self._lock = threading.RLock()  # a start may connect, and connecting may add the run lock's agent

    def get(self, interpreter: str, start: Callable[[str, PythonAgent | None], PythonAgent]) -> PythonAgent:
        with self._lock:
            agent = self._agents.get(interpreter)
            if agent is None or agent.dead:
                agent = self._agents[interpreter] = start(interpreter, agent)
            return agent

    def live(self, interpreter: str) -> PythonAgent | None:
        """The interpreter's agent when one is running; never starts one."""
        agent = self._agents.get(interpreter)
        return None if agent is None or agent.dead else agent

    def add(self, interpreter: str, agent: PythonAgent) -> None:
        """An agent started elsewhere (the one that took the run lock)."""
        with self._lock:
            self._agents[interpreter] = agent

    def close(self) -> None:
        with self._lock:
            agents, self._agents = list(self._agents.values()), {}
        for agent in agents:
            agent.close()


def _checked(answer: Any, op: str | None) -> dict[str, Any]:
    """An answer of the shape the agent gives (``rc`` an int, ``out``/``err`` base64 text; a batch's
    ``answers`` each so), else ValueError: nothing of a malformed answer is used."""
    parts = [answer]
    if op == "batch":
        inner = answer.get("answers") if isinstance(answer, dict) else None
        if not isinstance(inner, list):
            raise ValueError("the agent's answer is malformed (no list of answers)")
        parts += inner
    for part in parts:
        if not isinstance(part, dict) or type(part.get("rc")) is not int:
            raise ValueError("the agent's answer is malformed (not an object with an integer rc)")
        for key in ("out", "err"):
            if not isinstance(part.get(key), str):
                raise ValueError(f"the agent's answer is malformed ({key} is not text)")
            try:
                base64.b64decode(part[key], validate=True)
            except (ValueError, binascii.Error):
                raise ValueError(f"the agent's answer is malformed ({key} is not base64)") from None
    return answer


def _files(files: Any, asked: tuple[str, ...]) -> dict[str, bytes | None]:
    """The lock answer's ``files``: only the paths asked for, each ``[0, base64]`` (its bytes) or ``[2, ""]``
    (none); anything else is left out (the caller reads it again the usual way)."""
    out: dict[str, bytes | None] = {}
    if not isinstance(files, dict):
        return out
    for path in asked:
        one = files.get(path)
        if not (isinstance(one, list) and len(one) == 2 and one[0] in (0, 2) and isinstance(one[1], str)):
            continue
        try:
            data = base64.b64decode(one[1], validate=True)
        except (ValueError, binascii.Error):
            continue
        out[path] = data if one[0] == 0 else None
    return out


def _decoded(answer: dict[str, Any]) -> tuple[bytes, bytes]:
    return base64.b64decode(answer["out"]), base64.b64decode(answer["err"])
