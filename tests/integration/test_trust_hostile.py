"""Hosts that attack the controller with what they send back (the lab: real sshd, one Unix user per host,
whose login shell a test replaces): endless output, huge frames. One such host must neither stall the run for
the others nor grow the controller's memory without bound (issue 23, classes 1 and 2). And known_hosts read as
OpenSSH reads it: markers, malformed lines, SHA256 fingerprints (class 6, issue 21 item 6)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.commands import Command
from provision.errors import HostKeyChanged
from provision.transport import ConnectOptions
from provision.transport.ssh import SSHConnection
from tests.support.lab import Lab

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 3 << 30  # address space of the controller under test: a leak dies here, not in the machine's OOM

SHELLS = {
    # no newline ever: the agent's length header, the lock holder's answer and every command's output flood
    "zeros": "exec cat /dev/zero\n",
    # endless short lines (a chatty .bashrc that never ends)
    "lines": "exec yes provision\n",
    # a frame header announcing a terabyte, then a stream
    "frame": "printf '999999999999\\n'; exec cat /dev/zero\n",
}
TWO_TASKS = """
- hosts: all
  gather_facts: false
  tasks:
    - name: one
      command: "true"
    - name: two
      file: {path: hostile-two, state: directory}
"""


@contextlib.contextmanager
def login_shell(lab: Lab, i: int, body: str) -> Iterator[None]:
    """Host i's login shell replaced by a script (every exec channel runs ``shell -c ...``; internal-sftp does
    not), put back after."""
    user = lab.hosts[i].user
    old = pwd.getpwnam(user).pw_shell
    script = lab.hosts[i].home / "hostile-shell"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    subprocess.run(["usermod", "-s", str(script), user], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["usermod", "-s", old, user], check=True, capture_output=True)
        script.unlink()


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_bounded(lab: Lab, tmp_path: Path, text: str, *extra: str, limit: float = 120) -> tuple[int, str, str, float]:
    playbook = tmp_path / "pb.yml"
    playbook.write_text(text)
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[0, 1])
    env = {**os.environ, "PYTHONPATH": str(REPO), **lab.ssh_env()}
    argv = [sys.executable, "-m", "provision", "run", str(playbook), "-i", str(inv), "--json", *extra]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_limit_memory,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=limit)
    finally:
        proc.kill()
        proc.communicate()
    return proc.returncode, out, err, time.monotonic() - started


@pytest.mark.parametrize("kind", sorted(SHELLS))
def test_a_flooding_host_is_cut_off_in_bounded_time_and_the_others_finish(lab: Lab, tmp_path: Path, kind: str) -> None:
    lab.run_as(1, ["rm", "-rf", "hostile-two"])
    with login_shell(lab, 0, SHELLS[kind]):
        rc, out, err, took = run_bounded(lab, tmp_path, TWO_TASKS, "-T", "5", "--connect-timeout", "2")
    print(f"\n{kind}: run ended after {took:.1f}s with exit {rc}: {err.strip().splitlines()[-3:]}")
    assert "Traceback" not in err and "internal error" not in err, err
    assert rc in (2, 4), err
    stats = json.loads(out)["stats"]
    assert stats["lab1"] == {**stats["lab1"], "ok": 2, "failed": 0, "unreachable": 0}, stats
    assert stats["lab0"]["ok"] == 0 and stats["lab0"]["failed"] + stats["lab0"]["unreachable"] == 1, stats
    assert lab.run_as(1, ["test", "-d", "hostile-two"]).returncode == 0  # the healthy host went on
    assert took < 60, took  # bounded: -T 5 plus margins, not "as long as the host talks"


# ------------------------------------------------------------------------ known_hosts as OpenSSH reads it
def key_line(pub: Path) -> str:
    return " ".join(pub.read_text().split()[:2])


def connect_with(lab: Lab, i: int, known: Path, *, accept_new: bool = False) -> SSHConnection:
    h = lab.hosts[i]
    host_vars = {"ansible_host": h.address, "ansible_port": h.port, "ansible_user": h.user,
                 "ansible_ssh_private_key_file": str(lab.client_key)}  # fmt: skip
    opts = ConnectOptions(known_hosts=(str(known),), accept_new_host_keys=accept_new)
    return SSHConnection(h.name, host_vars, opts)


def other_key(tmp_path: Path) -> str:
    """A valid ed25519 public key that no lab host has."""
    path = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return key_line(path.with_name("other_key.pub"))


def host_key(lab: Lab, i: int) -> str:
    return key_line(lab.hosts[i].host_key.with_name(lab.hosts[i].host_key.name + ".pub"))


def test_malformed_lines_and_ca_lines_do_not_break_plain_entries(
    lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h = lab.hosts[0]
    other = other_key(tmp_path)
    known = tmp_path / "known_hosts"
    known.write_text(
        "# a comment\n"
        "garbage\n"  # line 2: too few fields
        f"@cert-authority *.example.org {other}\n"  # a host CA for other names
        "broken.example.org ssh-ed25519 @@not-base64@@\n"  # line 4
        f"@bogus {h.known_hosts_name} {other}\n"  # line 5: unknown marker
        f"{h.known_hosts_name} {host_key(lab, 0)}\n"
    )
    conn = connect_with(lab, 0, known)
    try:
        assert conn.run(Command.of("true")).rc == 0
    finally:
        conn.close()
    err = capsys.readouterr().err
    for line in (2, 4, 5):
        assert f"{known}:{line}: malformed known_hosts line skipped" in err, err
    assert f"{known}:3" not in err and f"{known}:6" not in err


@pytest.mark.parametrize("accept_new", [False, True])
def test_a_revoked_host_key_is_refused_even_when_listed(lab: Lab, tmp_path: Path, accept_new: bool) -> None:
    h = lab.hosts[0]
    known = tmp_path / "known_hosts"
    known.write_text(f"{h.known_hosts_name} {host_key(lab, 0)}\n@revoked * {host_key(lab, 0)}\n")
    conn = connect_with(lab, 0, known, accept_new=accept_new)
    try:
        with pytest.raises(HostKeyChanged, match=r"REVOKED.*refusing") as caught:
            conn.run(Command.of("true"))
    finally:
        conn.close()
    assert "SHA256:" in str(caught.value) and "\n" not in str(caught.value)
    assert known.read_text().count("\n") == 2  # accept-new added nothing


def test_a_changed_key_is_shown_by_its_sha256_fingerprint(lab: Lab, tmp_path: Path) -> None:
    h = lab.hosts[0]
    known = tmp_path / "known_hosts"
    known.write_text(f"{h.known_hosts_name} {other_key(tmp_path)}\n")
    conn = connect_with(lab, 0, known)
    try:
        with pytest.raises(HostKeyChanged) as caught:
            conn.run(Command.of("true"))
    finally:
        conn.close()
    pub = h.host_key.with_name(h.host_key.name + ".pub")
    want = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], capture_output=True, text=True)
    assert want.stdout.split()[1] in str(caught.value), (want.stdout, str(caught.value))


def test_a_revoked_key_of_one_type_and_a_known_key_of_another_connects(lab: Lab, tmp_path: Path) -> None:
    h = lab.hosts[2]
    ecdsa = tmp_path / "ssh_host_ecdsa_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(ecdsa)], check=True)
    config = h.config.read_text()
    lab.stop_host(2)
    h.config.write_text(config + f"HostKey {ecdsa}\n")
    lab.start_host(2)
    try:
        known = tmp_path / "known_hosts"
        known.write_text(f"@revoked {h.known_hosts_name} {host_key(lab, 2)}\n"
                         f"{h.known_hosts_name} {key_line(ecdsa.with_name(ecdsa.name + '.pub'))}\n")  # fmt: skip
        conn = connect_with(lab, 2, known)
        try:
            assert conn.run(Command.of("true")).rc == 0
        finally:
            conn.close()
    finally:
        lab.stop_host(2)
        h.config.write_text(config)
        lab.start_host(2)


def test_commands_without_a_timeout_never_crash_the_agent(lab: Lab, tmp_path: Path) -> None:
    """The agent's exec reaped a command whose pipes had ended and then waited for it again
    (ChildProcessError: the agent died, the host was "unreachable"): about one fresh connection in two."""
    known = tmp_path / "known_hosts"
    known.write_text(f"{lab.hosts[1].known_hosts_name} {host_key(lab, 1)}\n")
    for _ in range(12):
        conn = connect_with(lab, 1, known)
        try:
            assert conn.run(Command.of("true")).rc == 0
        finally:
            conn.close()


READ_ZERO = """
import resource, sys
sys.path.insert(0, sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from provision.errors import OutputTooLarge
from provision.transport import ConnectOptions
from provision.transport.ssh import SSHConnection
host_vars = {"ansible_host": sys.argv[2], "ansible_port": int(sys.argv[3]), "ansible_user": sys.argv[4],
             "ansible_ssh_private_key_file": sys.argv[5]}
conn = SSHConnection("lab1", host_vars, ConnectOptions(known_hosts=(sys.argv[6],)))
try:
    conn.get("zero-link")
    print("read it all")
except OutputTooLarge as exc:
    print("refused:", exc)
finally:
    conn.close()
"""


def test_a_file_that_never_ends_is_read_up_to_the_cap(lab: Lab, tmp_path: Path) -> None:
    """A host file read into the controller (SFTP: past the agent's 8 MiB) that is a link to /dev/zero."""
    h = lab.hosts[1]
    lab.run_as(1, ["ln", "-sf", "/dev/zero", "zero-link"])
    known = tmp_path / "known_hosts"
    known.write_text(f"{h.known_hosts_name} {host_key(lab, 1)}\n")
    argv = [sys.executable, "-c", READ_ZERO, str(REPO), h.address, str(h.port), h.user, str(lab.client_key), str(known)]
    started = time.monotonic()
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    finally:
        lab.run_as(1, ["rm", "-f", "zero-link"])
    took = time.monotonic() - started
    print(f"\n/dev/zero over SFTP: {run.stdout.strip()} after {took:.1f}s")
    assert run.stdout.startswith("refused:"), run.stdout + run.stderr
    assert "zero-link (the limit is 256 MiB)" in run.stdout
    assert took < 100
