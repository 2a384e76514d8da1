"""The host side of ``provision pd rollout``: router worker control, drain, a pinned PD generation, and the
previous launch files kept for a rollback.

Usage: ``python3 - ACTION`` with a JSON request on stdin: the host library's envelope (``hostlib.serve``: ONE
JSON line ``{"ok": bool, ...}``, ``msg`` when not ok; exit 0 when ok, 1 when not, a bad request included).
Stdlib only (Python 3.6+). Every network wait is bounded by the request's ``timeout``. Every file it writes
goes through ``hostlib.atomic_write`` (a new O_EXCL name, renamed over the target: never through a link).

Router actions talk to the SGLang router's worker API (sglang-router 0.3.x: ``GET /workers`` lists
``{"workers": [{"id", "url", "worker_type", "is_healthy", "load", ...}]}``; ``POST /workers`` with
``{"url", "worker_type", "bootstrap_port"}`` and ``DELETE /workers/{id}`` answer 202 and do the work in the
background, so each action polls ``GET /workers`` until it is done):

* ``router_list`` ``{"router"}`` → ``workers``.
* ``router_remove`` ``{"router", "urls", "timeout"}`` → removes each URL, waits until none is listed;
  ``removed`` (the URLs that were there), ``seconds``.
* ``router_add`` ``{"router", "workers": [{"url", "worker_type", "bootstrap_port"?}], "timeout", "wait"?}`` →
  adds those not listed, waits until each is listed and healthy (``wait: "added"``: each it added; ``pd up``
  reads its own servers' health itself); ``added``, ``seconds``. With ``healthy_only`` (an interrupted rollout
  putting its batch back) a server whose ``/health`` does not answer 200 within 5 s is not added: ``skipped``.
* ``router_metrics`` ``{"metrics_url"}`` → ``requests``: the router's count of ``/generate``-type requests
  served (its Prometheus counters), ``counters`` the raw values summed.

Server actions:

* ``drain`` ``{"url", "timeout", "interval", "settle"}`` → polls the server's ``/v1/loads`` until it has no
  running, waiting or (prefill) in-flight KV-sending request for ``settle`` seconds in a row; ``drained``,
  ``seconds``, ``last`` (the last load seen), ``max_seen``.
* ``pinned`` ``{"prefill", "decode", "bootstrap_host", "bootstrap_port", "prompt", "max_new_tokens",
  "timeout", "stream"?}`` → the same ``/generate`` sent to one prefill and one decode with the bootstrap fields
  that pair them (what the router does): the decode's answer must carry tokens; ``text``, ``output_ids``,
  ``completion_tokens``, ``latency``; with ``stream`` the decode's request streams and ``ttft`` is the time to
  its first chunk with tokens.
* ``pairs`` ``{"pairs": [{"prefill", "decode", "bootstrap_host", "bootstrap_port"}], "rounds", "parallel",
  "retries", "prompt", "max_new_tokens", "timeout", "stream"}`` → ``pinned`` for every pair, round after round
  (``rounds``: lists of pair indices), at most ``parallel`` at once (threads), then each failed pair again
  (``retries`` times, default 1); ``pairs``: each pair's answer in the order given (``ok`` false for a pair that
  failed; ``attempts`` and ``first_msg`` on a retried one), ``rounds``, ``seconds``.
* ``stack`` ``{"pidfile", "python"}`` → ``changed`` when the running server has mapped the site-packages of
  another venv than the one ``python`` (``VENV/bin/python``) resolves to now (``/proc/PID/maps`` shows real
  paths): an install switched the ``VENV -> VENV.envs/ID`` link under it. ``venv``, ``loaded``.
* ``files`` ``{"op": "backup"|"restore"|"discard", "paths", "python"?, "pidfile"?}`` → keeps ``PATH.rollout-prev``
  copies of the launch script and env file (mode kept), puts them back, or removes them; ``done``. With
  ``python``, the venv link too: ``backup`` records the env the running server loaded when the link now points
  elsewhere (``VENV.rollout-prev``), ``restore`` points the link back at it (atomically).
"""

