"""``--persist SECONDS``: connections kept between runs by the user's keeper, with every guarantee of a run's own
connection (provision.transport.persist). Each test has a keeper of its own ($XDG_RUNTIME_DIR of its own)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from provision.transport.persist import SOCKET
from tests.support.lab import Lab
from tests.support.processes import alive, openers, pids_of, read_pid, sigkill_mid_command, wait_for
from tests.support.rtt_proxy import RttProxy

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]

WHO = """
- hosts: all
  gather_facts: false
  tasks:
    - command: id -un
      register: who
      changed_when: false
    - copy: {{content: "{{{{ who.stdout }}}}\\n", dest: "persist-who-{tag}"}}
"""

FORKS = """
- hosts: all
  gather_facts: false
  tasks:
    - shell: echo "$PPID $(ps -o ppid= -p $PPID)" >> persist-forks
      changed_when: false
"""

SLEEP = """
- hosts: all
  gather_facts: false
  tasks:
    - shell: echo $$ > persist-sleep.pid; sleep 300; echo never
"""


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a test's runs: its own keeper directory; the keeper is stopped at the end."""
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_RUNTIME_DIR": str(folder)}
    yield env
    subprocess.run([sys.executable, "-m", "provision", "persist", "stop"], env=env, capture_output=True, timeout=60)


def _cli(env: dict[str, str], cwd: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provision", *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def _status(env: dict[str, str], cwd: Path) -> dict[str, object]:
    done = _cli(env, cwd, "persist", "status")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert isinstance(doc, dict)
    return doc


def test_a_second_run_reuses_the_kept_connection_and_stop_ends_it(lab: Lab, tmp_path: Path,
                                                                   runtime: dict[str, str]) -> None:  # fmt: skip
    with RttProxy(lab) as proxy:
        files = proxy.write_files(tmp_path / "proxied")
        env = {**runtime, "PROVISION_SSH_CONFIG": str(files["ssh_config"])}
        (tmp_path / "who.yml").write_text(WHO.format(tag="a"))
        inv = str(files["inventory"])
        for run in range(2):  # every playbook twice: the second changes nothing
            done = _cli(env, tmp_path, "run", "who.yml", "-i", inv, "-l", "lab0", "--persist", "60", "--json")
            assert done.returncode == 0, done.stdout + done.stderr
            changed = sum(s["changed"] for s in json.loads(done.stdout)["stats"].values())
            assert changed == (1 if run == 0 else 0)
            if run == 0:  # the keeper's only: the run's file write goes through the kept agent, not SFTP
                assert proxy.connections()["lab0"] == 1
                proxy.reset()
        assert proxy.connections().get("lab0", 0) == 0, "the second run made a connection of its own"
        assert proxy.turns()["lab0"] > 0, "the second run went through the kept connection"
        assert lab.run_as(0, ["cat", "persist-who-a"]).stdout.strip() == lab.hosts[0].user
        assert _status(env, tmp_path)["kept"] == 1
        assert _status(env, tmp_path)["residents"] == 1
        stopped = _cli(env, tmp_path, "persist", "stop")
        assert stopped.stdout.strip() == "stopped"
        assert wait_for(lambda: not _status(env, tmp_path).get("ok"), 10) is not None
        assert not (Path(runtime["XDG_RUNTIME_DIR"]) / f"provision-persist-{os.getuid()}" / SOCKET).exists()


def test_each_kept_run_is_a_fork_of_the_hosts_resident_agent(lab: Lab, tmp_path: Path,
                                                             runtime: dict[str, str]) -> None:  # fmt: skip
    """No interpreter started, no channel opened per run: the run's agent (the command's parent) is a new child
    of the same resident agent each time, and it ends with its run."""
    env = {**runtime, **lab.ssh_env()}
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[2])
    (tmp_path / "forks.yml").write_text(FORKS)
    lab.run_as(2, ["rm", "-f", "persist-forks"])
    for _ in range(3):
        done = _cli(env, tmp_path, "run", "forks.yml", "-i", str(inv), "--persist", "60")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "changed=0" in done.stdout
    lines = [line.split() for line in lab.run_as(2, ["cat", "persist-forks"]).stdout.splitlines()]
    agents = [int(agent) for agent, _ in lines]
    residents = {int(parent) for _, parent in lines}
    assert len(lines) == 3 and len(set(agents)) == 3, lines
    assert len(residents) == 1, f"the runs' agents have different parents: {lines}"
    resident = residents.pop()
    assert alive(resident) and not any(alive(agent) for agent in agents)
    assert _status(env, tmp_path)["residents"] == 1


