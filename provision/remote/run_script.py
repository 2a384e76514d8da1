"""Host side of ``script``: the controller's script arrives on stdin and runs from a private temp file.

``python3 - run`` in the host library's envelope (``hostlib.serve``): stdin's first line is the request ``{"argv",
"executable", "chdir", "creates", "removes", "name"}``, the rest the script's bytes. ``creates``/``removes`` are
checked first (``{"skipped": true}``); the script is written to a new directory made by ``mkdtemp`` (mode 0700),
made executable, run with ``argv`` as its arguments (no shell: the words were split on the controller) and
``executable`` in front when given, in ``chdir``, with no stdin; the temp directory is removed afterwards. Answers
``{"ok": true, "rc", "stdout", "stderr"}`` (``msg`` too when the script could not be started)."""

import os
import shutil
import subprocess
import sys
import tempfile

import hostlib


@hostlib.takes_data
def run(req, data):
    for key, exists_skips in (("creates", True), ("removes", False)):
        path = req.get(key)
        if path and os.path.exists(os.path.expanduser(path)) == exists_skips:
            what = "exists, matching creates option" if exists_skips else "does not exist, matching removes option"
            return {"skipped": True, "msg": "%s %s" % (path, what)}
    work = tempfile.mkdtemp(prefix="provision-script-")
    try:
        path = os.path.join(work, os.path.basename(req.get("name") or "script") or "script")
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, 0o700)
        argv = ([req["executable"]] if req.get("executable") else []) + [path] + list(req.get("argv") or [])
        try:
            proc = subprocess.run(  # noqa: UP022 (Python 3.6 on hosts: no capture_output)
                argv,
                cwd=os.path.expanduser(req["chdir"]) if req.get("chdir") else None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            return {"rc": 127, "stdout": "", "stderr": str(exc), "msg": "could not run the script: %s" % exc}
        return {
            "rc": proc.returncode,
            "stdout": proc.stdout.decode("utf-8", "replace"),
            "stderr": proc.stderr.decode("utf-8", "replace"),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


ACTIONS = {"run": run}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