import json
import os
import random
import socket
import sys
import threading
import time

import hostlib

PREV = ".rollout-prev"
REQUEST_COUNTERS = ("smg_router_requests_total", "sgl_router_requests_total", "smg_http_requests_total")


http = hostlib.http_json  # (status or None, parsed JSON or text or None, error)


def reply_text(status, err):
    """What came back, in words: "HTTP 503 <body>", or "no answer (<why>)" when no HTTP answer came (never
    "HTTP None")."""
    if status is None:
        return "no answer (%s)" % err if err else "no answer"
    return ("HTTP %s %s" % (status, err)).rstrip()


def norm(url):
    return url.rstrip("/")


def list_workers(router):
    status, doc, err = http("GET", norm(router) + "/workers")
    if status != 200 or not isinstance(doc, dict):
        raise RuntimeError("GET %s/workers: %s" % (norm(router), reply_text(status, err)))
    return doc.get("workers") or []


def router_list(req):
    return {"ok": True, "workers": list_workers(req["router"])}


def router_remove(req):
    router, urls, started = req["router"], [norm(u) for u in req["urls"]], time.monotonic()
    deadline = started + float(req.get("timeout", 60))
    removed = []
    for worker in list_workers(router):
        if norm(worker.get("url", "")) in urls:
            status, _, err = http("DELETE", "%s/workers/%s" % (norm(router), worker["id"]))
            if status not in (200, 202, 204, 404):
                return {
                    "ok": False,
                    "msg": "DELETE /workers/%s (%s): %s" % (worker["id"], worker["url"], reply_text(status, err)),
                }
            removed.append(norm(worker["url"]))
    while True:
        left = [w["url"] for w in list_workers(router) if norm(w.get("url", "")) in urls]
        if not left:
            return {"ok": True, "removed": removed, "seconds": round(time.monotonic() - started, 3)}
        if time.monotonic() > deadline:
            return {"ok": False, "msg": "the router still lists %s after %ss" % (", ".join(left), req.get("timeout"))}
        time.sleep(0.2)


def router_add(req):
    router, started = req["router"], time.monotonic()
    deadline = started + float(req.get("timeout", 120))
    listed = {norm(w.get("url", "")) for w in list_workers(router)}
    added, skipped = [], []
    for worker in req["workers"]:
        if norm(worker["url"]) in listed:
            continue
        if req.get("healthy_only") and http("GET", norm(worker["url"]) + "/health", timeout=5)[0] != 200:
            skipped.append(norm(worker["url"]))
            continue
        body = {"url": norm(worker["url"]), "worker_type": worker["worker_type"]}
        if worker.get("bootstrap_port") is not None:
            body["bootstrap_port"] = int(worker["bootstrap_port"])
        status, _, err = http("POST", norm(router) + "/workers", body)
        if status not in (200, 201, 202):
            return {"ok": False, "msg": "POST /workers %s: %s" % (body["url"], reply_text(status, err))}
        added.append(body["url"])
    want = set(added) if req.get("wait") == "added" else {norm(w["url"]) for w in req["workers"]}
    while True:
        healthy = {norm(w.get("url", "")) for w in list_workers(router) if w.get("is_healthy")} if want else set()
        if want <= healthy:
            return {"ok": True, "added": added, "skipped": skipped, "seconds": round(time.monotonic() - started, 3)}
        if time.monotonic() > deadline:
            missing = sorted(want - healthy)
            return {
                "ok": False,
                "msg": "the router does not list %s as healthy after %ss" % (", ".join(missing), req.get("timeout")),
            }
        time.sleep(0.2)


