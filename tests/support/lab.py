"""The lab: N real OpenSSH sshd "hosts" on loopback, one Unix user each, for integration tests.

Host ``i`` is Unix user ``{prefix}{i}-{token}`` (home under /home, 0700) served by its own
``/usr/sbin/sshd -D`` listening on ``127.0.X.(10+i):2222`` (hosts past the 240th reuse the addresses on port
2223, 2224, ...: at most :data:`MAX_HOSTS`). ``X`` is picked at random per lab and reserved
with a lock file, so labs running in parallel (other pytest sessions, xdist workers) never collide.

Everything the lab writes lives in ``base_dir``: host keys, sshd configs and logs, one client key pair
authorized on every host, ``known_hosts``, ``ssh_config``, ``inventory.yml`` and ``lab.json`` (the state a
later run needs to clean up after a crashed one, see :meth:`Lab.cleanup_stale`). A copy of lab.json in
/tmp/provision-lab/ lets :meth:`Lab.cleanup_orphans` (run by every ``start()``) find labs whose process died
even after their ``base_dir`` was deleted.

Teardown (``stop()``, the context manager, an ``atexit`` hook) kills every process of the lab's sshds and
users, deletes the users with their homes and removes ``base_dir``. Needs root.

:meth:`Lab.systemd_host` runs one host under a real systemd for a while: its sshd becomes a unit of a systemd
that is PID 1 of its own PID, mount, UTS and IPC namespaces (``unshare``), so what a session on that host sees
is a machine run by systemd (``/proc/1/comm`` is ``systemd``, ``/run/systemd/system`` exists, ``systemctl``
works as root), while the rest of the machine is not (the network is shared: the host keeps its address). That
systemd must not act on the real machine: it gets a private ``/run``, ``/tmp`` and ``/var/tmp`` (``base_dir``
is bound back in), the units that boot a machine (everything wanted by ``sysinit.target`` and the other boot
targets: tmpfiles, sysusers, utmp, udev, timesyncd, ...) are masked in its private ``/run``, and it starts only
its own target, which wants nothing but the sshd. Without those masks a service with default dependencies pulls
in ``sysinit.target``, whose ``systemd-tmpfiles-setup`` empties the real ``/tmp``. Unit files a test writes
to ``/etc/systemd/system`` are real files of the machine: the test removes them. Its boot (the first, and each
:meth:`reboot_systemd_host`) starts, besides the sshd, the ``provision-pd-*.service`` units enabled for
``multi-user.target`` whose ``User=`` is that host's user (what a reboot of a real host would start of provision's),
nothing else of /etc's. A reboot from inside (``shutdown -r now`` as root on the host: systemd's ``reboot(2)`` in
a PID namespace ends that namespace only) boots it again the same way: what the ``reboot`` module is tested on.

:meth:`Lab.grant_sudo` gives one host's user passwordless sudo (a sudoers drop-in
``/etc/sudoers.d/provision-lab-<user>``, mode 0440, checked with ``visudo -cf``) until :meth:`Lab.revoke_sudo`
or teardown; the drop-in is recorded in lab.json so that a crashed lab's cleanup removes it too.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import json
import os
import pwd
import random
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

SSHD = "/usr/sbin/sshd"
SSH_CONFIG_VAR = "PROVISION_SSH_CONFIG"  # where provision reads its ssh_config from (set by Lab.pointed_at)
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"
PORT = 2222
PER_PORT = 240  # addresses 127.0.X.10..249 on one port
MAX_HOSTS = 2 * PER_PORT


# where a kernel binds no loopback address but its own (gVisor's: scripts/fleet_device.sh), every host on this
# one address, each on a port of its own: 20000 + 256 * (X - 100) + i (at most 256 hosts a lab)
ONE_ADDRESS = os.environ.get("PROVISION_LAB_ONE_ADDRESS", "")


def _endpoint(subnet: int, i: int) -> tuple[str, int]:
    """Host i's address and port."""
    if ONE_ADDRESS:
        return ONE_ADDRESS, 20000 + 256 * (subnet - 100) + i
    return f"127.0.{subnet}.{10 + i % PER_PORT}", PORT + i // PER_PORT


