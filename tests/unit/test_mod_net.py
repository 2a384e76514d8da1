"""wait_for and uri, run for real through LocalConnection against sockets and an http.server thread."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from provision.modules import net  # noqa: F401  (registers the modules)
from provision.modules.base import ModuleContext, ModuleResult, lookup
from provision.transport import LocalConnection


def make_ctx(**kw: Any) -> ModuleContext:
    variables = {"ansible_python_interpreter": sys.executable}
    return ModuleContext(host="local", conn=LocalConnection("local"), variables=variables, **kw)


def run(ctx: ModuleContext, name: str, raw: Any) -> ModuleResult:
    cls = lookup(name)
    assert cls is not None
    args = cls.validate_static(cls.normalize(raw), lambda v: False)
    return cls().run(ctx, cls.coerce(args))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def listening() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield int(server.getsockname()[1])
    server.close()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {"status": "ok", "auth": self.headers.get("Authorization")})
        else:
            self._send(503, {"error": "not ready"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(201, {"echo": json.loads(body), "type": self.headers.get("Content-Type")})


@pytest.fixture()
def http_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# ----------------------------------------------------------------------------------------------- wait_for
def test_wait_for_open_port_is_ok_in_one_command(listening: int) -> None:
    ctx = make_ctx()
    result = run(ctx, "wait_for", {"port": listening, "timeout": 5})
    assert not result.failed and not result.changed and ctx.conn.commands_run == 1


def test_wait_for_closed_port_times_out(tmp_path: Path) -> None:
    port = free_port()
    result = run(make_ctx(), "wait_for", {"port": port, "timeout": 1, "sleep": 0.2})
    assert result.failed and f"127.0.0.1:{port}" in result.msg and result.data["elapsed"] >= 1
    assert not run(make_ctx(), "wait_for", {"port": port, "state": "stopped", "timeout": 1}).failed


def test_wait_for_path_and_search_regex(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    ctx = make_ctx()
    missing = run(ctx, "wait_for", {"path": str(log), "timeout": 0.5, "sleep": 0.1})
    assert missing.failed and str(log) in missing.msg
    log.write_text("booting\nThe server is fired up and ready to roll! port=30000\n")
    found = run(ctx, "wait_for", {"path": str(log), "search_regex": r"ready to roll! port=(\d+)", "timeout": 2})
    assert not found.failed and found.data["match_groups"] == ["30000"]
    assert run(ctx, "wait_for", {"path": str(tmp_path / "gone"), "state": "absent", "timeout": 1}).failed is False


def test_wait_for_check_mode_probes_once() -> None:
    port = free_port()
    result = run(make_ctx(check=True), "wait_for", {"port": port, "timeout": 300})
    assert result.skipped and not result.failed and result.data["elapsed"] < 30


# ---------------------------------------------------------------------------------------------------- uri
def test_uri_get_json(http_server: str) -> None:
    ctx = make_ctx()
    headers = {"Authorization": "Bearer s3cret"}
    result = run(ctx, "uri", {"url": f"{http_server}/health", "headers": headers})
    assert not result.failed and not result.changed and result.data["status"] == 200
    assert result.data["json"] == {"status": "ok", "auth": "Bearer s3cret"}
    assert "content" not in result.data and ctx.conn.commands_run == 1
    with_content = run(ctx, "uri", {"url": f"{http_server}/health", "return_content": True})
    assert json.loads(with_content.data["content"])["status"] == "ok"


def test_uri_post_json_body(http_server: str) -> None:
    body = {"text": "a'b\"c $(touch /tmp/x)", "n": [1, 2]}
    result = run(
        make_ctx(),
        "uri",
        {
            "url": http_server,
            "method": "POST",
            "body": body,
            "body_format": "json",
            "status_code": [200, 201],
        },
    )
    assert not result.failed and result.data["status"] == 201
    assert result.data["json"] == {"echo": body, "type": "application/json"}


def test_uri_status_mismatch_and_refused(http_server: str) -> None:
    result = run(make_ctx(), "uri", {"url": f"{http_server}/other"})
    assert result.failed and "503" in result.msg and "not ready" in result.data["content"]
    assert not run(make_ctx(), "uri", {"url": f"{http_server}/other", "status_code": "503"}).failed
    refused = run(make_ctx(), "uri", {"url": f"http://127.0.0.1:{free_port()}/", "timeout": 3})
    assert refused.failed and refused.data["status"] == -1 and "Request failed" in refused.msg


def test_uri_check_mode_skips_writes(http_server: str) -> None:
    ctx = make_ctx(check=True)
    assert run(ctx, "uri", {"url": http_server, "method": "POST", "body": "x"}).skipped
    assert ctx.conn.commands_run == 0
    assert run(ctx, "uri", {"url": f"{http_server}/health"}).data["status"] == 200
