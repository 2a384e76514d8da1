"""The run lock on a channel of its own (``python3 -c RUN_LOCKER NAME H``), for a host whose python agent could
not start: holds ``~/.provision/run-NAME.lock`` (flock) for as long as the run is connected.

Reads the holder's description (one line) from stdin, answers ``locked`` or, when the lock stays held for the grace
(``lockwait.py``: a run that just ended may still be taking its commands with it), ``busy <the holder's line>``;
then it waits for its stdin to end (the run closed the connection or died: sshd closes it) or, when H > 0, for 3 H
seconds without a heartbeat (a frozen controller, a silently dropped link), and exits: the lock is free.
"""

import os
import select
import sys

from lockwait import take_lock


def main():
    beat = float(sys.argv[2]) if len(sys.argv) > 2 else 0
    home = os.path.expanduser("~/.provision")
    try:
        os.makedirs(home, 0o700)
    except OSError:
        pass
    fd = os.open(os.path.join(home, "run-%s.lock" % sys.argv[1]), os.O_RDWR | os.O_CREAT, 0o600)
    holder = b""
    while not holder.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk:
            sys.exit(0)
        holder += chunk
    if not take_lock(fd):  # still held after the grace (lockwait.py)
        os.write(1, b"busy " + os.pread(fd, 4096, 0).split(b"\n")[0] + b"\n")
        sys.exit(1)
    os.ftruncate(fd, 0)
    os.pwrite(fd, holder, 0)
    os.write(1, b"locked\n")
    while (beat <= 0 or select.select([0], [], [], 3 * beat)[0]) and os.read(0, 4096):
        pass


if __name__ == "__main__":
    main()