def router_metrics(req):
    status, text, err = http("GET", req["metrics_url"], timeout=5)
    if status != 200 or not isinstance(text, str):
        return {"ok": False, "msg": "GET %s: %s" % (req["metrics_url"], reply_text(status, err))}
    counters = {}  # type: dict
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in REQUEST_COUNTERS and ("generate" in line or "completions" in line):
            try:
                counters[name] = counters.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    requests = max(counters.values()) if counters else None
    return {"ok": True, "requests": requests, "counters": counters}


def load_of(url):
    """Requests on the server, every DP rank: running + waiting (the prefill's bootstrap queue and the decode's
    prealloc and transfer queues are counted there) + the prefill's in-flight KV sends (None: no answer)."""
    status, doc, _ = http("GET", norm(url) + "/v1/loads?include=core,disagg", timeout=5)
    if status != 200 or not isinstance(doc, dict):
        return None
    total = 0
    for d in doc.get("loads", []):
        disagg = d.get("disaggregation") or {}
        total += int(d.get("num_running_reqs", 0)) + int(d.get("num_waiting_reqs", 0))
        total += int(disagg.get("prefill_inflight_queue_reqs", 0))
    return total


def drain(req):
    started = time.monotonic()
    deadline = started + float(req.get("timeout", 60))
    interval, settle = float(req.get("interval", 0.25)), float(req.get("settle", 1.0))
    idle_since, last, max_seen = None, None, 0
    while True:
        last = load_of(req["url"])
        now = time.monotonic()
        if last is not None:
            max_seen = max(max_seen, last)
        if last == 0:
            idle_since = now if idle_since is None else idle_since
            if now - idle_since >= settle:
                return {
                    "ok": True,
                    "drained": True,
                    "seconds": round(now - started, 3),
                    "last": last,
                    "max_seen": max_seen,
                }
        else:
            idle_since = None
        if now > deadline:
            return {
                "ok": True,
                "drained": False,
                "seconds": round(now - started, 3),
                "last": last,
                "max_seen": max_seen,
            }
        time.sleep(interval)


def http_stream(url, body, timeout):
    """A streaming ``/generate``: (status or None, the whole answer, error, seconds to the first chunk with
    tokens). SGLang's chunks carry the output so far (or, with ``--incremental-streaming-output``, the new part:
    told apart by ``meta_info.completion_tokens``). Read by ``hostlib.sse_json``: up to ``[DONE]``, bounded by
    ``timeout`` for the whole stream."""
    started, ttft, text, last = time.monotonic(), None, "", None
    ids = []  # type: list

    def on_chunk(chunk):
        nonlocal ttft, text, last, ids
        got = list(chunk.get("output_ids") or [])
        if not got:
            return
        ttft = time.monotonic() - started if ttft is None else ttft
        whole = len(got) == (chunk.get("meta_info") or {}).get("completion_tokens")
        ids, text = (got, chunk.get("text") or text) if whole else (ids + got, text + (chunk.get("text") or ""))
        last = chunk

    try:
        status = hostlib.sse_json(url, body, on_chunk, timeout=timeout)
    except hostlib.Failed as exc:
        if exc.data.get("status") == 200:  # cut short once it began (past the deadline, the limit): no answer
            return None, None, exc.msg, ttft
        return exc.data.get("status"), None, exc.data.get("reason", exc.msg), ttft
    if last is None:
        return status, None, "the stream carried no tokens", ttft
    return status, dict(last, output_ids=ids, text=text), "", ttft


