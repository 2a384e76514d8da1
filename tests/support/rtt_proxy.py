"""A delaying, counting TCP proxy in front of the lab's sshds: a real network's round-trip time on loopback.

This machine's kernel has no netem, so the delay is added in user space: every chunk read from one side is
written to the other ``rtt / 2`` seconds later (order kept, no bandwidth limit), both ways. One listener per
lab host, on ``127.0.0.1`` and a free port; :meth:`RttProxy.write_files` writes the inventory, ssh_config and
known_hosts that point a tool (provision, pyinfra, ansible) at the proxy instead of the host, with the host's
own key (the proxy only forwards bytes: host-key checks still check the lab host).

The proxy also counts each connection's *turns*: the times the client sends after it has received something
since its last send. A request/response exchange is one turn, so the turns of a connection are the sequential
round trips its client waited for (an upper bound: a keepalive or a heartbeat that goes out beside a command
counts too). :meth:`RttProxy.turns` gives them per host, all connections of the host summed.

    with Lab(8, base) as lab, RttProxy(lab, rtt_ms=20) as proxy:
        inventory = proxy.write_files(base / "proxied")
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .lab import Lab


@dataclass
class Flow:
    """One proxied TCP connection's counts."""

    host: str
    opened: float = field(default_factory=time.monotonic)
    turns: int = 0
    client_bytes: int = 0
    server_bytes: int = 0
    last: str = ""  # "c" (client sent last) or "s"
    marks: list[float] = field(default_factory=list)  # when each turn started (monotonic)
    closed: bool = False
    new: bool = True  # opened since the last reset
    stalled: bool = False  # what it carries is dropped, both ways, without a FIN (:meth:`RttProxy.stall`)


