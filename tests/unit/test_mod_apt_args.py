"""``apt``'s arguments beyond name and state against ansible-core's own ``apt``, on this machine (the suite runs
as root), as ``test_mod_packages``: the same steps in the same order, first under Ansible, then under provision,
each from the same start; the results must match key for key (apt-get's own text aside), and so must what
probes (``command`` steps) read from the machine in between.

The packages: ``.deb`` files built here with ``dpkg-deb --build`` (``provision-test-*``: one that depends on
``sl``, a tiny distribution package, one that conflicts with it, one whose postinst records the
``policy-rc.d`` it sees), one of them also in a local flat repository that apt may use only unauthenticated, and
a URL served by a local ``http.server``. The locks: a holder (``tests/support/apt_lock.py``) takes dpkg's
frontend lock or apt's lists lock for a few seconds, as unattended-upgrades would, right before a step. Every
package, the repository's source and lists, the holders and ``/usr/sbin/policy-rc.d`` are put back in
``finally``."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.modules.args import ArgError
from provision.modules.packages import Apt
from tests.support import apt_lock
from tests.support.ansible_ref import ansible_results, comparable, provision_result
from tests.support.web import served_folder

PKG, CONFLICT, RCD, SL = "provision-test-deb", "provision-test-conflict", "provision-test-rcd", "sl"
POLICY = Path("/usr/sbin/policy-rc.d")
SOURCES = Path("/etc/apt/sources.list.d")
HOLDER = [sys.executable, apt_lock.__file__]
FRONTEND, LISTS = "/var/lib/dpkg/lock-frontend", "/var/lib/apt/lists/lock"
HOLD = 3  # seconds a holder keeps a lock

Step = tuple[str, Any, bool]  # ("apt", arguments, check mode) | ("probe", argv, _) | ("cmd", argv, _)


def _deb(out: Path, name: str, version: str, **fields: str) -> Path:
    """A tiny .deb (architecture all) with these control fields (``postinst``: that script)."""
    root = out / f"{name}-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    postinst = fields.pop("postinst", None)
    extra = "".join(f"{key.replace('_', '-')}: {value}\n" for key, value in fields.items())
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: provision tests <root@localhost>\n"
        f"{extra}Description: provision's apt test package\n"
    )
    if postinst:
        (root / "DEBIAN" / "postinst").write_text(postinst)
        (root / "DEBIAN" / "postinst").chmod(0o755)
    deb = out / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True, capture_output=True)
    return deb


def _sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _purge() -> None:
    for hold in (PKG, CONFLICT, RCD):
        _sh("apt-mark", "unhold", hold)
    _sh("apt-get", "purge", "-y", "-q", PKG, CONFLICT, RCD, SL)


def _status(*names: str) -> list[str]:
    """A probe: each package's status and version (``un`` and none when it is not there)."""
    return ["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}${Version}\\n", *names]


def _index_entry(deb: Path) -> str:
    """The deb's stanza of a flat repository's Packages index (what dpkg-scanpackages writes, without dpkg-dev)."""
    control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    return f"{control.rstrip()}\nFilename: ./{deb.name}\nSize: {deb.stat().st_size}\nSHA256: {digest}\n"


@contextlib.contextmanager
def _repository(debs: list[Path]) -> Iterator[None]:
    """A flat file: repository holding ``debs`` with no Release file (``allow-insecure``: its packages install
    only with ``--allow-unauthenticated``), in apt's sources and lists for the while; only its own index is
    fetched."""
    repo = Path(tempfile.mkdtemp(prefix="provision-apt-repo-"))
    repo.chmod(0o755)  # apt reads a file: source as its sandbox user
    source = SOURCES / "provision-test-repo.list"
    try:
        for deb in debs:
            shutil.copy(deb, repo)
        (repo / "Packages").write_text("\n".join(_index_entry(repo / deb.name) for deb in debs))
        source.write_text(f"deb [allow-insecure=yes] file:{repo} ./\n")
        only = [f"Dir::Etc::sourcelist={source}", "Dir::Etc::sourceparts=-", "APT::Get::List-Cleanup=0"]
        subprocess.run(["apt-get", "update", "-q", *(f"-o{o}" for o in only)], capture_output=True, check=True)
        yield
    finally:
        source.unlink(missing_ok=True)
        for lists in Path("/var/lib/apt/lists").glob("_" + str(repo).strip("/").replace("/", "_") + "_*"):
            lists.unlink()
        shutil.rmtree(repo, ignore_errors=True)


