"""SSH transport over Fabric/paramiko, with host-key verification and timeouts.

See :mod:`provision.transport.base` for the contract this implements.

paramiko/socket exceptions never leave this module: they become :class:`UnreachableError` and friends.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import fabric
import paramiko

from ..commands import HEARTBEAT, Command
from ..errors import CommandTimeout, HostError, HostKeyChanged, HostKeyUnknown, OutputTooLarge, UnreachableError
from . import known_hosts, persist
from .agent import AgentPool, AgentUnavailable, PythonAgent
from .base import (
    COUNTERS,
    RUN_LOCKER,
    Collected,
    CommandResult,
    ConnectOptions,
    atomic_put,
    busy,
    expand_home,
    finished,
    lock_holder,
    lock_name,
    temp_path_beside,
)
from .known_hosts import fingerprint
from .trace import Phases

# --------------------------------------------------------------------------------------------- host keys
_known_hosts_lock = threading.Lock()


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Trust-on-first-use, as OpenSSH's ``StrictHostKeyChecking=accept-new``: save the key, under a lock; a
    revoked key is refused all the same."""

    def __init__(self, path: str, revoked: set[bytes]) -> None:
        self.path = path
        self.revoked = revoked

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if key.asbytes() in self.revoked:
            raise _RevokedKey(hostname, key)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        Path(self.path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with _known_hosts_lock, open(self.path, "a", encoding="ascii") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # other provision processes append to the same file
            fh.write(line)
            fcntl.flock(fh, fcntl.LOCK_UN)
        client.get_host_keys().add(hostname, key.get_name(), key)


class _RefusePolicy(paramiko.MissingHostKeyPolicy):
    def __init__(self, revoked: set[bytes]) -> None:
        self.revoked = revoked

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise (_RevokedKey if key.asbytes() in self.revoked else _UnknownKey)(hostname, key)


class _UnknownKey(Exception):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        self.hostname = hostname
        self.key = key


class _RevokedKey(_UnknownKey):
    """The host presented a key a ``@revoked`` line names."""


def _known_hosts_files(conn: fabric.Connection, opts: ConnectOptions) -> list[str]:
    files = list(opts.known_hosts)
    configured = conn.ssh_config.get("userknownhostsfile")
    if configured:
        files += [os.path.expanduser(p) for p in str(configured).split()]
    files.append(os.path.expanduser("~/.ssh/known_hosts"))
    return files


# --------------------------------------------------------------------------------------------------- SSH
class _ChannelStream:
    """The agent's stream: an exec channel kept open for the whole run."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self.channel = channel

    def send(self, data: bytes) -> None:
        _send_all(self.channel, data)

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


def _exec_pipelined(channel: paramiko.Channel, command: str) -> None:
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


def _send_heartbeat(channel: paramiko.Channel) -> None:
    """One heartbeat on a channel's stdin; never waits for window space (the host's end reads its stdin all
    the time, so there is always room; if there is none, the next beat will try again)."""
    if channel.send_ready():
        channel.send(HEARTBEAT)


SEND_PIECE = 1 << 20


def _send_all(channel: paramiko.Channel, data: bytes) -> None:
    """``channel.sendall`` in pieces: paramiko's sendall slices what is left after each packet (``s[sent:]``),
    a copy of the rest each time: a 32 MiB stdin took 1.9 s that way, 0.2 s in 1 MiB pieces."""
    for start in range(0, len(data), SEND_PIECE):
        channel.sendall(data[start : start + SEND_PIECE])


def _create_private(sftp: paramiko.SFTPClient, path: str) -> paramiko.SFTPFile:
    """Create a new file, mode 0600 from creation: SFTP open with a permissions attribute (paramiko's
    ``sftp.open`` sends none, and the server then creates it 0666 minus umask) and O_EXCL."""
    attrs = paramiko.SFTPAttributes()
    attrs.st_mode = 0o600
    flags = paramiko.sftp.SFTP_FLAG_WRITE | paramiko.sftp.SFTP_FLAG_CREATE | paramiko.sftp.SFTP_FLAG_EXCL
    kind, msg = sftp._request(paramiko.sftp.CMD_OPEN, path, flags, attrs)  # type: ignore[attr-defined]
    if kind != paramiko.sftp.CMD_HANDLE or msg is None:
        raise paramiko.SFTPError("Expected handle")
    return paramiko.SFTPFile(sftp, msg.get_binary(), "wb")


LOCK_ANSWER_MAX = 8 << 10  # "locked", or "busy " and the holder's line (which the holder wrote: short)
AGENT_EXEC_MAX = 4 << 20  # stdin data sent to a command through the agent; more goes on a channel of its own
AGENT_READ_MAX = 8 << 20  # files read through the agent; larger ones through SFTP
GET_MAX = 256 << 20  # bytes of one file read from a host into the controller's memory


class _SftpFiles:
    """:class:`~provision.transport.base.FileOps` over one SFTP session."""

    def __init__(self, sftp: paramiko.SFTPClient, conn: SSHConnection) -> None:
        self.sftp = sftp
        self.conn = conn

    def mode_of(self, path: str) -> int | None:
        try:
            return (self.sftp.stat(path).st_mode or 0o644) & 0o7777  # keep the mode of the file it replaces
        except FileNotFoundError:
            return None

    def create_private(self, path: str, data: bytes) -> None:
        with _create_private(self.sftp, path) as fh:
            fh.set_pipelined(True)
            fh.write(data)

    def chmod(self, path: str, mode: int) -> None:
        self.sftp.chmod(path, mode)

    def rename(self, src: str, dst: str) -> None:
        self.sftp.posix_rename(src, dst)

    def remove(self, path: str) -> None:
        if not self.conn._stalled:  # a stalled link would block here; close() cleans up what is left
            self.sftp.remove(path)


def connect_reason(exc: BaseException) -> str:
    """Why a connection failed, in words: paramiko's NoValidConnectionsError reads "[Errno None] Unable to connect
    to port 1 on 127.0.0.1" (it holds one socket error per address); the cause of those as OpenSSH says it
    ("Connection refused"), never "[Errno None]"."""
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) and exc.errors:
        return "; ".join(dict.fromkeys(connect_reason(e) for e in exc.errors.values()))
    if isinstance(exc, OSError) and exc.strerror:  # "[Errno 111] Connection refused": the words only
        return str(exc.strerror)
    text = str(exc) or type(exc).__name__
    if text.startswith(_NO_BANNER) and len(text) > len(_NO_BANNER):  # paramiko glues the socket error on
        return f"{_NO_BANNER} ({_ERRNO.sub('', text[len(_NO_BANNER) :]).strip()})"
    return text


_NO_BANNER = "Error reading SSH protocol banner"
_ERRNO = re.compile(r"^\[Errno -?\d+\] ")


class SSHConnection:
    """An SSH connection to one host, opened lazily on first use and kept for the whole run."""

    def __init__(
        self,
        name: str,
        variables: Mapping[str, Any],
        opts: ConnectOptions,
        password: str | None = None,
    ) -> None:
        self.name = name
        self.opts = opts
        self.commands_run = 0
        self._vars = variables
        self._password = password
        self._conn: fabric.Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._home: str | None = None
        self._lock = threading.Lock()
        self._agents = AgentPool()
        self.agent_calls = 0
        self._lock_channel: paramiko.Channel | None = None
        self._lock_agent: str | None = None  # the interpreter whose agent holds the run lock
        self._no_agent = False  # the default interpreter could not start an agent: commands use the runner
        self._stalled: str | None = None  # why the watchdog closed the connection
        self._inflight: set[str] = set()  # temp files of writes in progress (removed by close())
        self._watch_stop = threading.Event()
        self._heartbeat = opts.heartbeat_interval()  # H: see _heartbeats
        self._beats: dict[object, Callable[[], None]] = {}  # live channels that get heartbeats (see _heartbeats)
        self._beats_lock = threading.Lock()
        # one SFTP session per connection, held for each whole SFTP operation (see _sftp_session)
        self._sftp_lock = threading.Lock()
        self.phases = Phases()  # round trips by phase (PROVISION_TRACE_RTT)
        # a first read asked for before connecting goes with the run lock's request (see get); its answer is
        # kept only until anything else is done on the host
        self._want_reads: list[str] = []
        self._preread: dict[str, bytes | None] = {}
        self._kept = False  # the agent runs on the user's keeper's connection (--persist)

    # -- opening
    def _config(self) -> fabric.Config:
        path = self.opts.ssh_config or os.environ.get("PROVISION_SSH_CONFIG")
        if path:
            return fabric.Config(runtime_ssh_path=path)
        return fabric.Config()

    def _make(self, host: str, user: str | None, port: int | None, key: str | None) -> fabric.Connection:
        connect_kwargs: dict[str, Any] = {
            "banner_timeout": self.opts.banner_timeout,
            "auth_timeout": self.opts.auth_timeout,
            "channel_timeout": self.opts.channel_timeout,
        }
        if key:
            connect_kwargs["key_filename"] = [os.path.expanduser(key)]
        if self._password:
            connect_kwargs["password"] = self._password
        conn = fabric.Connection(
            host,
            user=user,
            port=port,
            config=self._config(),
            connect_timeout=self.opts.connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        self._secure(conn)
        return conn

    def _secure(self, conn: fabric.Connection) -> None:
        """Replace Fabric's trust-everything default with known_hosts verification."""
        files = _known_hosts_files(conn, self.opts)
        client = conn.client
        known = client.get_host_keys()
        known.clear()
        port = int(conn.port or 22)
        name = conn.host if port == 22 else f"[{conn.host}]:{port}"  # how paramiko looks the server up
        revoked: set[bytes] = set()
        found: dict[str, paramiko.PKey] = {}
        for path in files:
            keys, bad = known_hosts.cached(path).for_host(name)
            revoked |= bad
            found.update(keys)  # a later file wins, as when the files are loaded in order
        for keytype, key in found.items():
            if key.asbytes() not in revoked:  # listed and revoked: revoked wins, as in OpenSSH
                known.add(name, keytype, key)
        if self.opts.accept_new_host_keys:
            client.set_missing_host_key_policy(_AcceptNewPolicy(files[len(self.opts.known_hosts) :][0], revoked))
        else:
            client.set_missing_host_key_policy(_RefusePolicy(revoked))

    def _open(self, conn: fabric.Connection) -> None:
        gateway = conn.gateway
        if isinstance(gateway, fabric.Connection):
            # ProxyJump: open the jump host ourselves so that it gets host-key checks and a channel timeout
            self._secure(gateway)
            self._open(gateway)
            transport = gateway.client.get_transport()
            assert transport is not None
            channel = transport.open_channel(
                "direct-tcpip", (conn.host, int(conn.port)), ("", 0), timeout=self.opts.channel_timeout
            )
            conn.gateway = None
            conn.connect_kwargs["sock"] = channel
        conn.open()

    def connect(self) -> None:
        """The session: the agent through the user's keeper (``--persist``), else a connection of the run's own."""
        with self._lock:
            if self._conn is not None or self._kept:
                return
            if self.opts.run_lock and not self._password and persist.seconds(self.opts, self._vars) > 0:
                try:
                    self._open_kept()
                    return
                except (OSError, ValueError, persist.KeeperUnsafe, AgentUnavailable) as exc:
                    persist.unusable(exc)  # no usable keeper: said once, and this run connects on its own
            self._open_direct(self.opts.run_lock)

    def _direct(self) -> fabric.Connection:
        """The run's own SSH connection (made on first need: with --persist, only what needs a channel)."""
        with self._lock:
            if self._conn is None:
                self._open_direct(self.opts.run_lock and not self._kept)
            assert self._conn is not None
            return self._conn

    def _open_kept(self) -> None:
        """The run's agent on the kept connection (the keeper makes it when there is none): the run lock and the
        first read in the same flight; heartbeats on our side, as on a channel of our own."""
        started = time.monotonic()
        interpreter = self._interpreter()
        first = self._lock_request()
        command = PythonAgent.command(interpreter, self._heartbeat, first).direct()
        keep = persist.seconds(self.opts, self._vars)
        stream = persist.open_stream(self.name, self._vars, self.opts, command, keep)
        agent = PythonAgent(self.name, stream, self._agent_answered, preloaded=True)
        agent.phases = self.phases
        try:
            answer, home = agent.lock(*self._lock_args(), sent=True)
        except (AgentUnavailable, OutputTooLarge):
            agent.close()
            raise AgentUnavailable("no agent on the kept connection") from None
        if answer != "locked":
            agent.close()
            if answer.startswith("busy"):
                raise busy(self.name, answer)
            raise AgentUnavailable("the agent did not take the run lock")
        self._agents.add(interpreter, agent)
        self._lock_agent = interpreter
        self._home = home or None
        self._preread = agent.preread
        self._kept = True
        self._beating(agent, agent.beat)
        if self._heartbeat > 0:
            self._watch_stop = stop = threading.Event()
            name = f"provision-heartbeat-{self.name}"
            threading.Thread(target=self._heartbeats, args=(None, stop), daemon=True, name=name).start()
        self.phases.add("kept:bootstrap+lock+home", started)

    def _open_direct(self, run_lock: bool) -> None:
        v = self._vars
        conn = self._make(
            str(v.get("ansible_host") or self.name),
            v.get("ansible_user"),
            int(v["ansible_port"]) if v.get("ansible_port") else None,
            v.get("ansible_ssh_private_key_file"),
        )
        target = f"{conn.user}@{conn.host}:{conn.port}"
        started = time.monotonic()
        try:
            self._open(conn)
        except _RevokedKey as exc:
            raise HostKeyChanged(
                self.name,
                f"host key of {exc.hostname} ({exc.key.get_name()} {fingerprint(exc.key)}) is REVOKED in "
                "known_hosts: refusing to connect",
            ) from None
        except _UnknownKey as exc:
            raise HostKeyUnknown(
                self.name,
                f"host key of {exc.hostname} ({exc.key.get_name()} {fingerprint(exc.key)}) is not in known_hosts; "
                "verify it, add it with ssh-keyscan, or rerun with --accept-new-host-keys",
            ) from None
        except paramiko.BadHostKeyException as exc:
            raise HostKeyChanged(
                self.name,
                f"HOST KEY FOR {exc.hostname} HAS CHANGED (got {exc.key.get_name()} "
                f"{fingerprint(exc.key)}); refusing to connect — someone may be intercepting, "
                "or the host was reinstalled: remove the old key from known_hosts after checking",
            ) from None
        except paramiko.AuthenticationException as exc:
            raise UnreachableError(self.name, f"authentication failed for {target}: {exc}") from None
        except UnicodeError:  # a host name the resolver cannot encode (an add_host name, say)
            raise UnreachableError(self.name, f"cannot connect to {target}: not a valid host name") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise UnreachableError(self.name, f"cannot connect to {target}: {connect_reason(exc)}") from None
        self.phases.add("tcp+ssh+auth", started)
        transport = conn.client.get_transport()
        if transport is not None and isinstance(transport.sock, socket.socket):
            # small request/response exchanges: without this, Nagle + delayed ACK add ~40 ms per command
            transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        COUNTERS.opened()
        if transport is not None:
            self._watch_stop = stop = threading.Event()
            threading.Thread(
                target=self._watch, args=(transport, stop), daemon=True, name=f"provision-keepalive-{self.name}"
            ).start()
            if self._heartbeat > 0:
                name = f"provision-heartbeat-{self.name}"
                threading.Thread(target=self._heartbeats, args=(transport, stop), daemon=True, name=name).start()
        if run_lock:
            started = time.monotonic()
            try:
                self._take_run_lock(conn)
                self.phases.add("bootstrap+lock+home", started)
            except BaseException:
                with contextlib.suppress(Exception):
                    conn.close()
                raise
        self._conn = conn

    def _watch(self, transport: paramiko.Transport, stop: threading.Event) -> None:
        """Keepalives WITH replies (paramiko's own never waits for one): every ``interval`` seconds a
        ``keepalive@openssh.com`` global request; no reply within ``interval`` seconds and the connection is
        closed, so whatever waits on it fails at once as unreachable (a frozen host is reported within about
        2-3 intervals, not after the command timeout). Runs beside the commands: no latency added to them."""
        interval = self.opts.keepalive or self.opts.connect_timeout

        def ask(answered: threading.Event) -> None:
            with contextlib.suppress(Exception):  # any reply counts, even "request failed"
                transport.global_request("keepalive@openssh.com", wait=True)
            answered.set()

        while not stop.wait(interval) and transport.is_active():
            answered = threading.Event()
            threading.Thread(target=ask, args=(answered,), daemon=True, name=f"provision-keepalive-{self.name}").start()
            if not answered.wait(interval) and not stop.is_set():
                self._stalled = f"the host stopped answering: no keepalive reply within {interval:g}s"
                with contextlib.suppress(Exception):
                    transport.sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in send()
                with contextlib.suppress(Exception):
                    transport.close()
                return

    def _heartbeats(self, transport: paramiko.Transport | None, stop: threading.Event) -> None:
        """Heartbeats: every H seconds one :data:`HEARTBEAT` byte on the stdin of every live command channel,
        the run-lock holder's and each agent's (registered once all else they had to send is sent). Each of
        them exits after 3 H seconds without a byte, TERMing/KILLing what it started: a frozen controller or
        a link that dropped without a FIN reaching the host kills nothing otherwise (sshd's TCP keepalive
        takes about two hours). Its own thread, apart from the keepalive watchdog: a send that blocks on a
        wedged transport must not keep the watchdog from closing it; nothing is added to a command."""
        while not stop.wait(self._heartbeat) and (transport is None or transport.is_active()):
            with self._beats_lock:
                beats = list(self._beats.values())
            for beat in beats:
                with contextlib.suppress(Exception):  # a channel closing under us: it leaves the registry itself
                    beat()

    def _beating(self, key: object, beat: Callable[[], None] | None) -> None:
        """Add (``beat``) or remove (None) a channel in the heartbeat registry."""
        with self._beats_lock:
            if beat is None:
                self._beats.pop(key, None)
            else:
                self._beats[key] = beat

    def _lost(self, what: str, exc: BaseException) -> UnreachableError:
        if self._stalled:
            return UnreachableError(self.name, f"{self._stalled} ({what}); connection closed")
        return UnreachableError(self.name, f"SSH session lost {what}: {exc or type(exc).__name__}")

    def _interpreter(self) -> str:
        return str(self._vars.get("ansible_python_interpreter") or "python3")

    def _take_run_lock(self, conn: fabric.Connection) -> None:
        """Hold the host's run lock for as long as this connection lives (one round trip). The host's python
        agent takes it (``op: lock``) and holds it until it exits, so one interpreter per host serves the lock,
        the quick helpers, the commands and the small reads; the home directory comes with the answer. If no
        agent can start, the stand-alone :data:`RUN_LOCKER` is tried (it says why, or runs without a lock
        when there is no python3)."""
        transport = conn.client.get_transport()
        assert transport is not None
        interpreter = self._interpreter()
        try:
            agent = self._start_agent(transport, interpreter, self._lock_request())
            answer, home = agent.lock(*self._lock_args(), sent=True)
        except (AgentUnavailable, OutputTooLarge):  # no agent: no python3 yet, or not an agent at all
            self._take_run_lock_alone(transport, interpreter)
            return
        if answer == "locked":
            self._agents.add(interpreter, agent)
            self._beating(agent, agent.beat)
            self._lock_agent = interpreter
            self._home = home or None
            self._preread = agent.preread
            return
        agent.close()
        if answer.startswith("busy"):
            raise busy(self.name, answer)
        self._take_run_lock_alone(transport, interpreter)

    def _take_run_lock_alone(self, transport: paramiko.Transport, interpreter: str) -> None:
        """The run lock on a channel of its own: see RUN_LOCKER."""
        answer = b""
        try:
            channel = transport.open_session(timeout=self.opts.channel_timeout)
            holder = Command.of(interpreter, "-c", RUN_LOCKER, lock_name(self.name), f"{self._heartbeat:g}")
            channel.exec_command(holder.direct())
            channel.sendall((lock_holder() + "\n").encode())
            wait = max(self.opts.channel_timeout, 30.0)
            channel.settimeout(wait)
            deadline = time.monotonic() + wait
            while not answer.endswith(b"\n"):
                if len(answer) > LOCK_ANSWER_MAX or time.monotonic() > deadline:
                    channel.close()
                    raise UnreachableError(self.name, "the host's answer to the run lock is not one (too long)")
                chunk = channel.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise UnreachableError(self.name, f"cannot take the run lock: {exc or type(exc).__name__}") from None
        text = answer.decode(errors="replace").strip()
        if text == "locked":
            channel.settimeout(None)
            self._lock_channel = channel
            self._beating(channel, partial(_send_heartbeat, channel))
            self.commands_run += 1  # a round trip like a command
            return
        channel.close()
        if text.startswith("busy"):
            raise busy(self.name, text)
        # no python3 on the host (a bootstrap play may be about to install it): run without the lock

    @property
    def connected(self) -> bool:
        """Whether the session is open (nothing contacts the host before its first command)."""
        return self._conn is not None or self._kept

    def _transport(self) -> paramiko.Transport:
        transport = self._direct().client.get_transport()
        if transport is None or not transport.is_active():
            raise UnreachableError(self.name, self._stalled or "the SSH session was closed by the host")
        return transport

    # -- commands
    def run(
        self,
        cmd: Command,
        timeout: float | None = None,
        stdin: bytes | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        started = time.monotonic()
        self._preread.clear()
        if self.opts.agent_exec and on_output is None and not cmd.become and len(stdin or b"") <= AGENT_EXEC_MAX:
            done = self._run_in_agent(cmd, timeout, stdin or b"", started)
            if done is not None:
                return done
        inv = cmd.render(timeout, stdin, self._heartbeat)
        channel: paramiko.Channel | None = None
        try:
            channel = self._transport().open_session(timeout=self.opts.channel_timeout)
            channel.exec_command(inv.text)
            # stdin stays open until the command ends: its EOF makes the runner on the host kill the command,
            # and so do 3 H seconds without the heartbeats that follow the script and data
            _send_all(channel, inv.stdin)
            self._beating(channel, partial(_send_heartbeat, channel))
            out, err = self._drain(channel, None if timeout is None else timeout + 15.0, on_output)
            rc = channel.recv_exit_status()
        except TimeoutError:
            raise CommandTimeout(self.name, cmd.display(), timeout or 0) from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._lost("while running a command", exc) from None
        finally:
            if channel is not None:
                self._beating(channel, None)
                channel.close()  # also on KeyboardInterrupt: the host's runner sees EOF and kills the command
        self.commands_run += 1
        self.phases.add("channel-command", started)
        return finished(self.name, cmd, timeout, rc, out, err, started)

    def _run_in_agent(self, cmd: Command, timeout: float | None, data: bytes, started: float) -> CommandResult | None:
        """A command through the host's python agent (``op: exec``: the runner's semantics, without a channel
        and an interpreter start per command); None when there is no agent or it is busy: the caller opens a
        channel. Not for ``become`` (sudo needs its own exec) nor for output streamed as it comes."""
        if self._no_agent:
            return None
        script = cmd.script_text().encode()  # CommandError (NUL, bad env name) before anything is sent
        try:
            agent = self.python_agent(self._interpreter())
        except AgentUnavailable:
            self._no_agent = True  # no python3 (yet): the runner's own fallback handles such hosts
            return None
        try:
            answer = agent.try_exec(script, data, timeout)
        except AgentUnavailable as exc:
            raise self._lost("while running a command", exc) from None
        except CommandTimeout:
            raise CommandTimeout(self.name, cmd.display(), timeout or 0) from None
        if answer is None:
            return None
        rc, out, err = answer
        return finished(self.name, cmd, timeout, rc, out, err, started)

    def _drain(
        self, channel: paramiko.Channel, limit: float | None, on_output: Callable[[str], None] | None
    ) -> tuple[bytes, bytes]:
        """A command's output until it ends. The deadline is checked on every chunk (a host that never stops
        writing times out like a silent one) and the output is capped (:class:`~.base.Collected`)."""
        got = Collected(self.name, on_output)
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
    def python_agent(self, interpreter: str) -> PythonAgent:
        self.connect()  # connects first: taking the run lock may start this very agent
        self._preread.clear()
        return self._agents.get(interpreter, self._new_agent)

    def _new_agent(self, interpreter: str, dead: PythonAgent | None) -> PythonAgent:
        """The pool's start: an agent on a channel of its own; when the one that held the run lock died (the
        lock went with it), the new one takes the lock again."""
        if dead is not None:
            self._beating(dead, None)
        agent = self._start_agent(self._transport(), interpreter)
        if interpreter == self._lock_agent:
            answer, _ = agent.lock(lock_name(self.name), lock_holder())
            if answer != "locked":
                agent.close()
                raise busy(self.name, answer)
        self._beating(agent, agent.beat)
        return agent

    def _lock_args(self) -> tuple[str, str, tuple[str, ...], int]:
        return lock_name(self.name), lock_holder(), tuple(self._want_reads), AGENT_READ_MAX

    def _lock_request(self) -> dict[str, Any]:
        """The run lock's request (with the first read), sent in the agent's command line: see
        :meth:`PythonAgent.command`."""
        return PythonAgent.lock_request(*self._lock_args())

    def _start_agent(
        self, transport: paramiko.Transport, interpreter: str, first: dict[str, Any] | None = None
    ) -> PythonAgent:
        try:
            channel = transport.open_session(timeout=self.opts.channel_timeout)
            _exec_pipelined(channel, PythonAgent.command(interpreter, self._heartbeat, first).direct())
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise AgentUnavailable(str(exc)) from None
        agent = PythonAgent(self.name, _ChannelStream(channel), self._agent_answered, preloaded=first is not None)
        agent.phases = self.phases
        return agent

    def _agent_answered(self) -> None:
        self.agent_calls += 1  # a round trip like a command: counted in both
        self.commands_run += 1

    # -- files
    @contextlib.contextmanager
    def _sftp_session(self) -> Iterator[paramiko.SFTPClient]:
        """The connection's SFTP session (opened once), held by one thread for one whole operation: a delegated
        task's thread and the host's own share the connection, and paramiko's SFTPClient is not safe for two
        threads at once (one thread's read of the replies can take and drop the other's, which then waits out
        its timeout). Connecting happens before the lock: connecting takes the connection's own lock."""
        self.connect()
        with self._sftp_lock:
            channel = self._sftp.get_channel() if self._sftp is not None else None
            if self._sftp is None or channel is None or channel.closed:  # none yet, or closed by a failure
                self._sftp = self._direct().sftp()
                channel = self._sftp.get_channel()
                if channel is not None:
                    channel.settimeout(max(self.opts.channel_timeout, 60.0))
            yield self._sftp

    def expand_path(self, path: str) -> str:
        if not path.startswith("~"):
            return path
        if self._home is None:
            self.connect()  # taking the run lock through the agent tells the home directory
        if self._home is None:
            try:
                with self._sftp_session() as sftp:
                    self._home = self._home or sftp.normalize(".")
            except (paramiko.SSHException, OSError) as exc:
                raise UnreachableError(self.name, f"SFTP failed: {exc}") from None
        return expand_home(path, self._home)

    def put(self, data: bytes, path: str, mode: int | None = None) -> None:
        """Atomic write: a NEW temp file beside the target (SFTP open with O_EXCL and permissions 0600, so it
        is private from its first byte and never an existing file or planted link), the exact final mode,
        then ``posix_rename``. The temp file is removed on any failure or interrupt (and by :meth:`close`
        while a write is in flight). A write refused by the host (permission denied, disk full) is a
        HostError with the reason; only a lost connection is unreachable."""
        self._preread.clear()
        path = self.expand_path(path)
        tmp = temp_path_beside(path)
        sftp: paramiko.SFTPClient | None = None
        self._inflight.add(tmp)
        started = time.monotonic()
        try:
            with self._sftp_session() as sftp:
                atomic_put(_SftpFiles(sftp, self), data, path, mode, tmp)
            self.phases.add("sftp-put", started)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._file_error(f"cannot write {path}", exc, sftp) from None
        finally:
            self._inflight.discard(tmp)

    def _file_error(self, what: str, exc: BaseException, sftp: paramiko.SFTPClient | None = None) -> HostError:
        """A lost connection is unreachable; anything the host's filesystem said is a HostError (task fails)."""
        transport = self._conn.client.get_transport() if self._conn is not None else None
        channel = sftp.get_channel() if sftp is not None else None
        lost = isinstance(exc, (paramiko.SSHException, EOFError, TimeoutError, ConnectionError))
        lost = lost or (channel is not None and channel.closed)  # our SFTP session is gone, not a host's refusal
        if lost or self._stalled or transport is None or not transport.is_active():
            return self._lost(f"({what})", exc)
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        if reason == "Failure":  # SFTP v3 has no code for ENOSPC/EDQUOT/EROFS: OpenSSH answers "Failure"
            reason = "the host refused the write without a reason (disk full, quota or read-only filesystem?)"
        return HostError(self.name, f"{what}: {reason}")

    def get(self, path: str) -> bytes | None:
        if self._conn is None and self.opts.run_lock:
            self._want_reads = [path]  # read in the run lock's round trip
        self.connect()
        self._want_reads = []
        if path in self._preread:
            kept = self._preread.pop(path)
            self._preread.clear()
            return kept
        self._preread.clear()
        path = self.expand_path(path)
        agent = self._agents.live(self._interpreter())
        if agent is not None:  # no SFTP subsystem started for a small read
            with contextlib.suppress(AgentUnavailable):
                data = agent.read(path, AGENT_READ_MAX)
                if data is not False:
                    return data  # type: ignore[return-value]
        sftp: paramiko.SFTPClient | None = None
        try:
            with self._sftp_session() as sftp, sftp.open(path, "rb") as fh:
                chunks, size = [], 0
                while chunk := fh.read(1 << 20):  # a link to /dev/zero never ends: read at most GET_MAX
                    size += len(chunk)
                    if size > GET_MAX:
                        raise OutputTooLarge(self.name, size, GET_MAX, f"the file {path}")
                    chunks.append(chunk)
                return b"".join(chunks)
        except FileNotFoundError:
            return None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._file_error(f"cannot read {path}", exc, sftp) from None

    def close(self) -> None:
        started = time.monotonic()
        try:
            self._close()
        finally:
            self.phases.add("close", started)
            self.phases.report(self.name)

    def _close(self) -> None:
        self._watch_stop.set()
        with self._beats_lock:
            self._beats.clear()
        if self._inflight and self._conn is not None and not self._stalled:  # closed mid-write (interrupt)
            # stop the writes (SFTP session closed), then remove their temp files on a channel of its own
            temps = sorted(self._inflight)  # the writers drop theirs as soon as their session closes
            with contextlib.suppress(Exception):
                if self._sftp is not None:
                    self._sftp.close()
            with contextlib.suppress(Exception):
                self.run(Command.of("rm", "-f", "--", *temps), timeout=10)
        self._agents.close()
        with contextlib.suppress(Exception):
            if self._lock_channel is not None:
                self._lock_channel.close()  # the holder on the host sees EOF, exits: the lock is free
        self._lock_channel = None
        with contextlib.suppress(Exception):
            if self._sftp is not None:
                self._sftp.close()
        with contextlib.suppress(Exception):
            if self._conn is not None:
                self._conn.close()
        self._conn = None
        self._kept = False
        self._sftp = None
