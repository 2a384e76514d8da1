"""Make one HTTP(S) request from the host (urllib; stdlib only, Python 3.6+).

``python3 - request`` with the request on stdin (the host library's envelope, ``hostlib.serve``: headers and
bodies never show on the process list): ``url``, ``method``, ``body`` (text, sent as UTF-8), ``headers``,
``timeout``, ``validate_certs``, ``follow_redirects`` (``none`` or anything else for urllib's default),
``max_content`` (bytes kept). Answers ``{"ok": true, "status", "url", "reason", "headers", "content",
"truncated", "elapsed", "error"}`` whenever it could report; ``status`` is -1 when no HTTP answer came
(``error`` says why).
"""

import ssl
import sys
import time
import urllib.error
import urllib.request

import hostlib


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError with the 3xx status


def _text(raw, headers):
    try:
        return raw.decode(headers.get_content_charset() or "utf-8", "replace")
    except (AttributeError, LookupError):
        return raw.decode("utf-8", "replace")


def request(req):
    if not req.get("url"):
        raise ValueError("no url")
    body = req.get("body")
    data = body.encode("utf-8") if isinstance(body, str) else None
    handlers: list = []
    if not req.get("validate_certs", True):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        handlers.append(urllib.request.HTTPSHandler(context=ctx))
    if req.get("follow_redirects") == "none":
        handlers.append(_NoRedirect())
    opener = urllib.request.build_opener(*handlers)
    http_req = urllib.request.Request(
        req["url"], data=data, headers=req.get("headers") or {}, method=req.get("method") or "GET"
    )
    out = {"url": req["url"], "status": -1, "reason": "", "headers": {}, "content": "", "error": None}
    limit = int(req.get("max_content", 8 << 20))
    started = time.monotonic()
    try:
        resp = opener.open(http_req, timeout=float(req.get("timeout", 30)))
    except urllib.error.HTTPError as exc:
        resp = exc  # an HTTP answer with an error status: still a response to report
    except (urllib.error.URLError, OSError, ValueError) as exc:
        out["error"] = f"Request failed: {exc}"
        out["elapsed"] = round(time.monotonic() - started, 3)
        return out
    try:
        raw = resp.read(limit + 1)
    except OSError as exc:
        raw = b""
        out["error"] = f"reading the response failed: {exc}"
    finally:
        resp.close()
    out.update(
        status=resp.getcode(),
        url=resp.geturl(),
        reason=getattr(resp, "reason", "") or "",
        headers={k.lower(): v for k, v in resp.headers.items()},
        content=_text(raw[:limit], resp.headers),
        truncated=len(raw) > limit,
        elapsed=round(time.monotonic() - started, 3),
    )
    return out


ACTIONS = {"request": request}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
