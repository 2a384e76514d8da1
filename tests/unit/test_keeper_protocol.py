"""The keeper's request line (``--persist``): a run sends one JSON line (its host's connection and the agent's
command, 20-30 kB with the agent's source) and then the stream's bytes on the same Unix socket. The keeper reads
the line and not a byte more, in a few reads (read a byte at a time, 64 hosts' lines cost it seconds of CPU
in a kept run, the most of any process), and refuses a line past the limit."""

from __future__ import annotations

import socket
import threading

import pytest

from provision.transport import persist


class CountingSocket:
    """One end of a socket pair that counts its reads."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reads = 0

    def recv(self, n: int, flags: int = 0) -> bytes:
        self.reads += 1
        return self.sock.recv(n, flags)

    def settimeout(self, value: float | None) -> None:
        self.sock.settimeout(value)


def _send_later(sock: socket.socket, data: bytes) -> threading.Thread:
    thread = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    thread.start()
    return thread


def test_the_line_is_read_in_a_few_reads_and_the_stream_after_it_is_left_alone() -> None:
    a, b = socket.socketpair()
    with a, b:
        line = b'{"op": "open", "command": "' + b"x" * 30000 + b'"}\n'
        sender = _send_later(a, line + b"STREAM BYTES")
        reader = CountingSocket(b)
        assert persist._line(reader) == line  # type: ignore[arg-type]
        assert reader.reads <= 8, reader.reads  # a byte at a time: 30,000
        sender.join(5)
        b.settimeout(5)
        assert b.recv(100) == b"STREAM BYTES"


def test_an_answer_is_parsed_from_its_line() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b'{"ok": true}\n{"next": 1}\n')
        assert persist._answer(b) == {"ok": True}
        assert persist._answer(b) == {"next": 1}


@pytest.mark.parametrize("what", ["too long", "closed early"])
def test_a_line_past_the_limit_or_cut_short_is_refused(what: str) -> None:
    a, b = socket.socketpair()
    with a, b:
        if what == "too long":
            sender = _send_later(a, b"y" * (persist.LINE_MAX + 10))
            with pytest.raises(OSError, match="longer than the limit"):
                persist._line(b)
            sender.join(5)
        else:
            a.sendall(b'{"ok": tr')
            a.shutdown(socket.SHUT_WR)
            with pytest.raises(OSError, match="closed the connection"):
                persist._line(b)
