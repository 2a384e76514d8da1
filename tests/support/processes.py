"""Processes in tests: provision's supervisor (provision/remote/process_ctl.py) run here as on a host, a
process's liveness as /proc shows it, waits on processes, a lab host's processes, and the stand-in members of a
multi-host group (NOT SGLang) that the group-watch tests supervise."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provision import remote
from provision.transport.base import RUN_LOCKER
from tests.support.lab import Lab

HELPER = remote.path("process_ctl.py")


def ctl(action: str, **request: Any) -> dict[str, Any]:
    """process_ctl.py's answer to ``action`` with ``request``, run here as on a host. The envelope's exit code
    agrees with the answer (``hostlib.serve``: 0 when ok, 1 when not, a failure answer included)."""
    out = subprocess.run(
        [sys.executable, str(HELPER), action], input=json.dumps(request), capture_output=True, text=True, timeout=90
    )
    assert out.stdout.strip(), f"no answer (rc={out.returncode}): {out.stderr}"
    answer: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == (0 if answer.get("ok") else 1), (out.returncode, answer, out.stderr)
    return answer


def alive(pid: int | None) -> bool:
    """``pid`` is a process that is neither a zombie nor dead (False for None)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, TypeError):
        return False
    return state not in ("Z", "X")


def finish(proc: subprocess.Popen[bytes]) -> None:
    """Kill (if still there), reap, close our pipe ends."""
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def start_locker(home: Path, name: str, heartbeat: float, holder: bytes) -> subprocess.Popen[bytes]:
    """The stand-alone run locker (``RUN_LOCKER``) asking for the run lock ``name`` under ``HOME=home``, as a
    channel would start it: ``holder`` (its one line) sent; its answer is the next line of its stdout."""
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_LOCKER, name, f"{heartbeat:g}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "HOME": str(home)},
    )
    assert proc.stdin is not None
    proc.stdin.write(holder + b"\n")
    proc.stdin.flush()
    return proc


def wait_for(cond: Callable[[], bool], limit: float, step: float = 0.05) -> float | None:
    """Seconds until ``cond()`` held, None if it never did within ``limit``."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if cond():
            return time.monotonic() - started
        time.sleep(step)
    return None


def _matching(user: str, test: Callable[[Path], bool]) -> list[int]:
    """Live processes of ``user`` whose ``/proc/PID`` passes ``test`` (one gone meanwhile does not)."""
    uid = pwd.getpwnam(user).pw_uid
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid or not test(entry):
                continue
        except OSError:
            continue
        if alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def pids_of(user: str, needle: str) -> list[int]:
    """Live processes of ``user`` whose command line contains ``needle``."""
    return _matching(
        user, lambda proc: needle in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    )


def openers(user: str, suffix: str) -> list[int]:
    """Live processes of ``user`` with a file whose path ends with ``suffix`` open (a run lock's holder and the
    runs that wait for it)."""
    return _matching(user, lambda proc: any(os.readlink(fd).endswith(suffix) for fd in (proc / "fd").iterdir()))


def read_pid(lab: Lab, i: int, path: str, limit: float = 15.0) -> int:
    """The pid host i wrote to ``path`` (read as its user), waiting up to ``limit`` seconds for it."""
    got: list[int] = []

    def ready() -> bool:
        text = lab.run_as(i, ["cat", path]).stdout.strip()
        if text.isdigit():
            got.append(int(text))
        return bool(got)

    assert wait_for(ready, limit, 0.1) is not None, f"{path} never appeared"
    return got[0]


def sigkill_mid_command(lab: Lab, i: int, proc: subprocess.Popen[Any], pidfile: str) -> float | None:
    """SIGKILL the run ``proc`` once host i's command wrote ``pidfile``: the seconds until that command and its
    ``sleep 300`` were gone, None if they outlived 10 s."""
    sleeps: list[int] = []

    def sleeping() -> bool:  # the shell wrote its pid before it started the sleep: wait for that too
        sleeps[:] = pids_of(lab.hosts[i].user, "sleep 300")
        return bool(sleeps)

    try:
        pid = read_pid(lab, i, pidfile, 30)
        assert wait_for(sleeping, 15) is not None, "the command's sleep 300 never started"
        proc.kill()
        proc.communicate(timeout=15)
    finally:
        if proc.returncode is None:  # a failed assertion: reap the run here, not in a later test's warnings
            proc.kill()
            proc.communicate(timeout=15)
    return wait_for(lambda: not alive(pid) and not any(alive(p) for p in sleeps), 10)


LEADER = r"""#!/usr/bin/env python3
# A stand-in leader of a multi-host group (NOT SGLang): /health is 200 while the group it formed is whole.
import http.server, socket, sys, threading
ranks, http_port, group_port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
state = {"joined": 0, "broken": False}
def member(conn):
    state["joined"] += 1
    while conn.recv(1):
        pass
    state["broken"] = True  # a member left: this group is over (the leader must start again)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", group_port))
listener.listen(8)
def accept():
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=member, args=(conn,), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        whole = state["joined"] >= ranks and not state["broken"]
        self.send_response(200 if whole else 503)
        self.end_headers()
    def log_message(self, *a):
        pass
print("stand-in leader up", flush=True)
http.server.HTTPServer(("127.0.0.1", http_port), Health).serve_forever()
"""

RANK = r"""#!/usr/bin/env python3
# A stand-in rank (NOT SGLang): joins the leader's group, exits when the group connection ends.
import socket, sys, time
port = int(sys.argv[1])
while True:
    try:
        conn = socket.create_connection(("127.0.0.1", port), timeout=2)
        break
    except OSError:
        time.sleep(0.2)
conn.settimeout(None)
print("stand-in rank joined", flush=True)
while conn.recv(1):
    pass
sys.exit(1)
"""