class RttProxy:
    def __init__(self, lab: Lab, rtt_ms: float = 0.0) -> None:
        self.lab = lab
        self.delay = rtt_ms / 2000.0
        self.flows: list[Flow] = []
        self.ports: dict[str, int] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="rtt-proxy")
        self._servers: list[asyncio.AbstractServer] = []
        self._writers: list[asyncio.StreamWriter] = []  # every connection's two ends, closed at exit
        self._lock = threading.Lock()

    def __enter__(self) -> RttProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(60)
        return self

    def __exit__(self, *exc: object) -> None:
        async def shut() -> None:
            for server in self._servers:
                server.close()
            for writer in self._writers:
                writer.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for server in self._servers:
                await server.wait_closed()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():  # the loop's own sockets (its self-pipe) and the transports left
            self._loop.close()

    def set_rtt(self, rtt_ms: float) -> None:
        self.delay = rtt_ms / 2000.0

    def reset(self) -> None:
        """Counts from now on (connections that stay open, a kept one, count their new turns)."""
        with self._lock:
            self.flows = [f for f in self.flows if not f.closed]
            for flow in self.flows:
                flow.turns, flow.marks, flow.client_bytes, flow.server_bytes, flow.last = 0, [], 0, 0, ""
                flow.opened, flow.new = time.monotonic(), False

    def stall(self, host: str) -> int:
        """The host's open connections go silent (a link that stalled: nothing delivered, nothing closed); new
        connections are not. Returns how many were stalled."""
        with self._lock:
            flows = [f for f in self.flows if f.host == host and not f.closed]
            for flow in flows:
                flow.stalled = True
        return len(flows)

    def turns(self) -> dict[str, int]:
        """Per host: the turns of all its connections since the last :meth:`reset`."""
        out: dict[str, int] = {}
        with self._lock:
            for flow in self.flows:
                out[flow.host] = out.get(flow.host, 0) + flow.turns
        return out

    def connections(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self._lock:
            for flow in self.flows:
                out[flow.host] = out.get(flow.host, 0) + int(flow.new)
        return out

    async def _listen(self) -> None:
        for h in self.lab.hosts:
            server = await asyncio.start_server(
                lambda r, w, h=h: self._serve(h.name, h.address, h.port, r, w), "127.0.0.1", 0, backlog=1024
            )
            self._servers.append(server)
            self.ports[h.name] = server.sockets[0].getsockname()[1]

    async def _serve(
        self, name: str, address: str, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # the proxy's exit cancels it: not an error (asyncio's server callback reads task.exception(), which
        # raises for a cancelled task: one "Exception in callback" traceback per kept connection)
        with contextlib.suppress(asyncio.CancelledError):
            await self._relay(name, address, port, reader, writer)

    async def _relay(
        self, name: str, address: str, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        flow = Flow(name)
        with self._lock:
            self.flows.append(flow)
        self._writers.append(writer)
        try:
            await asyncio.sleep(2 * self.delay)  # the TCP handshake's round trip (SYN, SYN-ACK): accept is at once
            up_r, up_w = await asyncio.open_connection(address, port)
        except OSError:
            writer.close()
            return
        self._writers.append(up_w)
        for w in (writer, up_w):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(self._pipe(reader, up_w, flow, "c"), self._pipe(up_r, writer, flow, "s"))
        flow.closed = True

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, flow: Flow, side: str) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    with contextlib.suppress(OSError):
                        dst.write_eof() if dst.can_write_eof() else dst.close()
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if flow.stalled:
                    continue
                dst.write(data)
                with contextlib.suppress(OSError, ConnectionError):
                    await dst.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await src.read(65536)
                now = time.monotonic()
                if data:
                    if side == "c":
                        if flow.last != "c":
                            flow.turns += 1
                            flow.marks.append(now)
                        flow.client_bytes += len(data)
                    else:
                        flow.server_bytes += len(data)
                    flow.last = side
                queue.put_nowait((now + self.delay, data))
                if not data:
                    break
        except (OSError, ConnectionError):
            queue.put_nowait((0.0, b""))
        with contextlib.suppress(Exception):
            await sender

    # -- files that point the tools at the proxy
    def write_files(self, folder: Path) -> dict[str, Path]:
        """inventory.yml, ssh_config, known_hosts (and the pyinfra inventory's host list) for the proxied lab."""
        folder.mkdir(parents=True, exist_ok=True)
        known = folder / "known_hosts"
        lines = []
        for h in self.lab.hosts:
            pub = Path(str(h.host_key) + ".pub").read_text().split()
            lines.append(f"[127.0.0.1]:{self.ports[h.name]} {pub[0]} {pub[1]}\n")
        known.write_text("".join(lines))
        config = folder / "ssh_config"
        config.write_text(
            "".join(f"Host {h.name}\n  HostName 127.0.0.1\n  Port {self.ports[h.name]}\n  User {h.user}\n\n"
                    for h in self.lab.hosts)
            + f"Host *\n  UserKnownHostsFile {known}\n  IdentityFile {self.lab.client_key}\n"
            "  IdentitiesOnly yes\n  StrictHostKeyChecking yes\n"
        )  # fmt: skip
        hosts: dict[str, Any] = {
            h.name: {"ansible_host": "127.0.0.1", "ansible_port": self.ports[h.name], "ansible_user": h.user,
                     "ansible_ssh_private_key_file": str(self.lab.client_key)}
            for h in self.lab.hosts
        }  # fmt: skip
        inventory = folder / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"children": {"lab": {"hosts": hosts}}}}, sort_keys=False))
        return {"inventory": inventory, "ssh_config": config, "known_hosts": known}

    def pyinfra_hosts(self, known: Path) -> list[tuple[str, dict[str, Any]]]:
        return [
            (h.name, {"ssh_hostname": "127.0.0.1", "ssh_port": self.ports[h.name], "ssh_user": h.user,
                      "ssh_key": str(self.lab.client_key), "ssh_known_hosts_file": str(known),
                      "ssh_strict_host_key_checking": "yes"})
            for h in self.lab.hosts
        ]  # fmt: skip


@contextlib.contextmanager
def proxied(lab: Lab, folder: Path, rtt_ms: float = 0.0) -> Iterator[tuple[RttProxy, dict[str, Path]]]:
    with RttProxy(lab, rtt_ms) as proxy:
        yield proxy, proxy.write_files(folder)
