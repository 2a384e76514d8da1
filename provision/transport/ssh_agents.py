"""The SSH connection's python agents and its run lock: :class:`AgentSide`, a part of
:class:`~.ssh.SSHConnection` kept in a file of its own.

One agent per interpreter (:class:`~.agent.AgentPool`), each on an exec channel of its own; the first takes the
run lock (``op: lock``) with the home directory and the first read in the same round trip, and holds it for its
life; an agent that dies takes the lock with it, and the next one takes it again. When no agent can start, the
lock is held by :data:`~.base.RUN_LOCKER` on a channel of its own (:func:`~.channels.lock_alone`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from ..errors import OutputTooLarge
from .agent import AgentPool, AgentUnavailable, PythonAgent
from .base import ConnectOptions, busy, lock_holder, lock_name
from .channels import ChannelStream, Heartbeats, exec_pipelined, lock_alone, send_heartbeat
from .lazy import lazy
from .trace import Phases

if TYPE_CHECKING:
    import fabric
    import paramiko
else:
    paramiko = lazy("paramiko")

AGENT_READ_MAX = 8 << 20  # files read through the agent; larger ones through SFTP


class AgentSide:
    """The agents and the run lock of an :class:`~.ssh.SSHConnection` (which has the state named here)."""

    name: str
    opts: ConnectOptions
    commands_run: int
    agent_calls: int
    phases: Phases
    _vars: Mapping[str, Any]
    _agents: AgentPool
    _beats: Heartbeats
    _heartbeat: float
    _lock_agent: str | None
    _lock_channel: paramiko.Channel | None
    _home: str | None
    _preread: dict[str, bytes | None]
    _want_reads: list[str]

    def connect(self) -> None:
        raise NotImplementedError

    def _transport(self) -> paramiko.Transport:
        raise NotImplementedError

    def _lock_held_by(self, interpreter: str, agent: PythonAgent, home: str) -> None:
        """``agent`` took the run lock: kept (the lock lives as long as it does), beating; the home directory
        and the first read came with its answer."""
        self._agents.add(interpreter, agent)
        self._beats.set(agent, agent.beat)
        self._lock_agent = interpreter
        self._home = home or None
        self._preread = agent.preread

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
        agent = None
        try:
            agent = self._start_agent(transport, interpreter, self._lock_request())
            self._beats.set(agent, agent.beat)  # a held lock is waited for (its grace): beating meanwhile
            answer, home = agent.lock(*self._lock_args(), sent=True)
        except (AgentUnavailable, OutputTooLarge):  # no agent: no python3 yet, or not an agent at all
            self._beats.set(agent, None)
            self._take_run_lock_alone(transport, interpreter)
            return
        if answer == "locked":
            self._lock_held_by(interpreter, agent, home)
            return
        self._beats.set(agent, None)
        agent.close()
        if answer.startswith("busy"):
            raise busy(self.name, answer)
        self._take_run_lock_alone(transport, interpreter)

    def _take_run_lock_alone(self, transport: paramiko.Transport, interpreter: str) -> None:
        """The run lock on a channel of its own (:func:`~.channels.lock_alone`); none when there is no python3."""
        channel = lock_alone(self.name, transport, interpreter, self.opts, self._heartbeat)
        if channel is not None:
            self._lock_channel = channel
            self._beats.set(channel, partial(send_heartbeat, channel))
            self.commands_run += 1  # a round trip like a command

    def python_agent(self, interpreter: str) -> PythonAgent:
        self.connect()  # connects first: taking the run lock may start this very agent
        self._preread.clear()
        return self._agents.get(interpreter, self._new_agent)

    def _new_agent(self, interpreter: str, dead: PythonAgent | None) -> PythonAgent:
        """The pool's start: an agent on a channel of its own; when the one that held the run lock died (the
        lock went with it), the new one takes the lock again."""
        if dead is not None:
            self._beats.set(dead, None)
        agent = self._start_agent(self._transport(), interpreter)
        self._beats.set(agent, agent.beat)  # before the lock, which may be waited for
        if interpreter == self._lock_agent:
            answer, _ = agent.lock(lock_name(self.name), lock_holder())
            if answer != "locked":
                self._beats.set(agent, None)
                agent.close()
                raise busy(self.name, answer)
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
            exec_pipelined(channel, PythonAgent.command(interpreter, self._heartbeat, first).direct())
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise AgentUnavailable(str(exc)) from None
        agent = PythonAgent(self.name, ChannelStream(channel), self._agent_answered, preloaded=first is not None)
        agent.phases = self.phases
        return agent

    def _agent_answered(self) -> None:
        self.agent_calls += 1  # a round trip like a command: counted in both
        self.commands_run += 1