SUDOERS_DIR = Path("/etc/sudoers.d")
VISUDO = shutil.which("visudo") or "/usr/sbin/visudo"
REGISTRY = Path("/tmp/provision-lab")  # address locks, and a copy of every live lab's lab.json
START_TIMEOUT = 10.0
SYSTEMD = "/lib/systemd/systemd"
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"
BOOT_TARGETS = (
    "sysinit", "basic", "local-fs", "local-fs-pre", "swap", "sockets", "timers", "paths", "multi-user", "graphical",
    "getty", "network", "network-online", "network-pre", "remote-fs", "cryptsetup", "integritysetup",
    "veritysetup", "emergency", "rescue",
)  # fmt: skip
BOOT_UNITS = (  # masked too, whichever target wants them: each acts on the machine, not on a namespace
    "systemd-tmpfiles-setup.service", "systemd-tmpfiles-setup-dev.service", "systemd-tmpfiles-clean.service",
    "systemd-tmpfiles-clean.timer", "systemd-sysusers.service", "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service", "systemd-remount-fs.service", "systemd-journal-flush.service",
    "systemd-random-seed.service", "systemd-timesyncd.service", "systemd-repart.service", "ldconfig.service",
    "systemd-hwdb-update.service", "systemd-udevd.service", "systemd-udev-trigger.service",
    "systemd-fsck-root.service", "systemd-machine-id-commit.service", "systemd-firstboot.service",
    "systemd-pstore.service", "systemd-binfmt.service", "systemd-modules-load.service", "systemd-sysctl.service",
    "e2scrub_reap.service", "systemd-logind.service", "getty@.service", "serial-getty@.service",
)  # fmt: skip
USER_PATH = "/usr/local/bin:/usr/bin:/bin"
_PR_SET_CHILD_SUBREAPER = 36
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the forked child only calls it