def pinned(req):
    """One PD request pinned to a prefill and a decode (both are sent the same body, as the router does)."""
    timeout = float(req.get("timeout", 60))
    body = {
        "text": req.get("prompt", "Hello world"),
        "sampling_params": {"max_new_tokens": int(req.get("max_new_tokens", 8)), "temperature": 0},
        "bootstrap_host": req["bootstrap_host"],
        "bootstrap_port": int(req["bootstrap_port"]),
        "bootstrap_room": random.randint(0, 2**63 - 1),
    }
    answers = {}

    def send(role, url):
        if role == "decode" and req.get("stream"):
            answers[role] = http_stream(norm(url) + "/generate", dict(body, stream=True), timeout)
        else:
            answers[role] = http("POST", norm(url) + "/generate", body, timeout=timeout) + (None,)

    started = time.monotonic()
    threads = [threading.Thread(target=send, args=(r, req[r]), daemon=True) for r in ("prefill", "decode")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    latency = round(time.monotonic() - started, 3)
    status, doc, err, ttft = answers.get("decode", (None, None, "no answer within %ss" % timeout, None))
    p_status, _, p_err, _ = answers.get("prefill", (None, None, "no answer within %ss" % timeout, None))
    if status != 200 or not isinstance(doc, dict):
        return {
            "ok": False,
            "msg": "decode %s: %s (prefill %s: %s)"
            % (req["decode"], reply_text(status, err), req["prefill"], reply_text(p_status, p_err)),
            "latency": latency,
        }
    meta = doc.get("meta_info") or {}
    tokens = meta.get("completion_tokens") or len(doc.get("output_ids") or [])
    if not tokens:
        return {"ok": False, "msg": ("decode %s answered without tokens: %r" % (req["decode"], doc))[:500]}
    return {
        "ok": True,
        "text": doc.get("text", ""),
        "output_ids": doc.get("output_ids"),
        "completion_tokens": tokens,
        "latency": latency,
        "ttft": None if ttft is None else round(ttft, 3),
        "prefill_status": p_status,
    }


def pairs(req):
    """``pinned`` for every pair of the request, round after round (``rounds``: lists of indices, the
    controller's schedule in which no two pairs of a round share a server; one round of all when absent), at
    most ``parallel`` at once within a round; then each failed pair once more per ``retries`` (default 1), in
    the same rounds. Each answer in the order given; a retried one carries ``attempts`` and ``first_msg``."""
    todo = list(req["pairs"])
    common = {k: req[k] for k in ("prompt", "max_new_tokens", "timeout", "stream") if k in req}
    parallel = max(1, int(req.get("parallel", 8)))
    schedule = [[i for i in r if isinstance(i, int) and 0 <= i < len(todo)] for r in req.get("rounds") or []]
    left = sorted(set(range(len(todo))) - {i for r in schedule for i in r})
    schedule = [r for r in schedule if r] + ([left] if left else [])
    out = [None] * len(todo)  # type: list

    def one(i):
        try:
            answer = pinned(dict(common, **todo[i]))
        except (KeyError, TypeError, ValueError, RuntimeError, OSError) as exc:  # that pair's failure
            answer = {"ok": False, "msg": "bad pair %r: %s" % (todo[i], exc)}
        out[i] = dict(answer, prefill=todo[i].get("prefill"), decode=todo[i].get("decode"))

    def send(indices):
        for r in schedule:
            mine = [i for i in r if i in indices]
            for start in range(0, len(mine), parallel):
                threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in mine[start : start + parallel]]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()

    started = time.monotonic()
    send(set(range(len(todo))))
    for attempt in range(2, 2 + max(0, int(req.get("retries", 1)))):
        failed = {i: out[i] for i in range(len(todo)) if not (out[i] or {}).get("ok")}
        if not failed:
            break
        send(set(failed))
        for i, first in failed.items():
            out[i] = dict(out[i], attempts=attempt, first_msg=first.get("first_msg") or first.get("msg"))
    most = max([len(r) for r in schedule] or [0])
    return {
        "ok": True,
        "pairs": out,
        "parallel": min(parallel, most),
        "rounds": len(schedule),
        "seconds": round(time.monotonic() - started, 3),
    }


def venv_of(python):
    """The venv a ``VENV/bin/python`` belongs to (as written, ``~`` expanded)."""
    return os.path.dirname(os.path.dirname(os.path.expanduser(python)))


