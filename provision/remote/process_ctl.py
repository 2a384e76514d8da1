"""Supervise long-running processes on the host, without systemd or as systemd units: status, start, stop, wait,
tail.

Usage: ``python3 - ACTION`` with a JSON request on stdin, in the host library's envelope (``hostlib.serve``, as
every shipped helper): ONE JSON answer on the last stdout line, ``{"ok": true, ...}`` or ``{"ok": false, "failed":
true, "msg": ...}`` with the action's own fields (``why``, ``log_tail``, ``rc``, ...); exit 0 when ok, 1 when not
(a refused start, a failed wait, a bad request alike: the controller reads the answer whatever the rc,
``provision.pd.process.helper``). A bad request (unknown action, not a JSON object, a missing field) answers
``msg`` ``bad request: ...``; an OSError is a failure answer with its message. Stdlib only (Python 3.6+). Each
action is one round trip. ``supervise`` and ``watch`` (below) are not requests: long-running entry points, argv only.

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
  "force_restart": bool, "check": bool, "group"?}`` → ``action``: ``none`` (already running the same script),
  ``started``, ``restarted``; with ``check`` nothing is done, ``action`` says what would be. ``group``
  (``{"instance", "health", "grace", "interval"}``): a member of a multi-host server, restarted when its
  server's health fails (the group watch, below).
* ``stop`` ``{"name", "piddir", "timeout", "run_id"?, "check"}`` → ``action``: ``stopped`` or ``none``; with
  ``run_id`` only a process started by that run is stopped. TERM to the whole session, wait, then KILL.
* ``wait`` ``{"procs": [{"name", "piddir", "url", "log"?}], "timeout", "interval", "log_lines"}`` → polls
  each URL until HTTP 200 (every ``interval`` s); fails at once when a process dies (``why: exited``), else
  on ``timeout``; a failure names the process and carries its log tail.
* ``tail`` ``{"procs": [{"name", "piddir", "log"?}], "lines"}`` → the last lines of each log.
* ``probe`` ``{"sudo": bool}`` → ``systemd`` (it runs the host), ``version``, ``uid``, ``sudo`` (``sudo -n`` works).
* ``unit`` (root) ``{"name", "piddir", "script", "log", "env", "venv", "policy", "run_id", "restart_changed",
  "force_restart", "check", "group"?, "group_source"?}`` → the systemd unit's files brought to the request
  (``written``) and what systemd must do: ``action`` none/started/restarted, ``state`` for service.py;
  ``watch``: the group watch's unit. ``unit_remove`` (root) removes them.

``python3 process_ctl.py supervise PIDDIR`` is provision's supervisor; ``python3 group-watch.py watch NAME PIDDIR
URL GRACE INTERVAL LOG`` the group watch of a systemd unit.

A process that is a systemd unit (``provision-pd-NAME.service``, see the systemd section) is found by its unit
file: ``status`` and ``wait`` read systemd, ``stop`` names the unit for the controller to stop and disable.
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

import hostlib

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
    return read_json(paths(req)[0])


def read_json(path):
    """The JSON object in ``path``, or None (missing, unreadable, not an object)."""
    try:
        with open(path) as fh:
            value = json.load(fh)
        return value if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None


def write_atomic(path, text, mode=0o600):
    """``path`` replaced by ``text``, private (or ``mode``) from creation, never written through a link: the host
    library's atomic write (shipped bundled with this file, the supervisor's copy included)."""
    hostlib.atomic_write(path, text.encode("utf-8"), mode=mode)


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


def supervision(req, record, want):
    """A process's supervisor, state and restarts, for ``status``."""
    record = record or {}
    if want is None and record.get("supervisor") != "provision":
        state = "running" if alive(record) else ("dead" if record else "stopped")
        return {"supervisor": "none" if record else None, "state": state, "restarts": 0}
    sup = supervisor_record(req["piddir"])
    state = record.get("state") or "starting"
    if state == "running" and not alive(record):
        state = "dead"  # the supervisor has not seen it yet (or is gone)
    last = record.get("last_exit") or {}
    return {
        "supervisor": "provision", "supervisor_pid": (sup or {}).get("pid"), "state": state,
        "restarts": int(record.get("restarts") or 0), "crashes": len(record.get("crashes") or []),
        "last_exit": {k: v for k, v in last.items() if k != "log_tail"} or None, "last_reason": exit_text(last),
        "next_start_at": record.get("next_start_at"), "crash_looping": state == "failed",
        "venv": record.get("venv"), "policy": record.get("policy"), "now": time.time(),
        "group_restarts": int(record.get("group_restarts") or 0),
    }  # fmt: skip


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
    revived = {}
    if req.get("settle"):
        time.sleep(float(req["settle"]))
    for item in req["procs"]:
        if has_unit(item):
            try:
                info = unit_status(item)
            except OSError as exc:
                info = {"name": item["name"], "running": False, "supervisor": "systemd", "error": str(exc)}
            info["health"] = None
            if info["running"] and item.get("health"):
                info["health"] = http_status(item["health"], float(item.get("health_timeout", 2)))[0]
            out.append(info)
            continue
        want = read_json(want_path(item))
        if want is not None and item.get("supervisor_source") and item["piddir"] not in revived:
            # a supervisor that died is started again (it adopts the processes it finds)
            revived[item["piddir"]] = ensure_supervisor(item["piddir"], item["supervisor_source"])[1]
        info = describe(item, load(item))
        info.update(supervision(item, load(item), want))
        info["supervisor_restarted"] = revived.get(item["piddir"], False)
        info["health"] = None
        if info["running"] and item.get("health"):
            info["health"] = http_status(item["health"], float(item.get("health_timeout", 2)))[0]
        out.append(info)
    return {"ok": True, "procs": out}


def action_start(req):
    script = os.path.expanduser(req["script"])
    current = sha256(script)
    if current is None:
        return {"ok": False, "msg": "script %s does not exist or is not readable" % script}
    if has_unit(req):
        return {
            "ok": False,
            "msg": "%s runs as the systemd unit %s: stop it with `provision pd down` (as root or "
            "with become) first, or keep pd_supervisor: systemd" % (req["name"], unit_of(req["name"])),
        }
    if req.get("supervisor") == "provision":
        return supervised_start(req, script, current)
    record = load(req)
    if read_json(want_path(req)) is not None:  # was supervised: the supervisor lets go of it first
        supervised_stop(dict(req, timeout=req.get("stop_timeout", 20)), record, None)
        record = None
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
    if req.get("venv"):  # the env this start runs on, resolved now (the launch script reads it)
        req = dict(req, env=dict(req.get("env") or {}, PROVISION_PD_VENV=resolve_venv(req["venv"])))
    return launch(req, script, current, action)


