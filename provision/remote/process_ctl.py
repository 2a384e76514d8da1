"""Supervise long-running processes on the host without systemd: status, start, stop, wait, tail.

Usage: ``python3 - ACTION`` with a JSON request on stdin; prints ONE JSON line; exit 0 when it could answer,
2 on a bad request. Stdlib only (Python 3.6+). Each action is one round trip.

A process ``NAME`` is a launch script started detached in its own session (``setsid``): stdin from /dev/null,
stdout+stderr appended to its log. Its record ``PIDDIR/NAME.json`` (``PIDDIR/NAME.pid`` holds the bare pid)
keeps: pid, the kernel's start time of that pid (``/proc/PID/stat`` field 22), the session id, the script's
path and sha256 at start, the log, the wall-clock start, and an optional ``run_id`` (which run started it).

Alive means: ``/proc/PID`` exists, is not a zombie, leads its own session and has the recorded start time
(clock ticks since boot): a reused pid is never mistaken for ours. (The command line is not compared: the
script ``exec``s the server, which replaces it; it is recorded for people.)

Actions (request keys):

* ``status`` ``{"procs": [{"name", "piddir", "script"?, "health"?: URL, "health_timeout"?}]}`` → per process
  ``running``, ``pid``, ``uptime``, ``script_sha256`` (now) vs ``started_sha256``, ``health`` (HTTP status of
  the URL or ``null``), ``orphans`` (live members of the dead leader's session).
* ``start`` ``{"name", "piddir", "script", "log", "env": {}, "run_id", "restart_changed": bool,
  "force_restart": bool, "check": bool}`` → ``action``: ``none`` (already running the same script),
  ``started``, ``restarted``; with ``check`` nothing is done, ``action`` says what would be.
* ``stop`` ``{"name", "piddir", "timeout", "run_id"?, "check"}`` → ``action``: ``stopped`` or ``none``; with
  ``run_id`` only a process started by that run is stopped. TERM to the whole session, wait, then KILL.
* ``wait`` ``{"procs": [{"name", "piddir", "url", "log"?}], "timeout", "interval", "log_lines"}`` → polls
  each URL until HTTP 200 (every ``interval`` s); fails at once when a process dies (``why: exited``), else
  on ``timeout``; a failure names the process and carries its log tail.
* ``tail`` ``{"procs": [{"name", "piddir", "log"?}], "lines"}`` → the last lines of each log.
"""

import contextlib
import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# ------------------------------------------------------------------------------------------------ /proc
def proc_stat(pid):
    """(state, ppid, pgrp, session, starttime) of a live pid, or None."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            text = fh.read()
    except (OSError, ValueError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def boot_time():
    with open("/proc/stat") as fh:
        for line in fh:
            if line.startswith("btime "):
                return int(line.split()[1])
    return 0


def session_members(sid, not_before):
    """Live pids of session ``sid`` started at or after ``not_before`` (clock ticks since boot)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = proc_stat(int(name))
        if st and st[3] == sid and st[4] >= not_before and st[0] not in ("Z", "X"):
            out.append(int(name))
    return out


def sha256(path):
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------- records
def paths(req):
    piddir = os.path.expanduser(req["piddir"])
    return os.path.join(piddir, req["name"] + ".json"), os.path.join(piddir, req["name"] + ".pid")


def load(req):
    try:
        with open(paths(req)[0]) as fh:
            record = json.load(fh)
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


def write_atomic(path, text, mode=0o600):
    """A new temp file (O_EXCL: never an existing file or link), private from creation, renamed over ``path``;
    removed on any failure or interrupt."""
    tmp = "%s.tmp-%d-%s" % (path, os.getpid(), os.urandom(4).hex())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def forget(req):
    for path in paths(req):
        with contextlib.suppress(OSError):
            os.unlink(path)


def alive(record):
    """Is the recorded leader still the same, live process (same pid, start time and session)?"""
    pid = record.get("pid")
    st = proc_stat(pid) if isinstance(pid, int) else None
    return st is not None and st[0] not in ("Z", "X") and st[4] == record.get("starttime") and st[3] == pid


