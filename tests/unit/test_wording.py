"""Messages say what happened in words: never "[Errno None]" (paramiko's NoValidConnectionsError) nor "HTTP None"
(a request that got no HTTP answer at all)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from provision import remote
from provision.pd.modules import answer_text
from tests.support.cli import run_cli


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens there once the socket is closed


def test_a_refused_connection_says_connection_refused(tmp_path: Path) -> None:
    port = _closed_port()
    inventory = tmp_path / "inv.yml"
    inventory.write_text(
        f"all:\n  hosts:\n    gone: {{ansible_host: 127.0.0.1, ansible_port: {port}, ansible_user: nobody}}\n"
    )
    result = run_cli(["task", "ping", "-i", str(inventory), "--json"])
    assert result.code == 4
    msg = json.loads(result.out)["plays"][0]["tasks"][0]["hosts"]["gone"]["msg"]
    assert msg == f"cannot connect to nobody@127.0.0.1:{port}: Connection refused"
    assert "Errno" not in result.err


def test_no_http_answer_is_no_answer_not_http_none() -> None:
    assert answer_text(None, "[Errno 111] Connection refused") == "no answer ([Errno 111] Connection refused)"
    assert answer_text(-1, "") == "no answer"
    assert answer_text(503, "no prefill/decode workers") == "HTTP 503 no prefill/decode workers"
    assert answer_text(500, None) == "HTTP 500"


def test_the_rollout_helper_says_no_answer_when_the_router_is_down() -> None:
    request = json.dumps({"router": f"http://127.0.0.1:{_closed_port()}"})
    out = subprocess.run([sys.executable, str(remote.path("pd_rollout.py")), "router_list"], input=request,
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    answer = json.loads(out.stdout)
    assert out.returncode == 1  # the host library's envelope: a failed answer exits 1
    assert not answer["ok"] and "HTTP None" not in answer["msg"]
    assert answer["msg"].startswith("GET http://127.0.0.1:") and ": no answer (" in answer["msg"]


def test_paramikos_glued_banner_message_is_said_apart() -> None:
    import paramiko

    from provision.transport.ssh import connect_reason

    glued = paramiko.SSHException("Error reading SSH protocol banner[Errno 104] Connection reset by peer")
    assert connect_reason(glued) == "Error reading SSH protocol banner (Connection reset by peer)"
    assert connect_reason(paramiko.SSHException("Error reading SSH protocol banner")) == (
        "Error reading SSH protocol banner"
    )
    assert connect_reason(ConnectionResetError(104, "Connection reset by peer")) == "Connection reset by peer"
