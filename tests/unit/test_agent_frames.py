"""The controller's reader of agent answers against a hostile far end (a local socket pair plays the host's
agent): the deadline holds while the host keeps talking, headers and frames are capped, and reading a frame
costs time linear in its size (issue 23, classes 1 and 2)."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from provision.errors import CommandTimeout, OutputTooLarge
from provision.transport.agent import FRAME_MAX, AgentUnavailable, PythonAgent


class SocketStream:
    """The agent's stream over one end of a socket pair (what a channel is to the SSH transport)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, n: int, deadline: float | None) -> bytes:
        remaining = None if deadline is None else max(0.01, deadline - time.monotonic())
        self.sock.settimeout(remaining)
        try:
            return self.sock.recv(n)
        except TimeoutError:
            raise TimeoutError() from None

    def close(self) -> None:
        self.sock.close()


def host_side(sock: socket.socket, serve: Callable[[socket.socket], None]) -> threading.Thread:
    """The fake host: reads (and drops) whatever the controller sends, and writes what ``serve`` writes."""

    def drain() -> None:
        try:
            while sock.recv(1 << 20):
                pass
        except OSError:
            pass

    threading.Thread(target=drain, daemon=True).start()

    def talk() -> None:
        with contextlib.suppress(OSError):  # the controller hung up: what it should do with such a host
            serve(sock)

    t = threading.Thread(target=talk, daemon=True)
    t.start()
    return t


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    for s in (a, b):
        s.close()


def agent_on(sock: socket.socket) -> PythonAgent:
    return PythonAgent("hostile", SocketStream(sock))


def answer_frame(size: int) -> bytes:
    body = json.dumps({"rc": 0, "out": base64.b64encode(b"x" * size).decode(), "err": ""}).encode()
    return b"%d\n" % len(body) + body


class Chatty:
    """A host that is always ahead of the controller: whenever the controller reads, a chunk is waiting (what an
    SSH channel looks like when the host writes faster than the controller reads). A plausible length header,
    then 1 KiB per read for ever; what the controller sends is dropped."""

    def __init__(self) -> None:
        self.header = b"80000000\n"

    def send(self, data: bytes) -> None:
        pass

    def recv(self, n: int, deadline: float | None) -> bytes:
        if self.header:
            chunk, self.header = self.header, b""
            return chunk
        time.sleep(0.001)
        return b"A" * min(n, 1024)

    def close(self) -> None:
        pass


def test_a_host_that_keeps_talking_still_times_out() -> None:
    agent = PythonAgent("hostile", Chatty())
    result: list[BaseException] = []

    def call() -> None:
        try:
            agent.try_exec(b"true", b"", 0.5)
        except BaseException as exc:
            result.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    started = time.monotonic()
    caller.start()
    caller.join(60)
    took = time.monotonic() - started
    assert not caller.is_alive(), "the reader never timed out while the host kept talking"
    assert result and isinstance(result[0], CommandTimeout), result
    assert took < 0.5 + 15 + 10, took  # the agent's deadline (timeout + 15 s), with a generous margin


@pytest.mark.parametrize("sent", [b"7" * 100, b"12 junk from a login shell\n", b"-5\n"])
def test_a_header_that_is_not_a_length_ends_the_agent(pair: tuple[socket.socket, socket.socket], sent: bytes) -> None:
    controller, host = pair
    host_side(host, lambda s: (s.sendall(sent), s.sendall(b"\0" * (1 << 20))))
    agent = agent_on(controller)
    with pytest.raises(AgentUnavailable):
        agent.try_exec(b"true", b"", 5)
    assert agent.dead


def test_a_frame_past_the_cap_is_refused_before_it_is_read(pair: tuple[socket.socket, socket.socket]) -> None:
    controller, host = pair
    host_side(host, lambda s: s.sendall(b"%d\n" % (FRAME_MAX + 1)))
    agent = agent_on(controller)
    with pytest.raises(OutputTooLarge) as caught:
        agent.try_exec(b"true", b"", 5)
    assert "MiB" in str(caught.value) and agent.dead


def _read_once(frame: bytes, size: int) -> float:
    a, b = socket.socketpair()
    try:
        host_side(b, lambda s: s.sendall(frame))
        agent = agent_on(a)
        started = time.thread_time()  # this thread's CPU: the reader's own work, not the wait for the sender
        rc, out, _ = agent.try_exec(b"true", b"", 60) or (None, b"", b"")
        took = time.thread_time() - started
        assert rc == 0 and len(out) == size
        return took
    finally:
        a.close()
        b.close()


def test_reading_a_frame_is_linear_in_its_size() -> None:
    n = 24 << 20  # bytes of command output: big enough that a quadratic reader shows, small enough for CI
    small, large = answer_frame(n), answer_frame(2 * n)
    one = two = float("inf")
    for _ in range(4):  # interleaved, best of each (CPU seconds of the reading thread: a busy machine's other
        # processes do not count in them, a quadratic reader's copying does)
        one = min(one, _read_once(small, n))
        two = min(two, _read_once(large, 2 * n))
    print(f"\n{n >> 20} MiB: {one:.3f}s, {2 * n >> 20} MiB: {two:.3f}s, ratio {two / one:.2f}")
    assert two / one < 3.5  # linear: about 2.2; the quadratic reader: about 20 at these sizes


MALFORMED = {
    "a list": b"[1, 2]",
    "a string rc": b'{"rc": "0", "out": "", "err": ""}',
    "a boolean rc": b'{"rc": true, "out": "", "err": ""}',
    "bad base64": b'{"rc": 0, "out": "%%%", "err": ""}',
    "out a number": b'{"rc": 0, "out": 5, "err": ""}',
    "nested past the recursion limit": b'{"rc": 0, "out": "", "err": "", "x": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    "a non-finite number": b'{"rc": 0, "out": "", "err": "", "t": 1e400}',
    "not JSON": b"\xff\xfe",
}


@pytest.mark.parametrize("what", sorted(MALFORMED))
def test_a_malformed_answer_ends_the_agent_in_one_line(pair: tuple[socket.socket, socket.socket], what: str) -> None:
    controller, host = pair
    body = MALFORMED[what]
    host_side(host, lambda s: s.sendall(b"%d\n" % len(body) + body))
    agent = agent_on(controller)
    with pytest.raises(AgentUnavailable, match=r"^[^\n]+$"):
        agent.try_exec(b"true", b"", 5)
    assert agent.dead


def test_a_batch_answer_with_too_few_answers_ends_the_agent(pair: tuple[socket.socket, socket.socket]) -> None:
    controller, host = pair
    body = json.dumps({"rc": 0, "out": "", "err": "", "answers": []}).encode()
    host_side(host, lambda s: s.sendall(b"%d\n" % len(body) + body))
    agent = agent_on(controller)
    with pytest.raises(AgentUnavailable):
        agent.batch([("info.py", [], None)], 5)
