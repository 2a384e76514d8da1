"""The start gate of a ``pd_serial_start`` server: its launch script runs it just before it execs SGLang, so that
the servers of one machine start one after another whoever starts them: ``pd up``, ``pd rollout``, or a
supervisor's restart after a crash or a reboot (provision's or systemd's, which restart on their own). SGLang
sizes a server's KV cache from the GPU memory free at its own start: two that start at once count the same
memory and one fails.

Usage: ``python3 start_gate.py KEY NAME PID HEALTH_URL TIMEOUT``

The lock is the abstract Unix socket ``\\0KEY`` (Linux): held while a process has it bound, freed by the kernel
when that process exits however it exits, shared by every user of the machine's network namespace, with no file
to follow, fill or leave behind. The gate waits to bind it, then forks a holder and returns at once (the launch
script then execs the server: PID is the script's own ``$$``, which becomes the server). The holder keeps the
lock until PID answers HEALTH_URL with 200, PID exits, or TIMEOUT seconds pass, and answers each waiter that
connects with NAME, so that a waiting server's log says whose start it waits for.

Every wait is bounded by TIMEOUT: any local user can bind the name, so a gate that waited TIMEOUT starts its
server anyway, and says so. A gate that cannot work (not Linux, a bad argument) says so and exits 0: it must never
keep a server from starting. What a waiter reads from the socket is untrusted: only a short run of name
characters is kept. One line on stderr (the server's log) per step. Stdlib only, Python 3.6+.
"""

import os
import re
import socket
import sys
import time
import urllib.request

POLL = 0.5  # seconds between tries of the lock, and between the holder's health probes
NAME_RE = re.compile(rb"[A-Za-z0-9._@:-]{1,128}")


def say(name, text):
    sys.stderr.write("[%s] start gate %s: %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), name, text))
    sys.stderr.flush()


def holder_name(key):
    """The NAME the lock's holder answers with, or None (a holder that does not answer: another program)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(1.0)
    try:
        sock.connect("\0" + key)
        data = sock.recv(256)
    except OSError:
        return None
    finally:
        sock.close()
    found = NAME_RE.match(data)
    return found.group(0).decode("ascii") if found else None


def acquire(key, name, deadline):
    """The bound, listening lock socket, or None when ``deadline`` passed first."""
    started, told = time.monotonic(), None
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind("\0" + key)
            sock.listen(8)
        except OSError:
            sock.close()
        else:
            if told is not None:
                say(name, "took the start lock after %.1fs" % (time.monotonic() - started))
            return sock
        if time.monotonic() >= deadline:
            return None
        holder = holder_name(key) or "another process"
        if holder != told:
            say(name, "waiting for the start lock: %s is starting" % holder)
            told = holder
        time.sleep(POLL)


def start_time(pid):
    """PID's start time in clock ticks since boot (/proc/PID/stat field 22), or None when it is gone or a zombie
    (dead, not yet reaped): a pid reused by another process is not the server."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


def healthy(opener, url):
    try:
        with opener.open(url, timeout=2.0) as answer:
            return answer.status == 200
    except Exception:
        return False


def hold(sock, name, pid, url, deadline):
    """The holder: keep the lock until the server is healthy, gone, or the deadline; answer waiters meanwhile."""
    born = start_time(pid)
    sock.settimeout(POLL)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the server's own URL: no proxy
    started, next_probe = time.monotonic(), 0.0
    while True:
        now = time.monotonic()
        if born is None or start_time(pid) != born:
            say(name, "the server exited before it was up: start lock released")
            return
        if now >= next_probe:
            if healthy(opener, url):
                say(name, "the server is up after %.1fs: start lock released" % (now - started))
                return
            next_probe = now + POLL
        if now >= deadline:
            say(name, "the server is not up after %.0fs: start lock released" % (now - started))
            return
        try:
            conn, _ = sock.accept()  # a waiter asking whose start it waits for (at most POLL: the socket's timeout)
        except OSError:  # socket.timeout included
            continue
        try:
            conn.settimeout(1.0)
            conn.sendall(name.encode("ascii", "replace") + b"\n")
        except OSError:
            pass
        finally:
            conn.close()


def main(argv):
    if len(argv) != 6:
        sys.stderr.write("usage: start_gate.py KEY NAME PID HEALTH_URL TIMEOUT\n")
        return 0
    key, name, url = argv[1], argv[2], argv[4]
    try:
        pid, timeout = int(argv[3]), float(argv[5])
    except ValueError:
        say(name, "bad PID or TIMEOUT %r %r: starting without the gate" % (argv[3], argv[5]))
        return 0
    if not sys.platform.startswith("linux"):
        say(name, "no abstract sockets here: starting without the gate")
        return 0
    deadline = time.monotonic() + timeout
    sock = acquire(key, name, deadline)
    if sock is None:
        say(name, "the start lock was not free after %.0fs: starting anyway" % timeout)
        return 0
    if os.fork():  # the gate returns; its child holds the lock (the socket) until the server is up
        sock.close()
        return 0
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        hold(sock, name, pid, url, time.monotonic() + timeout)
    finally:
        os._exit(0)  # the holder never returns into the launch script


if __name__ == "__main__":
    sys.exit(main(sys.argv))