def _become_subreaper() -> None:
    """In the sshd child before exec: processes orphaned under it (session children whose monitor exited
    first, ``nohup cmd &``) are re-parented to that sshd, which reaps them, instead of lingering as zombies
    of init; and they stay in its process tree, where teardown finds them."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


class LabError(RuntimeError):
    """The lab could not be started (the message carries the sshd log tail where there is one)."""


@dataclass
class LabHost:
    name: str  # inventory name: lab0, lab1, ...
    user: str
    address: str
    port: int
    home: Path
    pid: int | None
    config: Path  # its sshd_config
    host_key: Path  # private host key (the .pub beside it)
    log: Path  # sshd's stderr
    sudo: bool = False  # its user has passwordless sudo (Lab.grant_sudo)
    systemd: bool = False  # its sshd runs under a systemd of its own (Lab.systemd_host)

    @property
    def known_hosts_name(self) -> str:
        return f"[{self.address}]:{self.port}"


# ---- processes ---------------------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a live process, None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def _alive(pid: int) -> bool:
    st = _proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _descendants(root: int) -> list[list[int]]:
    """The process tree under ``root``, level by level (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        st = _proc_stat(pid)
        if st:
            children.setdefault(st[1], []).append(pid)
    levels, level = [], children.get(root, [])
    while level:
        levels.append(level)
        level = [c for p in level for c in children.get(p, [])]
    return levels


def _pids_of_uid(uid: int) -> list[int]:
    """Processes whose real or effective uid is ``uid``."""
    pids = []
    for pid in _all_pids():
        with contextlib.suppress(OSError, ValueError, StopIteration):
            status = Path(f"/proc/{pid}/status").read_text()
            uids = next(line.split()[1:3] for line in status.splitlines() if line.startswith("Uid:"))
            if str(uid) in uids:
                pids.append(pid)
    return pids


def _kill(pids: Iterable[int], grace: float = 3.0) -> None:
    """SIGTERM each pid, then SIGKILL whatever is still alive after ``grace`` seconds."""
    pids = [p for p in set(pids) if p > 1 and p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            for pid in pids:  # reap our own children so they do not linger as zombies
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
            pids = [p for p in pids if _alive(p)]
            if not pids:
                return
            time.sleep(0.02)


def _kill_tree(pid: int) -> None:
    """Deepest processes first, so that their live parents reap them (no zombies left to init)."""
    for level in reversed(_descendants(pid)):
        _kill(level)
    deadline = time.monotonic() + 1.0
    while _descendants(pid) and time.monotonic() < deadline:  # give the sshd time to reap them
        time.sleep(0.01)
    _kill([pid])


def _run(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if proc.returncode != 0:
        raise LabError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return proc


def _keygen(path: Path, comment: str) -> str:
    """A fresh ed25519 key pair at ``path``; returns the public key line."""
    for p in (path, path.with_name(path.name + ".pub")):
        p.unlink(missing_ok=True)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return path.with_name(path.name + ".pub").read_text().strip()


def _port_open(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((address, port)) == 0


def _can_bind(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _remove_user(user: str) -> None:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return
    if entry.pw_uid < 1000:  # never a system account, whatever a lab.json says
        return
    _kill(_pids_of_uid(entry.pw_uid))
    # not ``userdel -r``: userdel holds the passwd lock while it removes the home, and a lab home with a venv in it
    # outlasts the 15 s every other useradd/usermod on this machine waits for that lock ("cannot lock /etc/passwd")
    subprocess.run(["userdel", "-f", user], capture_output=True, check=False)
    if Path(entry.pw_dir) == Path("/home") / user:  # the lab's own layout, never another home a lab.json names
        shutil.rmtree(entry.pw_dir, ignore_errors=True)


# ---- the lab -------------------------------------------------------------------------------------


class Lab:
    """N sshd hosts on 127.0.X.(10+i):2222. ``with Lab(4, path) as lab: ...``"""

    def __init__(self, n: int, base_dir: Path, prefix: str = "plab") -> None:
        if not 1 <= n <= MAX_HOSTS:
            raise ValueError(f"a lab has 1..{MAX_HOSTS} hosts")
        if ONE_ADDRESS and n > 256:
            raise ValueError("a lab on one address (PROVISION_LAB_ONE_ADDRESS) has 1..256 hosts")
        if len(prefix) + len(str(n - 1)) + 5 > 32 or not prefix[:1].isalpha():
            raise ValueError(f"bad user name prefix {prefix!r}")
        self.n = n
        self.base_dir = Path(base_dir).absolute()
        self.prefix = prefix
        self.hosts: list[LabHost] = []
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._boot_lock = threading.RLock()  # a systemd host booted again (_boot_again) or ended by the lab
        self._ended: set[int] = set()  # pids of systemd hosts the lab ended itself: not booted again
        self._lock: IO[str] | None = None
        self._token = ""
        self._started = False

    # -- paths
    @property
    def inventory_path(self) -> Path:
        return self.base_dir / "inventory.yml"

    @property
    def known_hosts_path(self) -> Path:
        return self.base_dir / "known_hosts"

    @property
    def ssh_config_path(self) -> Path:
        return self.base_dir / "ssh_config"

    def ssh_env(self) -> dict[str, str]:
        """THE variable that points provision at this lab's ssh_config (whose UserKnownHostsFile holds the lab's
        host keys), for a child process's environment: ``{**os.environ, **lab.ssh_env()}``."""
        return {SSH_CONFIG_VAR: str(self.ssh_config_path)}

    @contextlib.contextmanager
    def pointed_at(self) -> Iterator[Lab]:
        """This process's provision pointed at the lab (:meth:`ssh_env` in ``os.environ``) for the block, then
        put back as it was: the one way the in-process CLI and API are sent to a lab."""
        old = os.environ.get(SSH_CONFIG_VAR)
        os.environ[SSH_CONFIG_VAR] = str(self.ssh_config_path)
        try:
            yield self
        finally:
            if old is None:
                os.environ.pop(SSH_CONFIG_VAR, None)
            else:
                os.environ[SSH_CONFIG_VAR] = old

    @property
    def client_key(self) -> Path:
        return self.base_dir / "id_ed25519"

    @property
    def state_path(self) -> Path:
        return self.base_dir / "lab.json"

    def host(self, i: int) -> LabHost:
        return self.hosts[i]

    def __enter__(self) -> Lab:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lifecycle
    def start(self) -> Lab:
        if self._started:
            return self
        Lab.cleanup_orphans()
        Lab.cleanup_stale(self.base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base_dir, 0o755)
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
        REGISTRY.mkdir(mode=0o755, exist_ok=True)
        self._started = True
        atexit.register(self.stop)
        try:
            self._setup()
        except BaseException:
            self.stop()
            raise
        return self

    def _setup(self) -> None:
        subnet = self._reserve_subnet()
        token = self._token = self._user_token()
        client_pub = _keygen(self.client_key, "provision-lab-client")
        for i in range(self.n):
            user = f"{self.prefix}{i}-{token}"
            address, port = _endpoint(subnet, i)
            self.hosts.append(
                LabHost(
                    name=f"lab{i}",
                    user=user,
                    address=address,
                    port=port,
                    home=Path("/home") / user,
                    pid=None,
                    config=self.base_dir / f"sshd_config.lab{i}",
                    host_key=self.base_dir / f"ssh_host_ed25519_key.lab{i}",
                    log=self.base_dir / f"sshd.lab{i}.log",
                )
            )
            self._write_state()  # before useradd: a crash from here on leaves a lab.json behind
            self._add_user(self.hosts[-1], client_pub)
        host_keys = [_keygen(h.host_key, h.name) for h in self.hosts]
        for h in self.hosts:
            self._write_sshd_config(h)
            self._spawn(h)
        for h in self.hosts:
            self._wait_listening(h)
        self.known_hosts_path.write_text(
            "".join(
                f"{h.known_hosts_name} {' '.join(k.split()[:2])}\n" for h, k in zip(self.hosts, host_keys, strict=True)
            )
        )
        self._write_ssh_config()
        self.write_inventory(self.inventory_path)
        self._write_state()

    def stop(self) -> None:
        """Kill every sshd and user process, delete the users and ``base_dir``. Safe to call twice."""
        if not self._started:
            return
        self._started = False
        atexit.unregister(self.stop)
        for h in self.hosts:
            _remove_sudoers(h.user)
            self._kill_host(h)
            _remove_user(h.user)
        self.hosts = []
        shutil.rmtree(self.base_dir, ignore_errors=True)
        if self._token:
            (REGISTRY / f"lab-{self._token}.json").unlink(missing_ok=True)
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    @staticmethod
    def cleanup_stale(base_dir: Path) -> bool:
        """Undo a lab left behind in ``base_dir`` by a crashed run (its lab.json); True if there was one.

        A lab still up in another process (``scripts/lab.py up``) is asked to stop first (SIGTERM). Then the
        recorded sshds (only processes still running ``sshd -f <base_dir>/...``) and every process of the
        recorded users are killed, the users deleted and ``base_dir`` removed.
        """
        base_dir = Path(base_dir).absolute()
        try:
            state = json.loads((base_dir / "lab.json").read_text())
        except (OSError, ValueError):
            return False
        owner = Lab.owner_pid(base_dir)
        if owner is not None and owner != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(owner, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while _alive(owner) and time.monotonic() < deadline:
                time.sleep(0.05)
        _cleanup_state(state)
        return True

    @staticmethod
    def cleanup_orphans() -> int:
        """Clean up every lab whose owning process is dead (per /tmp/provision-lab/); returns how many."""
        count = 0
        for path in REGISTRY.glob("lab-*.json"):
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not _alive(state.get("owner_pid", 0)):
                _cleanup_state(state)
                count += 1
        return count

    @staticmethod
    def owner_pid(base_dir: Path) -> int | None:
        """PID of the live process that started the lab in ``base_dir`` (per its lab.json), if any."""
        try:
            owner = json.loads((Path(base_dir) / "lab.json").read_text()).get("owner_pid")
        except (OSError, ValueError, AttributeError):
            return None
        return owner if isinstance(owner, int) and _alive(owner) else None

    # -- per host
    def stop_host(self, i: int) -> None:
        """Kill host i's sshd and its sessions: connections are refused until :meth:`start_host`."""
        self._kill_host(self.hosts[i])
        self._write_state()

    def start_host(self, i: int) -> None:
        h = self.hosts[i]
        if h.pid is not None and _alive(h.pid):
            return
        self._spawn(h)
        self._wait_listening(h)
        self._write_state()

    @contextlib.contextmanager
    def systemd_host(self, i: int) -> Iterator[None]:
        """Host i runs under a systemd of its own (PID 1 of its namespaces, see the module docstring) inside
        the block; its plain sshd is back afterwards. Sessions open on the host are cut at both ends."""
        h = self.hosts[i]
        self._kill_host(h)
        h.systemd = True
        try:
            self._spawn(h)
            self._wait_listening(h)
            self._write_state()
            yield
        finally:
            self._kill_host(h)
            h.systemd = False
            self.start_host(i)

    def reboot_systemd_host(self, i: int) -> None:
        """Inside :meth:`systemd_host`: host i's systemd namespace killed (its init SIGKILLed: every process in it
        ends, as at a power cut) and booted again; of the enabled units, its target starts provision's PD units
        (``provision-pd-*.service`` enabled for ``multi-user.target``) besides the sshd."""
        h = self.hosts[i]
        if not h.systemd:
            raise LabError(f"{h.name} is not a systemd host (use Lab.systemd_host)")
        self._kill_host(h)
        self._spawn(h)
        self._wait_listening(h)
        self._write_state()

    def rotate_host_key(self, i: int) -> None:
        """Give host i a new host key and restart its sshd; known_hosts keeps the old key.

        The original key is kept aside: :meth:`restore_host_key` undoes this (for a shared lab).
        """
        h = self.hosts[i]
        self._kill_host(h)
        pub = h.host_key.with_name(h.host_key.name + ".pub")
        if not _orig(h.host_key).exists():
            h.host_key.rename(_orig(h.host_key))
            pub.rename(_orig(pub))
        _keygen(h.host_key, h.name)
        self.start_host(i)

    def restore_host_key(self, i: int) -> None:
        """Put back the host key known_hosts lists (after :meth:`rotate_host_key`) and restart the sshd."""
        h = self.hosts[i]
        pub = h.host_key.with_name(h.host_key.name + ".pub")
        if not _orig(h.host_key).exists():
            return
        self._kill_host(h)
        _orig(h.host_key).replace(h.host_key)
        _orig(pub).replace(pub)
        self.start_host(i)

    def grant_sudo(self, i: int) -> None:
        """Give host i's user passwordless sudo (to any user), until :meth:`revoke_sudo` or teardown."""
        h = self.hosts[i]
        h.sudo = True
        self._write_state()  # first: a crash from here on leaves the drop-in recorded for cleanup
        path = _sudoers_path(h.user)
        tmp = path.with_name(f".{path.name}.tmp")  # visudo ignores names with a dot
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o440)
        with os.fdopen(fd, "w") as fh:
            fh.write(
                f"# provision test lab {self.base_dir}: removed when the lab stops\n"
                f"{h.user} ALL=(ALL:ALL) NOPASSWD: ALL\n"
            )
        os.chmod(tmp, 0o440)
        try:
            _run([VISUDO, "-cqf", str(tmp)])
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)

    def revoke_sudo(self, i: int) -> None:
        """Remove host i's sudoers drop-in (no-op when there is none)."""
        h = self.hosts[i]
        _remove_sudoers(h.user)
        h.sudo = False
        self._write_state()

    def run_as(
        self, i: int, argv: Sequence[str], *, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` locally as host i's user (in its home), capturing text output; never raises on rc."""
        h = self.hosts[i]
        env = {"PATH": USER_PATH, "LANG": "C.UTF-8", "HOME": str(h.home), "USER": h.user, "LOGNAME": h.user}
        return subprocess.run(
            [RUNUSER, "-u", h.user, "--", *argv],
            input=input,
            capture_output=True,
            text=True,
            check=False,
            cwd=h.home,
            env=env,
            timeout=timeout,
        )

    # -- files
    def write_inventory(
        self,
        path: Path,
        names: Sequence[str | int] | None = None,
        extra_host_vars: Mapping[str, Mapping[str, Any]] | None = None,
        groups: Mapping[str, Sequence[str]] | None = None,
    ) -> Path:
        """An Ansible YAML inventory of some lab hosts (default all, in group ``lab``).

        ``names``: host names or indexes (default: the hosts of ``groups``, or all). ``extra_host_vars`` maps
        a host name to vars merged over the connection vars; ``groups`` maps a group name to host names (a
        host in no group goes under ``all.hosts``).
        """
        by_name = {h.name: h for h in self.hosts}
        if names is None:
            names = list(dict.fromkeys(n for m in groups.values() for n in m)) if groups else list(by_name)
        chosen = [self.hosts[n] if isinstance(n, int) else by_name[n] for n in names]
        extra = extra_host_vars or {}
        host_vars = {h.name: {**self._connection_vars(h), **extra.get(h.name, {})} for h in chosen}
        groups = {"lab": list(host_vars)} if groups is None else groups
        children = {g: {"hosts": {n: host_vars[n] for n in members}} for g, members in groups.items()}
        grouped = {n for members in groups.values() for n in members}
        inventory: dict[str, Any] = {}
        ungrouped = {n: v for n, v in host_vars.items() if n not in grouped}
        if ungrouped:
            inventory["hosts"] = ungrouped
        if children:
            inventory["children"] = children
        path = Path(path)
        path.write_text(yaml.safe_dump({"all": inventory}, sort_keys=False))
        return path

    def _connection_vars(self, h: LabHost) -> dict[str, Any]:
        return {
            "ansible_host": h.address,
            "ansible_port": h.port,
            "ansible_user": h.user,
            "ansible_ssh_private_key_file": str(self.client_key),
        }

    def _write_ssh_config(self) -> None:
        blocks = [f"Host {h.name}\n  HostName {h.address}\n  Port {h.port}\n  User {h.user}\n" for h in self.hosts]
        blocks.append(
            "Host *\n"
            f"  UserKnownHostsFile {self.known_hosts_path}\n"
            f"  IdentityFile {self.client_key}\n"
            "  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking yes\n"
        )
        self.ssh_config_path.write_text("\n".join(blocks))

    def _write_state(self) -> None:
        state = {
            "owner_pid": os.getpid(),
            "token": self._token,
            "base_dir": str(self.base_dir),
            "hosts": [
                {"name": h.name, "user": h.user, "address": h.address, "port": h.port, "pid": h.pid, "sudo": h.sudo}
                for h in self.hosts
            ],
        }
        for path in (self.state_path, REGISTRY / f"lab-{self._token}.json"):
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, indent=2))
            tmp.replace(path)

    def _write_sshd_config(self, h: LabHost) -> None:
        h.config.write_text(
            f"ListenAddress {h.address}:{h.port}\n"
            f"HostKey {h.host_key}\n"
            f"PidFile {self.base_dir / f'sshd.{h.name}.pid'}\n"
            "AuthorizedKeysFile .ssh/authorized_keys\n"
            "StrictModes no\n"
            f"AllowUsers {h.user}\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "PermitRootLogin no\n"
            "MaxSessions 64\n"
            "MaxStartups 200\n"
            "LogLevel VERBOSE\n"
            "Subsystem sftp internal-sftp\n"
        )

    # -- internals
    def _reserve_subnet(self) -> int:
        """Pick X in 100..250 no other lab holds (flock on a file) and whose hosts' addresses and ports bind."""
        candidates = list(range(100, 251))
        random.shuffle(candidates)
        for x in candidates:
            fh = open(REGISTRY / f"127.0.{x}.lock", "w")  # noqa: SIM115 - held for the lab's life
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                continue
            if all(_can_bind(*_endpoint(x, i)) for i in range(self.n)):
                self._lock = fh
                return x
            fh.close()
        raise LabError("no free 127.0.X.0/24 for the lab (X in 100..250)")

    def _user_token(self) -> str:
        for _ in range(100):
            token = secrets.token_hex(2)
            if not any(_user_exists(f"{self.prefix}{i}-{token}") for i in range(self.n)):
                return token
        raise LabError("could not find free lab user names")

    def _add_user(self, h: LabHost, client_pub: str) -> None:
        # '*' as the password: no password login, but not "locked" (sshd refuses locked accounts)
        _run(["useradd", "-m", "-d", str(h.home), "-s", "/bin/bash", "-p", "*", h.user])
        entry = pwd.getpwnam(h.user)
        os.chmod(h.home, 0o700)
        ssh_dir = h.home / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        (ssh_dir / "authorized_keys").write_text(client_pub + "\n")
        os.chmod(ssh_dir / "authorized_keys", 0o600)
        for p in (ssh_dir, ssh_dir / "authorized_keys"):
            os.chown(p, entry.pw_uid, entry.pw_gid)

    def _spawn(self, h: LabHost) -> None:
        argv = [SSHD, "-D", "-e", "-f", str(h.config)]
        if h.systemd:
            flags = ["--pid", "--fork", "--mount", "--uts", "--ipc", "--propagation", "private"]
            argv = [UNSHARE, *flags, "sh", "-euc", _systemd_launcher(h, self.base_dir)]
        with open(h.log, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # Ctrl-C in a terminal goes to us, not to the sshds
                preexec_fn=_become_subreaper,
            )
        self._procs[proc.pid] = proc
        h.pid = proc.pid
        if h.systemd:
            name = f"lab-boot-{h.name}"
            threading.Thread(target=self._boot_again, args=(h, proc), daemon=True, name=name).start()

    def _boot_again(self, h: LabHost, proc: subprocess.Popen[bytes]) -> None:
        """A systemd host's namespace that ends on its own (a reboot from inside: ``shutdown -r now``,
        ``systemctl reboot``: systemd's ``reboot(2)`` in a PID namespace ends that namespace, never the machine)
        is booted again, as a machine's firmware would; one the lab ends itself (:meth:`_kill_host`) is not."""
        proc.wait()
        with self._boot_lock:
            if not self._started or not h.systemd or h.pid != proc.pid or proc.pid in self._ended:
                return
            self._procs.pop(proc.pid, None)
            self._spawn(h)
            with contextlib.suppress(LabError):  # the test sees the host unreachable, with the log
                self._wait_listening(h)
            self._write_state()

    def _wait_listening(self, h: LabHost) -> None:
        proc = self._procs[h.pid] if h.pid is not None else None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc is None or proc.poll() is not None:
                raise LabError(f"sshd for {h.name} ({h.address}:{h.port}) exited:\n{_tail(h.log)}")
            if _port_open(h.address, h.port):
                return
            time.sleep(0.02)
        raise LabError(f"sshd for {h.name} not listening on {h.address}:{h.port} after 10 s:\n{_tail(h.log)}")

    def _kill_host(self, h: LabHost) -> None:
        with self._boot_lock:
            self._kill_host_locked(h)

    def _kill_host_locked(self, h: LabHost) -> None:
        if h.pid is None:
            return
        self._ended.add(h.pid)
        if h.systemd:  # SIGKILL to a PID namespace's init ends every process in it (SIGTERM would re-exec it)
            for child in _descendants(h.pid)[:1]:
                _kill(child, grace=0)
        _kill_tree(h.pid)
        proc = self._procs.pop(h.pid, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        h.pid = None


def _systemd_launcher(h: LabHost, base_dir: Path) -> str:
    """The shell script ``unshare`` runs for a systemd host: private /run, /tmp, /var/tmp (``base_dir`` bound
    back in), the boot units masked, a target that wants only the host's sshd, then ``exec`` systemd."""
    units = {
        "provision-lab.target": "[Unit]\nDescription=provision lab host\nWants=provision-lab-sshd.service\n",
        "provision-lab-sshd.service": (
            f"[Unit]\nDescription=sshd of lab host {h.name}\nDefaultDependencies=no\n"
            f"[Service]\nExecStart={SSHD} -D -e -f {h.config}\nStandardOutput=append:{h.log}\n"
            "StandardError=inherit\n"
        ),
    }
    base = shlex.quote(str(base_dir))
    # the distribution's boot wiring (``/etc``'s is left alone: a test's own unit enabled there must stay usable)
    wants = " ".join(f"/lib/systemd/system/{t}.target.{kind}/*" for t in BOOT_TARGETS for kind in ("wants", "requires"))
    lines = [
        "mount -t tmpfs -o mode=755 tmpfs /run",
        "mkdir -p /run/sshd /run/systemd/system /run/provision-lab-base",
        f"mount --bind {base} /run/provision-lab-base",
        "mount -t tmpfs -o mode=1777 tmpfs /tmp",
        "mount -t tmpfs -o mode=1777 tmpfs /var/tmp",
        f"mkdir -p {base}",
        f"mount --move /run/provision-lab-base {base}",
        "mount -t proc proc /proc",
        f"for u in {wants}; do",
        '  [ -L "$u" ] || [ -e "$u" ] || continue; ln -sfn /dev/null "/run/systemd/system/${u##*/}"',
        "done",
        f"for u in {' '.join(BOOT_UNITS)}; do ln -sfn /dev/null /run/systemd/system/$u; done",
        # the boot starts, of what is enabled for multi-user.target, provision's PD units of THIS host's user only
        # (the rest of /etc's multi-user.target.wants is the real machine's: postgresql, ssh, ...; and another
        # lab's host, in a parallel test session, may have enabled its own there)
        "mkdir -p /run/systemd/system/provision-lab.target.wants",
        "for u in /etc/systemd/system/multi-user.target.wants/provision-pd-*.service; do",
        f'  [ -e "$u" ] && grep -qsx {shlex.quote("User=" + h.user)} "$u" || continue',
        '  ln -sfn "$u" /run/systemd/system/provision-lab.target.wants/',
        "done",
        *(f"printf %s {shlex.quote(text)} > /run/systemd/system/{name}" for name, text in units.items()),
        f"hostname {shlex.quote(h.name)}",
        f"exec env container=provision-lab {SYSTEMD} --system --unit=provision-lab.target --log-target=console",
    ]
    return "\n".join(lines) + "\n"


def _cleanup_state(state: dict[str, Any]) -> None:
    """Kill the sshds and user processes a lab.json records, delete its users, base_dir and registry entry."""
    base_dir = Path(state.get("base_dir", "/nonexistent"))
    for h in state.get("hosts", []):
        pid = h.get("pid")
        if isinstance(pid, int) and _is_lab_sshd(pid, base_dir):
            _kill_tree(pid)
        _remove_sudoers(str(h["user"]))
        _remove_user(str(h["user"]))
    if base_dir.is_absolute() and (base_dir / "lab.json").exists():
        shutil.rmtree(base_dir, ignore_errors=True)
    token = state.get("token")
    if isinstance(token, str) and token.isalnum():
        (REGISTRY / f"lab-{token}.json").unlink(missing_ok=True)


def _sudoers_path(user: str) -> Path:
    if not user.replace("-", "").isalnum():  # lab user names only: never a path outside the drop-in dir
        raise LabError(f"not a lab user name: {user!r}")
    return SUDOERS_DIR / f"provision-lab-{user}"


def _remove_sudoers(user: str) -> None:
    with contextlib.suppress(LabError):
        _sudoers_path(user).unlink(missing_ok=True)


def _orig(path: Path) -> Path:
    return path.with_name(path.name + ".orig")


def _user_exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def _is_lab_sshd(pid: int, base_dir: Path) -> bool:
    """Is ``pid`` an sshd started with a config inside ``base_dir`` (not some reused pid)?"""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").replace("\0", " ")
    except OSError:
        return False
    return comm == "sshd" and f" -f {base_dir}/" in cmdline  # the listener rewrites its argv: "sshd: ..."
