"""The host side of ``apt``/``package`` and ``dnf``: packages brought to a state with ``apt-get`` as Ansible's
``apt``, or with the ``dnf`` command line and ``rpm`` as Ansible's ``dnf`` (stdlib only; the request as JSON on
stdin, ``python3 - apply``: the host library's envelope, ``hostlib.serve``; ``manager``: ``apt``, the default,
or ``dnf``).

apt request keys: ``names`` (``pkg`` or ``pkg=version``), ``state`` (present, latest, absent), ``update_cache``,
``cache_valid_time``, ``purge``, ``autoremove``, ``install_recommends`` (null: apt's default), ``force``,
``only_upgrade``, ``allow_downgrade``, ``default_release``, ``dpkg_options``, ``check``. Prints one JSON answer with
Ansible's keys: ``changed``, ``cache_updated``/``cache_update_time`` (present/latest and cache updates),
``stdout``/``stderr`` when apt-get ran, ``failed``/``msg``/``rc`` when it could not. Every command is an argv with a
bounded wait; apt-get runs with ``DEBIAN_FRONTEND=noninteractive``.

dnf request keys: ``names`` (package specs), ``state`` (present, latest, absent), ``installroot``,
``releasever``, ``conf_file``, ``disable_gpg_check``, ``enablerepo``/``disablerepo``, ``update_cache``,
``autoremove``, ``allow_downgrade``, ``install_weak_deps``, ``enable_plugin``/``disable_plugin``, ``check``. The
answer has Ansible's keys: ``changed``, ``msg``, ``rc``, ``results`` (``Installed: NEVRA``, ``Removed: NEVRA``,
``No match for argument: SPEC``), ``failures`` when it failed. What changed is read from the rpm database before
and after (never from dnf's text); check mode reads dnf's transaction table (``--assumeno``).
"""

import configparser
import os
import shutil
import subprocess
import sys
import time

import hostlib
from hostlib import Failed

TIMEOUT = 1800
STAMP = "/var/lib/apt/periodic/update-success-stamp"
LISTS = "/var/lib/apt/lists"
DNF_CONF = "/etc/dnf/dnf.conf"
REPOSDIRS = "/etc/yum.repos.d,/etc/yum/repos.d,/etc/distro.repos.d"  # dnf's default reposdir
NEVRA_QF = "%{NAME}\t%{EPOCHNUM}\t%{VERSION}-%{RELEASE}\t%{ARCH}\n"
INSTALLING = ("Installing", "Installing dependencies", "Installing weak dependencies")
REPLACING = ("Upgrading", "Downgrading")
CHECK_MSG = "Check mode: No changes made, but would have if not in check mode"
REMOVING = ("Removing", "Removing dependent packages", "Removing unused dependencies")


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


def apt_apply(req):
    if shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        raise Failed(
            "this host has no apt-get/dpkg-query: provision's apt and package manage Debian/Ubuntu hosts"
            + ("; this host has dnf: use the dnf module (or package)" if shutil.which("dnf") else "")
        )
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


def dnf_argv(req, *tail):
    """dnf with the request's options. dnf's command line looks for its config file and repo dirs inside
    ``--installroot`` first; Ansible's module (dnf's API) reads the host's: both are given, as host paths."""
    conf = req.get("conf_file") or DNF_CONF
    argv = ["dnf", "--color=never", "--installroot", req.get("installroot") or "/"]
    if os.path.exists(conf):
        argv += ["--config", conf]
    argv += [
        "--setopt=reposdir=" + reposdirs(conf),
        "--setopt=clean_requirements_on_remove=%s" % bool(req.get("autoremove")),  # Ansible's, not dnf.conf's
        "--setopt=install_weak_deps=%s" % bool(req.get("install_weak_deps", True)),
    ]
    if req.get("releasever"):
        argv += ["--releasever", str(req["releasever"])]
    if req.get("disable_gpg_check"):
        argv.append("--nogpgcheck")
    for option, key in (("disablerepo", "disablerepo"), ("enablerepo", "enablerepo"),
                        ("disableplugin", "disable_plugin"), ("enableplugin", "enable_plugin")):  # fmt: skip
        argv += ["--%s=%s" % (option, value) for value in req.get(key) or []]
    return argv + list(tail)


def reposdirs(conf):
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read(conf)
    except configparser.Error as exc:
        raise Failed("cannot read configuration file %s: %s" % (conf, exc), results=[]) from None
    return parser.get("main", "reposdir", fallback=REPOSDIRS)


def dnf(req, command, dry):
    """One dnf command (``--assumeno`` when ``dry``): its output. A failure raises with Ansible's keys: a spec
    that matches nothing is Ansible's "No package SPEC available." in ``failures``."""
    mode = ["--assumeno", "--nogpgcheck"] if dry else ["-y"]  # a plan checks no signature, as Ansible's check mode
    rc, out, err = run(dnf_argv(req, *mode, *command), check=False)
    if rc == 0 or (dry and "Operation aborted." in err):
        return out
    missing = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("No match for argument:")]
    if missing:
        failures = ["No package %s available." % spec for spec in missing]
        raise Failed("Failed to install some of the specified packages", failures=failures, results=[], rc=1)
    errors = [line for line in err.splitlines() if line.startswith("Error")]
    text = " ".join(errors) or " ".join(err.strip().split("\n\n")[0].split())  # else its first paragraph
    raise Failed(text or "dnf exited with %d" % rc, failures=[], results=[], rc=rc)


