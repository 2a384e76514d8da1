"""The start gate of ``pd_serial_start`` servers (``provision/remote/start_gate.py``), as their launch scripts run it,
with real processes: a server's start waits while another server of the machine starts, and goes once that one
answers ``/health`` or dies; a lock held by anything else is waited for at most TIMEOUT, and what its holder
says is not trusted. (The lab's rollout test runs it under SGLang: tests/integration/test_pd_rollout.py.)"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from provision import remote
from tests.support.waiting import until

GATE = str(remote.path("start_gate.py"))


class Health:
    """A stand-in for servers' ``/health``: each path answers 503 until it is marked up."""

    def __init__(self) -> None:
        self.up: set[str] = set()
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200 if self.path in health.up else 503)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{name}"


@pytest.fixture
def health() -> Iterator[Health]:
    h = Health()
    yield h
    h.server.shutdown()
    h.server.server_close()


@pytest.fixture
def key() -> str:
    return f"provision-test-gate-{uuid.uuid4().hex}"


class Server:
    """A server's stand-in: a process whose pid the gate watches (the launch script's ``$$``, after its exec)."""

    def __init__(self, tmp_path: Path, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(["sleep", "120"])
        self.log = tmp_path / f"{name}.log"

    def gate(self, key: str, health: Health, timeout: float = 60) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as log:
            return subprocess.Popen(
                [sys.executable, GATE, key, self.name, str(self.proc.pid), health.url(self.name), str(timeout)],
                stdout=log, stderr=log,  # the server's log; the gate's holder keeps it open
            )  # fmt: skip

    def text(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def still_waiting(gate: subprocess.Popen[bytes], server: Server) -> None:
    """The gate has not let its server start: it told whose start it waits for, and it has not returned."""
    until(f"{server.name} to say it waits", lambda: "waiting for the start lock" in server.text(), 30, 0.05)
    time.sleep(1.5)  # three tries of the lock
    assert gate.poll() is None, server.text()


def test_a_start_waits_for_the_server_before_it_to_be_up(tmp_path: Path, health: Health, key: str) -> None:
    a, b = Server(tmp_path, "lab0-decode"), Server(tmp_path, "lab1-decode")
    try:
        assert a.gate(key, health).wait(timeout=30) == 0  # a takes the lock and returns: its server starts
        gate_b = b.gate(key, health)
        still_waiting(gate_b, b)
        assert "waiting for the start lock: lab0-decode is starting" in b.text()
        health.up.add("/lab0-decode")
        assert gate_b.wait(timeout=30) == 0
        assert "took the start lock after" in b.text()
        until("a's holder to note a up", lambda: "the server is up after" in a.text(), 30, 0.05)
        assert "start lock released" in a.text()
    finally:
        a.stop()
        b.stop()


def test_a_server_that_dies_while_starting_frees_the_lock(tmp_path: Path, health: Health, key: str) -> None:
    a, b = Server(tmp_path, "p0-prefill"), Server(tmp_path, "d0-decode")
    try:
        assert a.gate(key, health).wait(timeout=30) == 0
        gate_b = b.gate(key, health)
        still_waiting(gate_b, b)
        a.stop()  # a crash before /health: the next start goes at once
        assert gate_b.wait(timeout=30) == 0
        assert "the server exited before it was up: start lock released" in a.text()
    finally:
        a.stop()
        b.stop()


def test_a_lock_held_by_anything_else_is_waited_for_at_most_timeout(tmp_path: Path, health: Health, key: str) -> None:
    """Any local user can bind the lock's name, and answer waiters with anything: the server starts after
    TIMEOUT, and the holder's bytes (escapes here) never reach the log."""
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind("\0" + key)
    squatter.listen(8)
    stop = threading.Event()

    def answer() -> None:
        squatter.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = squatter.accept()
            except OSError:
                continue
            conn.sendall(b"\x1b[31mevil\x1b[0m\n")
            conn.close()

    threading.Thread(target=answer, daemon=True).start()
    b = Server(tmp_path, "lab2-decode")
    try:
        assert b.gate(key, health, timeout=2).wait(timeout=30) == 0
        text = b.text()
        assert "waiting for the start lock: another process is starting" in text
        assert "the start lock was not free after 2s: starting anyway" in text
        assert "\x1b" not in text and "evil" not in text
    finally:
        stop.set()
        squatter.close()
        b.stop()


def test_a_gate_that_cannot_work_never_keeps_a_server_down(tmp_path: Path, health: Health, key: str) -> None:
    b = Server(tmp_path, "lab3-decode")
    try:
        with b.log.open("ab") as log:
            bad = subprocess.run([sys.executable, GATE, key, b.name, "not-a-pid", health.url(b.name), "x"],
                                 stdout=log, stderr=log, timeout=30, check=False)  # fmt: skip
        assert bad.returncode == 0 and "starting without the gate" in b.text()
    finally:
        b.stop()
