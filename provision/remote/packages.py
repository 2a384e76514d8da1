"""The host side of ``apt``/``package`` and ``dnf``: packages brought to a state with ``apt-get`` as Ansible's
``apt``, or with the ``dnf`` command line and ``rpm`` as Ansible's ``dnf`` (stdlib only; the request as JSON on
stdin, ``python3 - apply``: the host library's envelope, ``hostlib.serve``; ``manager``: ``apt``, the default,
or ``dnf``).

apt request keys: ``names`` (``pkg`` or ``pkg=version``), ``state`` (present, latest, absent), ``deb`` (a .deb
path, comma-separated paths, or a URL fetched on the host), ``update_cache``, ``update_cache_retries``,
``update_cache_retry_max_delay``, ``cache_valid_time``, ``purge``, ``autoremove``, ``autoclean``, ``clean``,
``fail_on_autoremove``, ``install_recommends`` (null: apt's default), ``force``, ``only_upgrade``,
``allow_downgrade``, ``allow_unauthenticated``, ``allow_change_held_packages``, ``default_release``,
``dpkg_options``, ``policy_rc_d``, ``lock_timeout``, ``check``. The steps run in the order of Ansible's
``main()``: clean, the cache update, a deb, autoclean/autoremove of a task without packages, then the packages.
Prints one JSON answer with Ansible's keys: ``changed``, ``cache_updated``/``cache_update_time`` (present/latest
and cache updates), ``stdout``/``stderr`` when apt-get ran, ``failed``/``msg``/``rc`` when it could not. Every
command is an argv with a bounded wait; apt-get runs with ``DEBIAN_FRONTEND=noninteractive`` and waits for apt's
and dpkg's locks up to ``lock_timeout`` seconds from the task's start (:func:`apt_run`).

dnf request keys: ``names`` (package specs), ``state`` (present, latest, absent), ``installroot``,
``releasever``, ``conf_file``, ``disable_gpg_check``, ``enablerepo``/``disablerepo``, ``update_cache``,
``autoremove``, ``allow_downgrade``, ``install_weak_deps``, ``enable_plugin``/``disable_plugin``, ``check``. The
answer has Ansible's keys: ``changed``, ``msg``, ``rc``, ``results`` (``Installed: NEVRA``, ``Removed: NEVRA``,
``No match for argument: SPEC``), ``failures`` when it failed. What changed is read from the rpm database before
and after (never from dnf's text); check mode reads dnf's transaction table (``--assumeno``).
"""

import configparser
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import hostlib
from hostlib import Failed

TIMEOUT = 1800
LOCK_TIMEOUT = 60  # Ansible's default lock_timeout: how long apt waits for apt's and dpkg's locks
LOCK_POLL = 1.0  # s between tries of an apt-get that failed on a lock apt does not wait for itself
LOCKED = ("Could not get lock", "Unable to lock directory", "Unable to acquire the dpkg frontend lock")
FETCH_FAILED = ("Failed to fetch", "Some index files failed to download")  # apt-get update may still exit 0
POLICY_RC_D = "/usr/sbin/policy-rc.d"
CLEANED = {"autoremove": "The following packages will be REMOVED", "autoclean": "Del "}  # Ansible's reading
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


def apt_run(req, argv):
    """apt-get/apt-mark ``argv`` run until it gets apt's and dpkg's locks or the task's deadline (``lock_timeout``
    from its start, as Ansible's) passes: apt waits for the dpkg frontend lock itself (``DPkg::Lock::Timeout``,
    the seconds left), not for the lists or archives lock (``apt-get update``, a download that
    unattended-upgrades holds), so a run that failed on a lock is tried again every LOCK_POLL s. The argv as run,
    rc, stdout, stderr."""
    deadline = req["_deadline"]
    while True:
        left = max(0, math.ceil(deadline - time.monotonic()))
        full = [argv[0], "-o", "DPkg::Lock::Timeout=%d" % left] + list(argv[1:])
        rc, out, err = run(full, check=False)
        wait = deadline - time.monotonic()
        if rc == 0 or not any(text in err for text in LOCKED) or wait <= 0:
            return full, rc, out, err
        time.sleep(min(LOCK_POLL, wait))


def apt_errors(err):
    """apt's error and warning lines as one line, as python-apt words a failed update."""
    return ", ".join(line.replace(": ", ":", 1) for line in err.splitlines() if line[:2] in ("E:", "W:"))


