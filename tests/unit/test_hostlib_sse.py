"""hostlib.sse_json, the host library's one reader of server-sent JSON events (a streaming ``/generate``), against a
real HTTP server in a thread: the objects in order, ``[DONE]`` ends the reading (whatever the server does after),
what is not a JSON object is skipped, and the stream is bounded: past ``limit`` bytes or past the deadline (a
stalled server, or one that never stops talking) it fails with a clear msg, as does an HTTP error."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from provision import remote

sys.path.insert(0, str(remote.REMOTE_DIR))
import hostlib

Script = Callable[["SSE"], None]  # what the server does with one request


class SSE(BaseHTTPRequestHandler):
    script: Script
    bodies: list[Any]
    release: threading.Event
    chunked = False

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        type(self).bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        type(self).script(self)

    def start(self, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/event-stream")
        if self.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send(self, raw: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw) if self.chunked else raw)
        self.wfile.flush()

    def end(self) -> None:
        if self.chunked:
            self.wfile.write(b"0\r\n\r\n")

    def stall(self) -> None:
        type(self).release.wait(30)


class Quiet(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a handler writing to a reader that stopped (over the limit, past the deadline, [DONE]): expected


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """``serve(script, chunked=False)`` → the URL of a server that runs ``script`` for each POST."""
    made: list[tuple[Quiet, threading.Event]] = []

    def start(script: Script, chunked: bool = False) -> str:
        release = threading.Event()
        attrs = {"script": staticmethod(script), "bodies": [], "release": release, "chunked": chunked}
        handler = type("Server", (SSE,), attrs)
        if chunked:
            handler.protocol_version = "HTTP/1.1"
        server = Quiet(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made.append((server, release))
        return f"http://127.0.0.1:{server.server_address[1]}/generate"

    yield start
    for server, release in made:
        release.set()
        server.shutdown()
        server.server_close()


def data(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


@pytest.mark.parametrize("chunked", [False, True], ids=["until-close", "chunked"])
def test_the_objects_come_in_order(serve: Callable[..., str], chunked: bool) -> None:
    def script(h: SSE) -> None:
        h.start()
        h.send(b": a comment\n\nevent: token\n")
        for n in range(1, 4):
            h.send(data({"text": "t" * n, "output_ids": list(range(n))}))
        h.send(b"data: [DONE]\n\n")
        h.end()

    url = serve(script, chunked)
    got: list[dict[str, Any]] = []
    assert hostlib.sse_json(url, {"text": "hi", "stream": True}, got.append, timeout=10) == 200
    assert got == [{"text": "t" * n, "output_ids": list(range(n))} for n in range(1, 4)]


def test_done_ends_the_reading_whatever_follows(serve: Callable[..., str]) -> None:
    def script(h: SSE) -> None:
        h.start()
        h.send(data({"n": 1}) + b"data: [DONE]\n\n" + data({"n": 2}))
        h.stall()  # the connection stays open: a reader that waits for its end waits 30 s

    got: list[dict[str, Any]] = []
    started = time.monotonic()
    assert hostlib.sse_json(serve(script), {}, got.append, timeout=20) == 200
    assert got == [{"n": 1}] and time.monotonic() - started < 5


def test_what_is_not_a_json_object_is_skipped(serve: Callable[..., str]) -> None:
    def script(h: SSE) -> None:
        h.start()
        h.send(b'data: [1, 2]\n\ndata: "text"\n\ndata: 7\n\ndata: null\n\ndata: {not json\n\ndata:\n\n')
        h.send(b'data:{"n": 1}\n\n' + data({"n": 2}))  # no space after the colon is a data line too
        h.end()  # no [DONE]: the end of the stream ends it

    got: list[dict[str, Any]] = []
    assert hostlib.sse_json(serve(script), {}, got.append, timeout=10) == 200
    assert got == [{"n": 1}, {"n": 2}]


def test_the_request_is_the_json_body_posted(serve: Callable[..., str]) -> None:
    seen: list[Any] = []

    def script(h: SSE) -> None:
        seen.extend(type(h).bodies)
        h.start()
        h.send(b"data: [DONE]\n\n")

    hostlib.sse_json(serve(script), {"text": "hi", "sampling_params": {"max_new_tokens": 2}}, print, timeout=10)
    assert seen == [{"text": "hi", "sampling_params": {"max_new_tokens": 2}}]


def test_a_stream_past_the_limit_fails(serve: Callable[..., str]) -> None:
    def script(h: SSE) -> None:
        h.start()
        for n in range(100):
            h.send(data({"n": n, "pad": "x" * 40}))
        h.stall()

    got: list[dict[str, Any]] = []
    with pytest.raises(hostlib.Failed) as failed:
        hostlib.sse_json(serve(script), {}, got.append, timeout=10, limit=1000)
    assert failed.value.msg.endswith("passed 1000 bytes") and failed.value.data["status"] == 200
    assert 0 < len(got) < 20  # what came before the limit was read, nothing after


def test_one_line_past_the_limit_is_never_read_whole(serve: Callable[..., str]) -> None:
    def script(h: SSE) -> None:
        h.start()
        h.send(b"data: " + b"x" * 100_000)  # no newline: a reader of whole lines would hold it all
        h.stall()

    with pytest.raises(hostlib.Failed, match="passed 4096 bytes"):
        hostlib.sse_json(serve(script), {}, lambda c: None, timeout=10, limit=4096)


def test_a_stalled_stream_fails_at_the_deadline(serve: Callable[..., str]) -> None:
    def script(h: SSE) -> None:
        h.start()
        h.send(data({"n": 1}))
        h.stall()

    got: list[dict[str, Any]] = []
    started = time.monotonic()
    with pytest.raises(hostlib.Failed) as failed:
        hostlib.sse_json(serve(script), {}, got.append, timeout=0.5)
    assert 0.5 <= time.monotonic() - started < 3 and got == [{"n": 1}]
    assert failed.value.msg.startswith("no end of the stream from http://127.0.0.1:")
    assert failed.value.msg.endswith("within 0.5s")
    assert failed.value.data["status"] == 200


def test_a_stream_that_never_ends_fails_at_the_deadline_of_the_whole(serve: Callable[..., str]) -> None:
    """Every read comes quicker than the timeout: the deadline is the whole stream's, not each read's."""

    def script(h: SSE) -> None:
        h.start()
        while not h.release.wait(0.05):
            h.send(data({"tick": True}))

    started = time.monotonic()
    with pytest.raises(hostlib.Failed, match=r"within 0\.6s"):
        hostlib.sse_json(serve(script), {}, lambda c: None, timeout=0.6)
    assert 0.6 <= time.monotonic() - started < 3


def test_a_server_that_never_answers_fails_at_the_deadline(serve: Callable[..., str]) -> None:
    started = time.monotonic()
    with pytest.raises(hostlib.Failed, match=r"within 0\.5s") as failed:
        hostlib.sse_json(serve(SSE.stall), {}, lambda c: None, timeout=0.5)
    assert time.monotonic() - started < 3 and failed.value.data["status"] is None


def test_an_http_error_fails_with_its_status_and_body(serve: Callable[..., str]) -> None:
    def script(h: SSE) -> None:
        h.send_response(503)
        h.send_header("Content-Length", "9")
        h.end_headers()
        h.wfile.write(b"not ready")

    with pytest.raises(hostlib.Failed) as failed:
        hostlib.sse_json(serve(script), {}, lambda c: None, timeout=10)
    assert failed.value.msg == "HTTP 503: not ready"
    assert failed.value.data == {"status": 503, "reason": "not ready"}
    assert failed.value.answer()["failed"] is True


def test_no_answer_fails_in_the_networks_words() -> None:
    with pytest.raises(hostlib.Failed, match="Connection refused") as failed:
        hostlib.sse_json("http://127.0.0.1:9/generate", {}, lambda c: None, timeout=5)
    assert failed.value.data["status"] is None and failed.value.data["reason"] == failed.value.msg


def test_what_the_callback_raises_is_raised_as_it_is(serve: Callable[..., str]) -> None:
    def script(h: SSE) -> None:
        h.start()
        h.send(data({"n": 1}) + b"data: [DONE]\n\n")

    def bad(chunk: dict[str, Any]) -> None:
        raise ValueError("the caller's own error")

    with pytest.raises(ValueError, match="the caller's own error"):
        hostlib.sse_json(serve(script), {}, bad, timeout=10)


def test_pd_verify_streams_through_it_and_stops_at_done(serve: Callable[..., str]) -> None:
    """pd_verify.py's TTFT stream is read by sse_json: its object chunks counted (a list chunk is skipped: before,
    it was a failure, ``'list' object has no attribute 'get'``), ended by [DONE] with the connection still open."""

    def script(h: SSE) -> None:
        if not type(h).bodies[-1].get("stream"):
            raw = json.dumps({"text": " ok", "output_ids": [1, 2], "meta_info": {"completion_tokens": 2}}).encode()
            h.send_response(200)
            h.send_header("Content-Length", str(len(raw)))
            h.end_headers()
            h.wfile.write(raw)
            return
        h.start()
        h.send(data({"text": " o", "output_ids": [1]}) + b"data: [1]\n\n" + data({"text": " ok", "output_ids": [2]}))
        h.send(b"data: [DONE]\n\n")
        h.stall()

    url = serve(script).removesuffix("/generate")
    proc = subprocess.run([sys.executable, str(remote.path("pd_verify.py")), "verify"], capture_output=True, text=True,
                          input=json.dumps({"url": url, "timeout": 20, "stream": True}), timeout=60)  # fmt: skip
    answer = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode == 0 and answer["ok"] is True, answer
    assert answer["stream_chunks"] == 2 and answer["stream_error"] is None and answer["text"] == " ok"
    assert 0 <= answer["ttft"] <= answer["stream_latency"] < 5, answer


def test_pd_rollout_streams_through_it_and_stops_at_done(serve: Callable[..., str]) -> None:
    """pd_rollout.py's pinned stream (http_stream) ends at [DONE] (before: it read on until the server closed the
    connection, here a failure after ``timeout``); its answer is the same: the ids and text put together."""
    spec = importlib.util.spec_from_file_location("pd_rollout_under_test", remote.path("pd_rollout.py"))
    assert spec and spec.loader
    rollout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rollout)

    def script(h: SSE) -> None:
        h.start()
        for n in (1, 2, 3):  # incremental output: each chunk the new token
            h.send(data({"text": "t", "output_ids": [n], "meta_info": {"completion_tokens": n}}))
        h.send(b"data: [DONE]\n\n")
        h.stall()

    started = time.monotonic()
    status, doc, err, ttft = rollout.http_stream(serve(script), {"stream": True}, 20)
    assert (status, err) == (200, "") and doc["output_ids"] == [1, 2, 3] and doc["text"] == "ttt"
    assert 0 <= ttft <= time.monotonic() - started < 5

    def stalled(h: SSE) -> None:
        h.start()
        h.send(data({"text": "t", "output_ids": [1], "meta_info": {"completion_tokens": 1}}))
        h.stall()

    status, doc, err, ttft = rollout.http_stream(serve(stalled), {"stream": True}, 0.5)
    assert (status, doc) == (None, None) and err.startswith("no end of the stream from"), err  # cut short: no answer
    assert ttft is not None
    status, doc, err, _ = rollout.http_stream(serve(script), {"stream": True}, 0)
    assert (status, doc) == (None, None) and err.endswith("within 0s"), err

    def refused(h: SSE) -> None:
        h.send_response(503)
        h.send_header("Content-Length", "0")
        h.end_headers()

    assert rollout.http_stream(serve(refused), {"stream": True}, 5) == (503, None, "", None)  # "HTTP 503", as before
