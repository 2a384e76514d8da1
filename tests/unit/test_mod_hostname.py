"""``hostname``'s host side against ansible-core's own module, both run in-process on the same sandboxed state:
the module's ``main`` (its ``AnsibleModule`` replaced by a stand-in that records the answer) and
``remote/hostname.py``'s ``apply``. The files are the test's own (``/etc/hostname`` and ``/etc/sysconfig/network``
moved by patching each side's constants) and ``hostnamectl`` is a stub of the test's, first on PATH, that keeps
its names in files: compared are what each wrote, what each answered and the names (running and static) after.

SAFETY: this machine's name and its ``/etc/hostname`` must never change. Every test checks them before and after
(fixture ``machine_unchanged``), and the sandbox is checked before anything runs: a test whose files are not the
test's own, or whose ``hostnamectl`` is not the stub, fails before either side writes. No test runs the real
``hostname`` or ``hostnamectl``."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision import remote
from provision.catalog import lookup
from provision.modules.base import ArgError

sys.path.insert(0, str(remote.REMOTE_DIR))
import hostname  # the shipped script, imported as a host would run it
from ansible.module_utils.common import sys_info
from ansible.modules import hostname as reference

REAL_FILE = Path("/etc/hostname")
STUB = """#!/bin/sh
d="$HOSTNAMECTL_STATE"
[ -n "$d" ] && [ -d "$d" ] || { echo "stub: no state folder" >&2; exit 3; }
echo "$*" >> "$d/log"
case "$*" in
  "--transient status") cat "$d/transient" ;;
  "--static status") cat "$d/static" ;;
  "--transient set-hostname "*) printf '%s\\n' "$3" > "$d/transient" ;;
  "--pretty --static set-hostname "*) printf '%s\\n' "$4" > "$d/static" ;;
  *) echo "stub: unknown arguments: $*" >&2; exit 1 ;;
esac
"""


@pytest.fixture(autouse=True)
def machine_unchanged() -> Iterator[None]:
    before = (socket.gethostname(), REAL_FILE.read_bytes() if REAL_FILE.exists() else None)
    yield
    assert (socket.gethostname(), REAL_FILE.read_bytes() if REAL_FILE.exists() else None) == before


class Done(BaseException):  # as AnsibleModule's SystemExit: the module's ``except Exception`` lets it through
    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(answer.get("msg", ""))
        self.answer = answer


class StandIn:
    """The part of ``AnsibleModule`` that ansible-core's ``hostname`` uses."""

    params: dict[str, Any] = {}
    check_mode = False

    def __init__(self, argument_spec: Any, supports_check_mode: bool) -> None:
        self.params, self.check_mode = dict(StandIn.params), StandIn.check_mode

    def get_bin_path(self, cmd: str, required: bool = False) -> str | None:
        found = shutil.which(cmd)
        if found is None and required:
            self.fail_json(msg=f"Failed to find required executable {cmd}")
        return found

    def run_command(self, argv: list[str]) -> tuple[int, str, str]:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    def fail_json(self, msg: str, **data: Any) -> None:
        raise Done(dict(data, failed=True, msg=msg))

    def exit_json(self, **data: Any) -> None:
        raise Done(data)


class Sandbox:
    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root, self.mp = root, monkeypatch
        stubs = root / "bin"
        stubs.mkdir()
        (stubs / "hostnamectl").write_text(STUB)
        (stubs / "hostnamectl").chmod(0o755)
        monkeypatch.setenv("PATH", f"{stubs}{os.pathsep}{os.environ['PATH']}")
        for side in ("reference", "provision"):
            (root / side).mkdir()
        monkeypatch.setattr(reference.FileStrategy, "FILE", str(root / "reference" / "hostname"))
        monkeypatch.setattr(reference.RedHatStrategy, "NETWORK_FILE", str(root / "reference" / "network"))
        monkeypatch.setattr(hostname, "HOSTNAME_FILE", str(root / "provision" / "hostname"))
        monkeypatch.setattr(hostname, "NETWORK_FILE", str(root / "provision" / "network"))
        monkeypatch.setattr(reference, "AnsibleModule", StandIn)
        monkeypatch.setattr(reference.socket, "getfqdn", lambda *a: "gpu01.fleet.example")
        monkeypatch.setattr(hostname.socket, "getfqdn", lambda *a: "gpu01.fleet.example")
        self.check()

    def check(self) -> None:
        """Fails before anything is written unless every path either side may write is the test's own."""
        ours = (reference.FileStrategy.FILE, reference.RedHatStrategy.NETWORK_FILE, hostname.HOSTNAME_FILE,
                hostname.NETWORK_FILE)  # fmt: skip
        assert all(Path(p).is_relative_to(self.root) for p in ours), ours
        assert shutil.which("hostnamectl") == str(self.root / "bin" / "hostnamectl")
        assert hostname.hostlib.find_bin("hostnamectl") == str(self.root / "bin" / "hostnamectl")

    def state(self, files: dict[str, str], names: tuple[str, str] | None) -> None:
        for side in ("reference", "provision"):
            for rel, text in files.items():
                (self.root / side / rel).write_text(text)
            if names is not None:
                (self.root / side / "transient").write_text(names[0] + "\n")
                (self.root / side / "static").write_text(names[1] + "\n")

    def read(self, side: str) -> dict[str, str]:
        return {p.name: p.read_text() for p in sorted((self.root / side).iterdir())}

    def run_reference(self, name: str, use: str | None, check: bool) -> dict[str, Any]:
        self.check()
        self.mp.setenv("HOSTNAMECTL_STATE", str(self.root / "reference"))
        StandIn.params, StandIn.check_mode = {"name": name, "use": use}, check
        with pytest.raises(Done) as done:
            reference.main()
        return done.value.answer

    def run_ours(self, name: str, use: str | None, check: bool) -> dict[str, Any]:
        self.check()
        self.mp.setenv("HOSTNAMECTL_STATE", str(self.root / "provision"))
        try:
            answer = hostname.apply({"name": name, "use": use, "check": check})
        except hostname.Failed as exc:
            return exc.answer() | {"ok": None}
        before, after = answer.pop("before", None), answer.pop("after", None)
        if before is not None:
            answer["diff"] = {"after": after, "before": before}
        return answer


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    return Sandbox(tmp_path, monkeypatch)


