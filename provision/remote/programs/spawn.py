"""The spawn core: start a command's ``/bin/sh`` script in a new session, stop its whole session (TERM, then
KILL), and watch the controller's stream (its end, or 3 H seconds without a heartbeat).

Used by the runner (``runner.py``), the python agent's ``exec`` (``../agent.py``) and async jobs
(``async_job.py``): the controller puts this text in front of each (``provision.remote.program``). Builtins
only (``os``, ``select``, ``time``, ``_thread``, ``_signal``: no ``subprocess``, ``threading`` or ``signal``,
which would double the interpreter's start time), Python 3.6+. A command starts with ``posix_spawn`` where the
host's Python has it (3.8+), else with fork and exec (:func:`_spawn`).
"""

import _signal
import _thread
import os
import select

# reset to their default action in the command: SIGPIPE and SIGXFSZ (Python ignores them), SIGTERM and
# SIGALRM (the agent handles them)
DEFAULT_SIGNALS = (13, 25, 15, 14)


def feed(fd, data):
    """Write all of ``data`` to ``fd``, then close it; a reader that left early is no error."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass
    os.close(fd)


def heard(fd, beat, size=65536):
    """The next bytes on ``fd``: b'' at its end, and (``beat`` > 0) after 3 ``beat`` seconds without a byte
    (the controller sends a heartbeat every ``beat`` seconds: silence is a frozen controller or a dropped link)."""
    if beat > 0 and not select.select([fd], [], [], 3 * beat)[0]:
        return b""
    return os.read(fd, size)


def watch(fd, beat, got, gone):
    """Pass each chunk read from ``fd`` to ``got`` (None: drop it) until its end or its silence
    (:func:`heard`), then call ``gone``: the controller went away. Runs in a thread of its own."""
    try:
        while True:
            chunk = heard(fd, beat)
            if not chunk:
                break
            if got is not None:
                got(chunk)
    finally:
        gone()


def exactly(fd, n, beat):
    """``n`` bytes from ``fd``; None when it ends or goes silent first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = heard(fd, beat, min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


PIPE_BUF = 4096  # bytes that a write to an empty pipe takes at once (POSIX): fed inline, no thread


def _spawn(sr, dr, out, err):
    """The pid of ``/bin/sh /proc/self/fd/3`` in a NEW session, ``sr`` as its fd 3, ``dr`` its stdin, ``out``
    and ``err`` its stdout and stderr when given, :data:`DEFAULT_SIGNALS` at their default action; it has
    exec'd when this returns, so its session exists before anything may signal it. ``posix_spawn`` where the
    host's Python has it (3.8+: no copy of this process, whose pages a fork copies and then faults in again:
    about half of what starting a command costs the host), else fork and exec (exit 127 when exec fails)."""
    moves = [(dr, 0), (out, 1), (err, 2), (sr, 3)]
    moves = [(src, dst) for src, dst in moves if src >= 0]
    if _SPAWN:
        copies = []  # a dup2 onto the same fd keeps close-on-exec before glibc 2.29: a copy moves instead
        actions = []
        for src, dst in moves:
            if src == dst:
                src = os.dup(src)
                copies.append(src)
            actions.append((os.POSIX_SPAWN_DUP2, src, dst))
        try:
            return os.posix_spawn("/bin/sh", ["/bin/sh", "/proc/self/fd/3"], os.environ, file_actions=actions,
                                  setsid=True, setsigdef=DEFAULT_SIGNALS)  # fmt: skip
        except (NotImplementedError, TypeError):  # no POSIX_SPAWN_SETSID in this libc (or no setsid= here)
            del _SPAWN[:]
        except OSError:
            pass  # no /bin/sh, say: the fork below exits 127, as a shell would
        finally:
            for fd in copies:
                os.close(fd)
    xr, xw = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            for src, dst in moves:
                os.dup2(src, dst)
            os.set_inheritable(3, True)
            for sig in DEFAULT_SIGNALS:
                _signal.signal(sig, 0)
            os.execv("/bin/sh", ["/bin/sh", "/proc/self/fd/3"])
        finally:
            os._exit(127)
    os.close(xw)
    os.read(xr, 1)
    os.close(xr)
    return pid


# Python 3.8+ (posix_spawnp came with posix_spawn's setsid=); emptied once the libc turns setsid down
_SPAWN = [True] if hasattr(os, "posix_spawnp") else []


class Child:
    """``/bin/sh`` running ``script`` (through a pipe on fd 3: never argv) in a NEW session, ``data`` fed to
    its stdin; stdout and stderr to ``out``/``err`` when given (closed here: the child has them). Returns
    once the child has exec'd (:func:`_spawn`), so its session exists before anything may signal it.
    ``done``: a fd that becomes readable once it exited, ``status`` its wait status then."""

    def __init__(self, script, data, out=-1, err=-1):
        sr, sw = os.pipe()
        dr, dw = os.pipe()
        pid = _spawn(sr, dr, out, err)
        for fd in (sr, dr, out, err):
            if fd >= 0:
                os.close(fd)
        self.pid = pid
        self.status = None
        self.done, w = os.pipe()
        for fd, text in ((sw, script), (dw, data)):
            if len(text) <= PIPE_BUF:  # an empty pipe takes it whole: no thread
                feed(fd, text)
            else:
                _thread.start_new_thread(feed, (fd, text))
        _thread.start_new_thread(self._reap, (w,))

    def _reap(self, w):
        try:
            self.status = os.waitpid(self.pid, 0)[1]
        except OSError:
            self.status = 255 << 8
        try:
            os.write(w, b"x")
        except OSError:  # the owner saw the status and closed ``done`` first: nobody is waiting
            pass
        os.close(w)

    def wait(self, seconds=None):
        """Whether the child exited within ``seconds`` (None: waits for it)."""
        return self.status is not None or bool(select.select([self.done], [], [], seconds)[0])

    def rc(self):
        """The exit code, as a shell reports it: 128 + N when killed by signal N."""
        s = self.status or 0
        return os.WEXITSTATUS(s) if os.WIFEXITED(s) else 128 + os.WTERMSIG(s)

    def signal(self, sig):
        """``sig`` to the child's whole session (its process group: everything it started, unless that left)."""
        try:
            os.killpg(self.pid, sig)
        except OSError:
            pass

    def stop(self, grace):
        """TERM the session, KILL it ``grace`` seconds later (or at once when the child exited before)."""
        self.signal(15)
        if grace:
            self.wait(grace)
        self.signal(9)


def ended(child, timeout, gone=-1):
    """Wait for ``child`` until ``timeout`` seconds (0 or None: no limit) or until the fd ``gone`` (when given)
    becomes readable; how it ended: ``"exited"`` (its own exit comes first when both are ready), ``"deadline"``
    (TERM its session, KILL it 5 s later) or ``"gone"`` (the controller went away: TERM, KILL 2 s later). The
    caller decides the exit code, in one thread: a child killed here never exits with its own status first."""
    if child.status is None:
        fds = [child.done] if gone < 0 else [child.done, gone]
        ready = select.select(fds, [], [], timeout if timeout and timeout > 0 else None)[0]
        if child.done not in ready:
            child.stop(2 if ready else 5)
            return "gone" if ready else "deadline"
    return "exited"