@contextlib.contextmanager
def _policy_rc_d_kept() -> Iterator[Path]:
    """``/usr/sbin/policy-rc.d`` as it is now (or its absence) put back at the end; a copy of it, for steps."""
    saved = Path(tempfile.mkdtemp(prefix="provision-policy-")) / "policy-rc.d"
    had = POLICY.exists()
    if had:
        shutil.copy2(POLICY, saved)
    try:
        yield saved
    finally:
        if had:
            shutil.copy2(saved, POLICY)
        else:
            POLICY.unlink(missing_ok=True)
        shutil.rmtree(saved.parent, ignore_errors=True)


def _as_ansible_task(step: Step) -> dict[str, Any]:
    kind, payload, check = step
    if kind == "apt":
        return {"apt": payload, "check_mode": check}
    return {"command": {"argv": payload}}


def _run_steps(
    steps: list[Step], tmp_path: Path, between: Callable[[], object] = lambda: None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[float]]:
    """Ansible's results, then (after ``between``) provision's (a probe's or command's as ``stdout``), and how long
    each of provision's steps took."""
    theirs = ansible_results(tmp_path, [_as_ansible_task(step) for step in steps])
    between()
    ours, took = [], []
    for kind, payload, check in steps:
        start = time.monotonic()
        if kind == "apt":
            ours.append(provision_result("apt", payload, check))
        else:
            ours.append({"stdout": _sh(*payload).stdout.strip()})
        took.append(time.monotonic() - start)
    return theirs, ours, took


def _compare(steps: list[Step], theirs: list[dict[str, Any]], ours: list[dict[str, Any]]) -> None:
    for i, (step, ref, got) in enumerate(zip(steps, theirs, ours, strict=True)):
        if step[0] == "apt":
            # the cache's time moves when Ansible's run updates it, and whether a real apt-get update changes the
            # lists depends on the mirrors at that moment: of those, only the type is compared
            loose = ("cache_update_time", *(("changed", "cache_updated") if step[1].get("update_cache") else ()))
            got, ref = ({**r, **{k: type(r[k]).__name__ for k in loose if k in r}} for r in (got, ref))
            assert comparable(got) == comparable(ref), (i, step)
        elif step[0] == "probe":
            assert got["stdout"].rstrip() == ref["stdout"].rstrip(), (i, step)


def _stop_holders(steps: list[Step], ours: list[dict[str, Any]]) -> None:
    for step, got in zip(steps, ours, strict=False):
        if step[0] == "cmd" and step[1][:2] == HOLDER and got.get("stdout", "").isdigit():
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(int(got["stdout"]), 15)