def loaded_venvs(pidfile):
    """The venv directories whose site-packages the process of ``pidfile`` has mapped (real paths: the kernel
    resolves symlinks), or None when it is not running."""
    try:
        with open(os.path.expanduser(pidfile)) as f:
            pid = int(json.load(f)["pid"])
        with open("/proc/%d/maps" % pid) as f:
            lines = f.read().splitlines()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    found = set()
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) == 6 and "/site-packages/" in parts[5]:
            found.add(parts[5].split("/lib/python", 1)[0])
    return sorted(found)


def stack(req):
    """Does the server run the venv ``python`` points at now? (``changed``: it runs another one, e.g. the
    previous env of ``<venv>.envs`` after an install switched the link.)"""
    real = os.path.realpath(venv_of(req["python"]))
    loaded = loaded_venvs(req["pidfile"])
    changed = bool(loaded) and real not in loaded
    return {"ok": True, "venv": real, "loaded": loaded, "changed": changed}


def keep_venv(req, op):
    """The venv link's previous target, kept beside it: recorded (the env the running server loaded, when the
    link now points elsewhere), put back (the link re-pointed atomically), or removed."""
    if not req.get("python"):
        return None
    venv = venv_of(req["python"])
    prev = venv.rstrip("/") + PREV
    if op == "backup" and os.path.islink(venv):
        loaded = loaded_venvs(req.get("pidfile") or "") or []
        real = os.path.realpath(venv)
        old = [d for d in loaded if d != real]
        if old:
            hostlib.atomic_write(prev, old[0].encode("utf-8"), 0o600)
            return venv
    elif op == "restore" and os.path.exists(prev):
        with open(prev) as f:
            target = f.read().strip()
        if os.path.isdir(target):
            hostlib.swap_link(venv.rstrip("/"), target)
            return venv
    elif op == "discard" and os.path.exists(prev):
        os.unlink(prev)
        return venv
    return None


def files(req):
    op, done = req["op"], []
    venv = keep_venv(req, op)
    if venv:
        done.append(venv)
    for path in (os.path.expanduser(p) for p in req["paths"]):
        prev = path + PREV
        if op == "backup" and os.path.exists(path):
            hostlib.copy_over(path, prev)
            done.append(path)
        elif op == "restore" and os.path.exists(prev):
            hostlib.copy_over(prev, path)
            done.append(path)
        elif op == "discard" and os.path.exists(prev):
            os.unlink(prev)
            done.append(path)
    return {"ok": True, "done": done}


def _address(hexed):
    """A /proc/net/tcp{,6} local address as text ("" for a wildcard one)."""
    raw = bytes.fromhex(hexed)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # each 32-bit word is host-order
    if not any(words):
        return ""
    if len(words) == 16 and words[:12] == b"\0" * 10 + b"\xff\xff":
        words = words[12:]  # ::ffff:a.b.c.d: an IPv4 listener on a dual-stack socket
    return socket.inet_ntop(socket.AF_INET if len(words) == 4 else socket.AF_INET6, words)


def listeners():
    """{port: [(address, socket inode), ...]} of every listening TCP socket here (address "" = every one)."""
    out = {}  # type: dict[int, list[tuple[str, str]]]
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A":  # LISTEN
                addr, _, port = cols[1].partition(":")
                out.setdefault(int(port, 16), []).append((_address(addr), cols[9]))
    return out


def _bind_of(bind):
    """The planned bind address as a listener's text ("" for a wildcard; a name resolved here, else "")."""
    if bind in (None, "", "0.0.0.0", "::"):
        return ""
    try:
        return socket.inet_ntop(socket.AF_INET, socket.inet_aton(bind))
    except OSError:
        pass
    try:
        return socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, bind.strip("[]")))
    except OSError:
        pass
    try:
        return socket.gethostbyname(bind)
    except OSError:
        return ""


def _clashing(entry, listening):
    """The inodes of the listeners that take ``entry``'s port on its bind address."""
    bind = _bind_of(entry.get("bind"))
    return [inode for addr, inode in listening.get(int(entry["port"]), ()) if not addr or not bind or addr == bind]