def _compare(box: Sandbox, name: str, use: str | None, check: bool) -> dict[str, Any]:
    theirs = box.run_reference(name, use, check)
    ours = box.run_ours(name, use, check)
    ours.pop("ok", None)
    for side, answer in (("provision", ours), ("reference", theirs)):
        if "msg" in answer:
            answer["msg"] = answer["msg"].replace(str(box.root / side), "SANDBOX")
    assert ours == theirs
    assert box.read("provision") == box.read("reference")
    return ours


DEBIAN = {"os-release": 'PRETTY_NAME="Debian GNU/Linux 12"\nID=debian\n'}
FILE_CASES: list[tuple[str, str | None, dict[str, str]]] = [
    ("gpu01", "Debian", {"hostname": "vm\n"}),
    ("gpu01", "Ubuntu", {"hostname": "gpu01\n"}),
    ("gpu01.fleet.example", "Debian", {"hostname": "  gpu01 \n\n"}),
    ("gpu01", "Debian", {}),
    ("gpu01", "Redhat", {"network": "NETWORKING=yes\nHOSTNAME=old.example\n# x\n"}),
    ("gpu01", "Amazon", {"network": "NETWORKING=yes\n HOSTNAME = gpu01\n"}),
    ("gpu01", "Centos", {"network": "NETWORKING=yes\n"}),
    ("gpu01", "Redhat", {"network": "HOSTNAME=a=b\n"}),
    ("gpu01", "Redhat", {}),
    ("gpu01", "Rocky", {"hostname": "vm\n"}),
    ("gpu01", "OtherLinux", {"hostname": "vm\n"}),
]  # fmt: skip


@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize(("name", "dist", "files"), FILE_CASES)
def test_the_default_strategy_without_systemd_as_ansible(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, name: str, dist: str, files: dict[str, str], check: bool
) -> None:
    monkeypatch.setattr(sys_info, "get_distribution", lambda: dist)
    monkeypatch.setattr(reference, "get_distribution", lambda: dist)
    monkeypatch.setattr(reference.ServiceMgrFactCollector, "is_systemd_managed", staticmethod(lambda m: False))
    monkeypatch.setattr(hostname, "systemd_managed", lambda: False)
    monkeypatch.setattr(hostname, "distribution", lambda: dist)
    sandbox.state(files, None)
    answer = _compare(sandbox, name, None, check)
    if not check and not answer.get("failed"):  # converged: a second run changes nothing
        assert _compare(sandbox, name, None, False)["changed"] is False


SYSTEMD_CASES: list[tuple[str, tuple[str, str]]] = [
    ("gpu01", ("vm", "vm")),
    ("gpu01", ("gpu01", "vm")),
    ("gpu01", ("vm", "gpu01")),
    ("gpu01", ("gpu01", "gpu01")),
    ("gpu01.fleet.example", ("localhost", "")),
    ("g" * 65, ("vm", "vm")),
]


@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize("use", ["systemd", "debian", None])
@pytest.mark.parametrize(("name", "names"), SYSTEMD_CASES)
def test_hostnamectl_as_ansible(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, name: str, names: tuple[str, str], use: str | None,
    check: bool,
) -> None:  # fmt: skip
    monkeypatch.setattr(reference.ServiceMgrFactCollector, "is_systemd_managed", staticmethod(lambda m: True))
    monkeypatch.setattr(hostname, "systemd_managed", lambda: True)
    sandbox.state({}, names)
    _compare(sandbox, name, use, check)  # the stub's log: the same hostnamectl calls, in the same order