def test_deb_held_unauthenticated_conflicts_and_policy_rc_d_the_same_as_ansible(tmp_path: Path) -> None:
    debs = tmp_path / "debs"
    debs.mkdir()
    record = tmp_path / "policy-seen"
    v1 = _deb(debs, PKG, "1.0", Depends=SL)
    v2 = _deb(debs, PKG, "2.0", Depends=SL)
    v3 = _deb(tmp_path, PKG, "3.0", Depends=SL)  # only in the repository
    conflict = _deb(debs, CONFLICT, "1.0", Conflicts=SL)
    sees = f"#!/bin/sh\n(cat {POLICY} 2>/dev/null || echo none) | tail -n 1 >> {record}\n"
    rcd = _deb(debs, RCD, "1.0", postinst=sees)
    _purge()
    try:
        with served_folder(debs) as url, _repository([v3]), _policy_rc_d_kept() as saved:
            latest = {"name": PKG, "state": "latest"}
            # what the postinst saw, whether a policy-rc.d is there, how many names like it (none, no temp left: 0)
            seen_and_left = f"tail -n1 {record}; test -e {POLICY} || echo gone; ls -a /usr/sbin | grep -c policy-rc"
            steps: list[Step] = [
                ("apt", {"deb": str(v1)}, True),  # would install
                ("probe", _status(PKG, SL), False),  # nothing installed
                ("apt", {"deb": str(v1)}, False),  # installed with its dependency sl
                ("probe", _status(PKG, SL), False),
                ("probe", ["apt-mark", "showmanual", SL], False),  # the dependency is marked manual, as Ansible's
                ("apt", {"deb": str(v1)}, False),  # converged: the same name and version
                ("apt", {"deb": str(v2)}, False),  # upgraded
                ("apt", {"deb": str(v1)}, False),  # fails: a later version is installed
                ("apt", {"deb": str(v1), "allow_downgrade": True}, False),
                ("apt", {"deb": str(v2)}, True),
                ("apt", {"deb": f"{url}/{v2.name}"}, False),  # fetched on the host, installed
                ("apt", {"deb": f"{url}/{v2.name}"}, False),  # converged
                ("apt", {"deb": f"{url}/no-such.deb"}, False),  # fails: HTTP 404
                ("probe", _status(PKG), False),
                ("cmd", ["apt-mark", "hold", PKG], False),
                ("apt", {**latest, "allow_unauthenticated": True}, False),  # fails: held
                ("apt", {**latest, "allow_change_held_packages": True}, False),  # fails: the repo is unsigned
                ("apt", {**latest, "allow_unauthenticated": True, "allow_change_held_packages": True}, False),
                ("apt", {**latest, "allow_unauthenticated": True, "allow_change_held_packages": True}, False),
                ("probe", _status(PKG), False),  # 3.0, from the repository
                ("cmd", ["apt-mark", "unhold", PKG], False),
                ("apt", {"name": PKG, "state": "absent", "purge": True}, False),
                ("apt", {"deb": str(conflict)}, False),  # fails: it conflicts with the installed sl
                ("probe", _status(CONFLICT, SL), False),
                ("apt", {"name": SL, "state": "absent", "purge": True}, False),
                ("apt", {"deb": str(conflict)}, False),
                ("apt", {"name": SL, "fail_on_autoremove": True}, False),  # fails: it would remove the conflict
                ("apt", {"name": SL, "fail_on_autoremove": True}, True),  # fails in check mode too
                ("probe", _status(CONFLICT, SL), False),
                ("apt", {"name": CONFLICT, "state": "absent", "purge": True}, False),
                ("apt", {"deb": str(rcd), "policy_rc_d": 42}, False),  # its postinst saw "exit 42"
                ("probe", ["cat", str(record)], False),
                ("probe", ["sha256sum", str(POLICY)], False),  # the one that was there, back
                ("apt", {"name": RCD, "state": "absent", "purge": True, "policy_rc_d": 42}, False),
                ("cmd", ["rm", "-f", str(POLICY)], False),
                ("apt", {"deb": str(rcd), "policy_rc_d": 43}, False),
                (
                    "probe",
                    ["sh", "-c", seen_and_left],
                    False,
                ),
                ("apt", {"name": RCD, "state": "absent", "purge": True}, False),
                ("cmd", ["cp", "-p", str(saved), str(POLICY)], False),
            ]
            if not saved.exists():  # this machine has no policy-rc.d: the steps around it start and end without one
                steps = [s for s in steps if s[1] != ["cp", "-p", str(saved), str(POLICY)]]
            theirs, ours, _ = _run_steps(steps, tmp_path, between=lambda: record.write_text(""))
            _compare(steps, theirs, ours)
        seen = [
            got["stdout"]
            for step, got in zip(steps, ours, strict=True)
            if step[0] == "probe" and step[1][0] in ("cat", "sh")
        ]
        assert seen[0] == "exit 42", seen  # the postinst ran under the task's policy-rc.d
        assert seen[1].splitlines() == ["exit 43", "gone", "0"], seen  # ... none left when none was there, nor a temp
    finally:
        _purge()