RESIDENT_MARK = "eyJvcCI6ICJyZXNpZGVu"  # base64 of '{"op": "residen': the resident's first request, in its argv


def test_a_resident_killed_under_a_run_takes_its_command_and_the_next_run_gets_a_new_one(
        lab: Lab, tmp_path: Path, runtime: dict[str, str]) -> None:  # fmt: skip
    """kill -9 of the host's resident agent mid-command: the run's agent (its fork) sees its input end and takes
    the command with it; the next run gets a new resident on the same kept connection."""
    env = {**runtime, **lab.ssh_env()}
    user = lab.hosts[1].user
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[1])
    (tmp_path / "who.yml").write_text(WHO.format(tag="r"))
    # this test's resident is the one new process left after its first run: an earlier test's resident of this
    # user may still be on its way out (its keeper was stopped: its channel closes, then it exits), and the run's
    # own agent, a fork of the resident (the same command line), may still be ending when the command returned
    before = set(pids_of(user, RESIDENT_MARK))
    assert _cli(env, tmp_path, "run", "who.yml", "-i", str(inv), "--persist", "120").returncode == 0
    new: set[int] = set()

    def one_new() -> bool:
        new.clear()
        new.update(set(pids_of(user, RESIDENT_MARK)) - before)
        return len(new) == 1

    assert wait_for(one_new, 10) is not None, f"new residents: {new}"
    (old,) = new
    (tmp_path / "sleep.yml").write_text(SLEEP)
    lab.run_as(1, ["rm", "-f", "persist-sleep.pid"])
    proc = subprocess.Popen([sys.executable, "-m", "provision", "run", "sleep.yml", "-i", str(inv), "--persist",
                             "120"], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        sleeper = read_pid(lab, 1, "persist-sleep.pid", 30)
        os.kill(old, 9)
        assert wait_for(lambda: not alive(sleeper), 10) is not None, "the command outlived its resident"
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    again = _cli(env, tmp_path, "run", "who.yml", "-i", str(inv), "--persist", "120")
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout + again.stderr
    assert [pid for pid in pids_of(user, RESIDENT_MARK) if pid != old and pid not in before], "no new resident"
    assert _status(env, tmp_path)["residents"] == 1


def test_a_kept_link_that_stalled_is_replaced_not_reported_unreachable(lab: Lab, tmp_path: Path,
                                                                       runtime: dict[str, str]) -> None:  # fmt: skip
    """Between runs the kept link goes silent (a host rebooted behind a NAT, a stalled path): the next run gets a
    new connection from the keeper, once, instead of the host reported unreachable."""
    with RttProxy(lab) as proxy:
        files = proxy.write_files(tmp_path / "proxied")
        env = {**runtime, "PROVISION_SSH_CONFIG": str(files["ssh_config"])}
        inv = str(files["inventory"])
        (tmp_path / "who.yml").write_text(WHO.format(tag="s"))
        first = _cli(env, tmp_path, "run", "who.yml", "-i", inv, "-l", "lab1", "--persist", "60")
        assert first.returncode == 0, first.stdout + first.stderr
        assert _status(env, tmp_path)["kept"] == 1
        assert proxy.stall("lab1") == 1  # the keeper's connection (the run's own ones have closed)
        proxy.reset()
        again = _cli(env, tmp_path, "run", "who.yml", "-i", inv, "-l", "lab1", "--persist", "60")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "changed=0" in again.stdout and "unreachable=0" in again.stdout, again.stdout
        assert proxy.connections()["lab1"] >= 1  # a new connection was made for it
        assert _status(env, tmp_path)["kept"] == 1


def _kept_run_behind_a_held_lock(
    lab: Lab, i: int, env: dict[str, str], cwd: Path, inv: str, asked: Callable[[set[int]], None] = lambda pids: None
) -> tuple[int, str, str]:
    """A run of sleep.yml holds host i's run lock (on a connection of its own); a kept run of who.yml (``--persist
    120``, H = 1 s: ``--connect-timeout 1``) then asks for it. Once a new process of the host's user has the lock
    file open, ``asked`` checks those pids; 3.5 s later (more than 3 H of silence, less than the lock's 5 s grace)
    the holder is killed: its agent takes its command with it, then lets go of the lock. The kept run's exit code,
    stdout and stderr."""
    user = lab.hosts[i].user
    lock = f".provision/run-{lab.hosts[i].name}.lock"
    lab.run_as(i, ["rm", "-f", "persist-sleep.pid"])
    holder = waiter = None
    try:
        holder = subprocess.Popen([sys.executable, "-m", "provision", "run", "sleep.yml", "-i", inv], env=env,
                                  cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        read_pid(lab, i, "persist-sleep.pid", 30)  # the holder has the lock
        held = set(openers(user, lock))
        waiter = subprocess.Popen([sys.executable, "-m", "provision", "run", "who.yml", "-i", inv, "--persist", "120",
                                   "--connect-timeout", "1"], env=env, cwd=cwd, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)  # fmt: skip
        asking = wait_for(lambda: bool(set(openers(user, lock)) - held), 60)
        assert asking is not None, "the kept run never asked for the lock"
        asked(set(openers(user, lock)) - held)
        time.sleep(3.5)
        holder.kill()
        holder.communicate(timeout=30)
        out, err = waiter.communicate(timeout=60)
    finally:
        for proc in (holder, waiter):
            if proc is not None and proc.returncode is None:
                proc.kill()
                proc.communicate(timeout=30)
    return waiter.returncode, out, err


def test_a_run_on_the_keepers_fallback_agent_waits_for_the_run_lock(lab: Lab, tmp_path: Path,
                                                                    runtime: dict[str, str]) -> None:  # fmt: skip
    """The keeper's way without a usable resident: the host's resident is stopped (SIGSTOP: its channel stays
    open, nothing answers), so after the channel timeout (10 s) the keeper gives up on it, makes a new connection
    and execs the run's agent on a channel of it, spliced to the run. That agent waits 3.5 s (> 3 H, H = 1 s) for
    the run lock of a run that ends then: the run's heartbeats reach it through the splice, so it lives, takes the
    lock, and the run needs no connection of its own."""
    env = {**runtime, **lab.ssh_env()}
    user = lab.hosts[1].user
    inv = str(lab.write_inventory(tmp_path / "inv.yml", names=[1]))
    (tmp_path / "who.yml").write_text(WHO.format(tag="f"))
    (tmp_path / "sleep.yml").write_text(SLEEP)
    kept = ("--persist", "120", "--connect-timeout", "1")  # the same options each time: the same kept connection
    before = set(pids_of(user, RESIDENT_MARK))  # an earlier test's resident may still be on its way out
    first = _cli(env, tmp_path, "run", "who.yml", "-i", inv, *kept)
    assert first.returncode == 0, first.stdout + first.stderr
    new: set[int] = set()

    def one_new() -> bool:  # the resident; the first run's agent (its fork, the same argv) may still be ending
        new.clear()
        new.update(set(pids_of(user, RESIDENT_MARK)) - before)
        return len(new) == 1

    assert wait_for(one_new, 10) is not None, f"new residents: {new}"
    (resident,) = new

    def not_a_fork(pids: set[int]) -> None:  # an agent of its own, not a fork of the (stopped) resident
        for pid in pids:
            assert RESIDENT_MARK not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")

    os.kill(resident, signal.SIGSTOP)
    try:
        code, out, err = _kept_run_behind_a_held_lock(lab, 1, env, tmp_path, inv, not_a_fork)
    finally:
        os.kill(resident, signal.SIGKILL)  # the keeper closed its channel; stopped, it cannot see that
    assert code == 0 and "changed=0" in out, out + err
    assert "--persist: no keeper" not in err, err  # the keeper's fallback agent took the lock itself
    assert _status(env, tmp_path)["kept"] == 1


def test_the_keeper_socket_is_private_to_the_user(lab: Lab, tmp_path: Path, runtime: dict[str, str]) -> None:
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[0])
    (tmp_path / "who.yml").write_text(WHO.format(tag="p"))
    done = _cli({**runtime, **lab.ssh_env()}, tmp_path, "run", "who.yml", "-i", str(inv), "--persist", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    folder = Path(runtime["XDG_RUNTIME_DIR"]) / f"provision-persist-{os.getuid()}"
    info = os.lstat(folder)
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()
    sock = os.lstat(folder / SOCKET)
    assert stat.S_ISSOCK(sock.st_mode) and stat.S_IMODE(sock.st_mode) == 0o600 and sock.st_uid == os.getuid()


def test_a_runtime_directory_deeper_than_a_socket_path_still_keeps(lab: Lab, tmp_path: Path,
                                                                    runtime: dict[str, str]) -> None:  # fmt: skip
    """A socket's path holds 107 bytes: a deep $XDG_RUNTIME_DIR (CI's pytest-NNN folders) is reached through
    /proc/self/fd of the folder, not given up on."""
    deep = Path(runtime["XDG_RUNTIME_DIR"]) / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True, mode=0o700)
    env = {**runtime, **lab.ssh_env(), "XDG_RUNTIME_DIR": str(deep)}
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[0])
    (tmp_path / "who.yml").write_text(WHO.format(tag="d"))
    try:
        done = _cli(env, tmp_path, "run", "who.yml", "-i", str(inv), "--persist", "60")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "no keeper" not in done.stderr, done.stderr
        assert len(os.fsencode(deep / f"provision-persist-{os.getuid()}" / SOCKET)) > 108
        assert _status(env, tmp_path)["kept"] == 1
    finally:
        _cli(env, tmp_path, "persist", "stop")