class PolicyRcD:
    """Ansible's ``policy_rc_d``: ``/usr/sbin/policy-rc.d`` is, while apt-get runs, a script that exits with the
    code given (101: no service is started); what was there (a file, a link) is put back after, else the script
    removed. The script goes through ``hostlib.atomic_write`` (a new file renamed over the name: never written
    through a link); the old one is kept by ``hostlib.set_aside`` (a hard link beside it) and renamed back
    (``hostlib.put_back``): there is no moment without one.
    Check mode writes nothing (apt-get --simulate runs no maintainer script)."""

    def __init__(self, req):
        self.code = None if req.get("check") else req.get("policy_rc_d")
        self.backup = None

    def __enter__(self):
        if self.code is None:
            return self
        try:
            self.backup = hostlib.set_aside(POLICY_RC_D)
        except OSError as exc:
            raise Failed("Fail to move %s aside: %s" % (POLICY_RC_D, exc)) from None
        try:
            hostlib.atomic_write(POLICY_RC_D, ("#!/bin/sh\nexit %d\n" % int(self.code)).encode(), mode=0o755)
        except OSError:
            if self.backup:
                os.unlink(self.backup)
            raise Failed("Failed to create or chmod %s" % POLICY_RC_D) from None
        return self

    def __exit__(self, *exc):
        if self.code is None:
            return False
        try:
            if self.backup:
                hostlib.put_back(self.backup, POLICY_RC_D)
            else:
                os.unlink(POLICY_RC_D)
        except OSError:
            if self.backup:
                raise Failed("Fail to move back %s to %s" % (self.backup, POLICY_RC_D)) from None
            raise Failed("Fail to remove %s (after package manipulation)" % POLICY_RC_D) from None
        return False


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
    """The version apt would install, None when there is none; Ansible's failure for a name apt does not know."""
    argv = ["apt-cache", "policy", name] if not release else ["apt-cache", "-t", release, "policy", name]
    _, out, _ = run(argv, check=False)
    if not out.strip():
        raise Failed("No package matching '%s' is available" % name)
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Candidate:"):
            value = line.split(":", 1)[1].strip()
            return None if value == "(none)" else value
    return None


def apt_argv(req, *verb):
    """``apt-get -y`` with the request's dpkg options (and ``--force-yes``)."""
    argv = ["apt-get", "-y"]
    for option in (req.get("dpkg_options") or "force-confdef,force-confold").split(","):
        if option.strip():
            argv += ["-o", "Dpkg::Options::=--%s" % option.strip()]
    if req.get("force"):
        argv.append("--force-yes")
    return argv + list(verb)


def install_options(req, downgrade):
    """What an install takes after its packages, as Ansible's: recommends, unauthenticated, downgrades, holds."""
    argv = []
    if req.get("install_recommends") is False:
        argv += ["-o", "APT::Install-Recommends=no"]
    elif req.get("install_recommends") is True:
        argv += ["-o", "APT::Install-Recommends=yes"]
    for key, flag in (("allow_unauthenticated", "--allow-unauthenticated"), ("", "--allow-downgrades"),
                      ("allow_change_held_packages", "--allow-change-held-packages")):  # fmt: skip
        if req.get(key) if key else downgrade:
            argv.append(flag)
    return argv


def apt_get(req, verb, specs):
    argv = apt_argv(req)
    if req.get("autoremove"):
        argv.append("--auto-remove")
    if verb == "install" and req.get("fail_on_autoremove"):
        argv.append("--no-remove")
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
        argv += install_options(req, req.get("allow_downgrade"))
    elif req.get("allow_change_held_packages"):
        argv.append("--allow-change-held-packages")
    with PolicyRcD(req):
        argv, rc, out, err = apt_run(req, argv)
    if rc != 0:
        raise Failed("'%s' failed: %s" % (" ".join(argv), err), stdout=out, stderr=err, rc=rc)
    return {"changed": True, "stdout": out, "stderr": err, "diff": {}}


def cleanup(req, operation):
    """``apt-get autoclean`` or ``autoremove`` (a task without packages), changed as Ansible reads their output."""
    argv = apt_argv(req) + (["--purge"] if req.get("purge") else []) + [operation]
    with PolicyRcD(req):
        argv, rc, out, err = apt_run(req, argv + (["--simulate"] if req.get("check") else []))
    if rc != 0:
        raise Failed("'apt-get %s' failed: %s" % (operation, err), stdout=out, stderr=err, rc=rc)
    return {"changed": CLEANED[operation] in out, "stdout": out, "stderr": err, "diff": {}}


