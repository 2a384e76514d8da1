"""Which of some requirements the running Python already satisfies (stdlib only; Python 3.6+).

Run by the ``pip`` module with the target interpreter (a virtualenv's ``bin/python``) as ``python - state``
with the request on stdin (the host library's envelope, ``hostlib.serve``): ``{"requirements": ["six==1.16.0",
...], "file": path-or-null}``. Answers ``{"ok": true, "python": version, "results": [{"req", "name",
"installed", "satisfied"}], "file_ok": bool}``:
``satisfied`` is true/false, or null when it cannot be told here (a URL, a path, an unknown specifier);
``file_ok`` is false when the requirements file has lines this script does not understand (-e, -r, URLs).

The controller imports :func:`evaluate` too, for ``pip list --format=json`` output (``executable``): the host
library is imported only when the file runs as a script.
"""

import os
import re
import sys

REQ_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(\(?[^;]*?\)?)\s*(;.*)?$")
NESTED = ("-r", "-c", "-e", "--requirement", "--constraint", "--editable")
SPEC_RE = re.compile(r"^\s*(===|==|!=|~=|>=|<=|>|<)\s*([A-Za-z0-9.*+!_-]+)\s*$")


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _packaging():
    for prefix in ("packaging", "pip._vendor.packaging"):
        try:
            spec = __import__(prefix + ".specifiers", fromlist=["SpecifierSet"])
            markers = __import__(prefix + ".markers", fromlist=["Marker"])
            return spec.SpecifierSet, markers.Marker
        except Exception:  # missing or broken: fall back to the simple rules
            continue
    return None, None


def _release(version):
    """The numeric release segment of a version (``1.16.0rc1`` -> (1, 16, 0)); None if not simple."""
    m = re.match(r"^v?(\d+(?:\.\d+)*)", version)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def _pad(a, b):
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)), b + (0,) * (n - len(b))


def _simple_match(op, want, have):
    """Specifier check for plain numeric versions; None when the rules here cannot decide."""
    if op == "===":
        return have == want
    if op in ("==", "!=") and want.endswith(".*"):
        prefix = _release(want[:-2])
        got = _release(have)
        if prefix is None or got is None:
            return None
        hit = got[: len(prefix)] == prefix
        return hit if op == "==" else not hit
    a, b = _release(have), _release(want)
    if a is None or b is None or not re.match(r"^v?[\d.]+$", have) or not re.match(r"^v?[\d.]+$", want):
        return None
    a, b = _pad(a, b)
    if op == "~=":
        prefix = b[: len(_release(want)) - 1]
        return (a >= b and a[: len(prefix)] == prefix) if prefix else None
    return {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]


def parse(req):
    """(name, specifier text, marker text) of a requirement string, or None for URLs and paths."""
    if "://" in req or "/" in req or req.startswith((".", "-")) or req.endswith((".whl", ".zip", ".gz")):
        return None
    m = REQ_RE.match(req)
    if not m or "@" in req.split(";")[0]:
        return None
    return m.group(1), m.group(3).strip("() "), (m.group(4) or ";")[1:].strip()


def evaluate(reqs, installed):
    """Results for requirement strings given ``installed``: canonical name -> version."""
    spec_set, marker_cls = _packaging()
    results = []
    for req in reqs:
        parsed = parse(req)
        if parsed is None:
            results.append({"req": req, "name": None, "installed": None, "satisfied": None})
            continue
        name, spec, marker = parsed
        have = installed.get(canonical(name))
        out = {"req": req, "name": name, "installed": have, "satisfied": None}
        results.append(out)
        if marker:
            if marker_cls is None:
                continue
            try:
                if not marker_cls(marker).evaluate():
                    out["satisfied"] = True  # not for this interpreter: nothing to do
                    continue
            except Exception:  # an unparsable marker: let pip decide
                continue
        if have is None:
            out["satisfied"] = False
        elif not spec:
            out["satisfied"] = True
        elif spec_set is not None:
            try:
                out["satisfied"] = spec_set(spec).contains(have, prereleases=True)
            except Exception:  # an unknown specifier: let pip decide
                out["satisfied"] = None
        else:
            checks = [SPEC_RE.match(part) for part in spec.split(",")]
            verdicts = [_simple_match(c.group(1), c.group(2), have) if c else None for c in checks]
            out["satisfied"] = None if None in verdicts else all(verdicts)
    return results


def installed_versions():
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        import pkg_resources

        return {canonical(d.project_name): d.version for d in pkg_resources.working_set}
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and canonical(name) not in found:
            found[canonical(name)] = dist.version
    return found


def read_file(path):
    """Requirement lines of a requirements file; (lines, understood)."""
    lines, ok = [], True
    with open(os.path.expanduser(path)) as fh:
        for raw in fh:
            line = raw.split(" #")[0].strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("-"):
                ok = ok and not line.startswith(NESTED)
                continue
            lines.append(re.sub(r"\s--hash[= ]\S+", "", line))
    return lines, ok


def state(req):
    reqs = list(req.get("requirements") or [])
    file_ok = True
    if req.get("file"):
        try:
            lines, file_ok = read_file(req["file"])
        except OSError as exc:
            raise OSError("cannot read %s: %s" % (req["file"], exc.strerror)) from None
        reqs += lines
    results = evaluate(reqs, installed_versions())
    return {"python": sys.version.split()[0], "results": results, "file_ok": file_ok}


ACTIONS = {"state": state}

if __name__ == "__main__":
    import hostlib

    sys.exit(hostlib.serve(ACTIONS))
