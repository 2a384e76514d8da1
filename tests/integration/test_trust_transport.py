"""The transport against hosts we do not trust (the lab: real sshd, one Unix user per host).

What a host's other users must never see (secrets in the process list), what must never outlive the
controller (remote commands of a dead, interrupted or disconnected run), a per-host run lock, a frozen host
reported unreachable in time, and remote file writes that are private from the first byte.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from provision.commands import RUNNER, Command
from provision.errors import CommandTimeout, HostError
from provision.transport import ConnectOptions, LocalConnection
from provision.transport.ssh import SSHConnection
from tests.support.lab import Lab
from tests.support.processes import alive, pids_of, read_pid, sigkill_mid_command, wait_for

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]


def ssh(lab: Lab, i: int = 0, **opts: Any) -> SSHConnection:
    h = lab.hosts[i]
    host_vars = {
        "ansible_host": h.address,
        "ansible_port": h.port,
        "ansible_user": h.user,
        "ansible_ssh_private_key_file": str(lab.client_key),
    }
    return SSHConnection(h.name, host_vars, ConnectOptions(known_hosts=(str(lab.known_hosts_path),), **opts))


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # the test inspects it
            box.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


# ---------------------------------------------------------------------------------- 1. no secret in `ps`
SECRET = "hf_TopSecretValue123"
SCRIPT_MARK = "script-text-marker-4711"


def ps_args() -> str:
    return subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout


def _assert_private_while_running(run: Callable[[Command], Any], pidfile: Path | str, read: Callable[[], str]) -> None:
    cmd = Command.shell(
        f'echo $$ > {pidfile}; sleep 3; echo "$HF_TOKEN" # {SCRIPT_MARK}',
        env={"HF_TOKEN": SECRET, "OTHER": f"x {SECRET} y"},
    )
    thread, box = in_thread(lambda: run(cmd))
    assert wait_for(lambda: read().strip().isdigit(), 15), "the command never started"
    listing = ps_args()
    thread.join(30)
    assert box and getattr(box[0], "stdout", None) == SECRET + "\n", box
    assert SECRET not in listing and SCRIPT_MARK not in listing, listing
    assert "sleep 3" in listing  # we looked while it ran


def test_ssh_secrets_and_script_text_never_in_the_process_list(lab: Lab, lab_env: None) -> None:
    conn = ssh(lab)
    lab.run_as(0, ["rm", "-f", "ps.pid"])
    try:
        _assert_private_while_running(
            lambda cmd: conn.run(cmd, timeout=60), "ps.pid", lambda: lab.run_as(0, ["cat", "ps.pid"]).stdout
        )
    finally:
        conn.close()


def test_local_secrets_and_script_text_never_in_the_process_list(tmp_path: Path) -> None:
    conn = LocalConnection("local")
    pidfile = tmp_path / "ps.pid"
    _assert_private_while_running(
        lambda cmd: conn.run(cmd, timeout=60), pidfile, lambda: pidfile.read_text() if pidfile.exists() else ""
    )


@pytest.mark.parametrize("agent_exec", [True, False], ids=["agent", "runner"])
def test_argv_command_with_env_chdir_and_stdin_over_ssh(lab: Lab, lab_env: None, agent_exec: bool) -> None:
    conn = ssh(lab, agent_exec=agent_exec)
    try:
        result = conn.run(
            Command.of("sh", "-c", 'printf "%s|%s|" "$V" "$(pwd)"; cat', env={"V": "it's $(x)"}, chdir="/tmp"),
            timeout=30,
            stdin=b"data",
        )
    finally:
        conn.close()
    assert (result.rc, result.stdout) == (0, "it's $(x)|/tmp|data")


# ------------------------------------------------------------------------- 2. command life tied to channel
# Commands run through the host's python agent (``op: exec``) unless they stream output or use become; both
# paths are tested: ``agent_exec=False`` sends every command on a channel of its own, through the runner.
@pytest.mark.parametrize("agent_exec", [True, False], ids=["agent", "runner"])
def test_closing_the_connection_kills_the_remote_command(lab: Lab, lab_env: None, agent_exec: bool) -> None:
    conn = ssh(lab, agent_exec=agent_exec)
    lab.run_as(0, ["rm", "-f", "tie.pid"])
    in_thread(lambda: conn.run(Command.shell("echo $$ > tie.pid; sleep 300 & sleep 301; wait"), timeout=600))
    pid = read_pid(lab, 0, "tie.pid")
    assert pids_of(lab.hosts[0].user, "sleep 300")
    conn.close()
    took = wait_for(lambda: not alive(pid) and not pids_of(lab.hosts[0].user, "sleep 30"), 10)
    assert took is not None, "the remote command outlived its connection"


@pytest.mark.parametrize("agent_exec", [True, False], ids=["agent", "runner"])
def test_a_command_that_ignores_sigterm_is_a_timeout_not_rc_minus_one(
    lab: Lab, lab_env: None, agent_exec: bool
) -> None:
    conn = ssh(lab, agent_exec=agent_exec)
    try:
        with pytest.raises(CommandTimeout):
            conn.run(Command.shell("trap '' TERM; echo $$ > trap.pid; sleep 60; sleep 60"), timeout=1)
        pid = int(lab.run_as(0, ["cat", "trap.pid"]).stdout)
        assert wait_for(lambda: not alive(pid), 5) is not None
        assert conn.run(Command.of("true"), timeout=10).rc == 0  # the connection is still good
    finally:
        conn.close()


def test_agent_exits_with_its_channel(lab: Lab, lab_env: None) -> None:
    conn = ssh(lab)
    agent = conn.python_agent("python3")
    assert agent.call("file_state.py", ["stat"], b'{"paths": ["/"]}', 30).rc == 0
    pids = pids_of(lab.hosts[0].user, "provision-agent")
    assert pids
    conn.close()
    assert wait_for(lambda: not any(alive(p) for p in pids), 10) is not None


KILL_SCRIPT = """
import sys, time
from provision.commands import Command
from provision.transport import ConnectOptions, LocalConnection
conn = LocalConnection("local")
print("ready", flush=True)
conn.run(Command.shell("echo $$ > " + sys.argv[1] + "; sleep 300"), timeout=600)
"""


def test_local_command_dies_with_a_sigkilled_controller(tmp_path: Path) -> None:
    pidfile = tmp_path / "local.pid"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(pidfile)], env=env)
    try:
        assert wait_for(lambda: pidfile.exists() and pidfile.read_text().strip().isdigit(), 15) is not None
        pid = int(pidfile.read_text())
        proc.kill()
        proc.wait()
        assert wait_for(lambda: not alive(pid), 10) is not None, "the command outlived its controller"
    finally:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------------------------- 3. controller signals
SLEEP_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: long
      shell: echo $$ > {pidfile}; sleep 300; echo never
"""