def clean(req):
    """``apt-get clean``: (stdout, stderr). Check mode runs nothing (Ansible's runs it): clean prints nothing."""
    if req.get("check"):
        return "", ""
    _, rc, out, err = apt_run(req, ["apt-get", "clean"])
    if rc != 0:
        raise Failed("apt-get clean failed", stdout=out, rc=rc)
    if err:
        raise Failed("apt-get clean failed: %s" % err, stdout=out, rc=rc)
    return out, err


def update_cache(req):
    """(updated, time) as Ansible's: updated when the cache is older than cache_valid_time (or always)."""
    before = cache_time()
    valid = int(req.get("cache_valid_time") or 0)
    if valid and before + valid >= time.time():
        return False, before
    if req.get("check"):
        return True, before
    apt_update(req)
    after = cache_time()
    return after != before, after


def apt_update(req):
    """``apt-get update``, tried ``update_cache_retries`` times while an index cannot be fetched, with Ansible's
    backoff (1, 2, 4 ... s, at most ``update_cache_retry_max_delay``, plus one random fraction of a second)."""
    retries = int(req.get("update_cache_retries", 5))
    max_delay = int(req.get("update_cache_retry_max_delay", 12))
    jitter = random.SystemRandom().randrange(1000) / 1000.0
    why = ""
    for attempt in range(retries):
        argv, rc, out, err = apt_run(req, ["apt-get", "update", "-q"])
        if rc != 0 and any(text in err for text in LOCKED):
            raise Failed("Failed to lock apt for exclusive operation: %s" % apt_errors(err))
        if not any(text in err for text in FETCH_FAILED):
            if rc != 0:
                raise Failed("'%s' failed: %s" % (" ".join(argv), err), stdout=out, stderr=err, rc=rc)
            return
        why = apt_errors(err)
        delay = 2**attempt + jitter
        time.sleep(delay if delay <= max_delay else max_delay + jitter)
    raise Failed("Failed to update apt cache after %d retries: %s" % (retries, why or "unknown reason"))


def deb_fields(path):
    """The control fields of a .deb that Ansible's ``deb`` reads (``dpkg-deb -f``)."""
    argv = ["dpkg-deb", "-f", path, "Package", "Version", "Architecture", "Pre-Depends", "Depends", "Recommends"]
    rc, out, err = run(argv, check=False)
    if rc != 0:
        raise Failed("Unable to install package: %s" % (err.strip() or "dpkg-deb exited with %d" % rc))
    fields, key = {}, None
    for line in out.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def dep_names(fields, recommends):
    """The package names a .deb depends on (each alternative), and recommends when ``recommends``."""
    names = []
    for field in ("Pre-Depends", "Depends") + (("Recommends",) if recommends else ()):
        for group in fields.get(field, "").split(","):
            for alternative in group.split("|"):
                name = alternative.strip().split(" ")[0].split("(")[0].split(":")[0]
                if name:
                    names.append(name)
    return names


def version_is(a, op, b):
    return run(["dpkg", "--compare-versions", a, op, b], check=False)[0] == 0


def deb_paths(req, workdir):
    """The .deb files of ``deb``: a URL (``://``) downloaded into ``workdir``, else paths (comma-separated, as
    Ansible's). apt-get takes a file for a package only by its ``.deb`` name: another name is linked as one."""
    deb = req["deb"]
    if "://" in deb:
        path = os.path.join(workdir, "package.deb")
        hostlib.download(deb, path, timeout=10.0, total=TIMEOUT)  # Ansible's fetch_file: 10 s a read
        return [path]
    paths = []
    for i, item in enumerate(p.strip() for p in deb.split(",")):
        path = os.path.abspath(os.path.expanduser(item))
        if not path.endswith(".deb"):
            link = os.path.join(workdir, "%d.deb" % i)
            os.symlink(path, link)
            path = link
        paths.append(path)
    return paths


def deb_check(req, argv):
    """The .deb install simulated first, as Ansible's module checks a .deb (python-apt's ``DebPackage.check``):
    a failure, or one that would remove an installed package (unless ``force``), fails with the reason alone."""
    _, rc, out, err = apt_run(req, argv)
    if rc != 0:
        raise Failed(apt_errors(err) or err.strip() or "%s failed" % " ".join(argv))
    removed = [line.split()[1] for line in out.splitlines() if line.startswith("Remv ")]
    if removed and not req.get("force"):
        raise Failed("Conflicts with the installed package '%s'" % "', '".join(removed))
    return out, err


