"""Validate SGLang server command lines with the INSTALLED SGLang's own parser, without starting a server.

Usage: ``VENV_PYTHON - check`` with a JSON request on stdin (the host library's envelope, ``hostlib.serve``):
``argvs`` (a list of argument lists, what follows ``python -m sglang.launch_server``), ``env`` (the launch
environment: applied before SGLang is imported; ``PYTHONPATH`` entries also go to ``sys.path``), ``hf_token_file``
(read into ``HF_TOKEN`` when it exists, as the launch scripts do), ``stamp_dir`` (optional: remembers argument
lists that passed, keyed by the lists, the env and the installed SGLang's files, so an unchanged deployment skips
the ~5.5 s import).

For each argv: ``prepare_server_args(argv)`` (argparse: an unknown flag or a bad choice exits 2 with
argparse's message), then ``resolve_once()`` and ``check_server_args()`` (the combination checks) when this
SGLang has them (0.5.23 does). SGLang's own message is returned verbatim.

Answers ``{"ok", "cached", "sglang_version", "results": [{"ok", "error"}], "seconds"}`` (``ok`` false and
``msg`` when a command line is rejected); a failure without ``results`` when it could not check (no SGLang, its
import failed).
"""

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import sys
import time
import traceback

import hostlib


def install_identity():
    """What identifies the installed SGLang without importing it: its package files' sizes and times."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = next(iter(spec.submodule_search_locations))
    parts = [root]
    for rel in ("version.py", os.path.join("srt", "server_args.py")):
        try:
            st = os.stat(os.path.join(root, rel))
            parts.append("%s:%d:%d" % (rel, st.st_size, int(st.st_mtime)))
        except OSError:
            parts.append(rel + ":missing")
    return "|".join(parts)


def parser_message(text):
    """argparse's error without its (very long) usage block: the ``PROG: error: ...`` line onwards."""
    lines = text.strip().splitlines()
    for i, line in enumerate(lines):
        if ": error: " in line:
            return "\n".join(lines[i:])
    return text.strip()


def check_one(prepare, argv):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = prepare(list(argv))
            if hasattr(args, "resolve_once"):
                args.resolve_once()
            if hasattr(args, "check_server_args"):
                args.check_server_args()
    except SystemExit as exc:
        return {"ok": False, "error": parser_message(err.getvalue()) or "the parser exited with %s" % exc.code}
    except Exception as exc:
        message = "%s: %s" % (type(exc).__name__, exc)
        where = traceback.extract_tb(exc.__traceback__)[-1:]
        if where:
            message += " (%s:%s)" % (os.path.basename(where[0].filename), where[0].lineno)
        return {"ok": False, "error": message}
    return {"ok": True, "error": None}


def check(req):
    argvs = [[str(w) for w in argv] for argv in req["argvs"]]
    started = time.monotonic()
    env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
    os.environ.update(env)
    token_file = os.path.expanduser(req.get("hf_token_file") or "")
    if token_file and os.path.isfile(token_file):
        with open(token_file) as fh:
            os.environ["HF_TOKEN"] = fh.read().strip()  # as the launch script does: gated configs load
    for entry in reversed([p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]):
        sys.path.insert(0, entry)
    identity = install_identity()
    if identity is None:
        raise hostlib.Failed("sglang is not installed for %s" % sys.executable)
    key = hashlib.sha256(json.dumps([argvs, sorted(env.items()), identity]).encode()).hexdigest()
    stamp = os.path.join(os.path.expanduser(req["stamp_dir"]), key) if req.get("stamp_dir") else None
    if stamp and os.path.exists(stamp):
        return {"ok": True, "cached": True, "results": [{"ok": True, "error": None}] * len(argvs)}
    try:
        import sglang
        from sglang.srt.server_args import prepare_server_args
    except Exception as exc:
        raise hostlib.Failed("importing sglang failed: %s: %s" % (type(exc).__name__, exc)) from None
    results = [check_one(prepare_server_args, argv) for argv in argvs]
    ok = all(r["ok"] for r in results)
    if ok and stamp:
        os.makedirs(os.path.dirname(stamp), mode=0o700, exist_ok=True)
        with open(stamp, "w") as fh:
            fh.write(json.dumps(argvs))
    version = getattr(sglang, "__version__", None)
    seconds = round(time.monotonic() - started, 2)
    answer = {"ok": ok, "cached": False, "sglang_version": version, "results": results, "seconds": seconds}
    if not ok:
        rejected = len([r for r in results if not r["ok"]])
        answer["msg"] = "SGLang %s rejects %d of the command lines" % (version, rejected)
    return answer


ACTIONS = {"check": check}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
