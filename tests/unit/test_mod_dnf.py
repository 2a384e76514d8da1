"""``dnf`` against ansible-core's own ``dnf``, on this machine (the suite runs as root; Debian's ``dnf`` and
``python3-dnf``): the same steps in the same order, first under Ansible, then under provision, each in its own
empty ``installroot`` (the machine's own package state is never touched); the results must match key for key.

The packages come from a local repo built here from the become_dnf case's spec (``provision-dnf-a`` 1.0 and
2.0, ``provision-dnf-b`` 1.0), named in a ``conf_file``: Ansible's module reads repos from the host's paths, not
from the installroot. A second repo section over the same packages wants signatures (which they lack) and is
disabled: one step enables it instead of the first, with ``disable_gpg_check``. Ansible runs with
``use_backend: dnf4``: on Debian its action would otherwise pick the backend from ``ansible_pkg_mgr``, apt."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from provision.catalog import lookup
from provision.modules.base import ModuleContext
from provision.transport import LocalConnection
from tests.support.ansible_ref import ansible_results

SPEC = Path(__file__).parents[1] / "compat" / "cases" / "become_dnf" / "files" / "provision-dnf.spec"
PACKAGES = (("provision-dnf-a", "1.0"), ("provision-dnf-a", "2.0"), ("provision-dnf-b", "1.0"))
A, B = "provision-dnf-a", "provision-dnf-b"
MISSING = "provision-no-such-package"
SIGNED = {"disablerepo": "provision-test", "enablerepo": "provision-signed"}  # the repo that wants signatures
OWN_WORDS = [  # steps that fail under both, with other messages (tests/compat/KNOWN.md)
    ({"name": [A, B], **SIGNED}, False),  # the package is not signed
    ({"name": B, "disablerepo": "provision-test"}, False),  # no repo enabled: dnf's command line refuses to start
]


def build_repo(root: Path) -> Path:
    """The packages built into ``root/repo`` with its metadata; returns the dnf.conf that names it."""
    repo = root / "repo"
    repo.mkdir()
    for name, version in PACKAGES:
        defines = ["--define", f"_topdir {root / 'rpmbuild'}", "--define", f"pkg {name}", "--define", f"ver {version}"]
        subprocess.run(
            ["rpmbuild", "-bb", "--quiet", *defines, str(SPEC)], check=True, capture_output=True, timeout=120
        )
    for rpm in (root / "rpmbuild" / "RPMS" / "noarch").glob("*.rpm"):
        shutil.copy(rpm, repo)
    subprocess.run(["createrepo_c", "-q", str(repo)], check=True, capture_output=True, timeout=120)
    conf = root / "dnf.conf"
    section = "name={0}\nbaseurl=file://" + str(repo) + "\n"
    conf.write_text(
        "[main]\ngpgcheck=1\n\n"
        f"[provision-test]\n{section.format('provision test')}gpgcheck=0\n\n"
        f"[provision-signed]\n{section.format('provision test, signatures wanted')}gpgcheck=1\nenabled=0\n"
    )
    return conf


def _steps() -> list[tuple[dict[str, Any], bool]]:
    """(arguments, check mode) in order, on top of installroot, releasever, conf_file."""
    return [
        ({"name": f"{A}-1.0"}, True),  # would install 1.0, not the newest
        ({"name": f"{A}-1.0"}, False),
        ({"name": A, "state": "installed"}, False),  # converged: some version is there
        ({"name": f"{A}-1.0"}, False),  # converged
        ({"name": A, "state": "latest"}, True),  # would upgrade: installs 2.0, removes 1.0
        ({"pkg": [A], "state": "latest"}, False),
        ({"name": A, "state": "latest"}, False),  # converged
        ({"name": f"{A}-1.0"}, False),  # a newer version is there: left alone (no allow_downgrade)
        ({"name": [A, B], **SIGNED}, True),  # check mode checks no signature
        OWN_WORDS[0],
        ({"name": [A, B], **SIGNED, "disable_gpg_check": True}, False),
        ({"name": f"{A}, {B}", "state": "absent"}, True),
        ({"name": f"{A}, {B}", "state": "removed"}, False),
        ({"name": [A, B], "state": "absent"}, False),  # converged: "No match for argument" for each
        ({"autoremove": True}, False),  # nothing left that nothing needs
        ({"name": [B, MISSING]}, False),  # fails: nothing installed
        ({"name": MISSING, "state": "latest"}, True),  # fails in check mode too
        OWN_WORDS[1],
        ({"name": B, "conf_file": "/nonexistent/dnf.conf"}, False),
        ({"update_cache": True}, False),
    ]  # fmt: skip


def _installed(root: Path) -> list[str]:
    out = subprocess.run(["rpm", "--root", str(root), "-qa"], capture_output=True, text=True, timeout=60, check=True)
    return sorted(out.stdout.split())


def _shape(result: dict[str, Any]) -> dict[str, Any]:
    """What must match: every key and value but Ansible's own bookkeeping."""
    skip = ("invocation", "warnings", "exception")  # exception: ansible-core's own "(traceback unavailable)"
    return {k: v for k, v in result.items() if k not in skip}


