"""Wait on the host for a port or a file, polling here so that the whole wait is ONE round trip.

Usage: ``python3 - wait`` with a JSON request on stdin (the host library's envelope, ``hostlib.serve``):
``host``, ``port``, ``path``, ``state`` (started, present, stopped, absent), ``timeout``, ``delay``, ``sleep``,
``connect_timeout``, ``search_regex``. A ``timeout`` of 0 probes once. Answers ``{"ok": bool, "elapsed":
seconds, "probes": n, "groups": [...], "groupdict": {...}}``: ``ok`` false (``msg`` "timed out", exit 1) when
the wait ended before the state was reached; a bad request is ``{"ok": false, "msg": "bad request: ..."}``.
Stdlib only, Python 3.6+.
"""

import os
import re
import socket
import sys
import time

import hostlib


def read_until(sock, regex, deadline):
    """Read from a connected socket until ``regex`` matches what was received; the match or None."""
    data = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, min(1.0, deadline - time.monotonic())))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:  # noqa: UP041 - not yet TimeoutError before Python 3.10
            continue
        except OSError:
            return None
        if not chunk:
            break
        data += chunk
        found = regex.search(data.decode("utf-8", "replace"))
        if found:
            return found
    return regex.search(data.decode("utf-8", "replace"))


def probe_port(req, regex, deadline):
    """(condition holds for ``started``, match)."""
    try:
        sock = socket.create_connection((req["host"], int(req["port"])), timeout=req["connect_timeout"])
    except OSError:
        return False, None
    with sock:
        if regex is None:
            return True, None
        found = read_until(sock, regex, max(deadline, time.monotonic() + req["connect_timeout"]))
        return found is not None, found


def probe_path(req, regex):
    path = os.path.expanduser(req["path"])
    if not os.path.exists(path):
        return False, None
    if regex is None:
        return True, None
    try:
        with open(path, "rb") as fh:
            found = regex.search(fh.read().decode("utf-8", "replace"))
    except OSError:
        return False, None
    return found is not None, found


def wait(req):
    try:
        regex = re.compile(req["search_regex"], re.MULTILINE) if req.get("search_regex") else None
    except re.error as exc:
        raise ValueError("search_regex: %s" % exc) from None
    want_up = req.get("state", "started") in ("started", "present")
    regex = regex if want_up else None  # stopped/absent: only existence matters
    started = time.monotonic()
    deadline = started + float(req.get("timeout", 300))
    if req.get("delay"):
        time.sleep(float(req["delay"]))
    probes = 0
    while True:
        probes += 1
        if req.get("port") is not None:
            up, found = probe_port(req, regex, deadline)
        elif req.get("path"):
            up, found = probe_path(req, regex)
        else:  # nothing to wait for: a plain sleep of `timeout` seconds
            time.sleep(max(0.0, deadline - time.monotonic()))
            up, found = want_up, None
        now = time.monotonic()
        if up == want_up or now >= deadline:
            break
        time.sleep(max(0.0, min(float(req.get("sleep", 1)), deadline - now)))
    result = {"ok": up == want_up, "elapsed": round(time.monotonic() - started, 3), "probes": probes}
    if not result["ok"]:
        result["msg"] = "timed out"
    if found is not None:
        result.update(groups=list(found.groups()), groupdict=found.groupdict(), match=found.group(0))
    return result


ACTIONS = {"wait": wait}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
