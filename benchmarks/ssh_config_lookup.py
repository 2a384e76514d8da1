"""What finding a host's settings in an ssh_config costs the controller, per host, when the file has one ``Host``
block per host (as generated for a fleet, and as the fleet benchmark's proxied lab has it).

    python benchmarks/ssh_config_lookup.py [--blocks 64 256 1024 4096]

For each size it writes a file of N ``Host hI`` blocks (HostName, Port, User) followed by ``Host *.example``
and ``Host *`` (IdentityFile, UserKnownHostsFile), then prints the CPU ms of one lookup (the median of the
hosts' lookups, each host once) for:

* ``provision``: the lookup every connection of a run makes (``transport.session``: the parsed file, indexed);
* ``unindexed``: the same lookup trying every block (as before the index: paramiko's order, without its
  passwd read per block, literal patterns compared as text);
* ``paramiko`` (anchor): ``paramiko.SSHConfig`` from the same file: every block tried for every host;
* ``ssh -G`` (anchor): OpenSSH's own client printing the host's settings: a process per lookup, the most an
  ssh-based tool pays (measured on 32 hosts of the file).

And the whole run's share: lookups x hosts, in CPU seconds. Asserts nothing.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import paramiko  # noqa: E402

from provision.transport import session  # noqa: E402
from provision.transport.base import ConnectOptions  # noqa: E402


def write(path: Path, n: int) -> None:
    blocks = [f"Host h{i}\n  HostName 10.{i // 65536}.{i // 256 % 256}.{i % 256}\n  Port {2000 + i % 60000}\n"
              f"  User u{i}\n" for i in range(n)]  # fmt: skip
    path.write_text("".join(blocks) + "Host *.example\n  User wild\n"
                    "Host *\n  IdentityFile ~/.ssh/fleet\n  UserKnownHostsFile ~/.ssh/fleet_known\n")  # fmt: skip


def per_lookup_ms(lookup: object, hosts: list[str]) -> float:
    times = []
    for host in hosts:
        started = time.thread_time()
        lookup(host)  # type: ignore[operator]
        times.append((time.thread_time() - started) * 1000)
    return statistics.median(times)


def ssh_g_ms(path: Path, hosts: list[str]) -> float | None:
    ssh = shutil.which("ssh")
    if ssh is None:
        return None
    times = []
    for host in hosts:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([ssh, "-G", "-F", str(path), host], capture_output=True, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, nargs="+", default=[64, 256, 1024, 4096])
    args = parser.parse_args()
    print("one ssh_config lookup, CPU ms (median over the file's hosts); a run's lookups, CPU s")
    print(f"{'blocks':>7} {'provision':>10} {'unindexed':>10} {'paramiko':>10} {'ssh -G':>8}   "
          f"{'run: provision':>15} {'unindexed':>10} {'paramiko':>9}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="provision-ssh-config-") as tmp:
        for n in args.blocks:
            path = Path(tmp) / f"ssh_config.{n}"
            write(path, n)
            hosts = [f"h{i}" for i in range(n)]
            ours = session.config(ConnectOptions(ssh_config=str(path))).base_ssh_config
            plain = paramiko.SSHConfig.from_path(str(path))
            full = session._SSHConfig.from_path(str(path))  # parsed, not indexed: every block tried
            mine, theirs = per_lookup_ms(ours.lookup, hosts), per_lookup_ms(plain.lookup, hosts)
            before = per_lookup_ms(full.lookup, hosts)
            ssh = ssh_g_ms(path, hosts[:: max(1, n // 32)])
            shown = f"{ssh:8.2f}" if ssh is not None else f"{'-':>8}"
            print(f"{n:>7} {mine:>10.3f} {before:>10.3f} {theirs:>10.3f} {shown}   {mine * n / 1000:>15.3f} "
                  f"{before * n / 1000:>10.3f} {theirs * n / 1000:>9.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
