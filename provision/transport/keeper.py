"""The keeper of kept SSH connections (``--persist``): see :mod:`provision.transport.persist`, whose client
starts it as ``python -m provision.transport.keeper serve DIR``. It holds connections and, on each, a resident
agent per interpreter (:mod:`.resident`); each run's agent is a fork of the resident (else a channel of its own)
that lives exactly as long as the run's socket to the keeper."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import HostKeyChanged, HostKeyUnknown, UnreachableError
from .agent import QUICK_SCRIPTS, PythonAgent, script_source
from .base import ConnectOptions
from .channels import exec_pipelined
from .persist import LOCK, SOCKET, _answer, socket_address
from .resident import SEND_WAIT, Resident
from .ssh import SSHConnection

RESIDENT_SLACK = 30.0  # seconds a resident agent outlives the keeper's idle time (then it exits by itself)


class Keeper:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / SOCKET
        self.idle = 60.0
        self.streams = 0
        self.last = time.monotonic()
        self.lock = threading.Lock()
        self.kept: dict[str, Any] = {}  # key -> SSHConnection
        self.residents: dict[tuple[str, str], Resident] = {}  # (key, interpreter) -> its resident agent
        self.key_locks: dict[str, threading.Lock] = {}
        self.stopping = threading.Event()

    def serve(self) -> None:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            with socket_address(self.path) as address:
                server.bind(address)  # 0600 from creation
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        server.listen(1024)
        server.settimeout(1.0)
        try:
            while not self.stopping.is_set():
                with self.lock:
                    if self.streams == 0 and time.monotonic() - self.last > self.idle:
                        break
                try:
                    client, _ = server.accept()
                except TimeoutError:
                    continue
                threading.Thread(target=self.client, args=(client,), daemon=True).start()
        finally:
            with contextlib.suppress(OSError):
                self.path.unlink()
            server.close()
            for resident in list(self.residents.values()):
                resident.close()
            for conn in list(self.kept.values()):
                with contextlib.suppress(Exception):
                    conn.close()

    def client(self, sock: socket.socket) -> None:
        with contextlib.closing(sock):
            try:
                request = _answer(sock)
            except (OSError, ValueError):
                return
            op = request.get("op")
            if op == "stop":
                self.stopping.set()
                sock.sendall(b'{"ok": true}\n')
            elif op == "status":
                with self.lock:
                    doc = {"ok": True, "pid": os.getpid(), "kept": len(self.kept), "streams": self.streams,
                           "residents": sum(r.alive() for r in self.residents.values()),
                           "idle": self.idle}  # fmt: skip
                sock.sendall(json.dumps(doc).encode() + b"\n")
            elif op == "open":
                self.open(sock, request)

    def _connection(self, request: Mapping[str, Any], stale: Any = None) -> tuple[Any, bool]:
        """The kept connection for the request's key, made when there is none, it died, or it is ``stale`` (a
        channel could not be opened on it); and whether it was made just now."""
        key = str(request["key"])
        with self.lock:
            key_lock = self.key_locks.setdefault(key, threading.Lock())
        with key_lock:
            conn = self.kept.get(key)
            if conn is not None and conn is not stale and _alive(conn):
                return conn, False
            if conn is not None:  # dead or stale: its threads and socket go with it
                self.kept.pop(key, None)
                with contextlib.suppress(Exception):
                    conn.close()
            opts = dict(request["opts"])
            opts["known_hosts"] = tuple(opts.get("known_hosts") or ())
            conn = SSHConnection(str(request["name"]), dict(request["vars"]), ConnectOptions(**opts))
            conn._direct()  # host keys checked here, as in a run
            self.kept[key] = conn
            return conn, True

    def _channel(self, request: Mapping[str, Any]) -> Any:
        """A session channel with the run's command exec'd on it. A kept connection that fails to give one (the
        host rebooted, the link stalled or dropped without a word) is replaced by a new connection, once."""
        conn, fresh = self._connection(request)
        try:
            channel = conn._transport().open_session(timeout=conn.opts.channel_timeout)
        except Exception:
            if fresh:
                raise
            conn, _ = self._connection(request, stale=conn)
            channel = conn._transport().open_session(timeout=conn.opts.channel_timeout)
        exec_pipelined(channel, str(request["command"]))
        return channel

    def _resident_idle(self, request: Mapping[str, Any]) -> float:
        """How long a resident stays without a run: the run's ``--persist`` window, and some slack."""
        return float(request.get("idle") or self.idle) + RESIDENT_SLACK

    def _resident(self, request: Mapping[str, Any], agent: Mapping[str, Any]) -> tuple[Resident, bool]:
        """The host's resident agent for the run's interpreter, started when there is none (or it died, or its
        connection was replaced); and whether it was started just now."""
        slot = (str(request["key"]), str(agent["interpreter"]))
        with self.lock:
            key_lock = self.key_locks.setdefault(f"resident {slot}", threading.Lock())
        with key_lock:
            resident = self.residents.get(slot)
            if resident is not None and resident.alive() and self.kept.get(slot[0]) is resident.conn:
                return resident, False
            if resident is not None:
                resident.close()
            first = {"op": "resident", "idle": self._resident_idle(request)}
            command = PythonAgent.command(slot[1], 0.0, first).direct()
            channel = self._channel({**request, "command": command})
            resident = self.residents[slot] = Resident(self.kept[slot[0]], channel)
            resident.preload({name: script_source(name) for name in sorted(QUICK_SCRIPTS)})
            return resident, True

    def _open_warm(self, sock: socket.socket, request: Mapping[str, Any]) -> bool:
        """The run's agent as a fork of the host's resident agent (:mod:`.resident`); False when there is no
        usable resident (it could not start; a kept link that went stale is replaced): the caller opens a
        channel of the run's own."""
        agent = request["agent"]
        first = json.dumps(agent["first"]).encode()
        try:
            resident, fresh = self._resident(request, agent)
        except (HostKeyUnknown, HostKeyChanged, UnreachableError):
            raise  # the host's answer, for the run (not a second try on a channel of its own)
        except Exception:
            return False
        sock.settimeout(SEND_WAIT)
        try:
            beat = float(agent.get("beat") or 0)
            rid = resident.open(sock, beat, self._resident_idle(request), b"%d\n" % len(first) + first)
        except Exception:
            resident.close()
            return False
        if not resident.first_answer(rid, resident.conn.opts.channel_timeout + (30.0 if fresh else 0.0), beat):
            resident.drop(rid)
            resident.close()
            if not fresh:
                with contextlib.suppress(Exception):
                    self._connection(request, stale=resident.conn)  # silent: a new connection for the run
            return False
        try:
            said = json.dumps({"ok": True, "scripts": resident.readied}).encode() + b"\n"
            resident.hand_over(rid, said)
        except OSError:  # the run went away meanwhile
            resident.drop(rid)
            return True
        resident.relay(rid)
        return True

    def open(self, sock: socket.socket, request: Mapping[str, Any]) -> None:
        with self.lock:
            self.streams += 1
            self.idle = float(request.get("idle") or self.idle)
        try:
            try:
                if self._open_warm(sock, request):
                    return
                sock.settimeout(None)
                agent = request["agent"]  # the run's agent on a channel of its own, as a run starts it
                command = PythonAgent.command(str(agent["interpreter"]), float(agent["beat"]), agent["first"])
                channel = self._channel({**request, "command": command.direct()})
            except (HostKeyUnknown, HostKeyChanged, UnreachableError) as exc:
                doc = {"ok": False, "error": type(exc).__name__, "message": exc.msg}
                sock.sendall(json.dumps(doc).encode() + b"\n")
                return
            except Exception as exc:  # paramiko's, on a kept connection that just died
                doc = {"ok": False, "error": "UnreachableError", "message": f"kept connection: {exc}"}
                sock.sendall(json.dumps(doc).encode() + b"\n")
                return
            sock.sendall(b'{"ok": true}\n')
            _splice(sock, channel)
        finally:
            with self.lock:
                self.streams -= 1
                self.last = time.monotonic()


def _alive(conn: Any) -> bool:
    transport = conn._conn.client.get_transport() if conn._conn is not None else None
    return transport is not None and transport.is_active()


def _splice(sock: socket.socket, channel: Any) -> None:
    """Bytes both ways until either end closes; then the channel is closed (the agent's stdin ends)."""
    sock.setblocking(True)
    sock.settimeout(None)

    def down() -> None:
        with contextlib.suppress(Exception):
            while True:
                data = channel.recv(65536)
                if not data:
                    break
                sock.sendall(data)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # the run sees the agent's end

    reader = threading.Thread(target=down, daemon=True)
    reader.start()
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            channel.sendall(data)
    except Exception:
        pass
    finally:
        with contextlib.suppress(Exception):
            channel.close()
        reader.join(5)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "serve":
        os.environ.pop("PROVISION_SSH_CONFIG", None)  # each request names its own (None: the default files)
        folder = Path(argv[1])
        lock = open(folder / LOCK, "a")  # noqa: SIM115 - held for the keeper's life
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another keeper serves this user
        Keeper(folder).serve()
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
