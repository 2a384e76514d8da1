"""The lab itself: real sshd hosts reachable with OpenSSH and paramiko, and a clean teardown."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
import yaml

from tests.support.lab import MAX_HOSTS, Lab, LabError, LabHost, _endpoint

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]


def _ssh(lab: Lab, h: LabHost, command: str) -> subprocess.CompletedProcess[str]:
    argv = ["ssh", "-F", str(lab.ssh_config_path), "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"]
    argv += ["-o", "ConnectTimeout=10", "-p", str(h.port), f"{h.user}@{h.address}", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def _paramiko(lab: Lab, h: LabHost) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_system_host_keys(str(lab.known_hosts_path))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        h.address,
        port=h.port,
        username=h.user,
        key_filename=str(lab.client_key),
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
        banner_timeout=10,
        auth_timeout=10,
    )
    return client


def _exec(client: paramiko.SSHClient, command: str) -> tuple[int, str]:
    _, stdout, _ = client.exec_command(command, timeout=30)
    out = stdout.read().decode()
    return stdout.channel.recv_exit_status(), out


def _gone(users: list[str], pids: list[int]) -> bool:
    def user_exists(u: str) -> bool:
        try:
            pwd.getpwnam(u)
        except KeyError:
            return False
        return True

    return not any(map(user_exists, users)) and not any(map(_running, pids))


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie is dead, only not yet reaped by init


@pytest.fixture
def own_lab(tmp_path: Path) -> Iterator[Lab]:
    """A private 2-host lab for tests that break hosts (the session lab stays intact for others)."""
    with Lab(2, tmp_path / "own") as lab:
        yield lab


# ---- the shared session lab -----------------------------------------------------------------------


def test_files(lab: Lab) -> None:
    inventory = yaml.safe_load(lab.inventory_path.read_text())
    hosts = inventory["all"]["children"]["lab"]["hosts"]
    assert list(hosts) == [f"lab{i}" for i in range(lab.n)]
    for h in lab.hosts:
        assert hosts[h.name] == {
            "ansible_host": h.address,
            "ansible_port": 2222,
            "ansible_user": h.user,
            "ansible_ssh_private_key_file": str(lab.client_key),
        }
    known = lab.known_hosts_path.read_text().splitlines()
    assert [line.split()[:2] for line in known] == [[f"[{h.address}]:2222", "ssh-ed25519"] for h in lab.hosts]
    config = lab.ssh_config_path.read_text()
    assert f"UserKnownHostsFile {lab.known_hosts_path}" in config
    assert f"IdentityFile {lab.client_key}" in config
    state = json.loads((lab.base_dir / "lab.json").read_text())
    assert [h["user"] for h in state["hosts"]] == [h.user for h in lab.hosts]
    assert [h["pid"] for h in state["hosts"]] == [h.pid for h in lab.hosts]
    assert len({h.address for h in lab.hosts}) == lab.n


def test_users(lab: Lab) -> None:
    for i, h in enumerate(lab.hosts):
        assert h.user.startswith(f"plab{i}") and len(h.user) <= 32
        st = h.home.stat()
        assert st.st_uid == pwd.getpwnam(h.user).pw_uid and stat.S_IMODE(st.st_mode) == 0o700
        assert lab.run_as(i, ["id", "-un"]).stdout.strip() == h.user
        assert lab.run_as(i, ["touch", str(h.home / "probe")]).returncode == 0
        py = lab.run_as(i, ["/usr/bin/python3", "-c", "import sys; print(sys.version_info[0])"])
        assert py.stdout.strip() == "3", py.stderr


def test_openssh_client(lab: Lab) -> None:
    for h in lab.hosts:
        assert _ssh(lab, h, "true").returncode == 0
        result = _ssh(lab, h, "id -un; echo $HOME")
        assert result.stdout.split() == [h.user, str(h.home)], result.stderr
    # the named Host blocks of ssh_config work too
    h = lab.host(0)
    byname = subprocess.run(
        ["ssh", "-F", str(lab.ssh_config_path), "-o", "BatchMode=yes", h.name, "id -un"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert byname.stdout.strip() == h.user, byname.stderr


def test_allow_users_only_that_user(lab: Lab) -> None:
    other = lab.host(1)
    assert _ssh(lab, other, "true").returncode == 0
    wrong_user = dataclasses.replace(lab.host(0), user=other.user)  # host 0 only lets its own user in
    result = _ssh(lab, wrong_user, "true")
    assert result.returncode == 255 and "Permission denied" in result.stderr


def test_sftp(lab: Lab, tmp_path: Path) -> None:
    h = lab.host(0)
    local = tmp_path / "payload.txt"
    local.write_text("hello lab\n")
    batch = tmp_path / "batch"
    batch.write_text(f"put {local} uploaded.txt\nls -l uploaded.txt\n")
    result = subprocess.run(
        [
            "sftp",
            "-F",
            str(lab.ssh_config_path),
            "-o",
            "StrictHostKeyChecking=yes",
            "-b",
            str(batch),
            "-P",
            str(h.port),
            f"{h.user}@{h.address}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert lab.run_as(0, ["cat", str(h.home / "uploaded.txt")]).stdout == "hello lab\n"
    assert lab.run_as(0, ["stat", "-c", "%U", "uploaded.txt"]).stdout.strip() == h.user


def test_paramiko(lab: Lab) -> None:
    for h in lab.hosts:
        with _paramiko(lab, h) as client:
            assert _exec(client, "id -un") == (0, h.user + "\n")
            with client.open_sftp() as sftp:
                assert sftp.normalize(".") == str(h.home)


def test_many_sessions_on_one_connection(lab: Lab) -> None:
    h = lab.host(lab.n - 1)
    with _paramiko(lab, h) as client:
        transport = client.get_transport()
        assert transport is not None
        channels = [transport.open_session(timeout=10) for _ in range(20)]
        for k, ch in enumerate(channels):
            ch.exec_command(f"sleep 0.2; echo {k}")
        assert [ch.makefile().read().decode().strip() for ch in channels] == [str(k) for k in range(20)]
        for ch in channels:
            ch.close()


def test_write_inventory(lab: Lab, tmp_path: Path) -> None:
    path = lab.write_inventory(
        tmp_path / "inv.yml",
        extra_host_vars={"lab1": {"role": "decode"}},
        groups={"prefill": ["lab0"], "decode": ["lab1"]},
    )
    inv = yaml.safe_load(path.read_text())["all"]
    assert set(inv["children"]) == {"prefill", "decode"}
    assert inv["children"]["decode"]["hosts"]["lab1"]["role"] == "decode"
    assert inv["children"]["prefill"]["hosts"]["lab0"]["ansible_user"] == lab.host(0).user
    assert "hosts" not in inv
    only = yaml.safe_load(lab.write_inventory(tmp_path / "one.yml", names=[1]).read_text())
    assert list(only["all"]["children"]["lab"]["hosts"]) == ["lab1"]


# ---- breaking hosts (a private lab) --------------------------------------------------------------


def test_stop_and_start_host(own_lab: Lab) -> None:
    h = own_lab.host(1)
    with _paramiko(own_lab, h) as client:
        own_lab.stop_host(1)
        with pytest.raises((EOFError, OSError, paramiko.SSHException)):  # the session died with the host
            _exec(client, "true")
    with pytest.raises(paramiko.ssh_exception.NoValidConnectionsError) as info:
        _paramiko(own_lab, h)
    assert all(isinstance(e, ConnectionRefusedError) for e in info.value.errors.values())
    with pytest.raises(ConnectionRefusedError), socket.create_connection((h.address, h.port), timeout=5):
        pass
    assert _ssh(own_lab, own_lab.host(0), "true").returncode == 0  # the other host is unaffected
    own_lab.start_host(1)
    with _paramiko(own_lab, h) as client:
        assert _exec(client, "id -un") == (0, h.user + "\n")


def test_rotate_host_key(own_lab: Lab) -> None:
    h = own_lab.host(0)
    known_before = own_lab.known_hosts_path.read_text()
    own_lab.rotate_host_key(0)
    assert own_lab.known_hosts_path.read_text() == known_before
    with pytest.raises(paramiko.BadHostKeyException):
        _paramiko(own_lab, h)
    result = _ssh(own_lab, h, "true")
    assert result.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in result.stderr
    own_lab.restore_host_key(0)
    with _paramiko(own_lab, h) as client:
        assert _exec(client, "id -un")[1] == h.user + "\n"


def test_a_systemd_host_runs_a_real_systemd_that_leaves_the_machine_alone(own_lab: Lab, tmp_path: Path) -> None:
    h0, h1 = own_lab.host(0), own_lab.host(1)
    own_lab.grant_sudo(0)
    keep = Path("/tmp") / f"provision-lab-keep-{h0.user}"  # what systemd-tmpfiles would empty on the machine
    keep.write_text("kept")
    unit = Path("/usr/local/lib/systemd/system/provision-lab-test-sleep.service")
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text("[Service]\nExecStart=/bin/sleep 86397\n")  # default dependencies: pulls in sysinit.target
    try:
        with own_lab.systemd_host(0):
            seen = _ssh(own_lab, h0, "cat /proc/1/comm; test -d /run/systemd/system && echo canary; ls /tmp")
            assert seen.stdout.splitlines()[:2] == ["systemd", "canary"]
            assert keep.name not in seen.stdout  # a private /tmp
            assert _ssh(own_lab, h0, "sudo -n systemctl start provision-lab-test-sleep").returncode == 0
            active = _ssh(own_lab, h0, "sudo -n systemctl list-units --state=active --type=service --plain --no-legend")
            assert sorted(line.split()[0] for line in active.stdout.splitlines()) == [
                "provision-lab-sshd.service",
                "provision-lab-test-sleep.service",
            ]  # nothing of a machine's boot started (tmpfiles, sysusers, udev, timesyncd, ...)
            assert _ssh(own_lab, h0, "sudo -n systemctl is-system-running").stdout.strip() == "running"
            assert _ssh(own_lab, h1, "cat /proc/1/comm").stdout != "systemd\n"  # the other host is not under it
            assert not Path("/run/systemd/system").exists()  # nor is the machine
            sleeper = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p) == "/bin/sleep 86397"]
            assert sleeper
        assert keep.read_text() == "kept"
        assert not any(map(_running, (int(p.name) for p in sleeper)))  # the namespace died with its systemd
        assert _ssh(own_lab, h0, "cat /proc/1/comm").stdout != "systemd\n"  # the plain sshd is back
    finally:
        keep.unlink(missing_ok=True)
        unit.unlink(missing_ok=True)


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def test_grant_and_revoke_sudo(own_lab: Lab) -> None:
    h0, h1 = own_lab.host(0), own_lab.host(1)
    drop_in = Path("/etc/sudoers.d") / f"provision-lab-{h0.user}"
    assert _ssh(own_lab, h0, "sudo -n true").returncode != 0  # no sudo by default
    own_lab.grant_sudo(0)
    assert stat.S_IMODE(drop_in.stat().st_mode) == 0o440 and drop_in.stat().st_uid == 0
    assert subprocess.run(["visudo", "-cqf", str(drop_in)], capture_output=True).returncode == 0
    assert _ssh(own_lab, h0, "sudo -n id -u").stdout == "0\n"
    assert _ssh(own_lab, h0, f"sudo -n -u {h1.user} id -un").stdout == h1.user + "\n"  # become_user
    assert _ssh(own_lab, h1, "sudo -n true").returncode != 0  # only the host asked for
    assert json.loads(own_lab.state_path.read_text())["hosts"][0]["sudo"] is True
    own_lab.revoke_sudo(0)
    assert not drop_in.exists()
    assert _ssh(own_lab, h0, "sudo -n true").returncode != 0
    own_lab.grant_sudo(1)
    drop_in1 = Path("/etc/sudoers.d") / f"provision-lab-{h1.user}"
    own_lab.stop()  # teardown removes a drop-in still there
    assert not drop_in1.exists()


# ---- lifecycle ------------------------------------------------------------------------------------


def test_stop_removes_everything(tmp_path: Path) -> None:
    lab = Lab(2, tmp_path / "lab")
    lab.start()
    users, pids = [h.user for h in lab.hosts], [h.pid for h in lab.hosts if h.pid]
    # a process the user left running in the background must not survive the teardown
    assert _ssh(lab, lab.host(0), "nohup sleep 300 >/dev/null 2>&1 &").returncode == 0
    uid = pwd.getpwnam(users[0]).pw_uid
    lab.stop()
    lab.stop()  # idempotent
    assert _gone(users, pids)
    assert not (tmp_path / "lab").exists()
    assert _processes_of(uid) == []


def _passwd_lock_holders() -> list[int]:
    """The pids holding the shadow tools' lock (``lckpwdf``: a POSIX lock on /etc/.pwd.lock), from /proc/locks."""
    try:
        inode = Path("/etc/.pwd.lock").stat().st_ino
    except FileNotFoundError:
        return []
    holders = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" not in fields and len(fields) > 5 and fields[5].rsplit(":", 1)[-1] == str(inode):
            holders.append(int(fields[4]))
    return holders


