"""Async tasks and ``async_status`` (``python3 -c ASYNC_JOB MODE JID ...``): the ONE deliberate exception to "a
command dies with its channel".

Job files live in ``~/.provision/async/`` (0700); each is written atomically (O_EXCL temp file, 0600, rename)
and holds a JSON record. Modes:

- ``start JID LIMIT NM NS``: reads NM bytes of metadata (JSON: what the controller keeps with the job), NS bytes
  of job script and then the job's stdin data from its stdin; writes the "started" record, then double-forks a
  daemon (so the runner's TERM/KILL of its session, when the channel closes, does not reach it) with
  stdin/stdout/stderr on /dev/null. The daemon runs the script as the runner does (:class:`spawn.Child`: a new
  session), output to 0600 files beside the record; after LIMIT seconds it TERMs the job's session (KILL 5 s
  later) and records "Timeout exceeded". The finished record replaces the started one (rc, stdout, stderr, times).
- ``write JID``: the record given on stdin (JSON), as a finished job (check mode, a skipped guard).
- ``status JID``: prints ``{"file": PATH, "job": TEXT or null}``. ``cleanup JID``: removes the record and its
  output files.

The controller's text of it is what the host's process list shows: it holds no user value.
"""

import json
import os
import sys
import time

from spawn import Child, ended

MODE, JOB = sys.argv[1], sys.argv[2]
DIR = os.path.join(os.path.expanduser("~"), ".provision", "async")
FILE = os.path.join(DIR, JOB)


def put(record):
    tmp = "%s.tmp%d" % (FILE, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, json.dumps(record).encode())
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, FILE)


def say(**answer):
    answer["file"] = FILE
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def taken(path):
    """A job's output file, read and removed."""
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    finally:
        os.remove(path)


def start(request):
    limit, nm, ns = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    meta = json.loads(request[:nm].decode())
    script, data = request[nm : nm + ns], request[nm + ns :]
    put({"ansible_job_id": JOB, "started": 1, "finished": 0, "meta": meta})
    r, w = os.pipe()
    if os.fork():
        os.close(w)
        os.read(r, 1)  # the daemon is on its own: answer
        say()
        os._exit(0)
    os.close(r)
    os.setsid()
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(w)
    out = os.open(FILE + ".out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(FILE + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    began = time.time()
    child = Child(script, data, out, err)
    record = {"ansible_job_id": JOB, "started": 1, "finished": 1, "meta": meta, "start": began}
    if ended(child, limit) == "exited":
        record.update(rc=child.rc(), stdout=taken(FILE + ".out"), stderr=taken(FILE + ".err"))
    else:
        taken(FILE + ".out")
        taken(FILE + ".err")
        record.update(failed=1, msg="Timeout exceeded", child_pid=child.pid, stdout="", stderr="")
    record["end"] = time.time()
    put(record)
    os._exit(0)


def main():
    os.makedirs(DIR, 0o700, exist_ok=True)
    if MODE == "status":
        try:
            with open(FILE) as fh:
                text = fh.read()
        except FileNotFoundError:
            text = None
        say(job=text)
    elif MODE == "cleanup":
        for path in (FILE, FILE + ".out", FILE + ".err"):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
        say()
    elif MODE == "write":
        record = json.loads(sys.stdin.buffer.read().decode())
        record.update(ansible_job_id=JOB, started=1, finished=1)
        put(record)
        say()
    else:
        start(sys.stdin.buffer.read())


if __name__ == "__main__":
    main()
