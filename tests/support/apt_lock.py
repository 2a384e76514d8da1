"""A lock held on apt's and dpkg's lock files for a while, as dpkg and apt hold them (an ``fcntl`` write lock on
the whole file: what apt's ``GetLock`` tests, and whose holder it names): ``python apt_lock.py SECONDS PATH...``
returns once the locks are taken and prints the pid of the process that holds them; that process lets them go
after SECONDS (it is detached: a playbook's ``command`` task returns while it holds them), or as soon as the file
given with ``--until FILE`` exists (it removes it): a step that must find the lock held, however late it starts,
is followed by one that creates FILE."""

from __future__ import annotations

import fcntl
import os
import sys
import time


def _take(fd: int, wait: float = 10.0) -> None:
    """The lock on ``fd``, waiting up to ``wait`` s for a holder before (one just told to let go)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def hold(seconds: float, paths: list[str], until: str | None = None) -> int:
    """Fork a detached holder; return its pid once it holds every lock (an OSError when it could not)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the holder
        os.close(read)
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            fds = [os.open(path, os.O_RDWR | os.O_CREAT, 0o640) for path in paths]
            for fd in fds:
                _take(fd)
            os.write(write, b"locked")
        except OSError as exc:
            os.write(write, str(exc).encode())
            os._exit(1)
        os.close(write)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until is not None and os.path.exists(until):
                os.unlink(until)
                break
            time.sleep(0.05)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    if said != "locked":
        os.waitpid(pid, 0)
        raise OSError(f"could not lock {paths}: {said}")
    return pid


if __name__ == "__main__":
    if sys.argv[2] == "--until":
        print(hold(float(sys.argv[1]), sys.argv[4:], until=sys.argv[3]))
    else:
        print(hold(float(sys.argv[1]), sys.argv[2:]))
