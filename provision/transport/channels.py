"""SSH channels: the agent's stream over an exec channel, an exec sent without waiting for its reply, stdin in
pieces, heartbeats, a command's output drained with its deadline and cap, and the run lock held on a channel of
its own.

paramiko exceptions are left to the caller (:class:`~.ssh.SSHConnection` turns them into
:class:`UnreachableError`), except where said.
"""

from __future__ import annotations

import contextlib
import select
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import remote
from ..commands import HEARTBEAT, Command
from ..errors import UnreachableError
from .base import Collected, ConnectOptions, busy, lock_holder, lock_name
from .lazy import lazy

if TYPE_CHECKING:
    import paramiko
else:
    paramiko = lazy("paramiko")

LOCK_ANSWER_MAX = 8 << 10  # "locked", or "busy " and the holder's line (which the holder wrote: short)


class ChannelStream:
    """The agent's stream: an exec channel kept open for the whole run."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self.channel = channel

    def send(self, data: bytes) -> None:
        send_all(self.channel, data)

    def recv(self, n: int, deadline: float | None) -> bytes:
        while True:
            while self.channel.recv_stderr_ready():  # never let a chatty child fill the window
                self.channel.recv_stderr(65536)
            if self.channel.recv_ready() or self.channel.eof_received or self.channel.closed:
                return bytes(self.channel.recv(n))
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError()
            select.select([self.channel], [], [], 1.0 if remaining is None else min(remaining, 1.0))

    def close(self) -> None:
        self.channel.close()


def exec_pipelined(channel: paramiko.Channel, command: str) -> None:
    """``exec`` on a channel without waiting for the host's reply (paramiko's ``exec_command`` waits: one round
    trip): the agent's source and first request follow at once, in the same flight. sshd handles a channel's
    messages in order, so they reach the command's stdin; a refused exec closes the channel (paramiko's
    ``_request_failed``), which the agent's first read sees as its end (:class:`AgentUnavailable`)."""
    m = paramiko.Message()
    m.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
    m.add_int(channel.remote_chanid)
    m.add_string("exec")
    m.add_boolean(True)
    m.add_string(command)
    channel._event_pending()  # type: ignore[attr-defined]
    channel.transport._send_user_message(m)  # type: ignore[union-attr]


def send_heartbeat(channel: paramiko.Channel) -> None:
    """One heartbeat on a channel's stdin; never waits for window space (the host's end reads its stdin all
    the time, so there is always room; if there is none, the next beat will try again)."""
    if channel.send_ready():
        channel.send(HEARTBEAT)


SEND_PIECE = 1 << 20


def send_all(channel: paramiko.Channel, data: bytes) -> None:
    """``channel.sendall`` in pieces: paramiko's sendall slices what is left after each packet (``s[sent:]``),
    a copy of the rest each time: a 32 MiB stdin took 1.9 s that way, 0.2 s in 1 MiB pieces."""
    for start in range(0, len(data), SEND_PIECE):
        channel.sendall(data[start : start + SEND_PIECE])


def drain(
    host: str, channel: paramiko.Channel, limit: float | None, on_output: Callable[[str], None] | None
) -> tuple[bytes, bytes]:
    """A command's output until it ends. The deadline is checked on every chunk (a host that never stops
    writing times out like a silent one) and the output is capped (:class:`~.base.Collected`)."""
    got = Collected(host, on_output)
    deadline = None if limit is None else time.monotonic() + limit
    while True:
        progressed = False
        while channel.recv_ready():
            got.add(channel.recv(65536))
            progressed = True
            if deadline is not None and time.monotonic() > deadline:
                break
        while channel.recv_stderr_ready():
            got.add(channel.recv_stderr(65536), stderr=True)
            progressed = True
            if deadline is not None and time.monotonic() > deadline:
                break
        drained = not channel.recv_ready() and not channel.recv_stderr_ready()
        if channel.exit_status_ready() and drained and (channel.eof_received or channel.closed):
            transport = channel.get_transport()
            if channel.exit_status == -1 and (transport is None or not transport.is_active()):
                raise EOFError("the connection closed before the command ended")  # not the command's rc
            break
        if deadline is not None and time.monotonic() > deadline:
            channel.close()
            raise TimeoutError()
        if not progressed:
            select.select([channel], [], [], 0.2)
    return got.joined()


# -- the persistent python helper


def lock_alone(
    host: str, transport: paramiko.Transport, interpreter: str, opts: ConnectOptions, heartbeat: float
) -> paramiko.Channel | None:
    """The run lock on a channel of its own (:data:`~.base.RUN_LOCKER`): the channel that holds it (its end frees
    the lock), or None when the host has no python3 (a bootstrap play may be about to install it: the run goes
    on without the lock). :class:`~provision.errors.HostBusy` when another run holds it."""
    answer = b""
    try:
        channel = transport.open_session(timeout=opts.channel_timeout)
        holder = Command.of(interpreter, "-c", remote.program("run_lock.py"), lock_name(host), f"{heartbeat:g}")
        channel.exec_command(holder.direct())
        channel.sendall((lock_holder() + "\n").encode())
        wait = max(opts.channel_timeout, 30.0)
        channel.settimeout(wait)
        deadline = time.monotonic() + wait
        while not answer.endswith(b"\n"):
            if len(answer) > LOCK_ANSWER_MAX or time.monotonic() > deadline:
                channel.close()
                raise UnreachableError(host, "the host's answer to the run lock is not one (too long)")
            chunk = channel.recv(4096)
            if not chunk:
                break
            answer += chunk
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise UnreachableError(host, f"cannot take the run lock: {exc or type(exc).__name__}") from None
    text = answer.decode(errors="replace").strip()
    if text == "locked":
        channel.settimeout(None)
        return channel
    channel.close()
    if text.startswith("busy"):
        raise busy(host, text)
    return None  # no python3 on the host


class Heartbeats:
    """A connection's heartbeats: every H seconds (``interval``) one :data:`~provision.commands.HEARTBEAT` byte on
    the stdin of every live command channel, the run-lock holder's and each agent's (registered once all else
    they had to send is sent). Each of them exits after 3 H seconds without a byte, TERMing/KILLing what it
    started: a frozen controller or a link that dropped without a FIN reaching the host kills nothing otherwise
    (sshd's TCP keepalive takes about two hours)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._beats: dict[object, Callable[[], None]] = {}
        self._lock = threading.Lock()

    def set(self, key: object, beat: Callable[[], None] | None) -> None:
        """Add (``beat``) or remove (None) a channel or agent."""
        with self._lock:
            if beat is None:
                self._beats.pop(key, None)
            else:
                self._beats[key] = beat

    def clear(self) -> None:
        with self._lock:
            self._beats.clear()

    def run(self, transport: paramiko.Transport | None, stop: threading.Event) -> None:
        """The beating thread, until ``stop`` or the transport's end. Its own thread, apart from the keepalive
        watchdog: a send that blocks on a wedged transport must not keep the watchdog from closing it; nothing
        is added to a command."""
        while not stop.wait(self.interval) and (transport is None or transport.is_active()):
            with self._lock:
                beats = list(self._beats.values())
            for beat in beats:
                with contextlib.suppress(Exception):  # a channel closing under us: it leaves the registry itself
                    beat()
