"""SSH transport over Fabric/paramiko, with host-key verification and timeouts: :class:`SSHConnection`.

See :mod:`provision.transport.base` for the contract this implements. Its parts, by job: opening the session
(:mod:`.session`: host keys from :mod:`.known_hosts`), channels (:mod:`.channels`), SFTP files (:mod:`.sftp`),
the python agents and the run lock (:mod:`.ssh_agents`), the user's kept connection (:mod:`.persist`).

paramiko/socket exceptions never leave this module: they become :class:`UnreachableError` and friends.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import remote
from ..commands import Command
from ..errors import CommandTimeout, HostError, OutputTooLarge, UnreachableError
from . import persist
from .agent import AgentPool, AgentUnavailable, PythonAgent
from .base import (
    COUNTERS,
    CommandResult,
    ConnectOptions,
    atomic_put,
    busy,
    expand_home,
    finished,
    temp_path_beside,
)
from .channels import Heartbeats, drain, exec_pipelined, send_all, send_heartbeat
from .lazy import lazy
from .sftp import SftpFiles, SftpSession, read_all, refusal
from .ssh_agents import AGENT_READ_MAX, AgentSide
from .trace import Phases

if TYPE_CHECKING:
    import fabric
    import paramiko
else:
    paramiko = lazy("paramiko")  # imported when a run makes a connection of its own (not through the keeper)

__all__ = ["AGENT_EXEC_MAX", "AGENT_READ_MAX", "SSHConnection", "connect_reason", "exec_pipelined"]

AGENT_EXEC_MAX = 4 << 20  # stdin data sent to a command through the agent; more goes on a channel of its own
AGENT_WRITE_MAX = 4 << 20  # a file at most this large is written by the agent (one round trip), a larger one over
# SFTP, streamed (the agent's request carries it whole, base64 in JSON)
AGENT_WRITE_TIMEOUT = 120.0


def connect_reason(exc: BaseException) -> str:
    """:func:`.session.connect_reason` (the session module, with Fabric, loads when first needed)."""
    from .session import connect_reason as reason

    return reason(exc)


class SSHConnection(AgentSide):
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
        self._sftp = SftpSession(opts.channel_timeout)  # one SFTP session, opened on first use
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
        self._heartbeat = opts.heartbeat_interval()  # H: see Heartbeats
        self._beats = Heartbeats(self._heartbeat)  # the live channels and agents that get heartbeats
        self.phases = Phases()  # round trips by phase (PROVISION_TRACE_RTT)
        # a first read asked for before connecting goes with the run lock's request (see get); its answer is
        # kept only until anything else is done on the host
        self._want_reads: list[str] = []
        self._preread: dict[str, bytes | None] = {}
        self._kept = False  # the agent runs on the user's keeper's connection (--persist)

    # -- opening
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
        keep = persist.seconds(self.opts, self._vars)
        agent_doc = {"interpreter": interpreter, "beat": self._heartbeat, "first": self._lock_request()}
        stream = persist.open_stream(self.name, self._vars, self.opts, keep, agent_doc)
        agent = PythonAgent(self.name, stream, self._agent_answered, preloaded=True)
        agent.has_scripts(stream.scripts)
        agent.phases = self.phases
        self._watch_stop = stop = threading.Event()
        self._beats.set(agent, agent.beat)  # a held lock is waited for (its grace): beating meanwhile
        self._beating(None, stop)

        def give_up() -> None:
            stop.set()
            self._beats.set(agent, None)
            agent.close()

        try:
            answer, home = agent.lock(*self._lock_args(), sent=True)
        except (AgentUnavailable, OutputTooLarge):
            answer, home = "", ""  # no agent
        except BaseException:
            give_up()
            raise
        if answer != "locked":
            give_up()
            if answer.startswith("busy"):
                raise busy(self.name, answer)
            why = "the agent did not take the run lock" if answer else "no agent on the kept connection"
            raise AgentUnavailable(why)
        self._lock_held_by(interpreter, agent, home)
        self._kept = True
        self.phases.add("kept:bootstrap+lock+home", started)

    def _open_direct(self, run_lock: bool) -> None:
        from . import session  # Fabric and paramiko: only a connection of the run's own needs them

        conn = session.make(self.name, self._vars, self.opts, self._password)
        started = time.monotonic()
        session.open_checked(conn, self.opts, self.name)
        self.phases.add("tcp+ssh+auth", started)
        transport = conn.client.get_transport()
        if transport is not None and isinstance(transport.sock, socket.socket):
            # small request/response exchanges: without this, Nagle + delayed ACK add ~40 ms per command
            transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        COUNTERS.opened()
        if transport is not None:
            self._watch_stop = stop = threading.Event()
            interval = self.opts.keepalive or self.opts.connect_timeout
            watch = (transport, interval, stop, self.name, self._stall)
            threading.Thread(
                target=session.keepalive_watch, args=watch, daemon=True, name=f"provision-keepalive-{self.name}"
            ).start()
            self._beating(transport, stop)
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

    def _beating(self, transport: paramiko.Transport | None, stop: threading.Event) -> None:
        """The heartbeat thread (:class:`~.channels.Heartbeats`), when H > 0."""
        if self._heartbeat > 0:
            name = f"provision-heartbeat-{self.name}"
            threading.Thread(target=self._beats.run, args=(transport, stop), daemon=True, name=name).start()

    def _stall(self, why: str) -> None:
        self._stalled = why  # the keepalive watchdog closes the connection next

    def _lost(self, what: str, exc: BaseException) -> UnreachableError:
        if self._stalled:
            return UnreachableError(self.name, f"{self._stalled} ({what}); connection closed")
        return UnreachableError(self.name, f"SSH session lost {what}: {exc or type(exc).__name__}")

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
            send_all(channel, inv.stdin)
            self._beats.set(channel, partial(send_heartbeat, channel))
            out, err = drain(self.name, channel, None if timeout is None else timeout + 15.0, on_output)
            rc = channel.recv_exit_status()
        except TimeoutError:
            raise CommandTimeout(self.name, cmd.display(), timeout or 0) from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._lost("while running a command", exc) from None
        finally:
            if channel is not None:
                self._beats.set(channel, None)
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

    # -- files
    @contextlib.contextmanager
    def _sftp_session(self) -> Iterator[paramiko.SFTPClient]:
        """The connection's SFTP session (:class:`~.sftp.SftpSession`), held for one whole operation. Connecting
        happens before its lock: connecting takes the connection's own lock."""
        self.connect()
        with self._sftp.held(lambda: self._direct().sftp()) as sftp:
            yield sftp

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
        if len(data) <= AGENT_WRITE_MAX and self._put_in_agent(data, path, mode):
            return
        tmp = temp_path_beside(path)
        sftp: paramiko.SFTPClient | None = None
        self._inflight.add(tmp)
        started = time.monotonic()
        try:
            with self._sftp_session() as sftp:
                atomic_put(SftpFiles(sftp, lambda: bool(self._stalled)), data, path, mode, tmp)
            self.phases.add("sftp-put", started)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._file_error(f"cannot write {path}", exc, sftp) from None
        finally:
            self._inflight.discard(tmp)

    def _put_in_agent(self, data: bytes, path: str, mode: int | None) -> bool:
        """A small file written by the host's agent in ONE round trip: ``file_state.py write``, i.e.
        ``hostlib.atomic_write`` (a new ``O_EXCL|O_NOFOLLOW`` file beside the target, its final mode from the
        first byte, fsync, rename: the SFTP write's guarantees), instead of an SFTP session's channel, subsystem,
        open, writes, chmod and rename (5-7 round trips; with ``--persist``, a whole connection of the run's own:
        the keeper keeps only the agent's stream). False when no agent runs or it is busy with another call: the
        caller writes over SFTP. A refusal of the host's filesystem is a HostError with its reason."""
        self.connect()  # the agent comes with the session (and the run lock)
        agent = self._agents.live(self._interpreter())
        if agent is None:
            return False
        started = time.monotonic()
        request = remote.request({"path": path, "mode": mode}, data)
        try:
            done = agent.call("file_state.py", ["write"], request, AGENT_WRITE_TIMEOUT)
        except AgentUnavailable:
            return False  # busy, or gone (a lost connection then fails the SFTP write, said as such)
        except CommandTimeout:
            raise self._lost(f"(cannot write {path})", TimeoutError(f"no answer in {AGENT_WRITE_TIMEOUT:g}s")) from None
        answer = done.last_json()
        if answer is None:
            raise HostError(self.name, f"cannot write {path}: the host's agent gave no answer (rc={done.rc}): "
                                       f"{done.tail(5)}")  # fmt: skip
        if not answer.get("ok"):
            raise HostError(self.name, f"cannot write {path}: {answer.get('strerror') or answer.get('msg')}")
        self.phases.add("agent-put", started)
        return True

    def _file_error(self, what: str, exc: BaseException, sftp: paramiko.SFTPClient | None = None) -> HostError:
        """A lost connection is unreachable; anything the host's filesystem said is a HostError (task fails)."""
        transport = self._conn.client.get_transport() if self._conn is not None else None
        channel = sftp.get_channel() if sftp is not None else None
        lost = isinstance(exc, (paramiko.SSHException, EOFError, TimeoutError, ConnectionError))
        lost = lost or (channel is not None and channel.closed)  # our SFTP session is gone, not a host's refusal
        if lost or self._stalled or transport is None or not transport.is_active():
            return self._lost(f"({what})", exc)
        return HostError(self.name, f"{what}: {refusal(exc)}")

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
            with self._sftp_session() as sftp:
                return read_all(self.name, sftp, path)
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
        self._beats.clear()
        if self._inflight and self._conn is not None and not self._stalled:  # closed mid-write (interrupt)
            # stop the writes (SFTP session closed), then remove their temp files on a channel of its own
            temps = sorted(self._inflight)  # the writers drop theirs as soon as their session closes
            self._sftp.close()
            with contextlib.suppress(Exception):
                self.run(Command.of("rm", "-f", "--", *temps), timeout=10)
        self._agents.close()
        with contextlib.suppress(Exception):
            if self._lock_channel is not None:
                self._lock_channel.close()  # the holder on the host sees EOF, exits: the lock is free
        self._lock_channel = None
        self._sftp.close()
        with contextlib.suppress(Exception):
            if self._conn is not None:
                self._conn.close()
        self._conn = None
        self._kept = False
