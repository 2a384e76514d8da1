"""A small persistent Python helper on the host: runs provision's quick helper scripts without starting a new
interpreter for each task (stdlib only; Python 3.6+).

Started once per host and interpreter over one SSH channel (``python3 -c BOOTSTRAP H``: the bootstrap reads
this source, length-prefixed, from stdin). Then, on the same stdin, requests arrive framed as
``<length>\\n<json>``: ``{"name": script, "source": text or null (null: use the cached one), "args": [...],
"stdin": base64, "timeout": seconds}``. Each answer goes back framed the same way: ``{"rc": n, "out": base64,
"err": base64}``. Between two requests the controller may send heartbeats: a bare newline (an empty line where a
length would start), skipped.

The protocol uses private copies of fds 0 and 1; the real fds 0 and 1 point at /dev/null, so a script's child
processes can never write into the protocol stream. A script that runs past its timeout is interrupted with
SIGALRM and answered with rc 124, as GNU timeout does. When stdin ends (the channel closed, the controller
died) the agent exits and TERMs its process group: nothing it started outlives the run. When H > 0 (an SSH
host: the controller sends a heartbeat every H seconds), 3 H seconds without a byte on stdin count as its end
(a frozen controller, a link that dropped without a FIN reaching the host). A thread reads stdin, so either is
noticed also while a script runs.
"""

import base64
import io
import json
import os
import select
import signal
import sys
import threading
import traceback


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


class _Input:
    """The request stream: a thread reads stdin into a buffer; the end of stdin, or 3 ``beat`` seconds without
    a byte when ``beat`` > 0, ends the agent (:func:`_gone`) even while a script runs."""

    def __init__(self, fd, beat):
        self._fd = fd
        self._beat = beat
        self._buf = bytearray()
        self._cond = threading.Condition()
        pump = threading.Thread(target=self._pump, name="provision-agent-stdin")
        pump.daemon = True
        pump.start()

    def _pump(self):
        try:
            while True:
                if self._beat > 0 and not select.select([self._fd], [], [], 3 * self._beat)[0]:
                    return  # the controller went silent
                data = os.read(self._fd, 65536)
                if not data:
                    return
                with self._cond:
                    self._buf += data
                    self._cond.notify()
        finally:
            _gone()

    def line(self):
        with self._cond:
            while b"\n" not in self._buf:
                self._cond.wait()
            end = self._buf.index(b"\n")
            line = bytes(self._buf[:end])
            del self._buf[: end + 1]
        return line

    def exact(self, n):
        with self._cond:
            while len(self._buf) < n:
                self._cond.wait()
            data = bytes(self._buf[:n])
            del self._buf[:n]
        return data


def _run(code, name, args, stdin, timeout):
    saved = (sys.argv, sys.stdin, sys.stdout, sys.stderr, os.getcwd())
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    sys.argv = [name, *args]
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout, sys.stderr = out, err
    rc = 0
    if timeout:
        signal.alarm(max(1, int(timeout + 0.999)))
    try:
        exec(code, {"__name__": "__main__", "__file__": name, "__builtins__": __builtins__})
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            err.write(str(exc.code) + "\n")
    except _Timeout:
        rc = 124
    except BaseException:
        traceback.print_exc()
        rc = 1
    finally:
        signal.alarm(0)
        sys.argv, sys.stdin, sys.stdout, sys.stderr, cwd = saved
        try:
            os.chdir(cwd)
        except OSError:
            pass
    return rc, out.buffer.getvalue(), err.buffer.getvalue()


_leaving = []  # type: list[bool]


def _on_term(signum, frame):
    os._exit(0 if _leaving else 128 + signum)  # TERM from anyone else: as if by the default action


def _gone():
    """Our stdin ended (the controller closed the channel or died) or went silent (a frozen controller, a
    dropped link). Take what our scripts started with us, and exit: called from the stdin thread."""
    _leaving.append(True)  # our own TERM below reaches us too: exit 0 then
    if os.getpgrp() == os.getpid():  # we lead our own group (sshd's session child, or a local new session)
        try:
            os.killpg(0, signal.SIGTERM)
        except OSError:
            pass
    os._exit(0)


def main():
    beat = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0  # H: ``python3 -c BOOTSTRAP H``
    signal.signal(signal.SIGTERM, _on_term)  # a Python handler: the children of scripts get the default
    fd_in = os.dup(0)
    fout = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    signal.signal(signal.SIGALRM, _alarm)
    os.chdir(os.path.expanduser("~"))
    fin = _Input(fd_in, beat)
    cache = {}
    while True:
        line = fin.line()
        if not line.strip():
            continue  # a heartbeat
        request = json.loads(fin.exact(int(line)).decode("utf-8"))
        name = request["name"]
        if request.get("source") is not None:
            cache[name] = compile(request["source"], name, "exec")
        if name not in cache:
            answer = {"rc": 255, "out": "", "err": base64.b64encode(b"agent: unknown script").decode()}
        else:
            stdin = base64.b64decode(request.get("stdin") or "")
            rc, out, err = _run(cache[name], name, request.get("args", []), stdin, request.get("timeout"))
            answer = {"rc": rc, "out": base64.b64encode(out).decode(), "err": base64.b64encode(err).decode()}
        data = json.dumps(answer).encode("utf-8")
        fout.write(b"%d\n" % len(data) + data)
        fout.flush()


if __name__ == "__main__":
    sys.exit(main())
