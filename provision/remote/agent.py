"""A small persistent Python helper on the host: runs provision's quick helper scripts without starting a new
interpreter for each task (stdlib only; Python 3.6+).

Started once per host and interpreter over one SSH channel (``python3 -c BOOTSTRAP``: the bootstrap reads this
source, length-prefixed, from stdin). Then, on the same stdin, requests arrive framed as ``<length>\\n<json>``:
``{"name": script, "source": text or null (null: use the cached one), "args": [...], "stdin": base64,
"timeout": seconds}``. Each answer goes back framed the same way: ``{"rc": n, "out": base64, "err": base64}``.

The protocol uses private copies of fds 0 and 1; the real fds 0 and 1 point at /dev/null, so a script's child
processes can never write into the protocol stream. A script that runs past its timeout is interrupted with
SIGALRM and answered with rc 124, as GNU timeout does. When stdin ends (the channel closed, the controller
died) the agent exits and TERMs its process group: nothing it started outlives the run.
"""

import base64
import io
import json
import os
import signal
import sys
import traceback


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _read_exact(stream, n):
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EOFError()
        data += chunk
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


def _gone():
    """Our stdin ended: the controller closed the channel or died. Take what our scripts started with us."""
    if os.getpgrp() == os.getpid():  # we lead our own group (sshd's session child, or a local new session)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            os.killpg(0, signal.SIGTERM)
        except OSError:
            pass
    return 0


def main():
    fin = os.fdopen(os.dup(0), "rb")
    fout = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    signal.signal(signal.SIGALRM, _alarm)
    os.chdir(os.path.expanduser("~"))
    cache = {}
    while True:
        line = fin.readline()
        if not line:
            return _gone()
        request = json.loads(_read_exact(fin, int(line)).decode("utf-8"))
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
