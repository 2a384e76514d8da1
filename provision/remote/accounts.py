"""Host side of ``group`` (stdlib only; Python 3.6+): read the group, change it only when it differs.

``python3 - group JSON`` with ``{"name", "state", "gid", "system", "force", "non_unique", "gid_min", "gid_max",
"check"}`` prints Ansible's result: ``groupadd``/``groupmod``/``groupdel`` run with an argv (no shell), as root
through ``become``; their stdout/stderr come back as Ansible's module returns them.
"""

import grp
import json
import subprocess
import sys


def _info(name):
    try:
        return grp.getgrnam(name)
    except KeyError:
        return None


def _exec(argv):
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # noqa: UP022
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def do_group(req):
    name, state, gid = req["name"], req.get("state") or "present", req.get("gid")
    result = {"name": name, "state": state}
    rc, out, err = None, "", ""
    current = _info(name)
    if state == "absent":
        if current is not None:
            if req.get("check"):
                return {"changed": True}
            rc, out, err = _exec(["groupdel"] + (["-f"] if req.get("force") else []) + [name])
    elif current is None:
        if req.get("check"):
            return {"changed": True}
        argv = ["groupadd"]
        if gid is not None:
            argv += ["-g", str(gid)] + (["-o"] if req.get("non_unique") else [])
        if req.get("system"):
            argv.append("-r")
        for key, value in (("GID_MIN", req.get("gid_min")), ("GID_MAX", req.get("gid_max"))):
            if value is not None:
                argv += ["-K", "%s=%s" % (key, value)]
        rc, out, err = _exec(argv + [name])
    elif gid is not None and current.gr_gid != int(gid):
        if req.get("check"):
            rc = 0
        else:
            rc, out, err = _exec(["groupmod", "-g", str(gid)] + (["-o"] if req.get("non_unique") else []) + [name])
    if rc is not None and rc != 0:
        return {"failed": True, "name": name, "msg": err}
    result["changed"] = rc is not None
    if out:
        result["stdout"] = out
    if err:
        result["stderr"] = err
    now = _info(name)
    if now is not None:
        result["system"] = bool(req.get("system"))
        result["gid"] = now.gr_gid
    return result


def main(argv):
    action, req = argv[1], json.loads(argv[2])
    answer = do_group(req) if action == "group" else {"failed": True, "msg": "unknown action %r" % action}
    print(json.dumps(answer))
    return 1 if answer.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