def test_stop_removes_a_big_home_without_holding_the_passwd_lock(tmp_path: Path) -> None:
    """``userdel -r`` removes the home with the passwd lock held: a home of a venv's size outlasted the 15 s every
    other useradd/usermod on the machine waits for it (a parallel test failed "cannot lock /etc/passwd")."""
    lab = Lab(1, tmp_path / "lab")
    lab.start()
    home, user = lab.host(0).home, lab.host(0).user
    for d in range(200):
        (home / f"d{d}").mkdir()
        for f in range(200):
            (home / f"d{d}" / f"f{f}").touch()
    full = len(list(home.iterdir()))
    stopping = threading.Thread(target=lab.stop)
    stopping.start()
    seen = []  # (pid, entries left in the home) whenever a process about our user holds the lock
    while stopping.is_alive():
        for pid in _passwd_lock_holders():
            if user in _cmdline(Path(f"/proc/{pid}")):
                with contextlib.suppress(FileNotFoundError):  # the home went between the two looks
                    seen.append((pid, len(list(home.iterdir())) if home.exists() else 0))
        time.sleep(0.005)
    stopping.join()
    assert not home.exists()
    assert [s for s in seen if 0 < s[1] < full] == []  # never half removed while it holds the lock


def _processes_of(uid: int) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and proc.stat().st_uid == uid and _running(int(proc.name)):
                found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()!r}")
        except OSError:
            pass
    return found


