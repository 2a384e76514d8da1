"""The host side of ``apt``/``package``: Debian packages brought to a state with ``apt-get``, as Ansible's ``apt``
(stdlib only; the request as JSON on stdin).

Request keys: ``names`` (``pkg`` or ``pkg=version``), ``state`` (present, latest, absent), ``update_cache``,
``cache_valid_time``, ``purge``, ``autoremove``, ``install_recommends`` (null: apt's default), ``force``,
``only_upgrade``, ``allow_downgrade``, ``default_release``, ``dpkg_options``, ``check``. Prints one JSON answer with
Ansible's keys: ``changed``, ``cache_updated``/``cache_update_time`` (present/latest and cache updates),
``stdout``/``stderr`` when apt-get ran, ``failed``/``msg``/``rc`` when it could not. Every command is an argv with a
bounded wait; apt-get runs with ``DEBIAN_FRONTEND=noninteractive``.
"""

import json
import os
import shutil
import subprocess
import sys
import time

TIMEOUT = 1800
STAMP = "/var/lib/apt/periodic/update-success-stamp"
LISTS = "/var/lib/apt/lists"


class Failed(Exception):
    def __init__(self, msg, **data):
        super().__init__(msg)
        self.data = dict(data, msg=msg)


def run(argv, check=True):
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
    try:
        proc = subprocess.run(  # noqa: UP022 (capture_output is 3.7+; hosts may have 3.6)
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise Failed("'%s' did not finish within %d s" % (" ".join(argv), TIMEOUT)) from None
    out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
    if check and proc.returncode != 0:
        raise Failed("'%s' failed: %s" % (" ".join(argv), err), stdout=out, stderr=err, rc=proc.returncode)
    return proc.returncode, out, err


def cache_time():
    for path in (STAMP, LISTS):
        if os.path.exists(path):
            return int(os.stat(path).st_mtime)
    return 0


def installed_versions(names):
    """name -> installed version (absent names are missing)."""
    _, out, _ = run(["dpkg-query", "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Version}\n", *names], check=False)
    found = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[1].startswith("ii"):
            found[parts[0]] = parts[2]
    return found


def candidate(name, release):
    argv = ["apt-cache", "policy", name] if not release else ["apt-cache", "-t", release, "policy", name]
    _, out, _ = run(argv, check=False)
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Candidate:"):
            value = line.split(":", 1)[1].strip()
            return None if value == "(none)" else value
    return None


def apt_get(req, verb, specs):
    argv = ["apt-get", "-y"]
    for option in (req.get("dpkg_options") or "force-confdef,force-confold").split(","):
        if option.strip():
            argv += ["-o", "Dpkg::Options::=--%s" % option.strip()]
    if req.get("force"):
        argv.append("--force-yes")
    if req.get("autoremove"):
        argv.append("--auto-remove")
    if verb == "install" and req.get("only_upgrade"):
        argv.append("--only-upgrade")
    if verb == "remove" and req.get("purge"):
        argv.append("--purge")
    if req.get("check"):
        argv.append("--simulate")
    argv += [verb, *specs]
    if verb == "install":
        if req.get("default_release"):
            argv += ["-t", req["default_release"]]
        if req.get("install_recommends") is False:
            argv += ["-o", "APT::Install-Recommends=no"]
        elif req.get("install_recommends") is True:
            argv += ["-o", "APT::Install-Recommends=yes"]
        if req.get("allow_downgrade"):
            argv.append("--allow-downgrades")
    _, out, err = run(argv)
    return {"changed": True, "stdout": out, "stderr": err, "diff": {}}


def update_cache(req):
    """(updated, time) as Ansible's: updated when the cache is older than cache_valid_time (or always)."""
    before = cache_time()
    valid = int(req.get("cache_valid_time") or 0)
    if valid and before + valid >= time.time():
        return False, before
    if req.get("check"):
        return True, before
    run(["apt-get", "update", "-q"])
    after = cache_time()
    return after != before, after


def apply(req):
    if shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        raise Failed("this host has no apt-get/dpkg-query: provision's apt and package manage Debian/Ubuntu hosts")
    updated, stamp = False, cache_time()
    if req.get("update_cache"):
        updated, stamp = update_cache(req)
        if not req.get("names"):
            return {"changed": updated, "cache_updated": updated, "cache_update_time": stamp}
    names = req.get("names") or []
    for spec in names:
        if spec.count("=") > 1:
            raise Failed("invalid package spec: %s" % spec)
    split = [(s.split("=", 1)[0], s.split("=", 1)[1] if "=" in s else None) for s in names]
    have = installed_versions([n for n, _ in split]) if split else {}
    state = req.get("state") or "present"
    if state == "absent":
        gone = [n for n, v in split if n in have and (v is None or have[n] == v)]
        if not gone:
            return {"changed": False}
        return apt_get(req, "remove", gone)
    wanted = []
    for name, version in split:
        current = have.get(name)
        if version is not None:
            if current != version:
                wanted.append("%s=%s" % (name, version))
            continue
        if current is None:
            if req.get("only_upgrade"):
                continue
            if candidate(name, req.get("default_release")) is None:
                raise Failed("no available installation candidate for %s" % name)
            wanted.append(name)
        elif state == "latest":
            newest = candidate(name, req.get("default_release"))
            if newest is not None and newest != current:
                wanted.append(name)
    result = apt_get(req, "install", wanted) if wanted else {"changed": False}
    result.update(cache_updated=updated, cache_update_time=stamp)
    return result


def main():
    req = json.loads(sys.stdin.read())
    try:
        answer = apply(req)
    except Failed as exc:
        answer = dict(exc.data, failed=True)
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