def test_dnf_the_same_as_ansible(tmp_path: Path) -> None:
    conf = build_repo(tmp_path)
    roots = {tool: tmp_path / f"root-{tool}" for tool in ("ansible", "provision")}
    common = {"releasever": "1", "conf_file": str(conf)}
    steps = _steps()
    tasks = [
        {"dnf": {"installroot": str(roots["ansible"]), **common, **args, "use_backend": "dnf4"}, "check_mode": check}
        for args, check in steps
    ]
    theirs = ansible_results(tmp_path, tasks)
    cls = lookup("dnf")
    assert cls is not None
    for i, ((raw, check), ref) in enumerate(zip(steps, theirs, strict=True)):
        args = cls.coerce(
            cls.validate_static({"installroot": str(roots["provision"]), **common, **raw}, lambda v: False)
        )
        ctx = ModuleContext(host="h", conn=LocalConnection("h"), variables={}, check=check)
        before = _installed(roots["provision"])
        res = cls().run(ctx, args)
        ours = {**res.data, "changed": res.changed, "failed": res.failed, "msg": res.msg}
        if (raw, check) in OWN_WORDS:  # both fail, in their own words (tests/compat/KNOWN.md)
            assert (res.failed, res.changed, ref["failed"], ref["changed"]) == (True, False, True, False), (i, ref)
        else:
            assert _shape(ours) == _shape(ref), (i, raw, check)
        if check or res.failed:
            assert _installed(roots["provision"]) == before, (i, raw)  # check mode and failures change nothing
        if i == 1:
            assert _installed(roots["provision"]) == [f"{A}-1.0-1.noarch"]
    assert _installed(roots["provision"]) == _installed(roots["ansible"]) == []


def _package_steps() -> list[dict[str, Any]]:
    return [
        {"name": A, "use": "dnf"},
        {"name": A, "use": "dnf"},  # converged
        {"name": A, "state": "absent", "use": "dnf"},
        {"name": A, "state": "absent", "use": "dnf"},  # converged: "No match for argument"
    ]


def test_package_hands_its_arguments_to_dnf_as_ansible(tmp_path: Path) -> None:
    # Ansible's package action gives every argument but `use` to the backend: dnf's installroot, conf_file, ...
    conf = build_repo(tmp_path)
    roots = {tool: tmp_path / f"root-{tool}" for tool in ("ansible", "provision")}
    common = {"releasever": "1", "conf_file": str(conf)}
    steps = _package_steps()
    theirs = ansible_results(
        tmp_path, [{"package": {"installroot": str(roots["ansible"]), **common, **s}} for s in steps]
    )
    cls = lookup("package")
    assert cls is not None
    for i, (raw, ref) in enumerate(zip(steps, theirs, strict=True)):
        args = cls.coerce(
            cls.validate_static({"installroot": str(roots["provision"]), **common, **raw}, lambda v: False)
        )
        res = cls().run(ModuleContext(host="h", conn=LocalConnection("h"), variables={}), args)
        assert _shape({**res.data, "changed": res.changed, "failed": res.failed, "msg": res.msg}) == _shape(ref), i
    # apt refuses dnf's arguments, under both (in their own words)
    bad = cls.coerce(cls.validate_static({"name": A, "use": "apt", "installroot": "/x"}, lambda v: False))
    res = cls().run(ModuleContext(host="h", conn=LocalConnection("h"), variables={}), bad)
    assert res.failed and "installroot" in res.msg


def test_package_picks_dnf_on_a_host_without_apt_get(tmp_path: Path) -> None:
    # no host here lacks apt: a PATH that has python3, dnf and rpm but no apt-get stands for one (the same
    # lookup the helper makes); the package lands in an installroot
    conf = build_repo(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python3", "dnf", "rpm"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    root = tmp_path / "root"
    cls = lookup("package")
    assert cls is not None
    raw = {"name": B, "installroot": str(root), "releasever": "1", "conf_file": str(conf)}
    args = cls.coerce(cls.validate_static(raw, lambda v: False))
    ctx = ModuleContext(host="h", conn=LocalConnection("h"), variables={}, environment={"PATH": str(bin_dir)})
    res = cls().run(ctx, args)
    assert (res.failed, res.changed, res.data["results"]) == (False, True, [f"Installed: {B}-1.0-1.noarch"]), res.msg
    assert (root / "usr" / "share" / B / "version").is_file()  # the package's file is in the installroot
    again = cls().run(ctx, args)  # (rpm's database path follows the environment: asked in the same one)
    assert (again.failed, again.changed, again.msg) == (False, False, "Nothing to do")
    with_apt = cls().run(ModuleContext(host="h", conn=LocalConnection("h"), variables={}), args)  # apt-get found
    assert with_apt.failed and with_apt.msg.startswith("apt: unknown argument")  # apt picked: dnf's args refused