def test_parallel_labs_do_not_collide(tmp_path: Path) -> None:
    with Lab(2, tmp_path / "a") as a, Lab(2, tmp_path / "b") as b:
        assert a.host(0).address != b.host(0).address
        assert {h.user for h in a.hosts}.isdisjoint(h.user for h in b.hosts)
        assert _ssh(a, a.host(1), "true").returncode == 0
        assert _ssh(b, b.host(1), "true").returncode == 0


def test_failed_start_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support import lab as lab_module

    monkeypatch.setattr(lab_module, "SSHD", "/bin/false")
    lab = Lab(2, tmp_path / "broken")
    with pytest.raises(LabError, match="exited"):
        lab.start()
    assert not (tmp_path / "broken").exists()
    assert lab.hosts == []


@pytest.mark.parametrize("how", ["cleanup_stale", "cleanup_orphans"])
def test_cleanup_after_crash(tmp_path: Path, how: str) -> None:
    base = tmp_path / "crashed"
    code = (
        f"import sys, os, signal; sys.path.insert(0, {str(REPO)!r})\n"
        "from pathlib import Path; from tests.support.lab import Lab\n"
        f"lab = Lab(2, Path({str(base)!r})).start(); lab.grant_sudo(1); print('up', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"  # no atexit, no teardown
    )
    crashed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert crashed.returncode == -signal.SIGKILL and crashed.stdout == "up\n", crashed.stderr
    state = json.loads((base / "lab.json").read_text())
    users, pids = [h["user"] for h in state["hosts"]], [h["pid"] for h in state["hosts"]]
    assert not _gone(users, pids)
    drop_in = Path("/etc/sudoers.d") / f"provision-lab-{users[1]}"
    assert drop_in.exists()
    if how == "cleanup_stale":
        assert Lab.cleanup_stale(base) is True
        assert Lab.cleanup_stale(base) is False
    else:
        shutil.rmtree(base)  # e.g. pytest rotated its old tmp dirs away: the registry still knows the lab
        assert Lab.cleanup_orphans() >= 1
    assert _gone(users, pids) and not base.exists() and not drop_in.exists()
    assert not list(Path("/tmp/provision-lab").glob(f"lab-{state['token']}.json"))