def holders(inodes):
    """{inode: pid} for the sockets ``inodes``, as far as this user may look into /proc/PID/fd."""
    wanted, found = {"socket:[%s]" % i: i for i in inodes}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % name)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink("/proc/%s/fd/%s" % (name, fd))
            except OSError:
                continue
            if target in wanted:
                found[wanted[target]] = int(name)
    return found


def session_of(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[3])
    except (OSError, ValueError, IndexError):
        return None


def own_session(pidfile):
    try:
        with open(os.path.expanduser(pidfile)) as fh:
            return json.load(fh).get("sid")
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def in_unit(pid, unit):
    """Is ``pid`` in systemd's cgroup of ``unit`` (``NAME.service``: the last component of its path in one of
    the process's cgroup hierarchies: v2, v1's name=systemd, a hybrid's), where systemd puts a unit's
    processes?"""
    try:
        with open("/proc/%d/cgroup" % pid) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    return any(line.split(":", 2)[2].rstrip("/").rpartition("/")[2] == unit for line in lines if line.count(":") >= 2)


def owned(pid, entry):
    """Is the listener ``pid`` the planned process itself: its session (the ``sid`` of its record,
    ``pidfile``), or, under systemd, its unit's cgroup (``unit``: a unit's process keeps no provision record)?"""
    own = own_session(entry.get("pidfile"))
    if own is not None and session_of(pid) == own:
        return True
    return bool(entry.get("unit")) and in_unit(pid, entry["unit"])


def ports(req):
    """``{"ports": [{"port", "what", "name", "pidfile"?, "unit"?}]}`` → not ok, naming each planned port another
    process listens on with its pid and command (``held``; no pid where /proc does not say: another user's). A
    port held by the process itself (:func:`owned`: already running, under provision's record or as its systemd
    unit) is its own."""
    listening = listeners()
    planned = [(p, _clashing(p, listening)) for p in req["ports"]]
    planned = [(p, inodes) for p, inodes in planned if inodes]
    pids = holders([i for _, inodes in planned for i in inodes])
    held = []
    for p, inodes in planned:
        pid = next((pids[i] for i in inodes if i in pids), None)
        if pid is not None and owned(pid, p):
            continue
        command = None
        if pid is not None:
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as fh:
                    command = " ".join(fh.read().replace(b"\0", b" ").decode("utf-8", "replace").split())[:200]
            except OSError:
                pass
        held.append(dict(p, pid=pid, command=command))
    msg = "; ".join("port %s (%s of %s) is held by %s" % (h["port"], h["what"], h["name"], "pid %s: %s" % (
        h["pid"], h["command"]) if h["pid"] else "another user's process") for h in held)  # fmt: skip
    return {"ok": not held, "held": held, "msg": msg + " (stop it, or give this process other ports)" if held else ""}


def adopt(req):
    """The running process takes its rewritten script as its own (``pd scale``: the router's live worker set
    is already what its new script lists): its record's digest becomes the script's, so a later ``pd up``
    does not restart it for that change. Only a running process under provision's record (pidfile JSON)."""
    path = os.path.expanduser(req["pidfile"])
    try:
        with open(path) as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        return {"ok": True, "done": False, "why": "no record"}
    script = os.path.expanduser(req["script"])
    current = hostlib.digest(script) if os.path.exists(script) else None
    if not isinstance(record, dict) or current is None or record.get("sha256") in (None, current):
        return {"ok": True, "done": False}
    record["sha256"] = current
    hostlib.atomic_write(path, json.dumps(record).encode(), mode=0o600)
    return {"ok": True, "done": True}


ACTIONS = {
    "adopt": adopt,
    "ports": ports,
    "router_list": router_list,
    "router_remove": router_remove,
    "router_add": router_add,
    "router_metrics": router_metrics,
    "drain": drain,
    "pinned": pinned,
    "pairs": pairs,
    "files": files,
    "stack": stack,
}


if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