def members(record):
    """Live processes of the recorded session: the leader and whatever it started (they may outlive it and
    hold ports and memory). The kernel keeps a session id allocated while any member lives, so when a
    process with the leader's pid exists but started at another time, the session is someone else's."""
    sid, start = record.get("sid"), record.get("starttime")
    if not isinstance(sid, int) or not isinstance(start, int):
        return []
    leader = proc_stat(sid)
    if leader is not None and leader[4] != start:
        return []
    return session_members(sid, start)


def describe(req, record):
    if record is None:
        return {"name": req["name"], "running": False, "pid": None, "recorded": False, "orphans": []}
    running = alive(record)
    uptime = None
    if running:
        uptime = round(time.time() - (boot_time() + record["starttime"] / float(CLK_TCK)), 1)
    return {
        "name": req["name"],
        "recorded": True,
        "running": running,
        "pid": record.get("pid"),
        "uptime": uptime,
        "started_at": record.get("started_at"),
        "script": record.get("script"),
        "started_sha256": record.get("sha256"),
        "script_sha256": sha256(record.get("script") or req.get("script") or ""),
        "log": record.get("log"),
        "run_id": record.get("run_id"),
        "orphans": [] if running else members(record),
    }


# -------------------------------------------------------------------------------------------- signals
def kill_session(record, timeout):
    """TERM every process of the session, wait up to ``timeout`` s, then KILL what is left. Returns pids hit."""
    pids = members(record)
    hit = sorted(pids)
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError as exc:
                if exc.errno != errno.ESRCH:
                    raise
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            time.sleep(0.1)
            pids = members(record)
        if not pids:
            break
    return hit


# ------------------------------------------------------------------------------------------------ actions
def action_status(req):
    out = []
    for item in req["procs"]:
        info = describe(item, load(item))
        info["health"] = None
        if info["running"] and item.get("health"):
            info["health"] = http_status(item["health"], float(item.get("health_timeout", 2)))[0]
        out.append(info)
    return {"ok": True, "procs": out}


def action_start(req):
    record = load(req)
    script = os.path.expanduser(req["script"])
    current = sha256(script)
    if current is None:
        return {"ok": False, "msg": "script %s does not exist or is not readable" % script}
    running = record is not None and alive(record)
    changed = running and record.get("sha256") != current
    if running and not changed and not req.get("force_restart"):
        return {"ok": True, "action": "none", "pid": record["pid"], "sha256": current}
    if running and changed and not req.get("restart_changed", True) and not req.get("force_restart"):
        return {"ok": True, "action": "none", "pid": record["pid"], "sha256": current, "stale": True}
    action = "restarted" if running else "started"
    if req.get("check"):
        return {"ok": True, "action": action, "pid": record.get("pid") if record else None}
    if record is not None:
        kill_session(record, float(req.get("stop_timeout", 20)))  # the old one, or its orphans
        forget(req)
    return launch(req, script, current, action)


def launch(req, script, digest, action):
    piddir = os.path.expanduser(req["piddir"])
    log = os.path.expanduser(req["log"])
    for directory in (piddir, os.path.dirname(log)):
        if directory and not os.path.isdir(directory):
            os.makedirs(directory, 0o700)
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
    with open(log, "ab") as fh:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        fh.write(("\n=== %s: provision %s %s (%s) ===\n" % (stamp, action, req["name"], script)).encode())
        fh.flush()
        child = subprocess.Popen(
            [script], stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, env=env,
            cwd=os.path.dirname(script) or None, start_new_session=True, close_fds=True,
        )  # fmt: skip
    st = proc_stat(child.pid)
    record = {
        "pid": child.pid, "sid": child.pid, "starttime": st[4] if st else 0, "script": script, "sha256": digest,
        "log": log, "started_at": time.time(), "run_id": req.get("run_id") or None,
        "cmdline": cmdline(child.pid),
    }  # fmt: skip
    json_path, pid_path = paths(req)
    write_atomic(json_path, json.dumps(record))
    write_atomic(pid_path, "%d\n" % child.pid, 0o644)
    time.sleep(float(req.get("settle", 0.3)))
    if child.poll() is not None:  # died at once: bad interpreter, syntax error, missing file...
        forget(req)
        return {"ok": False, "action": action, "rc": child.returncode, "pid": child.pid,
                "msg": "%s exited at once (rc=%s)" % (req["name"], child.returncode),
                "log_tail": tail_lines(log, int(req.get("log_lines", 20)))}  # fmt: skip
    return {"ok": True, "action": action, "pid": child.pid, "sha256": digest}