def install_deb(req):
    workdir = tempfile.mkdtemp(prefix="provision-deb-")
    try:
        return install_debs(req, deb_paths(req, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def install_debs(req, paths):
    """Ansible's ``install_deb``: a .deb whose name and version are installed is left out; one older than the
    installed package fails unless ``allow_downgrade`` (or ``force``); the rest are installed with their
    dependencies in one ``apt-get install ./file.deb`` that removes nothing (Ansible refuses a .deb that
    conflicts with an installed package) unless ``force``. The dependencies it installed are marked installed
    manually, as Ansible's."""
    foreign = run(["dpkg", "--print-foreign-architectures"], check=False)[1].strip()
    pending, deps = [], []
    for path in paths:
        fields = deb_fields(path)
        name, version, arch = fields.get("Package", ""), fields.get("Version", ""), fields.get("Architecture")
        key = "%s:%s" % (name, arch) if foreign and arch not in (None, "all") else name
        have = installed_versions([key]).get(name)
        if have is not None:
            if version_is(version, "eq", have):
                continue
            if version_is(version, "lt", have) and not (req.get("allow_downgrade") or req.get("force")):
                raise Failed("A later version is already installed")
        pending.append(path)
        deps += dep_names(fields, req.get("install_recommends") is True)
    if not pending:
        return {"changed": False, "stdout": "", "stderr": "", "diff": ""}
    if req.get("install_recommends") is not True:  # Ansible installs a .deb's recommends only when asked
        req = dict(req, install_recommends=False)
    tail = ["install"] + pending + install_options(req, req.get("allow_downgrade") or req.get("force"))
    out, err = deb_check(req, apt_argv(req, "--simulate", *tail))
    if req.get("check"):
        return {"changed": True, "stdout": out, "stderr": err, "diff": {}}
    before = installed_versions(deps) if deps else {}
    with PolicyRcD(req):
        argv, rc, out, err = apt_run(req, apt_argv(req) + ([] if req.get("force") else ["--no-remove"]) + tail)
    if rc != 0:
        raise Failed("%s failed" % " ".join(argv), stdout=out, stderr=err)
    if deps:  # (check mode returned above)
        new = sorted(set(installed_versions(deps)) - set(before))
        if new:
            argv, rc, out2, err2 = apt_run(req, ["apt-mark", "manual"] + new)
            if rc != 0:
                raise Failed("'%s' failed: %s" % (" ".join(argv), err2), stdout=out2, stderr=err2, rc=rc)
    return {"changed": True, "stdout": out, "stderr": err, "diff": {}}


def apt_apply(req):
    if shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        raise Failed(
            "this host has no apt-get/dpkg-query: provision's apt and package manage Debian/Ubuntu hosts"
            + ("; this host has dnf: use the dnf module (or package)" if shutil.which("dnf") else "")
        )
    req["_deadline"] = time.monotonic() + int(req.get("lock_timeout", LOCK_TIMEOUT))
    names = req.get("names") or []
    if req.get("clean"):  # first, as Ansible's; alone it is the task
        out, err = clean(req)
        if not names and not req.get("deb"):
            return {"changed": True, "msg": out, "stdout": out, "stderr": err, "diff": {}}
    updated, stamp = False, cache_time()
    if req.get("update_cache"):
        updated, stamp = update_cache(req)
        if not names and not req.get("deb"):
            return {"changed": updated, "cache_updated": updated, "cache_update_time": stamp}
    if req.get("deb"):
        return install_deb(req)
    for spec in names:
        if spec.count("=") > 1:
            raise Failed("invalid package spec: %s" % spec)
    if not names:  # Ansible's order: autoclean answers before autoremove
        for operation in ("autoclean", "autoremove"):
            if req.get(operation):
                return cleanup(req, operation)
    split = [(s.split("=", 1)[0], s.split("=", 1)[1] if "=" in s else None) for s in names]
    have = installed_versions([n for n, _ in split]) if split else {}
    state = req.get("state") or "present"
    if state == "absent":
        gone = [n for n, v in split if n in have and (v is None or have[n] == v)]
        if not gone:
            return {"changed": False}
        return apt_get(req, "remove", gone)
    result = install(req, split, have, state, {"cache_updated": updated, "cache_update_time": stamp})
    result.update(cache_updated=updated, cache_update_time=stamp)
    return result


def install(req, split, have, state, cache):
    """Ansible's ``install()``: its failures (no candidate, apt-get's) carry the ``cache`` keys as its result."""
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
                raise Failed("no available installation candidate for %s" % name, **cache)
            wanted.append(name)
        elif state == "latest":
            newest = candidate(name, req.get("default_release"))
            if newest is not None and newest != current:
                wanted.append(name)
    if not wanted:
        return {"changed": False}
    try:
        return apt_get(req, "install", wanted)
    except Failed as exc:
        exc.data.update(cache)
        raise


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
