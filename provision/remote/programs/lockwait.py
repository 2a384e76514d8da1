"""The run lock's take, with its grace: put in front of the programs that take it, the agent (``../agent.py``,
``op: lock``) and the stand-alone locker (``run_lock.py``). Builtins only, Python 3.6+.

The agent of a run that just ended holds its host's run lock until it exits, and it first takes that run's
commands with it (TERM, KILL 2 s later for one that ignores TERM): a run started right after another ended waits
for it, for up to LOCK_GRACE seconds, instead of being told the host is busy.
"""

LOCK_GRACE = 5.0  # seconds a held run lock is tried again before the run is told the host is busy


def take_lock(fd):
    """Take the exclusive flock of ``fd``, trying a held one again every 50 ms for LOCK_GRACE seconds: True when
    taken, False when still held by another."""
    import fcntl
    import time

    end = time.time() + LOCK_GRACE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            if time.time() >= end:
                return False
        time.sleep(0.05)