def action_stop(req):
    record = load(req)
    if record is None:
        return {"ok": True, "action": "none"}
    if req.get("run_id") and record.get("run_id") != req["run_id"]:
        return {"ok": True, "action": "none", "skipped": "started by another run"}
    live = bool(members(record))
    if req.get("check"):
        return {"ok": True, "action": "stopped" if live else "none", "pid": record.get("pid")}
    started = time.monotonic()
    hit = kill_session(record, float(req.get("timeout", 20)))
    forget(req)
    return {"ok": True, "action": "stopped" if hit else "none", "pid": record.get("pid"), "killed": hit,
            "seconds": round(time.monotonic() - started, 2)}  # fmt: skip


def http_status(url, timeout):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.getcode(), ""
    except urllib.error.HTTPError as exc:
        return exc.code, str(exc.reason)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return None, str(getattr(exc, "reason", exc))


def action_wait(req):
    """Wait until every process's URL answers 200; fail at once when one of them dies."""
    items = req.get("procs") or [req]
    started = time.monotonic()
    deadline = started + float(req.get("timeout", 600))
    interval = float(req.get("interval", 0.25))
    pending = {item["name"]: item for item in items}
    last: dict = {}
    ready: dict = {}
    probes = 0
    while True:
        for name, item in list(pending.items()):
            record = load(item)
            if record is None or not alive(record):
                return failure(req, item, record, "exited", started, last.get(name, (None, "")), ready)
            probes += 1
            last[name] = http_status(item["url"], min(5.0, max(0.5, deadline - time.monotonic())))
            if last[name][0] == 200:
                ready[name] = round(time.monotonic() - started, 3)
                del pending[name]
        if not pending:
            return {"ok": True, "elapsed": round(time.monotonic() - started, 3), "probes": probes, "ready": ready}
        if time.monotonic() >= deadline:
            name, item = next(iter(pending.items()))
            return failure(req, item, load(item), "timeout", started, last.get(name, (None, "")), ready)
        time.sleep(interval)


def failure(req, item, record, why, started, last, ready):
    log = (record or {}).get("log") or item.get("log")
    return {
        "ok": False, "why": why, "name": item["name"], "url": item["url"], "ready": ready,
        "elapsed": round(time.monotonic() - started, 3), "last_status": last[0],
        "last_error": last[1], "pid": (record or {}).get("pid"), "log": log,
        "log_tail": tail_lines(log, int(req.get("log_lines", 30))) if log else [],
    }  # fmt: skip


def tail_lines(path, lines):
    try:
        with open(os.path.expanduser(path), "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max(65536, lines * 400)))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    return data.splitlines()[-lines:] if lines > 0 else []


def action_tail(req):
    out = []
    for item in req["procs"]:
        record = load(item) or {}
        log = record.get("log") or item.get("log")
        out.append({"name": item["name"], "log": log, "lines": tail_lines(log, int(req.get("lines", 50)))})
    return {"ok": True, "procs": out}


ACTIONS = {"status": action_status, "start": action_start, "stop": action_stop, "wait": action_wait,
           "tail": action_tail}  # fmt: skip


def main(argv):
    try:
        action = ACTIONS[argv[1]]
        req = json.loads(sys.stdin.buffer.read().decode("utf-8") or "{}")
    except (IndexError, KeyError, ValueError) as exc:
        print(json.dumps({"ok": False, "msg": "bad request: %r" % (exc,)}))
        return 2
    try:
        answer = action(req)
    except KeyError as exc:
        answer = {"ok": False, "msg": "bad request: missing %s" % exc}
    except OSError as exc:
        answer = {"ok": False, "msg": "%s: %s" % (type(exc).__name__, exc)}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
