"""What a host's Python stack looks like, in ONE command (stdlib only; runs on Python 3.6+ so that an
interpreter that is too old can still say so).

Run by the ``venv_stack`` / ``nixl_variant`` modules with the host's base interpreter as ``python - state``
with the request on stdin (the host library's envelope, ``hostlib.serve``): ``{"venv": path, "packages":
[names], "uv": path-or-null, "need_venv": bool, "imports": [modules], "disk": path-or-null, "base_packages":
[names]}``. Answers ONE JSON object:

    {"ok": true, "python": {"path", "version", "venv_ok"}, "machine", "system",
     "venv": {"path", "kind": "link"|"dir"|"absent"|"other", "target", "python_ok", "version",
              "installed": {name: version-or-null}, "torch_cuda", "import_error", "error"},
     "uv": {"exists", "sha256"} | null, "disk": {"path", "free"} | null,
     "base": {"installed": {name: version-or-null}, "glibc"}  (only with base_packages)}

The installed versions come from ``importlib.metadata`` run by the venv's own Python (``-I``: no user
site, no PYTHON* variables): one extra interpreter start, about 0.1 s with the state check. ``torch_cuda``
is the CUDA version torch was built for (read from ``torch/version.py`` without importing torch).
"""

import json
import os
import platform
import sys

import hostlib

# Run by the venv's python: versions of the named distributions, torch's CUDA (read, not imported), then
# the imports asked for (the gate before a new env is switched in).
PROBE = r"""
import importlib, json, platform, re, sys
import importlib.metadata as md
out = {"version": platform.python_version(), "installed": {}, "torch_cuda": None, "import_error": None}
for name in json.loads(sys.argv[1]):
    try:
        out["installed"][name] = md.version(name)
    except md.PackageNotFoundError:
        out["installed"][name] = None
try:
    text = md.distribution("torch").locate_file("torch/version.py").read_text()
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([0-9.]+)", text, re.M)
    out["torch_cuda"] = m.group(1) if m else None
except Exception:
    pass
import os
sys.stdout.flush()
real_stdout = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # whatever the imports print (Python or C) goes to stderr: stdout holds the JSON only
sys.stdout = sys.stderr
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        out["import_error"] = "import %s: %s: %s" % (name, type(exc).__name__, exc)
        break
real_stdout.write(json.dumps(out) + "\n")
real_stdout.flush()
"""


def last_line(text):
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def venv_ok():
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError:
        return False
    return True


def venv_state(path, packages, imports):
    out = {"path": path, "kind": "absent", "target": None, "python_ok": False, "version": None,
           "installed": {}, "torch_cuda": None, "import_error": None, "error": None}  # fmt: skip
    if os.path.islink(path):
        out["kind"] = "link"
        out["target"] = os.readlink(path)
    elif os.path.isdir(path):
        out["kind"] = "dir"
    elif os.path.lexists(path):
        out["kind"] = "other"
    python = os.path.join(path, "bin", "python")
    if out["kind"] in ("absent", "other") or not os.path.exists(python):
        return out
    rc, stdout, stderr = hostlib.run([python, "-I", "-c", PROBE, json.dumps(packages), *imports], timeout=300)
    try:
        probe = json.loads(last_line(stdout))
    except ValueError:
        out["error"] = last_line(stderr) or f"the venv's python did not run (rc={rc})"
        return out
    out.update(python_ok=True, version=probe["version"], installed=probe["installed"])
    out.update(torch_cuda=probe["torch_cuda"], import_error=probe["import_error"])
    return out


def base_state(packages):
    """Versions of ``packages`` in the base interpreter itself (what a venv with system site packages sees)."""
    installed = {}  # type: dict
    out = {"installed": installed, "glibc": None}  # type: dict
    try:
        import importlib.metadata as md
    except ImportError:  # Python < 3.8: too old for the stack anyway, python_check says so
        return out
    for name in packages:
        try:
            installed[name] = md.version(name)
        except md.PackageNotFoundError:
            installed[name] = None
    libc, version = platform.libc_ver()
    out["glibc"] = version if libc == "glibc" else None
    return out


def uv_state(path):
    exists = os.path.isfile(path)
    return {"exists": exists, "sha256": hostlib.digest(path) if exists else None}


def disk_state(path):
    probe = path
    while probe and not os.path.isdir(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    try:
        st = os.statvfs(probe or "/")
    except OSError:
        return None
    return {"path": probe, "free": st.f_bavail * st.f_frsize}


def state(request):
    python = {"path": sys.executable, "version": platform.python_version(), "venv_ok": None}
    if request.get("need_venv"):
        python["venv_ok"] = venv_ok()
    answer = {
        "python": python,
        "machine": platform.machine(),
        "system": platform.system(),
        "venv": None,
        "uv": None,
        "disk": None,
    }
    if request.get("venv"):
        answer["venv"] = venv_state(request["venv"], request.get("packages", []), request.get("imports", []))
    uv = request.get("uv")
    if uv:
        answer["uv"] = uv_state(uv)
    if request.get("disk"):
        answer["disk"] = disk_state(request["disk"])
    if request.get("base_packages") is not None:
        answer["base"] = base_state(request["base_packages"])
    return answer


ACTIONS = {"state": state}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
