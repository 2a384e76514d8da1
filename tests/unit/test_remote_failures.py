"""The failure answers of pd_verify.py and nixl_probe.py (issue 24: one failure shape, ``hostlib.Failed``): a failed
generation or smoke gate answers ok false, failed true, ``msg`` (= ``error``) and the same fields as before."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from provision import remote

sys.path.insert(0, str(remote.REMOTE_DIR))
import hostlib

VERIFY_FIELDS = {"ok", "failed", "msg", "error", "url", "attempts", "status", "latency", "waited"}
COMPLETION_FIELDS = {"text", "output_ids", "completion_tokens", "finish_reason"}
PROBE_FIELDS = {"ok", "failed", "msg", "error", "hint", "python", "nixl_version", "variants", "variant", "plugins",
                "mem_types", "import_seconds", "nixl_plugin_dir_env", "bundled_plugin_dir", "plugin_dir", "ucx_libs",
                "ld_library_path", "nixl_config_files", "cuda_driver"}  # fmt: skip


def run(script: str, action: str, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, str(remote.path(script)), action], input=json.dumps(request),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    return proc.returncode, json.loads(proc.stdout.splitlines()[-1])


class Generate(BaseHTTPRequestHandler):
    status = 500
    answer: bytes = b"fake failure"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(type(self).status)
        self.send_header("Content-Length", str(len(type(self).answer)))
        self.end_headers()
        self.wfile.write(type(self).answer)


@pytest.fixture
def router() -> Iterator[tuple[str, type[Generate]]]:
    handler = type("Router", (Generate,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_a_failed_generation_is_a_failure_answer_with_its_fields(router: tuple[str, type[Generate]]) -> None:
    url, handler = router
    rc, answer = run("pd_verify.py", "verify", {"url": url, "timeout": 5})
    assert rc == 1 and answer["ok"] is False and answer["failed"] is True, answer
    assert answer["msg"] == answer["error"] == "fake failure" and answer["status"] == 500, answer
    assert set(answer) == VERIFY_FIELDS and answer["attempts"] == 1 and answer["url"] == url + "/generate"
    handler.status, handler.answer = 200, json.dumps({"text": "  ", "meta_info": {"completion_tokens": 0}}).encode()
    rc, empty = run("pd_verify.py", "verify", {"url": url, "timeout": 5})
    assert rc == 1 and empty["ok"] is False and empty["failed"] is True, empty
    assert empty["msg"] == empty["error"] == "the completion is empty" and empty["status"] == 200
    assert set(empty) == VERIFY_FIELDS | COMPLETION_FIELDS and empty["completion_tokens"] == 0


def test_a_failed_smoke_gate_is_a_failure_answer_with_the_whole_report() -> None:
    rc, answer = run("nixl_probe.py", "probe", {"backends": "UCX", "require_vram": True})  # this venv has no nixl
    assert rc == 1 and answer["ok"] is False and answer["failed"] is True, answer
    assert answer["msg"] == answer["error"] and answer["error"].startswith("import nixl._api failed"), answer
    assert "no nixl variant installed" in answer["hint"] and set(answer) == PROBE_FIELDS, answer


def test_a_crashed_probe_is_a_failure_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("nixl_probe_under_test", remote.path("nixl_probe.py"))
    assert spec and spec.loader
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)

    def crash(backends: list[str], require_vram: bool) -> dict[str, Any]:
        raise RuntimeError("boom")

    monkeypatch.setattr(probe, "probe", crash)
    monkeypatch.setattr(probe, "answer_on_a_copy_of_stdout", lambda: None)  # never move this process's fd 1
    answer = hostlib.answer_of(probe.ACTIONS, ["probe"], "{}")
    assert answer == {"ok": False, "failed": True, "msg": "probe crashed: RuntimeError: boom",
                      "error": "probe crashed: RuntimeError: boom", "hint": ""}  # fmt: skip