def start_cli(lab: Lab, tmp_path: Path, pidfile: str, *extra: str, text: str = SLEEP_PLAYBOOK) -> subprocess.Popen[str]:
    playbook = tmp_path / "sleep.yml"
    playbook.write_text(text.format(pidfile=pidfile))
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[0])
    env = {**os.environ, "PYTHONPATH": str(REPO), **lab.ssh_env()}
    return subprocess.Popen(
        [sys.executable, "-m", "provision", "run", str(playbook), "-i", str(inv), *extra],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(("sig", "code", "line"), [
    (signal.SIGTERM, 143, "ERROR: terminated (SIGTERM)"),
    (signal.SIGINT, 130, "ERROR: interrupted"),
])  # fmt: skip
def test_signal_to_the_controller_exits_with_one_line_and_kills_the_remote_command(
    lab: Lab, tmp_path: Path, sig: int, code: int, line: str
) -> None:
    lab.run_as(0, ["rm", "-f", "sig.pid"])
    proc = start_cli(lab, tmp_path, "sig.pid")
    try:
        pid = read_pid(lab, 0, "sig.pid", 30)
        sleeps = pids_of(lab.hosts[0].user, "sleep 300")
        assert sleeps
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert [ln for ln in err.splitlines() if ln.startswith("ERROR")] == [line], err
    assert err.rstrip().splitlines()[-1] == line
    took = wait_for(lambda: not alive(pid) and not any(alive(p) for p in sleeps), 5)
    assert took is not None, "the remote command outlived the interrupted run"
    print(f"\n{signal.Signals(sig).name}: remote command gone {took:.2f}s after the controller exited")


def test_sigkilled_controller_leaves_nothing_running_on_the_host(lab: Lab, tmp_path: Path) -> None:
    lab.run_as(0, ["rm", "-f", "kill.pid"])
    took = sigkill_mid_command(lab, 0, start_cli(lab, tmp_path, "kill.pid"), "kill.pid")
    assert took is not None, "the remote command outlived the SIGKILLed controller"
    print(f"\nSIGKILL: remote command gone {took:.2f}s after the controller died")


# -------------------------------------------------------------------------------------------- 4. run lock
TOUCH_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: step
      command: touch lock-rerun-ran
"""


# the first run's command ignores TERM (so does its sleep: an ignored signal stays ignored across exec): when the
# run is gone, its agent TERMs it, waits 2 s, KILLs it, then exits and lets go of the run lock
STUBBORN_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: long
      shell: trap '' TERM; echo $$ > {pidfile}; sleep 300; echo never
"""


def test_a_second_run_on_a_busy_host_is_refused_until_the_first_one_is_gone(lab: Lab, tmp_path: Path) -> None:
    """Refused while the first run runs; once it is killed, a rerun at once waits (the lock's grace) for the
    first run's agent to take its command with it, and runs."""
    from tests.support.cli import run_cli

    lab.run_as(0, ["rm", "-f", "lock.pid", "lock-rerun-ran"])
    first = start_cli(lab, tmp_path, "lock.pid", text=STUBBORN_PLAYBOOK)
    playbook = tmp_path / "touch.yml"
    playbook.write_text(TOUCH_PLAYBOOK)
    inv = lab.write_inventory(tmp_path / "inv2.yml", names=[0])
    cwd = Path.cwd()
    os.chdir(tmp_path)  # the retry file
    try:
        with lab.pointed_at():
            pid = read_pid(lab, 0, "lock.pid", 30)
            second = run_cli(["run", str(playbook), "-i", str(inv)])
            assert second.code == 4, second.err
            shown = second.out + second.err
            assert "host is busy" in shown and f"provision pid {first.pid} on " in shown, shown
            assert lab.run_as(0, ["test", "-e", "lock-rerun-ran"]).returncode != 0  # nothing of it ran
            first.kill()  # an interrupted run: the rerun must not overlap with what it left running
            first.communicate(timeout=15)
            rerun = run_cli(["run", str(playbook), "-i", str(inv)])
            assert rerun.code == 0, rerun  # no "host is busy" while the ended run's agent finished
            assert not alive(pid)
    finally:
        first.kill()
        first.communicate()
        os.chdir(cwd)


LOCK_SCRIPT = """
import sys
from provision.commands import Command
from provision.transport import LocalConnection
from provision.errors import HostBusy
try:
    LocalConnection(sys.argv[1], run_lock=True).run(Command.of("true"))
except HostBusy as exc:
    print(exc.msg)
"""


def test_local_run_lock_is_shared_in_a_process_and_refused_to_another(tmp_path: Path) -> None:
    name = f"lock-test-{os.getpid()}"
    one, two = LocalConnection(name, run_lock=True), LocalConnection(name, run_lock=True)
    try:
        assert one.run(Command.of("true")).rc == 0 and two.run(Command.of("true")).rc == 0
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        out = subprocess.run([sys.executable, "-c", LOCK_SCRIPT, name], env=env, capture_output=True, text=True)
        assert f"host is busy: another provision run holds its run lock (provision pid {os.getpid()}" in out.stdout
        one.close()
        out = subprocess.run([sys.executable, "-c", LOCK_SCRIPT, name], env=env, capture_output=True, text=True)
        assert "busy" in out.stdout  # still held by `two`
        two.close()
        out = subprocess.run([sys.executable, "-c", LOCK_SCRIPT, name], env=env, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout == "", out
    finally:
        one.close()
        two.close()
        Path(os.path.expanduser(f"~/.provision/run-{name}.lock")).unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------ 5. stalled link
FREEZE_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: long
      shell: "{{ 'echo $$ > freeze.pid; sleep 60' if inventory_hostname == 'lab0' else 'true' }}"
    - name: after
      command: touch after-freeze
"""


def connection_sshds(lab: Lab, i: int) -> list[int]:
    """The per-connection sshd processes of lab host i (under its listener; not the listener itself)."""
    listener = lab.hosts[i].pid
    assert listener is not None
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    out = []
    for pid in parents:
        up = parents.get(pid)
        while up is not None and up != listener:
            up = parents.get(up)
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if up == listener and comm.startswith("sshd"):
            out.append(pid)
    return out


def test_a_frozen_host_is_unreachable_within_three_keepalive_intervals(lab: Lab, tmp_path: Path) -> None:
    import json

    for i in (0, 1):
        lab.run_as(i, ["rm", "-f", "freeze.pid", "after-freeze"])
    playbook = tmp_path / "freeze.yml"
    playbook.write_text(FREEZE_PLAYBOOK)
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[0, 1])
    env = {**os.environ, "PYTHONPATH": str(REPO), **lab.ssh_env()}
    argv = [sys.executable, "-m", "provision", "run", str(playbook), "-i", str(inv), "--json"]
    argv += ["--connect-timeout", "2", "-T", "120"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    frozen: list[int] = []
    try:
        pid = read_pid(lab, 0, "freeze.pid", 30)
        frozen = connection_sshds(lab, 0)
        assert frozen
        for p in frozen:
            os.kill(p, signal.SIGSTOP)
        started = time.monotonic()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - started
    finally:
        for p in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGCONT)
        proc.kill()
        proc.communicate()
    print(f"\nfrozen host reported unreachable {took:.2f}s after SIGSTOP (connect timeout 2 s)")
    assert proc.returncode == 4, err
    stats = json.loads(out)["stats"]
    assert stats["lab0"]["unreachable"] == 1 and stats["lab1"]["failed"] == 0 and stats["lab1"]["ok"] == 2
    msgs = json.dumps(json.loads(out)["plays"][0]["tasks"][0]["hosts"]["lab0"])
    assert "keepalive" in msgs, msgs
    assert lab.run_as(1, ["test", "-e", "after-freeze"]).returncode == 0  # lab1 went on
    assert took < 15, took  # about 2-3 keepalive intervals, far from the 120 s command timeout
    # once the host thaws, its sshd finds the connection closed and the command dies with its channel
    assert wait_for(lambda: not alive(pid), 15) is not None


# ------------------------------------------------------------- 6. heartbeats: a frozen controller, a silent link
AGENT_SLEEP_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: the python agent starts here
      file: {{path: hb-dir, state: directory}}
    - name: long
      shell: echo $$ > {pidfile}; sleep 300; echo never
"""
RUNNER_MARK = RUNNER[RUNNER.rindex("def main():") :][:60]  # the runner's own main, on its command line
LOCKER_MARK = "run-%s.lock"  # in the run-lock holder's program text


def group_members(pgid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError):
                stat = (entry / "stat").read_text()
                if int(stat[stat.rindex(")") + 2 :].split()[2]) == pgid and alive(int(entry.name)):
                    out.append(int(entry.name))
    return out


def test_a_frozen_controller_leaves_nothing_running_on_the_host(lab: Lab, tmp_path: Path) -> None:
    """SIGSTOP on the controller is, from the host, a link that dropped without a FIN: TCP stays up, nothing
    arrives, stdin never ends. The heartbeats stop: the agent (it runs the command and holds the run lock)
    kills the command's process group and exits, freeing the lock, within 3 H (+ the TERM grace) — while the
    connection itself is still up."""
    user = lab.hosts[0].user
    lab.run_as(0, ["rm", "-rf", "hb.pid", "hb-dir"])
    h = 1.0  # --connect-timeout 1: H = 1 s
    proc = start_cli(lab, tmp_path, "hb.pid", "--connect-timeout", "1", text=AGENT_SLEEP_PLAYBOOK)
    stopped = False
    try:
        pgid = read_pid(lab, 0, "hb.pid", 30)  # the script's sh: leader of the command's process group
        remote = {
            "command group": group_members(pgid),
            "agent (it runs the command and holds the run lock)": pids_of(user, "provision-agent"),
        }
        assert all(remote.values()), remote
        assert not pids_of(user, RUNNER_MARK) and not pids_of(user, LOCKER_MARK)  # one interpreter per host
        assert len(remote["command group"]) >= 2  # the sh and its sleep
        sshds = connection_sshds(lab, 0)
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = True
        left = dict(remote)

        def all_gone() -> bool:
            for what, pids in list(left.items()):
                if not any(alive(p) for p in pids):
                    del left[what]
            return not left and not group_members(pgid)

        took = wait_for(all_gone, 3 * h + 2 + 5)
        still_connected = [p for p in sshds if alive(p)]
        freed = lab.run_as(0, ["flock", "-n", f".provision/run-{lab.hosts[0].name}.lock", "true"]).returncode
    finally:
        if stopped:
            os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.communicate()
    assert took is not None, f"still running on the host with the controller frozen: {sorted(left)}"
    assert still_connected, "the connection was closed: this did not test a silent link"
    assert freed == 0, "the run lock is still held"
    print(f"\nfrozen controller (H = {h:g} s): command, run lock and agent gone on the host {took:.2f}s after SIGSTOP")


def test_heartbeats_keep_a_long_command_the_lock_and_the_agent_alive(lab: Lab, lab_env: None) -> None:
    user = lab.hosts[0].user
    conn = ssh(lab, connect_timeout=1.0, run_lock=True)  # H = 1 s: 3 s of silence would kill
    try:
        agent = conn.python_agent("python3")
        assert agent.call("file_state.py", ["stat"], b'{"paths": ["/"]}', 30).rc == 0
        agents = pids_of(user, "provision-agent")  # it holds the run lock too
        assert agents and not pids_of(user, LOCKER_MARK)
        holders = agents
        result = conn.run(Command.shell("sleep 6; echo done"), timeout=60)
        assert (result.rc, result.stdout) == (0, "done\n"), result
        assert agent.call("file_state.py", ["stat"], b'{"paths": ["/"]}', 30).rc == 0
        assert conn.python_agent("python3") is agent  # the same agent: it never left
        assert all(alive(p) for p in holders + agents)
    finally:
        conn.close()


def test_heartbeats_keep_an_agent_that_waits_for_the_run_lock_alive(lab: Lab, lab_env: None) -> None:
    """H = 1 s, and the run lock held 4 s more by a run that ends then (the lock's grace is 5 s): the agent that
    waits for it is beaten meanwhile, lives, and holds the lock itself (unbeaten, it ended after 3 s of silence
    and the stand-alone locker took the lock in its stead)."""
    user = lab.hosts[0].user
    first, second = ssh(lab, run_lock=True), ssh(lab, connect_timeout=1.0, run_lock=True)
    timer = threading.Timer(4.0, first.close)
    try:
        assert first.run(Command.of("true"), timeout=30).rc == 0  # it holds host 0's run lock
        timer.start()
        started = time.monotonic()
        result = second.run(Command.of("true"), timeout=60)
        waited = time.monotonic() - started
        assert result.rc == 0 and waited >= 3.5, (result, waited)
        assert pids_of(user, "provision-agent") and not pids_of(user, LOCKER_MARK)  # the agent holds the lock
        agent = second.python_agent("python3")
        assert agent.call("file_state.py", ["stat"], b'{"paths": ["/"]}', 30).rc == 0
    finally:
        timer.cancel()
        first.close()
        second.close()


def test_local_commands_and_agents_expect_no_heartbeat(tmp_path: Path) -> None:
    conn = LocalConnection("local")
    try:
        agent = conn.python_agent(sys.executable)
        assert agent.call("file_state.py", ["stat"], b'{"paths": ["/"]}', 30).rc == 0
        result = conn.run(Command.shell("sleep 3.5; echo done"), timeout=60)  # > 3 x the shortest H
        assert (result.rc, result.stdout) == (0, "done\n"), result
        assert agent.call("file_state.py", ["stat"], b'{"paths": ["/"]}', 30).rc == 0
        assert conn.python_agent(sys.executable) is agent
    finally:
        conn.close()


# ------------------------------------------------------------------------------------- 7. remote file writes
def temp_files(directory: Path, name: str) -> list[Path]:
    return [p for p in directory.glob(f".{name}.provision-*")]


def test_threads_sharing_a_connection_write_files_at_once(lab: Lab, lab_env: None) -> None:
    # a delegated task's thread and the host's own share one connection (and its SFTP session): paramiko's
    # SFTPClient lets one thread take and drop another's reply, which then waited out a 60 s timeout and the
    # host was reported unreachable ("SFTP failed: ", case key_delegate_to under load)
    lab.run_as(0, ["rm", "-rf", "shared"])
    lab.run_as(0, ["mkdir", "shared"])
    conn = ssh(lab)
    errors: list[str] = []

    def write(t: int) -> None:
        try:
            for i in range(25):
                conn.put(f"{t}-{i}".encode(), f"~/shared/f{t}-{i}", 0o644)
        except Exception as exc:  # collected, asserted below
            errors.append(repr(exc))

    threads = [threading.Thread(target=write, args=(t,), daemon=True) for t in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        conn.close()
    assert not errors and not any(t.is_alive() for t in threads), errors[:3]
    written = {p.name: p.read_text() for p in (lab.hosts[0].home / "shared").iterdir()}
    assert written == {f"f{t}-{i}": f"{t}-{i}" for t in range(8) for i in range(25)}


def test_ssh_put_is_private_from_the_first_byte(lab: Lab, lab_env: None) -> None:
    home = lab.hosts[0].home
    lab.run_as(0, ["rm", "-rf", "priv"])
    lab.run_as(0, ["mkdir", "priv"])
    seen: dict[str, int] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for tmp in temp_files(home / "priv", "big.bin"):
                with contextlib.suppress(OSError):
                    seen[tmp.name] = seen.get(tmp.name, 0) | tmp.lstat().st_mode

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    conn = ssh(lab)
    try:
        conn.put(os.urandom(64 << 20), "~/priv/big.bin", 0o600)
    finally:
        done.set()
        watcher.join()
        conn.close()
    assert seen, "the temp file was never seen while written"
    assert all(mode & 0o077 == 0 for mode in seen.values()), {k: oct(v) for k, v in seen.items()}
    assert (home / "priv" / "big.bin").stat().st_mode & 0o777 == 0o600
    assert not temp_files(home / "priv", "big.bin")


@pytest.fixture(params=["agent", "sftp"])
def write_way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A small file is written by the host's agent (one round trip); over SFTP when larger than
    ``AGENT_WRITE_MAX`` or when the agent is busy: both ways, the same guarantees and the same errors."""
    if request.param == "sftp":
        monkeypatch.setattr("provision.transport.ssh.AGENT_WRITE_MAX", -1)
    return str(request.param)


def test_a_small_write_is_the_agents_one_round_trip_not_an_sftp_session(lab: Lab, lab_env: None) -> None:
    home = lab.hosts[0].home
    lab.run_as(0, ["rm", "-rf", "small"])
    lab.run_as(0, ["mkdir", "small"])
    conn = ssh(lab)
    try:
        conn.run(Command.of("true"), timeout=10)  # the session and its agent
        before = conn.agent_calls
        target = str(home / "small" / "a.txt")  # absolute: "~" without the run lock's answer asks SFTP for home
        conn.put(b"hello\n", target, 0o640)
        conn.put(b"again\n", target, None)  # no mode: the one it has is kept
        assert conn.agent_calls == before + 2
        assert conn._sftp.client is None, "an SFTP session was opened for a small write"
    finally:
        conn.close()
    written = home / "small" / "a.txt"
    assert written.read_bytes() == b"again\n" and written.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in (home / "small").iterdir()) == ["a.txt"]


def test_put_failures_are_host_errors_and_leave_no_temp_file(
    lab: Lab, lab_env: None, tmp_path: Path, write_way: str
) -> None:
    from provision.errors import HostError, UnreachableError

    home = lab.hosts[0].home
    lab.run_as(0, ["rm", "-rf", "isdir"])
    lab.run_as(0, ["mkdir", "-p", "isdir/target"])
    conn = ssh(lab)
    try:
        with pytest.raises(HostError) as denied:
            conn.put(b"x", "/etc/provision-denied.txt", 0o600)
        assert not isinstance(denied.value, UnreachableError) and "Permission denied" in denied.value.msg
        with pytest.raises(HostError) as over_dir:  # created, then the rename fails: the temp file goes
            conn.put(b"x" * 100000, "~/isdir/target", 0o600)
        assert not isinstance(over_dir.value, UnreachableError)
        assert not temp_files(home / "isdir", "target")
        assert conn.run(Command.of("true"), timeout=10).rc == 0  # the connection is fine
    finally:
        conn.close()
    local = LocalConnection("local")
    (tmp_path / "target").mkdir()
    with pytest.raises(HostError):
        local.put(b"x", str(tmp_path / "target"), 0o600)
    assert not temp_files(tmp_path, "target")


def test_every_legal_name_can_be_written_and_a_too_long_one_is_said_plainly(
    lab: Lab, lab_env: None, tmp_path: Path, write_way: str
) -> None:
    """A 255-byte name (the most a Linux filesystem takes, here in 3-byte characters) is written through its
    shortened temp name; a 256-byte name fails the write with the filesystem's own reason, no temp file left."""
    longest, too_long = "日" * 85, "a" + "日" * 85
    assert len(longest.encode()) == 255 and len(too_long.encode()) == 256
    lab.run_as(0, ["rm", "-rf", "names"])
    lab.run_as(0, ["mkdir", "names"])
    home = lab.hosts[0].home
    local = LocalConnection("local")
    conn = ssh(lab)
    try:
        for put, directory in ((conn.put, "~/names"), (local.put, str(tmp_path))):
            put(b"ok", f"{directory}/{longest}", 0o640)
            with pytest.raises(HostError) as refused:
                put(b"no", f"{directory}/{too_long}", 0o640)
            assert refused.value.msg.endswith(": File name too long"), refused.value.msg
    finally:
        conn.close()
    for where in (home / "names", tmp_path):
        assert (where / longest).read_bytes() == b"ok" and (where / longest).stat().st_mode & 0o777 == 0o640
        assert sorted(p.name for p in where.iterdir()) == [longest]  # no temp file, nothing else


def test_closing_mid_write_removes_the_temp_file(lab: Lab, lab_env: None) -> None:
    home = lab.hosts[0].home
    lab.run_as(0, ["rm", "-rf", "cut"])
    lab.run_as(0, ["mkdir", "cut"])
    conn = ssh(lab)
    thread, box = in_thread(lambda: conn.put(os.urandom(256 << 20), "~/cut/huge.bin", 0o600))
    assert wait_for(lambda: bool(temp_files(home / "cut", "huge.bin")), 30, 0.01) is not None
    conn.close()  # what an interrupted run does
    thread.join(60)
    assert box and isinstance(box[0], Exception)
    assert wait_for(lambda: not temp_files(home / "cut", "huge.bin"), 10) is not None
    assert not (home / "cut" / "huge.bin").exists()


DENIED_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: denied
      copy: {content: "secret\\n", dest: /etc/provision-denied.txt, mode: "0600"}
      ignore_errors: true
    - name: after
      command: touch after-denied
"""


def test_a_refused_write_fails_the_task_and_ignore_errors_keeps_the_host(
    lab: Lab, lab_env: None, tmp_path: Path
) -> None:
    import json

    from tests.support.cli import run_cli

    lab.run_as(0, ["rm", "-f", "after-denied"])
    playbook = tmp_path / "denied.yml"
    playbook.write_text(DENIED_PLAYBOOK)
    inv = lab.write_inventory(tmp_path / "inv.yml", names=[0])
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        result = run_cli(["run", str(playbook), "-i", str(inv), "--json"])
    finally:
        os.chdir(cwd)
    doc = json.loads(result.out)
    denied = doc["plays"][0]["tasks"][0]["hosts"]["lab0"]
    assert denied["failed"] and "Permission denied" in denied["msg"], denied
    assert doc["stats"]["lab0"]["unreachable"] == 0
    assert lab.run_as(0, ["test", "-e", "after-denied"]).returncode == 0  # the host stayed in the play
    assert result.code == 0, result.err


# ------------------------------------------------------------------- the code a host's agent keeps between runs
def test_the_agent_keeps_its_code_in_the_login_users_own_private_folder(lab: Lab) -> None:
    """Over SSH the agent compiles once per host, not once per run: the code is kept in the login user's own
    ``~/.cache/provision-code`` (0700, entries 0600, all the user's), and the next connection's fresh agent
    runs from it (no entry added: nothing compiled again)."""
    h = lab.hosts[1]
    lab.run_as(1, ["rm", "-rf", ".cache/provision-code"])
    uid = pwd.getpwnam(h.user).pw_uid
    folder = h.home / ".cache/provision-code"
    for run in range(2):
        conn = ssh(lab, 1)
        try:
            assert conn.run(Command.shell("echo ran"), timeout=60).stdout.strip() == "ran"
        finally:
            conn.close()
        entries = {p.name: p.stat() for p in folder.iterdir()}
        if run == 0:
            first = set(entries)
            assert folder.stat().st_uid == uid and folder.stat().st_mode & 0o777 == 0o700
            assert first and all(st.st_uid == uid and st.st_mode & 0o777 == 0o600 for st in entries.values())
        else:
            assert set(entries) == first