def resolve_venv(venv):
    return os.path.realpath(os.path.expanduser(venv))


def spawn(req, script, digest, action, who="provision"):
    """Start the script detached (its own session, stdin /dev/null, output appended to its log) and write its
    record; (child, record). ``who`` names the starter in the log's banner line."""
    piddir = os.path.expanduser(req["piddir"])
    log = os.path.expanduser(req["log"])
    for directory in (piddir, os.path.dirname(log)):
        if directory and not os.path.isdir(directory):
            os.makedirs(directory, 0o700)
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
    with open(log, "ab") as fh:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        fh.write(("\n=== %s: %s %s %s (%s) ===\n" % (stamp, who, action, req["name"], script)).encode())
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
    return child, record


def save(req, record):
    json_path, pid_path = paths(req)
    write_atomic(json_path, json.dumps(record))
    write_atomic(pid_path, "%d\n" % record["pid"], 0o644)


def launch(req, script, digest, action):
    child, record = spawn(req, script, digest, action)
    save(req, record)
    log = record["log"]
    time.sleep(float(req.get("settle", 0.3)))
    if child.poll() is not None:  # died at once: bad interpreter, syntax error, missing file...
        forget(req)
        return {"ok": False, "action": action, "rc": child.returncode, "pid": child.pid,
                "msg": "%s exited at once (rc=%s)" % (req["name"], child.returncode),
                "log_tail": tail_lines(log, int(req.get("log_lines", 20)))}  # fmt: skip
    return {"ok": True, "action": action, "pid": child.pid, "sha256": digest}


def action_stop(req):
    """Stop what runs under provision (or nothing); a systemd unit of that name is named in the answer
    (``unit``) for the controller to stop, disable and remove."""
    answer = stop_record(req)
    if has_unit(req):
        started = x_provision(read_text(unit_files(req["name"], req.get("unit_dir"))["start"]))
        if req.get("run_id") and started.get("RunId") != req["run_id"]:
            answer["unit_skipped"] = "started by another run"
        else:
            answer["unit"] = unit_of(req["name"])
    return answer


def stop_record(req):
    record = load(req)
    want = read_json(want_path(req))
    if record is None and want is None:
        return {"ok": True, "action": "none"}
    if req.get("run_id") and (record or want).get("run_id") != req["run_id"]:
        return {"ok": True, "action": "none", "skipped": "started by another run"}
    live = bool(members(record)) if record else False
    if req.get("check"):
        return {"ok": True, "action": "stopped" if live or want else "none", "pid": (record or {}).get("pid")}
    if want is not None or (record or {}).get("supervisor") == "provision":
        answer = supervised_stop(req, record, want)
        if want is not None and answer["action"] == "none":
            answer["action"] = "stopped"  # nothing ran (backoff, crash loop), but it would have been restarted
        return answer
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
            if has_unit(item):  # systemd's: its MainPID, whichever it is now
                live, pid = unit_alive(item)
                record = {"pid": pid, "log": item.get("log")}
            else:
                record = load(item)
                live = record is not None and alive(record)
            if not live:
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
            record = {"log": item.get("log")} if has_unit(item) else load(item)
            return failure(req, item, record, "timeout", started, last.get(name, (None, "")), ready)
        time.sleep(interval)


