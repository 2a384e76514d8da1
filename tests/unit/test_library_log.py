"""paramiko's log (its traceback when a port accepts the connection and closes it before the SSH banner) goes
to the debug log, never to stderr without -vvv: the user sees the one UNREACHABLE line and the one ERROR line.

A real listening socket on loopback that accepts and closes; the real command line in a subprocess (stderr as
a user's terminal gets it, Python's last-resort logging handler included).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def closing_port() -> Iterator[int]:
    """A port that accepts every connection and closes it at once."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def _task(tmp_path: Path, port: int, *flags: str) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        "all:\n  vars:\n    ansible_host: 127.0.0.1\n"
        f"    ansible_port: {port}\n    ansible_user: nobody\n  hosts:\n    one:\n    two:\n"
    )
    env = {**os.environ, "PROVISION_DEBUG_LOG": str(tmp_path / "debug.log"), "HOME": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "provision", "task", "ping", "-i", str(inventory), *flags],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip


def test_a_port_that_closes_prints_no_paramiko_traceback(tmp_path: Path, closing_port: int) -> None:
    proc = _task(tmp_path, closing_port)
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert "paramiko" not in proc.stderr and "Exception (client)" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["ERROR: unreachable hosts: one, two"]
    assert [line for line in proc.stdout.splitlines() if "UNREACHABLE!" in line] == [
        "one | UNREACHABLE! => {",
        "two | UNREACHABLE! => {",
    ]
    # paramiko reads EOF, or a reset (its message then glues the socket error on: said apart here)
    reason = rf'"msg": "cannot connect to nobody@127\.0\.0\.1:{closing_port}: Error reading SSH protocol banner'
    assert len(re.findall(reason + r'( \(Connection reset by peer\))?",$', proc.stdout, re.MULTILINE)) == 2
    log = (tmp_path / "debug.log").read_text()
    assert "paramiko.transport ERROR" in log and "Error reading SSH protocol banner" in log
    assert "Traceback" in log  # kept where a bug report can find it


def test_vvv_shows_paramikos_log_on_stderr(tmp_path: Path, closing_port: int) -> None:
    proc = _task(tmp_path, closing_port, "-vvv")
    assert proc.returncode == 4
    assert "Traceback" in proc.stderr and "paramiko.transport ERROR" in proc.stderr


def test_the_handler_is_removed_when_the_command_ends() -> None:
    import logging

    from tests.support.cli import run_cli

    logger = logging.getLogger("paramiko")
    before = (list(logger.handlers), logger.propagate)
    run_cli(["playbooks"])
    assert (list(logger.handlers), logger.propagate) == before