def test_the_distribution_table_is_ansible_cores() -> None:
    table: dict[str, str] = {}
    for cls in reference.Hostname.__subclasses__():
        if cls.platform == "Linux" and cls.distribution is not None:
            table[cls.distribution] = cls.strategy_class.__name__
    ours = {d: "FileStrategy" for d in hostname.FILE_DISTROS} | {d: "RedHatStrategy" for d in hostname.REDHAT_DISTROS}
    assert {d: s for d, s in table.items() if s in ("FileStrategy", "RedHatStrategy")} == ours
    assert set(table) - set(ours) == {"Alpine", "Gentoo", "Sles"}  # not offered (Alpine's order differs, see KNOWN)


@pytest.mark.parametrize(
    ("text", "dist"),
    [("ID=ubuntu\n", "Ubuntu"), ('ID="rhel"\n', "Redhat"), ("ID=amzn\n", "Amazon"), ("NAME=x\n", "OtherLinux")],
)
def test_the_distribution_from_os_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, dist: str
) -> None:
    (tmp_path / "os-release").write_text(text)
    monkeypatch.setattr(hostname, "OS_RELEASE", (str(tmp_path / "os-release"),))
    assert hostname.distribution() == dist


def test_the_module_is_offered_and_checks_its_arguments_before_the_run() -> None:
    cls = lookup("hostname")
    assert cls is lookup("ansible.builtin.hostname")
    assert cls.__name__ == "Hostname"
    with pytest.raises(ArgError, match="use 'freebsd' is not supported by provision"):
        cls.check_combination({"name": "gpu01", "use": "freebsd"}, lambda v: False)
    cls.check_combination({"name": "gpu01", "use": "redhat"}, lambda v: False)


# ---------------------------------------------------------------- both tools as processes, on a private /etc
SANDBOX_SH = """set -eu
/usr/bin/mount --bind "$1" /etc
[ "$(/usr/bin/cat /etc/hostname)" = sandbox-vm ] || { echo "sandbox: not the private /etc" >&2; exit 99; }
shift
exec "$@"
"""


def _in_sandbox(etc: Path, argv: list[str], stdin: str = "") -> dict[str, Any]:
    """``argv`` in a UTS and mount namespace of its own with ``etc`` mounted over ``/etc`` (checked before it runs:
    exit 99 otherwise), ``PATH`` an empty folder (no ``systemctl``, ``hostnamectl`` or ``hostname``: the default
    strategy is the file one and nothing can ask this machine's hostnamed)."""
    empty = etc.parent / "empty-path"
    empty.mkdir(exist_ok=True)
    assert all(shutil.which(c, path=str(empty)) is None for c in ("systemctl", "hostnamectl", "hostname"))
    env = {"PATH": str(empty), "LANG": "C.UTF-8"}
    proc = subprocess.run(
        ["/usr/bin/unshare", "--uts", "--mount", "/bin/sh", "-c", SANDBOX_SH, "sandbox", str(etc), *argv],
        input=stdin, capture_output=True, text=True, env=env, cwd=etc.parent, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def _private_etc(root: Path, mode: int) -> Path:
    etc = root / "etc"
    etc.mkdir(parents=True)
    (etc / "hostname").write_text("sandbox-vm\n")
    (etc / "hostname").chmod(mode)
    shutil.copy("/etc/os-release", etc / "os-release")
    return etc


@pytest.mark.parametrize(("name", "check", "mode"), [("gpu01.fleet.example", False, 0o644),
                                                     ("gpu01", True, 0o644), ("sandbox-vm", False, 0o640),
                                                     ("gpu01", False, 0o600)])  # fmt: skip
def test_the_shipped_script_as_the_module_on_the_real_path_in_a_namespace(
    tmp_path: Path, name: str, check: bool, mode: int
) -> None:
    theirs, ours = _private_etc(tmp_path / "reference", mode), _private_etc(tmp_path / "provision", mode)
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"name": name, "_ansible_check_mode": check}}))
    answer_theirs = _in_sandbox(theirs, [sys.executable, "-m", "ansible.modules.hostname", str(args)])
    script = str(Path(remote.REMOTE_DIR) / "hostname.py")
    request = json.dumps({"name": name, "use": None, "check": check})
    answer_ours = _in_sandbox(ours, [sys.executable, script, "apply"], request)
    answer_theirs.pop("invocation")
    assert answer_ours.pop("ok") is True
    before, after = answer_ours.pop("before", None), answer_ours.pop("after", None)
    if before is not None:
        answer_ours["diff"] = {"after": after, "before": before}
    assert answer_ours == answer_theirs
    assert answer_ours["changed"] is (name != "sandbox-vm")
    for etc in (theirs, ours):
        assert (etc / "hostname").read_text() == ("sandbox-vm\n" if check else f"{name}\n")
        assert (etc / "hostname").stat().st_mode & 0o7777 == mode