def test_the_locks_clean_autoclean_and_update_retries_the_same_as_ansible(tmp_path: Path) -> None:
    """A step that waits starts right after a hold of HOLD s; one that must fail finds the lock held however late
    it starts (Ansible's apt takes a second or more to start under load: its own respawn, python-apt's cache)
    and the hold ends right after it."""
    bad = SOURCES / "provision-test-unreachable.list"
    release = tmp_path / "release"
    hold_frontend = ("cmd", [*HOLDER, str(HOLD), FRONTEND], False)
    hold_lists = ("cmd", [*HOLDER, str(HOLD), LISTS], False)
    let_go = ("cmd", ["touch", str(release)], False)
    until = [*HOLDER, "60", "--until", str(release)]
    steps: list[Step] = [
        ("apt", {"clean": True}, True),
        ("apt", {"clean": True}, False),
        ("apt", {"clean": True}, False),  # apt-get clean reports a change every time, as Ansible's
        ("apt", {"autoclean": True}, False),  # nothing left to clean
        ("apt", {"autoclean": True}, False),
        ("apt", {"autoremove": True}, True),  # check mode only: the machine's own packages are not removed
        hold_frontend,
        ("apt", {"name": SL}, False),  # waits for the lock, installs
        ("apt", {"name": SL}, False),
        ("cmd", [*until, FRONTEND], False),
        ("apt", {"name": SL, "state": "absent", "lock_timeout": 0}, False),  # fails at once
        let_go,
        ("probe", _status(SL), False),
        hold_frontend,
        ("apt", {"name": SL, "state": "absent", "purge": True}, False),  # waits
        hold_lists,
        ("apt", {"update_cache": True}, False),  # waits for the lists lock, which apt itself does not wait for
        ("cmd", [*until, LISTS], False),
        ("apt", {"update_cache": True, "lock_timeout": 1}, False),  # fails after 1 s
        let_go,
        ("cmd", ["sh", "-c", f"echo 'deb [allow-insecure=yes] file:/nonexistent-provision ./' > {bad}"], False),
        ("apt", {"update_cache": True, "update_cache_retries": 2, "update_cache_retry_max_delay": 1}, False),
        ("cmd", ["rm", "-f", str(bad)], False),
    ]
    _purge()
    ours: list[dict[str, Any]] = []
    try:
        theirs, ours, took = _run_steps(steps, tmp_path)
        _compare(steps, theirs, ours)
        at = {
            name: steps.index(step)
            for name, step in (
                ("wait", ("apt", {"name": SL}, False)),
                ("at_once", ("apt", {"name": SL, "state": "absent", "lock_timeout": 0}, False)),
                ("purge_wait", ("apt", {"name": SL, "state": "absent", "purge": True}, False)),
                ("update_wait", ("apt", {"update_cache": True}, False)),
                ("update_1s", ("apt", {"update_cache": True, "lock_timeout": 1}, False)),
                ("retries", steps[-2]),
            )
        }
        assert took[at["wait"]] > HOLD - 0.5, took  # it waited for the holder
        assert took[at["at_once"]] < 1.5, took
        assert took[at["purge_wait"]] > HOLD - 0.5, took
        assert took[at["update_wait"]] > HOLD - 0.5, took
        assert 1 <= took[at["update_1s"]] < 3, took
        assert took[at["retries"]] >= 2, took  # two updates, a backoff of 1 s (and a fraction) after each
    finally:
        bad.unlink(missing_ok=True)
        _stop_holders(steps, ours)
        _purge()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"deb": "/x.deb", "name": "sl"}, "apt: parameters are mutually exclusive: deb|package"),
        ({"deb": "/x.deb", "pkg": "sl"}, "apt: parameters are mutually exclusive: deb|package"),
        ({"deb": "/x.deb", "state": "absent"}, "apt: deb only supports state=present"),
        ({"deb": "/x.deb", "state": "latest"}, "apt: deb only supports state=present"),
        ({"name": "sl", "lock_timeout": -1}, "apt: lock_timeout must be 0 or more"),
        ({"update_cache": True, "update_cache_retries": "-2"}, "apt: update_cache_retries must be 0 or more"),
        ({"name": "sl", "upgrade": "dist"}, "apt: upgrade is not supported by provision"),
        ({"purge": True}, "apt: one of the following is required: name, deb, update_cache, autoremove"),
        ({"name": "sl", "policy_rc_d": "x"}, "policy_rc_d"),
    ],
)
def test_bad_arguments_are_one_line_before_the_run(args: dict[str, Any], error: str) -> None:
    with pytest.raises(ArgError, match=error.replace("|", "[|]")):
        Apt.validate_static(args, lambda v: False)


@pytest.mark.parametrize(
    "args",
    [{"autoclean": True}, {"clean": True}, {"autoremove": True}, {"deb": "/x.deb", "state": "installed"},
     {"update_cache": True, "lock_timeout": 0, "update_cache_retries": 0}],
)  # fmt: skip
def test_arguments_ansible_takes_are_taken(args: dict[str, Any]) -> None:
    request = Apt.request(Apt.coerce(Apt.validate_static(args, lambda v: False)))
    assert request["lock_timeout"] == args.get("lock_timeout", 60)
    assert {k: request[k] for k in args if k != "state"} == {k: v for k, v in args.items() if k != "state"}
    assert request["state"] == "present"  # installed is Ansible's word for it too
