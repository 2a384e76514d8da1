"""Verify a PD deployment end to end FROM the router's host: a real ``/generate`` through the router.

Usage: ``python3 - verify`` with a JSON request on stdin (the host library's envelope, ``hostlib.serve``):
``url`` (the router, ``http://host:port``), ``prompt``, ``max_new_tokens``, ``timeout`` (s, for the whole
check), ``interval`` (s between attempts while the router answers 503 or is not listening yet), ``stream``
(also measure TTFT with a streaming request).

1. ``POST /generate {"text", "sampling_params": {"max_new_tokens", "temperature": 0}}`` until it answers 200
   (503 "no prefill/decode workers" and refused connections are retried until ``timeout``; any other status
   fails at once). The router sends the request to a prefill and a decode; the KV cache crosses between them
   over NIXL, so a 200 with tokens proves the whole path. ``latency`` is this request's time.
2. The same request with ``"stream": true``: ``ttft`` is the time to the first chunk carrying text or tokens,
   ``stream_latency`` the time to ``[DONE]``.

Answers ``{"ok", "status", "text", "output_ids", "completion_tokens", "latency", "ttft", "stream_latency",
"attempts", "waited", "error"}``; a generation that failed is a failure answer (``failed``, ``msg``: the
``error``; exit 1) with the same fields. Stdlib only (Python 3.6+).
"""

import sys
import time

import hostlib

RETRY_STATUSES = (502, 503, 504, None)


def stream(url, body, timeout):
    """(ttft, total, chunks, text, error) of a streaming request (``hostlib.sse_json``: read up to ``[DONE]``,
    bounded by ``timeout`` for the whole stream)."""
    started = time.monotonic()
    ttft, chunks, text = None, 0, ""

    def on_chunk(chunk):
        nonlocal ttft, chunks, text
        chunks += 1
        if ttft is None and (chunk.get("text") or chunk.get("output_ids")):
            ttft = time.monotonic() - started
        text = chunk.get("text", text)

    try:
        hostlib.sse_json(url, dict(body, stream=True), on_chunk, timeout=timeout)
    except hostlib.Failed as exc:
        return None, None, chunks, text, exc.msg
    return ttft, time.monotonic() - started, chunks, text, ""


def failed(out, error):
    """The failure answer with the fields gathered so far: ``error`` is its ``msg`` too."""
    out["error"] = error
    raise hostlib.Failed(error, **out)


def verify(req):
    url = req["url"].rstrip("/") + "/generate"
    body = {
        "text": req.get("prompt", "Hello world"),
        "sampling_params": {"max_new_tokens": int(req.get("max_new_tokens", 8)), "temperature": 0},
    }
    timeout = float(req.get("timeout", 120))
    interval = float(req.get("interval", 0.25))
    begun = time.monotonic()
    deadline = begun + timeout
    out = {"url": url, "attempts": 0}
    while True:
        out["attempts"] += 1
        started = time.monotonic()
        status, answer, error = hostlib.http_json("POST", url, body, timeout=max(1.0, deadline - started))
        if status == 200 and isinstance(answer, str):
            error = "not JSON: %r" % answer[:200]
        out.update(status=status, latency=round(time.monotonic() - started, 3), error=error)
        if status == 200 or status not in RETRY_STATUSES or time.monotonic() + interval >= deadline:
            break
        time.sleep(interval)
    out["waited"] = round(started - begun, 3)
    if status != 200 or not isinstance(answer, dict):
        failed(out, error or "no JSON answer")
    meta = answer.get("meta_info") or {}
    out.update(text=answer.get("text", ""), output_ids=answer.get("output_ids"),
               completion_tokens=meta.get("completion_tokens"), finish_reason=meta.get("finish_reason"))  # fmt: skip
    if not (out["text"] or "").strip():
        failed(out, "the completion is empty")
    if req.get("stream", True):
        ttft, total, chunks, _, serror = stream(url, body, max(5.0, deadline - time.monotonic() + 30))
        out.update(ttft=None if ttft is None else round(ttft, 3), stream_chunks=chunks,
                   stream_latency=None if total is None else round(total, 3), stream_error=serror or None)  # fmt: skip
    out["ok"] = True
    return out


ACTIONS = {"verify": verify}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