def failure(req, item, record, why, started, last, ready):
    log = (record or {}).get("log") or item.get("log")
    what = ("exited while starting" if why == "exited" else "did not answer %s with 200 within %gs"
            % (item["url"], float(req.get("timeout", 600))))  # fmt: skip
    return {
        "ok": False, "why": why, "name": item["name"], "url": item["url"], "ready": ready,
        "msg": "%s %s" % (item["name"], what),
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


# ------------------------------------------------------------------------------------------ supervision
# With ``"supervisor": "provision"`` a start does not launch the script itself: it writes what should run
# (PIDDIR/NAME.want.json: script, log, env, run id, restart policy and a fresh ``generation``) and makes sure
# the host's supervisor runs: THIS file, copied to PIDDIR/supervisor.py and started detached
# (``supervisor.py supervise PIDDIR``, its own session, one per PIDDIR under a flock). The supervisor is the
# only writer of the supervised NAME.json records. Every POLL seconds it reaps its children (their exit code or
# signal), and for every wanted process: starts it when its record is of another generation (a new start:
# restart counters reset); when it died, records the exit (time, code or signal, uptime, log tail) and starts
# it again after a growing delay (``delay`` doubled per crash within ``interval``, at most ``max_delay``); past
# ``burst`` restarts within ``interval`` it stays down, state ``failed`` (crash loop) until the next start. A
# process whose want file is gone is stopped (TERM to its session, KILL after ``stop_timeout``) and forgotten.
# With nothing left to watch it exits. SIGTERM ends it without touching the processes: a newer supervisor (a
# changed file) adopts them by their records (their exit code is then unknown).
# The group watch: a member of a multi-host server (the want's ``group``) whose server's health URL (its
# leader's /health) fails for ``grace`` s after it had answered 200 is restarted too (GroupWatch); under
# systemd a watch unit does the same (``watch``, the systemd section).
POLL = 0.25
SUPERVISOR = "supervisor"
DEFAULT_POLICY = {"delay": 5.0, "max_delay": 300.0, "burst": 5, "interval": 900.0, "stop_timeout": 20.0}


def want_path(req):
    return os.path.join(os.path.expanduser(req["piddir"]), req["name"] + ".want.json")


def supervisor_files(piddir):
    base = os.path.join(os.path.expanduser(piddir), SUPERVISOR)
    return {"script": base + ".py", "record": base + ".json", "log": base + ".log", "lock": base + ".lock"}


def supervisor_record(piddir):
    """The live supervisor's record (pid, starttime, sha256 of its file), or None."""
    record = read_json(supervisor_files(piddir)["record"])
    return record if record is not None and alive(record) else None


def ensure_supervisor(piddir, source):
    """The host's supervisor running the given source; (record, started: bool). An older one (another
    source) is asked to leave (SIGTERM: its processes keep running and the new one adopts them)."""
    files = supervisor_files(piddir)
    directory = os.path.dirname(files["script"])
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    if sha256(files["script"]) != digest:
        write_atomic(files["script"], source, 0o700)
    record = supervisor_record(piddir)
    if record is not None and record.get("sha256") == digest:
        return record, False
    if record is not None:
        with contextlib.suppress(OSError):
            os.kill(record["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 10
        while alive(record) and time.monotonic() < deadline:
            time.sleep(0.05)
    with open(files["log"], "ab") as log:
        child = subprocess.Popen(
            [sys.executable, files["script"], "supervise", os.path.expanduser(piddir)], stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, cwd=directory, start_new_session=True, close_fds=True,
        )  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        record = supervisor_record(piddir)
        if record is not None and record.get("pid") == child.pid:
            return record, True
        if child.poll() is not None:
            break
        time.sleep(0.05)
    raise OSError("the supervisor did not start (see %s)" % files["log"])


def policy_of(want):
    policy = dict(DEFAULT_POLICY)
    policy.update({k: v for k, v in (want.get("policy") or {}).items() if k in DEFAULT_POLICY})
    return policy


def signal_name(number):
    try:
        return signal.Signals(number).name
    except (ValueError, AttributeError):
        return "signal %d" % number


def exit_text(last):
    if not last:
        return None
    if last.get("reason") == "group":
        return "restarted with its multi-host server (%s)" % last.get("why", "unhealthy")
    if last.get("signal"):
        what = "killed by %s" % last["signal"]
    elif last.get("code") is not None:
        what = "exit code %s" % last["code"]
    else:
        what = "exited (code unknown)"
    return what if last.get("uptime") is None else "%s after %ss" % (what, last.get("uptime"))


class Supervisor:
    def __init__(self, piddir):
        self.piddir = piddir
        self.children = {}  # pid -> Popen of the processes this supervisor started
        self.exits = {}  # pid -> (code, signal name) of those that ended
        self.groups = {}  # name -> GroupWatch of a multi-host server's member
        self.stopping = False

    def reap(self):
        for pid, child in list(self.children.items()):
            rc = child.poll()
            if rc is not None:
                del self.children[pid]
                self.exits[pid] = (rc, None) if rc >= 0 else (None, signal_name(-rc))

    def collect(self, pid):
        """The exit status of a child that /proc already shows dead: a multi-threaded leader is a zombie while
        its other threads still exit, and only then can it be reaped (waited for here, bounded)."""
        child = self.children.pop(pid, None)
        if child is None:
            return
        try:
            rc = child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.children[pid] = child
            return
        self.exits[pid] = (rc, None) if rc >= 0 else (None, signal_name(-rc))

    def end(self, record, timeout):
        """Stop a process on purpose (a new generation, or no longer wanted): its session ended, and its exit,
        which is no crash, collected and dropped."""
        kill_session(record, timeout)
        self.collect(record.get("pid"))
        self.exits.pop(record.get("pid"), None)

    def wants(self):
        out = {}
        for entry in os.listdir(self.piddir):
            if entry.endswith(".want.json"):
                want = read_json(os.path.join(self.piddir, entry))
                if want is not None and want.get("name") == entry[: -len(".want.json")]:
                    out[want["name"]] = want
        return out

    def supervised(self):
        """Names of records this supervisor owns (it may have to stop them)."""
        out = []
        for entry in os.listdir(self.piddir):
            if entry.endswith(".json") and not entry.endswith(".want.json") and entry != SUPERVISOR + ".json":
                record = read_json(os.path.join(self.piddir, entry))
                if record is not None and record.get("supervisor") == "provision":
                    out.append(entry[: -len(".json")])
        return out

    def start(self, want, previous, action):
        req = {"name": want["name"], "piddir": self.piddir, "log": want["log"], "env": want.get("env"),
               "run_id": want.get("run_id")}  # fmt: skip
        script = os.path.expanduser(want["script"])
        child, record = spawn(req, script, sha256(script), action, who="provision supervisor:")
        self.children[child.pid] = child
        keep = ("restarts", "crashes", "last_exit", "history", "group_restarts") if action == "restarted" else ()
        record.update({k: previous[k] for k in keep if previous and k in previous})
        if action == "restarted":
            record["restarts"] = int(record.get("restarts") or 0) + 1
        record.update({"supervisor": "provision", "generation": want["generation"], "state": "running",
                       "venv": want.get("venv"), "policy": policy_of(want)})  # fmt: skip
        save(req, record)

    def step(self, name, want):
        req = {"name": name, "piddir": self.piddir}
        record = load(req)
        now = time.time()
        if want is None:  # no longer wanted: stop it and forget it
            if record is not None and record.get("supervisor") == "provision":
                self.end(record, float((record.get("policy") or {}).get("stop_timeout", 20)))
                forget(req)
            return
        policy = policy_of(want)
        live = record is not None and alive(record)
        if record is None or record.get("generation") != want.get("generation"):
            if record is not None:
                self.end(record, policy["stop_timeout"])  # the previous generation, or its orphans
            self.start(want, None, "started")
            return
        if live:
            self.watch_group(name, want, record, policy, now)
            return
        state = record.get("state")
        if state == "running":  # it just died
            self.collect(record.get("pid"))
            code, sig = self.exits.pop(record.get("pid"), (None, None))
            uptime = round(now - float(record.get("started_at") or now), 1)
            crashes = [t for t in record.get("crashes") or [] if now - t < policy["interval"]] + [now]
            last = {"at": now, "code": code, "signal": sig, "uptime": uptime,
                    "log_tail": tail_lines(record.get("log") or want["log"], 10)}  # fmt: skip
            history = (record.get("history") or [])[-9:] + [{k: v for k, v in last.items() if k != "log_tail"}]
            record.update({"last_exit": last, "history": history, "crashes": crashes})
            kill_session(record, 5.0)  # what the dead leader left behind holds its ports and memory
            if len(crashes) > int(policy["burst"]):
                record.update({"state": "failed", "next_start_at": None})
                self.note(
                    record,
                    "%s %s: %d crashes within %ss, over the start limit (%s): not restarted"
                    % (name, exit_text(last), len(crashes), policy["interval"], policy["burst"]),
                )
            else:
                delay = min(float(policy["delay"]) * 2 ** (len(crashes) - 1), float(policy["max_delay"]))
                record.update({"state": "backoff", "delay": delay, "next_start_at": now + delay})
                self.note(record, "%s %s: restarting in %ss" % (name, exit_text(last), delay))
            save(req, record)
        elif state == "backoff" and now >= float(record.get("next_start_at") or 0):
            self.start(want, record, "restarted")

    def watch_group(self, name, want, record, policy, now):
        """A member of a multi-host server (``want["group"]``) whose server stays unhealthy restarts with the
        others: counted as a crash (the start limit applies), recorded as ``reason: group``."""
        group = want.get("group")
        if not group:
            return
        watch = self.groups.get(name)
        if watch is None or watch.key != (record.get("pid"), record.get("starttime")):
            watch = self.groups[name] = GroupWatch(group, (record.get("pid"), record.get("starttime")))
        why = watch.poll(time.monotonic())
        if why is None:
            return
        crashes = [t for t in record.get("crashes") or [] if now - t < policy["interval"]] + [now]
        uptime = round(now - float(record.get("started_at") or now), 1)
        last = {"at": now, "code": None, "signal": None, "uptime": uptime, "reason": "group", "why": why}
        history = (record.get("history") or [])[-9:] + [last]
        record.update({"last_exit": last, "history": history, "crashes": crashes,
                       "group_restarts": int(record.get("group_restarts") or 0) + 1})  # fmt: skip
        self.end(record, policy["stop_timeout"])
        if len(crashes) > int(policy["burst"]):
            record.update({"state": "failed", "next_start_at": None})
            self.note(record, "%s: its multi-host server %s: %s; %d restarts within %ss, over the start limit (%s): "
                      "not restarted" % (name, group.get("instance"), why, len(crashes), policy["interval"],
                                         policy["burst"]))  # fmt: skip
            save({"name": name, "piddir": self.piddir}, record)
            return
        self.note(record, "%s: its multi-host server %s: %s: restarting this rank with the others"
                  % (name, group.get("instance"), why))  # fmt: skip
        self.start(want, record, "restarted")

    def note(self, record, text):
        with contextlib.suppress(OSError), open(os.path.expanduser(record["log"]), "ab") as fh:
            fh.write(("=== %s: provision supervisor: %s ===\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), text)).encode())

    def run(self):
        while not self.stopping:
            self.reap()
            wants = self.wants()
            names = list(wants) + [n for n in self.supervised() if n not in wants]
            for name in names:
                try:
                    self.step(name, wants.get(name))
                except Exception as exc:  # one process's trouble must not stop the others' supervision
                    print("%s: %s: %s: %s" % (time.strftime("%Y-%m-%d %H:%M:%S"), name, type(exc).__name__, exc),
                          flush=True)  # fmt: skip
            if not wants and not self.supervised():
                return True
            time.sleep(POLL)
        return False


class GroupWatch:
    """The health of a member's multi-host server (pd_instance), as that member sees it: ``group["health"]``,
    its leader's ``/health`` (answered once every rank has joined), polled every ``interval`` s. Armed once it
    answered 200 since this member started (a server that is still starting is no failure); then ``grace`` s of
    no 200 in a row is a failed server. Every member's supervisor watches the same URL, so a dead rank (its own
    supervisor restarts it) or a hung one takes every other member down and up again: the ranks of a
    torch.distributed group cannot rejoin it one by one. The only thing read from the URL is its HTTP status."""

    def __init__(self, group, key):
        self.url = group["health"]
        self.grace = float(group.get("grace", 30))
        self.interval = float(group.get("interval", 2))
        self.key = key
        self.armed = False
        self.bad_since = None
        self.next = 0.0

    def poll(self, now):
        """None while nothing is to be done; the reason to restart this member once its server failed."""
        if now < self.next:
            return None
        self.next = now + self.interval
        code, err = http_status(self.url, min(5.0, self.interval))
        if code == 200:
            self.armed, self.bad_since = True, None
            return None
        if not self.armed:
            return None
        if self.bad_since is None:
            self.bad_since = now
        if now - self.bad_since < self.grace:
            return None
        self.armed, self.bad_since = False, None
        return "%s answered %s for %gs" % (self.url, "HTTP %s" % code if code else "nothing (%s)" % err, self.grace)


def supervise(piddir):
    """The supervisor's main loop (``supervisor.py supervise PIDDIR``); 0 when another one holds the lock."""
    import fcntl

    files = supervisor_files(piddir)
    lock = os.open(files["lock"], os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0
    me = os.getpid()
    st = proc_stat(me)
    record = {"pid": me, "sid": os.getsid(0), "starttime": st[4] if st else 0, "sha256": sha256(files["script"]),
              "started_at": time.time()}  # fmt: skip
    write_atomic(files["record"], json.dumps(record))
    supervisor = Supervisor(os.path.expanduser(piddir))
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an ignored SIGCHLD (inherited) would hide exit statuses
    signal.signal(signal.SIGTERM, lambda *_: setattr(supervisor, "stopping", True))
    if supervisor.run():  # nothing left to watch
        with contextlib.suppress(OSError):
            os.unlink(files["record"])
    return 0


def supervised_start(req, script, current):
    """``start`` under the provision supervisor: the want file, the supervisor, then wait for its answer."""
    record = load(req)
    want = read_json(want_path(req))
    running = record is not None and alive(record)
    ours = running and record.get("supervisor") == "provision" and want is not None
    same = ours and record.get("sha256") == current and record.get("generation") == want.get("generation")
    policy = {k: v for k, v in (req.get("policy") or {}).items() if k in DEFAULT_POLICY}
    group = req.get("group") or None
    if same and not req.get("force_restart"):
        if not req.get("check"):
            if want.get("policy") != policy or want.get("group") != group:  # applies from now on, no restart
                want.update(policy=policy, group=group)
                write_atomic(want_path(req), json.dumps(want))
            ensure_supervisor(req["piddir"], req["supervisor_source"])
        return {"ok": True, "action": "none", "pid": record["pid"], "sha256": current}
    if ours and record.get("sha256") != current and not req.get("restart_changed", True) \
            and not req.get("force_restart"):  # fmt: skip
        return {"ok": True, "action": "none", "pid": record["pid"], "sha256": current, "stale": True}
    action = "restarted" if running else "started"
    if req.get("check"):
        return {"ok": True, "action": action, "pid": record.get("pid") if record else None}
    if record is not None and record.get("supervisor") != "provision":
        kill_session(record, float(req.get("stop_timeout", 20)))  # started without the supervisor
        forget(req)
    generation = os.urandom(8).hex()
    piddir = os.path.expanduser(req["piddir"])
    if not os.path.isdir(piddir):
        os.makedirs(piddir, 0o700)
    venv = req.get("venv")
    env = dict(req.get("env") or {})
    if venv:  # the env this start runs on, resolved now: a supervised restart stays on it (only a new start moves)
        env["PROVISION_PD_VENV"] = resolve_venv(venv)
    want = {"name": req["name"], "script": script, "log": os.path.expanduser(req["log"]), "env": env,
            "run_id": req.get("run_id") or None, "generation": generation, "policy": policy,
            "venv": env.get("PROVISION_PD_VENV"), "group": group}  # fmt: skip
    write_atomic(want_path(req), json.dumps(want))
    ensure_supervisor(req["piddir"], req["supervisor_source"])
    settle = float(req.get("settle", 0.3))
    deadline = time.monotonic() + float(req.get("stop_timeout", 20)) + 15
    while time.monotonic() < deadline:
        record = load(req)
        if record is not None and record.get("generation") == generation:
            if record.get("state") in ("backoff", "failed"):
                last = record.get("last_exit") or {}
                return {"ok": False, "action": action, "rc": last.get("code"), "pid": record.get("pid"),
                        "msg": "%s exited at once (%s)" % (req["name"], "rc=%s" % last["code"]
                                                      if last.get("code") is not None else exit_text(last)),
                        "log_tail": last.get("log_tail") or []}  # fmt: skip
            if alive(record) and time.time() - float(record.get("started_at") or 0) >= settle:
                return {"ok": True, "action": action, "pid": record["pid"], "sha256": current}
        time.sleep(0.05)
    return {
        "ok": False,
        "action": action,
        "msg": "the supervisor did not start %s in time (see %s)"
        % (req["name"], supervisor_files(req["piddir"])["log"]),
    }


def supervised_stop(req, record, want):
    """``stop`` of a supervised process: its want file goes, the supervisor stops it and forgets it (done here
    when no supervisor runs)."""
    with contextlib.suppress(OSError):
        os.unlink(want_path(req))
    started = time.monotonic()
    hit = members(record) if record else []
    timeout = float(req.get("timeout", 20))
    if supervisor_record(req["piddir"]) is not None:
        deadline = started + timeout + 15
        while load(req) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
    record = load(req)
    if record is not None:
        kill_session(record, timeout)
        forget(req)
    return {"ok": True, "action": "stopped" if hit else "none", "pid": (record or {}).get("pid"), "killed": hit,
            "seconds": round(time.monotonic() - started, 2)}  # fmt: skip


# --------------------------------------------------------------------------------------------- systemd
# With ``"supervisor": "systemd"`` a process is the unit ``provision-pd-NAME.service`` in UNIT_DIR (root's part;
# the controller runs those actions with become). ``unit`` writes it, atomically and never through a link:
# the unit (``User=`` the owner of the launch script, ``ExecStart=`` the script, output appended to the log,
# ``Restart=on-failure``, ``KillMode=control-group``, ``WantedBy=multi-user.target``, an ``ExecStopPost=`` that
# records each exit in PIDDIR/NAME.exits), ``NAME.service.d/policy.conf`` (the restart delay, growing with
# ``RestartSteps``/``RestartMaxDelaySec`` on systemd >= 254, the start limit, the stop timeout) and, at each
# start provision makes, ``NAME.service.d/start.conf`` (the env resolved then: ``PROVISION_PD_VENV``; and in
# its ``[X-Provision]`` section, which systemd ignores, the script's sha256 and the run id). It answers what the
# controller then asks of systemd through service.py (daemon-reload, enable, start or restart). ``status``,
# ``wait`` and ``stop`` find a unit by its file; ``unit_remove`` (after the stop and disable) removes it.
# A member of a multi-host server (the request's ``group``) also gets its group watch: the unit
# ``provision-pdwatch-NAME.service`` (PartOf= the process's unit, pulled in by the drop-in group.conf's Wants=,
# run as the same user) running this file's ``watch`` from the drop-in directory (group-watch.py).
UNIT_DIR = "/etc/systemd/system"
UNIT_PREFIX = "provision-pd-"
WATCH_PREFIX = "provision-pdwatch-"  # a multi-host server's member's group watch (``watch``)
SHOW = ("LoadState", "ActiveState", "SubState", "Result", "MainPID", "NRestarts", "ExecMainCode", "ExecMainStatus",
        "UnitFileState")  # fmt: skip
STEPS_SINCE = 254  # RestartSteps= and RestartMaxDelaySec= (systemd 254)
CLD = {"1": "exited", "2": "killed", "3": "dumped"}  # ExecMainCode: si_code of the main process's end


def systemctl_path():
    for directory in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]:
        candidate = os.path.join(directory or ".", "systemctl")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def systemctl(*args):
    """rc, stdout, stderr of ``systemctl ARGS``; without the system bus (no dbus: a non-root user cannot reach
    systemd) it is asked through ``sudo -n`` (passwordless sudo is what lets provision use systemd)."""
    path = systemctl_path()
    if path is None:
        return 127, "", "systemctl not found"
    argv = [path] + list(args)
    for attempt in (argv, ["sudo", "-n"] + argv):
        try:
            proc = subprocess.run(  # noqa: UP022 (capture_output is 3.7+; hosts may have 3.6)
                attempt, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=dict(os.environ, LANG="C", LC_ALL="C"), timeout=60,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 127, "", str(exc)
        err = proc.stderr.decode("utf-8", "replace")
        if os.geteuid() == 0 or "Failed to connect to bus" not in err:
            break
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), err


def systemd_runs():
    """Is the host run by systemd (PID 1, as sd_booted() asks), with systemctl there?"""
    return os.path.isdir("/run/systemd/system") and systemctl_path() is not None


def systemd_version():
    rc, out, _ = systemctl("--version")
    words = out.split()
    try:
        return int(words[1].split(".")[0]) if rc == 0 and words[:1] == ["systemd"] else 0
    except (IndexError, ValueError):
        return 0


def unit_of(name):
    return UNIT_PREFIX + name + ".service"


def unit_files(name, unit_dir=None):
    base = os.path.join(unit_dir or UNIT_DIR, unit_of(name))
    return {"unit": base, "dir": base + ".d", "policy": base + ".d/policy.conf", "start": base + ".d/start.conf",
            "group": base + ".d/group.conf", "watch_py": base + ".d/group-watch.py",
            "watch": os.path.join(unit_dir or UNIT_DIR, watch_of(name))}  # fmt: skip


def watch_of(name):
    return WATCH_PREFIX + name + ".service"


GROUP_FILES = ("group", "watch", "watch_py")  # a multi-host server's member: the watch unit and what it runs


def render_group(req, user, python):
    """A member of a multi-host server: its unit ``Wants=`` the watch unit (started with it; the watch is
    ``PartOf=`` it: stopped and restarted with it), which runs this file's ``watch`` as the same user."""
    name, group = req["name"], req["group"]
    files = unit_files(name, req.get("unit_dir"))
    drop = ("# Written by provision: a member of the multi-host server %s; its group watch starts with it.\n"
            "[Unit]\nWants=%s\n" % (str(group.get("instance")).replace("%", "%%").replace("\n", " "),
                                     watch_of(name)))  # fmt: skip
    argv = [files["watch_py"], "watch", name, os.path.expanduser(req["piddir"]), str(group["health"]),
            "%g" % float(group.get("grace", 30)), "%g" % float(group.get("interval", 2)),
            os.path.expanduser(req["log"])]  # fmt: skip
    lines = [
        "# Written by provision (pd_supervisor: systemd): edits here are replaced by the next `provision pd up`.",
        "[Unit]",
        "Description=provision PD group watch of %s" % name.replace("%", "%%"),
        "PartOf=%s" % unit_of(name),
        "After=%s" % unit_of(name),
        "",
        "[Service]",
        "Type=simple",
        "User=%s" % user,
        "ExecStart=%s %s" % (quoted(python, dollar=False), " ".join(quoted(a) for a in argv)),
        "StandardInput=null",
        "StandardOutput=append:%s" % plain(os.path.expanduser(req["log"])),
        "StandardError=inherit",
        "Restart=always",
        "RestartSec=5s",
    ]
    return {"group": drop, "watch": "\n".join(lines) + "\n", "watch_py": req["group_source"]}


def has_unit(item):
    return os.path.lexists(unit_files(item["name"], item.get("unit_dir"))["unit"])


def show(unit):
    rc, out, err = systemctl("show", unit, "-p", ",".join(SHOW))
    if rc != 0:
        raise OSError("systemctl show %s: %s" % (unit, (err or out).strip()))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def read_text(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def x_provision(text):
    """The ``[X-Provision]`` keys of start.conf (what provision started: the script's sha256, the run id)."""
    out, inside = {}, False
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("["):
            inside = line == "[X-Provision]"
        elif inside and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def quoted(value, dollar=True):
    """One word of a unit file: double-quoted, ``\\`` and ``"`` escaped, ``%`` (specifiers) doubled, and ``$``
    doubled too where systemd expands env variables (an Exec line's arguments, not its command: ``dollar``). A
    newline cannot be written: refused."""
    if "\n" in value or "\r" in value:
        raise ValueError("a newline cannot go into a unit file: %r" % value)
    text = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return '"%s"' % (text.replace("$", "$$") if dollar else text)


def plain(path):
    """A path as the rest of a unit file line (WorkingDirectory=, StandardOutput=append:): ``%`` doubled."""
    if "\n" in path or "\r" in path:
        raise ValueError("a newline cannot go into a unit file: %r" % path)
    return path.replace("%", "%%")


def render_unit(req, script, user):
    """The unit: what runs, as whom, where its output goes, and how it is restarted and stopped."""
    log = os.path.expanduser(req["log"])
    exits = os.path.join(os.path.expanduser(req["piddir"]), req["name"] + ".exits")
    # the exit as systemd reports it to ExecStopPost (systemd.exec(5)); quoted() doubles $ and %
    record = ('echo "$(date +%s) $SERVICE_RESULT $EXIT_CODE $EXIT_STATUS" >> "$1"; '
              'echo "=== $(date "+%Y-%m-%d %H:%M:%S"): systemd: $2 ended: $SERVICE_RESULT $EXIT_CODE '
              '$EXIT_STATUS ===" >> "$3"')  # fmt: skip
    lines = [
        "# Written by provision (pd_supervisor: systemd): edits here are replaced by the next `provision pd up`.",
        "[Unit]",
        "Description=provision PD process %s" % req["name"].replace("%", "%%"),
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        "User=%s" % user,
        "WorkingDirectory=%s" % plain(os.path.dirname(script) or "/"),
        "ExecStart=%s" % quoted(script, dollar=False),
        "ExecStopPost=/bin/sh -c %s sh %s %s %s" % (quoted(record), quoted(exits), quoted(req["name"]), quoted(log)),
        "StandardInput=null",
        "StandardOutput=append:%s" % plain(log),
        "StandardError=inherit",
        "Restart=on-failure",
        "KillMode=control-group",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def render_policy(policy, version):
    """The restart policy: ``delay`` first, growing to ``max_delay`` (RestartSteps: as many doublings as it
    takes) on systemd >= 254, fixed before; ``burst`` restarts within ``interval`` (the first start counts too,
    hence burst + 1 starts), after which the unit stays failed (Result=start-limit-hit)."""
    delay, top = float(policy["delay"]), float(policy["max_delay"])
    service = ["RestartSec=%gs" % delay]
    if version >= STEPS_SINCE and top > delay:
        steps = 0
        while delay * 2**steps < top:
            steps += 1
        service += ["RestartSteps=%d" % steps, "RestartMaxDelaySec=%gs" % top]
    service.append("TimeoutStopSec=%gs" % float(policy["stop_timeout"]))
    unit = ["StartLimitIntervalSec=%gs" % float(policy["interval"]), "StartLimitBurst=%d" % (int(policy["burst"]) + 1)]
    head = "# Written by provision: the restart policy (pd_restart_delay, pd_start_limit_*, pd_stop_timeout).\n"
    return head + "[Unit]\n" + "\n".join(unit) + "\n\n[Service]\n" + "\n".join(service) + "\n"


def render_start(env, digest, run_id):
    lines = ["# Written by provision at its last start of this process: the env it runs on, resolved then.",
             "[X-Provision]", "ScriptSha256=%s" % digest, "RunId=%s" % (run_id or ""),
             "StartedAt=%d" % int(time.time()), "", "[Service]"]  # fmt: skip
    lines += ["Environment=%s" % quoted("%s=%s" % (k, v), dollar=False) for k, v in sorted(env.items())]
    return "\n".join(lines) + "\n"


def write_unit_file(path, text, mode=0o644):
    """``path`` written atomically, root's and 0644; never through a link (a link there, a mask included, is
    refused: whoever put it meant something)."""
    if os.path.islink(path):
        raise OSError("%s is a symbolic link (masked?): refusing to write through it" % path)
    directory = os.path.dirname(path)
    if os.path.islink(directory):
        raise OSError("%s is a symbolic link: refusing to write through it" % directory)
    if not os.path.isdir(directory):
        os.mkdir(directory, 0o755)
    write_atomic(path, text, mode)


def action_probe(req):
    """What supervisor this host allows: systemd (running it, version), root, passwordless sudo."""
    runs = systemd_runs()
    sudo = False
    if req.get("sudo") and os.geteuid() != 0:
        try:
            sudo = subprocess.run(["sudo", "-n", "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=30).returncode == 0  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            sudo = False
    return {"ok": True, "systemd": runs, "version": systemd_version() if runs else 0, "uid": os.geteuid(),
            "sudo": sudo}  # fmt: skip


def action_unit(req):
    """Bring the unit files to what the request says; answer what systemd must do (reload, start, restart)."""
    if os.geteuid() != 0:
        return {"ok": False, "msg": "the systemd unit of %s needs root (become)" % req["name"]}
    if not systemd_runs():
        return {"ok": False, "msg": "this host is not run by systemd (/run/systemd/system is missing)"}
    script = os.path.expanduser(req["script"])
    current = sha256(script)
    if current is None:
        return {"ok": False, "msg": "script %s does not exist or is not readable" % script}
    if "@" in req["name"]:
        return {"ok": False, "msg": "%s: a unit name cannot hold @ (systemd's template instances)" % req["name"]}
    st = os.stat(script)
    import pwd

    user = pwd.getpwuid(st.st_uid).pw_name
    files = unit_files(req["name"], req.get("unit_dir"))
    unit = unit_of(req["name"])
    old_unit = read_text(files["unit"])
    if old_unit is not None and "\nUser=%s\n" % user not in old_unit:
        return {"ok": False, "msg": "%s exists and runs as another user: not provision's unit for %s" % (unit, user)}
    version = systemd_version()
    policy = dict(DEFAULT_POLICY)
    policy.update({k: v for k, v in (req.get("policy") or {}).items() if k in DEFAULT_POLICY})
    texts = {"unit": render_unit(req, script, user), "policy": render_policy(policy, version)}
    if req.get("group"):
        if not req.get("group_source"):
            return {"ok": False, "msg": "%s: a group watch needs group_source" % req["name"]}
        texts.update(render_group(req, user, sys.executable))
    state = show(unit) if old_unit is not None else {}
    started = x_provision(read_text(files["start"]))
    running = state.get("ActiveState") in ("active", "activating", "reloading")
    fresh = running and started.get("ScriptSha256") == current and old_unit == texts["unit"]
    stale = running and not fresh
    restart = bool(req.get("force_restart")) or (stale and req.get("restart_changed", True))
    start = restart or not running
    if start:
        env = dict(req.get("env") or {})
        if req.get("venv"):
            env["PROVISION_PD_VENV"] = resolve_venv(req["venv"])
        texts["start"] = render_start(env, current, req.get("run_id"))
    changed = [key for key, text in texts.items() if read_text(files[key]) != text]
    if req.get("check") and any(k not in texts and os.path.lexists(files[k]) for k in GROUP_FILES):
        changed.append("group")  # would go
    answer = {"ok": True, "unit": unit, "user": user, "version": version, "written": changed, "reload": bool(changed),
              "state": "restarted" if restart and running else "started", "action": "none",
              "pid": int(state.get("MainPID") or 0) or None, "sha256": current}  # fmt: skip
    if start:
        answer["action"] = "restarted" if running else "started"
    elif stale:
        answer["stale"] = True
    if req.get("check"):
        return answer
    migrate = dict(req, timeout=req.get("stop_timeout", 20))
    if load(req) is not None or read_json(want_path(req)) is not None:
        stop_record(dict(migrate, run_id=None))  # it ran without systemd: that one stops
    if start:
        log = os.path.expanduser(req["log"])
        if not os.path.exists(log):  # the user's file (systemd would create it as root's)
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            os.fchown(fd, st.st_uid, st.st_gid)
            os.close(fd)
        if state.get("ActiveState") == "failed":  # a crash loop (start limit) ends with a start provision makes
            systemctl("reset-failed", unit)
    private = set(req.get("env") or {}) - {"PROVISION_PD_VENV"}  # the task's own env may hold secrets
    for key in changed:
        write_unit_file(files[key], texts[key], 0o600 if key == "start" and private else 0o644)
    gone = [key for key in GROUP_FILES if key not in texts and os.path.lexists(files[key])]
    if gone:  # no longer a member of a multi-host server: its watch stops and goes
        systemctl("stop", watch_of(req["name"]))
        for key in gone:
            with contextlib.suppress(OSError):
                os.unlink(files[key])
        answer.update(written=answer["written"] + ["-" + key for key in gone], reload=True)
    if "watch" in texts:
        answer["watch"] = watch_of(req["name"])
    return answer


def unit_status(item):
    """A systemd process's row: the same fields as provision's supervisor gives (``supervisor``, ``state``,
    ``pid``, ``uptime``, ``restarts``, ``last_exit``/``last_reason``, ``crash_looping``)."""
    files = unit_files(item["name"], item.get("unit_dir"))
    unit = unit_of(item["name"])
    state = show(unit)
    pid = int(state.get("MainPID") or 0) or None
    st = proc_stat(pid) if pid else None
    running = state.get("ActiveState") == "active" and st is not None and st[0] not in ("Z", "X")
    uptime = round(time.time() - (boot_time() + st[4] / float(CLK_TCK)), 1) if running and st else None
    start_text = read_text(files["start"]) or ""
    started = x_provision(start_text)
    venv = next((line.split("PROVISION_PD_VENV=", 1)[1].rstrip('"') for line in start_text.splitlines()
                 if line.startswith('Environment="PROVISION_PD_VENV=')), None)  # fmt: skip
    exits = tail_lines(os.path.join(os.path.expanduser(item["piddir"]), item["name"] + ".exits"), 10)
    last = exit_of(exits[-1]) if exits else None
    active, result = state.get("ActiveState"), state.get("Result")
    sub = state.get("SubState")
    # with Restart=on-failure a unit ends up failed only when systemd gave up restarting it: the start limit
    # (Result=start-limit-hit on a start job; after an automatic restart systemd 252 keeps the crash's result)
    looping = active == "failed"
    word = {"active": "running", "activating": "backoff" if sub == "auto-restart" else "starting",
            "failed": "failed" if looping else "dead"}.get(active or "", "stopped")  # fmt: skip
    return {
        "name": item["name"], "recorded": True, "running": running, "pid": pid if running else None,
        "uptime": uptime, "started_at": float(started["StartedAt"]) if started.get("StartedAt") else None,
        "script": item.get("script"), "started_sha256": started.get("ScriptSha256"),
        "script_sha256": sha256(item.get("script") or ""), "log": item.get("log"),
        "run_id": started.get("RunId") or None, "orphans": [], "supervisor": "systemd", "unit": unit,
        "unit_state": "%s/%s" % (active, sub), "result": result, "enabled": state.get("UnitFileState"),
        "state": word, "restarts": int(state.get("NRestarts") or 0), "last_exit": last,
        "last_reason": exit_text(last) if last else None, "crash_looping": looping, "now": time.time(),
        "venv": venv, "group_restarts": len(tail_lines(group_log(item), 10000)),
        "main_exit": {"code": CLD.get(state.get("ExecMainCode") or "", state.get("ExecMainCode")),
                      "status": state.get("ExecMainStatus")},
    }  # fmt: skip


def exit_of(line):
    """A line of NAME.exits (``TIME SERVICE_RESULT EXIT_CODE EXIT_STATUS``) as provision's ``last_exit``."""
    words = (line.split() + ["", "", "", ""])[:4]
    try:
        at = float(words[0])
    except ValueError:
        return None
    code, sig = None, None
    if words[2] == "exited" and words[3].lstrip("-").isdigit():
        code = int(words[3])
    elif words[2] in ("killed", "dumped"):
        sig = "SIG" + words[3] if words[3] and not words[3].startswith("SIG") else words[3]
    return {"at": at, "code": code, "signal": sig, "result": words[1], "uptime": None}


def group_log(item):
    """PIDDIR/NAME.group: one line per restart the group watch made (under systemd)."""
    return os.path.join(os.path.expanduser(item["piddir"]), item["name"] + ".group")


def unit_pids(unit):
    """The live processes of ``unit`` (in its cgroup, as pd_rollout.py's ``in_unit`` reads it), the main one
    (whose parent is not in it, the oldest) first."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cgroup" % entry) as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        if any(line.split(":", 2)[2].rstrip("/").rpartition("/")[2] == unit for line in lines if line.count(":") >= 2):
            st = proc_stat(int(entry))
            if st and st[0] not in ("Z", "X"):
                found[int(entry)] = st
    return sorted(found, key=lambda pid: (found[pid][1] in found, found[pid][4], pid))


def watch(name, piddir, url, grace, interval, log):
    """The group watch of a systemd unit (``watch NAME PIDDIR URL GRACE INTERVAL LOG``, its own unit, as the
    unit's user): the unit's main process is killed (SIGKILL: systemd restarts the unit, ``Restart=on-failure``,
    counted in NRestarts and under its start limit) when its multi-host server fails as :class:`GroupWatch`
    says; each such restart is a line in PIDDIR/NAME.group and a note in the log."""
    unit, current = unit_of(name), None
    group = {"health": url, "grace": float(grace), "interval": float(interval)}
    while True:
        pids = unit_pids(unit)
        if not pids:
            current = None
        else:
            key = (pids[0], (proc_stat(pids[0]) or (0, 0, 0, 0, 0))[4])
            if current is None or current.key != key:
                current = GroupWatch(group, key)
            why = current.poll(time.monotonic())
            if why is not None:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                with contextlib.suppress(OSError), open(log, "ab") as fh:
                    fh.write(("=== %s: provision group watch: %s: its multi-host server: %s: restarting this rank "
                              "with the others ===\n" % (stamp, name, why)).encode())  # fmt: skip
                with contextlib.suppress(OSError), open(group_log({"name": name, "piddir": piddir}), "a") as fh:
                    fh.write("%d %s\n" % (time.time(), why))
                with contextlib.suppress(OSError):
                    os.kill(pids[0], signal.SIGKILL)
        time.sleep(min(float(interval), 1.0))


def unit_alive(item):
    """For ``wait``: (alive, pid): the unit is active with a live MainPID (a crash, even one systemd
    restarts, is an exit while starting)."""
    state = show(unit_of(item["name"]))
    pid = int(state.get("MainPID") or 0) or None
    return state.get("ActiveState") == "active" and pid is not None and proc_stat(pid) is not None, pid


def action_unit_remove(req):
    """The unit's files gone (after the controller stopped and disabled it); its failed state reset."""
    files = unit_files(req["name"], req.get("unit_dir"))
    found = os.path.lexists(files["unit"])
    if req.get("check") or not found:
        return {"ok": True, "removed": found}
    systemctl("reset-failed", unit_of(req["name"]))
    if os.path.lexists(files["watch"]):
        systemctl("stop", watch_of(req["name"]))  # stopped with its unit already (PartOf=): this is a safety net
    for key in ("start", "policy", "unit") + GROUP_FILES:
        with contextlib.suppress(OSError):
            os.unlink(files[key])
    with contextlib.suppress(OSError):
        os.rmdir(files["dir"])
    return {"ok": True, "removed": True}


ACTIONS = {"status": action_status, "start": action_start, "stop": action_stop, "wait": action_wait,
           "tail": action_tail, "probe": action_probe, "unit": action_unit,
           "unit_remove": action_unit_remove}  # fmt: skip


def main(argv):
    """The two long-running entry points (``supervise``, ``watch``: argv, no request), else one request in the
    host library's envelope (:func:`hostlib.serve`)."""
    if argv[1:2] == ["supervise"] and len(argv) == 3:
        return supervise(argv[2])
    if argv[1:2] == ["watch"] and len(argv) == 8:
        return watch(*argv[2:])
    return hostlib.serve(ACTIONS, argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