def test_cli_up_and_down(tmp_path: Path) -> None:
    base = tmp_path / "cli"
    script = str(REPO / "scripts" / "lab.py")
    argv = [sys.executable, script, "up", "-n", "2", "--dir", str(base)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as up:
        try:
            assert up.stdout is not None
            inventory = Path(up.stdout.readline().strip())
            assert inventory == base / "inventory.yml" and inventory.exists()
            users = [h["user"] for h in json.loads((base / "lab.json").read_text())["hosts"]]
            again = subprocess.run([sys.executable, script, "up", "--dir", str(base)], capture_output=True, text=True)
            assert again.returncode == 1 and "already up" in again.stderr
            down = subprocess.run([sys.executable, script, "down", "--dir", str(base)], capture_output=True, text=True)
            assert down.returncode == 0, down.stderr
            assert up.wait(timeout=30) == 0
            assert _gone(users, []) and not base.exists()
        finally:
            if up.poll() is None:
                up.terminate()
                up.wait(timeout=30)


def test_hosts_past_240_share_the_addresses_on_the_next_port() -> None:
    assert _endpoint(150, 0) == ("127.0.150.10", 2222)
    assert _endpoint(150, 239) == ("127.0.150.249", 2222)
    assert _endpoint(150, 240) == ("127.0.150.10", 2223)  # the 256-host benchmark's fleet
    assert len({_endpoint(150, i) for i in range(MAX_HOSTS)}) == MAX_HOSTS
    with pytest.raises(ValueError, match=r"1\.\.480"):
        Lab(MAX_HOSTS + 1, Path("/nonexistent"))