def test_a_keeper_directory_open_to_others_is_refused(lab: Lab, tmp_path: Path, runtime: dict[str, str]) -> None:
    folder = Path(runtime["XDG_RUNTIME_DIR"]) / f"provision-persist-{os.getuid()}"
    folder.mkdir(mode=0o700)
    folder.chmod(0o777)
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[0])
    (tmp_path / "who.yml").write_text(WHO.format(tag="o"))
    done = _cli({**runtime, **lab.ssh_env()}, tmp_path, "run", "who.yml", "-i", str(inv), "--persist", "60")
    assert done.returncode == 0, done.stdout + done.stderr  # the run connects on its own
    assert not (folder / SOCKET).exists(), "a keeper listened in a directory others can write"
    assert "[WARNING]: --persist: no keeper" in done.stderr, done.stderr  # said, not silently dropped


def test_a_changed_inventory_never_reuses_a_connection_made_for_another(lab: Lab, tmp_path: Path,
                                                                       runtime: dict[str, str]) -> None:  # fmt: skip
    env = {**runtime, **lab.ssh_env()}
    (tmp_path / "who.yml").write_text(WHO.format(tag="c"))
    first = lab.write_inventory(tmp_path / "first.yml", names=[1])
    done = _cli(env, tmp_path, "run", "who.yml", "-i", str(first), "--persist", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    # the same inventory name, now with host 2's address and user: the kept connection is not for it
    h2 = lab.hosts[2]
    second = tmp_path / "second.yml"
    second.write_text(json.dumps({"all": {"hosts": {"lab1": {
        "ansible_host": h2.address, "ansible_port": h2.port, "ansible_user": h2.user,
        "ansible_ssh_private_key_file": str(lab.client_key)}}}}))  # fmt: skip
    done = _cli(env, tmp_path, "run", "who.yml", "-i", str(second), "--persist", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    assert lab.run_as(2, ["cat", "persist-who-c"]).stdout.strip() == h2.user
    assert _status(env, tmp_path)["kept"] == 2


def test_the_keeper_exits_when_idle(lab: Lab, tmp_path: Path, runtime: dict[str, str]) -> None:
    env = {**runtime, **lab.ssh_env()}
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[0])
    (tmp_path / "who.yml").write_text(WHO.format(tag="i"))
    done = _cli(env, tmp_path, "run", "who.yml", "-i", str(inv), "--persist", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    pid = _status(env, tmp_path)["pid"]
    assert isinstance(pid, int) and alive(pid)
    done = _cli(env, tmp_path, "run", "who.yml", "-i", str(inv), "--persist", "2")  # the last run's window counts
    assert done.returncode == 0, done.stdout + done.stderr
    assert wait_for(lambda: not alive(pid), 30, 0.2) is not None, "the keeper outlived its idle time"
    assert not (Path(runtime["XDG_RUNTIME_DIR"]) / f"provision-persist-{os.getuid()}" / SOCKET).exists()


def test_a_sigkilled_run_kills_its_remote_command_not_the_kept_connection(lab: Lab, tmp_path: Path,
                                                                          runtime: dict[str, str]) -> None:  # fmt: skip
    env = {**runtime, **lab.ssh_env()}
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[3])
    (tmp_path / "who.yml").write_text(WHO.format(tag="k"))
    assert _cli(env, tmp_path, "run", "who.yml", "-i", str(inv), "--persist", "120").returncode == 0
    (tmp_path / "sleep.yml").write_text(SLEEP)
    lab.run_as(3, ["rm", "-f", "persist-sleep.pid"])
    proc = subprocess.Popen([sys.executable, "-m", "provision", "run", "sleep.yml", "-i", str(inv), "--persist",
                             "120"], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    took = sigkill_mid_command(lab, 3, proc, "persist-sleep.pid")
    assert took is not None, "the remote command outlived the SIGKILLed run"
    assert _status(env, tmp_path)["kept"] == 1  # the keeper and its connection live on
    assert _status(env, tmp_path)["residents"] == 1  # the run's agent was the resident's fork: it lives on too
    again = _cli(env, tmp_path, "run", "who.yml", "-i", str(inv), "--persist", "120")
    assert again.returncode == 0, again.stdout + again.stderr  # the run lock died with the killed run


def test_a_kept_run_that_waits_for_the_run_lock_keeps_its_kept_agent(lab: Lab, tmp_path: Path,
                                                                    runtime: dict[str, str]) -> None:  # fmt: skip
    """H = 1 s (``--connect-timeout 1``): a kept run that waits 3.5 s for the run lock of a run that ends then
    (within the lock's grace, 5 s) is beaten meanwhile: its agent lives and takes the lock (unbeaten, it ended
    after 3 s of silence and the run connected on its own, with a warning)."""
    env = {**runtime, **lab.ssh_env()}
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[2])
    (tmp_path / "sleep.yml").write_text(SLEEP)
    (tmp_path / "who.yml").write_text(WHO.format(tag="w"))
    code, out, err = _kept_run_behind_a_held_lock(lab, 2, env, tmp_path, str(inv))
    assert code == 0, out + err
    assert "--persist: no keeper" not in err, err  # the kept agent took the lock itself
    assert _status(env, tmp_path)["kept"] == 1