def planned(out):
    """dnf's transaction table as (section, name, arch, evr) rows. A row starts with one space; a name too wide
    for its column pushes the rest of the row onto the next lines; "replacing" lines (obsoletes) are removals."""
    entries, section = [], None
    for line in out.splitlines():
        words = line.split()
        if not words or not line.startswith(" "):
            section = line[:-1] if line.endswith(":") else None
        elif section is None:
            continue
        elif words[0] == "replacing" and len(words) >= 3:
            name, _, arch = words[1].rpartition(".")
            entries.append(["Removing", name, arch, words[2]])
        elif line[1] != " " or not entries:
            entries.append([section, *words])
        else:
            entries[-1] += words
    return [tuple(entry[:4]) for entry in entries if len(entry) >= 4]


def rpm_packages(root):
    """NEVRA (as dnf writes it: the epoch only when not 0) -> (name, arch) of every installed package."""
    _, out, _ = run(["rpm", "--root", root, "-qa", "--qf", NEVRA_QF])
    found = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[0] != "gpg-pubkey":  # imported signing keys are not packages to Ansible
            name, epoch, version, arch = parts
            found[nevra(name, version if epoch == "0" else "%s:%s" % (epoch, version), arch)] = (name, arch)
    return found


def nevra(name, evr, arch):
    return "%s-%s.%s" % (name, evr, arch)


def rpm_has(root, spec):
    """Whether an installed package matches the spec: by name (or name-version...), else by what it provides."""
    for query in (["-q"], ["-q", "--whatprovides"]):
        if run(["rpm", "--root", root, *query, "--", spec], check=False)[0] == 0:
            return True
    return False


def plan_changes(rows, have):
    """(installed, removed) NEVRAs of planned rows, as Ansible's module lists a transaction: an upgrade or
    downgrade installs the new package and removes the one of the same name and arch that is there."""
    installed, removed = set(), set()  # type: set[str], set[str]
    for section, name, arch, evr in rows:
        if section in INSTALLING or section in REPLACING:
            installed.add(nevra(name, evr, arch))
        if section in REPLACING:
            removed.update(n for n, key in have.items() if key == (name, arch))
        if section in REMOVING:
            removed.add(nevra(name, evr, arch))
    return installed, removed


def dnf_step(req, verb, specs):
    """Plan one transaction (``--assumeno``), and unless in check mode do it: the planned rows. As Ansible's module,
    a versioned spec older than the installed package is left out (dnf's ``install`` would downgrade) unless
    ``allow_downgrade``."""
    rows = planned(dnf(req, [verb, "--", *specs], dry=True))
    if verb == "install" and not req.get("allow_downgrade"):
        older = {name for section, name, _, _ in rows if section == "Downgrading"}
        keep = [s for s in specs if not any(s.startswith(n + "-") and s[len(n) + 1 :][:1].isdigit() for n in older)]
        if keep != specs:
            return dnf_step(req, verb, keep) if keep else []
    if rows and not req.get("check"):
        dnf(req, [verb, "--", *specs], dry=False)
    return rows


def dnf_steps(req, root, names, state):
    """(verb, specs) in order, and Ansible's notes for specs that are not installed when removing."""
    there = [spec for spec in names if rpm_has(root, spec)]
    if state == "absent":
        notes = ["No match for argument: %s" % spec for spec in names if spec not in there]
        steps = [("remove", there)] if there else []
        return steps + ([("autoremove", [])] if req.get("autoremove") else []), notes
    steps = [("install", [spec for spec in names if spec not in there])]
    if state == "latest":
        steps.append(("upgrade", there))
    return [(verb, specs) for verb, specs in steps if specs], []


def dnf_apply(req):
    if shutil.which("dnf") is None or shutil.which("rpm") is None:
        raise Failed("this host has no dnf/rpm: provision's dnf manages hosts with the dnf (4) command line")
    names = req.get("names") or []
    if req.get("update_cache") and not names:  # as Ansible's module: no root check, only the cache refreshed
        readable_conf(req)
        dnf(req, ["makecache", "--refresh"], dry=False)
        return {"changed": False, "msg": "Cache updated", "results": [], "rc": 0}
    if os.geteuid() != 0:
        raise Failed("This command has to be run under the root user.", results=[])
    readable_conf(req)
    if req.get("update_cache"):
        dnf(req, ["makecache", "--refresh"], dry=False)
    state = req.get("state") or ("absent" if not names and req.get("autoremove") else "present")
    root = req.get("installroot") or "/"
    before = rpm_packages(root)
    steps, notes = dnf_steps(req, root, names, state)
    rows = [row for verb, specs in steps for row in dnf_step(req, verb, specs)]
    if req.get("check"):
        installed, removed = plan_changes(rows, before)
    else:
        after = rpm_packages(root)
        installed, removed = set(after) - set(before), set(before) - set(after)
    results = notes + ["Installed: %s" % n for n in sorted(installed)] + ["Removed: %s" % n for n in sorted(removed)]
    changed = bool(installed or removed)
    msg = "Nothing to do" if not changed else CHECK_MSG if req.get("check") else ""
    return {"changed": changed, "msg": msg, "results": results, "rc": 0}


def readable_conf(req):
    conf = req.get("conf_file")
    if conf and not os.access(conf, os.R_OK):
        raise Failed("cannot read configuration file", conf_file=conf, results=[])


def chosen(req):
    """``package`` with ``use: auto`` sends a request per backend: the host's manager picks one (apt where
    apt-get is, else dnf), as Ansible's ``pkg_mgr`` fact would. A backend that refused the arguments says why."""
    if req.get("manager") == "auto":
        manager = "dnf" if shutil.which("apt-get") is None and shutil.which("dnf") else "apt"
        req = dict(req["requests"][manager], check=req.get("check"))
    if req.get("error"):
        raise Failed(req["error"])
    return req


def apply(req):
    req = chosen(req)
    return dnf_apply(req) if req.get("manager") == "dnf" else apt_apply(req)


ACTIONS = {"apply": apply}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
