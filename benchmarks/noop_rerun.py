"""Re-apply a converged playbook of ten generic tasks to N lab hosts and print what it costs.

    python benchmarks/noop_rerun.py [--hosts 8] [--repeat 3]

Starts a lab of real sshd hosts on loopback (needs root: one Unix user per host), converges the playbook
once, then times the no-op re-runs. Prints hosts, tasks, wall seconds, SSH connections opened and remote
commands per host. Target: under 1 s for 10 tasks on 8 hosts, one connection per host.
For scale: ansible-core 2.19 (forks 50, pipelining, ControlPersist) needs about 16 s for 9 tasks on 8 hosts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provision.executor import Executor, RunOptions  # noqa: E402
from provision.inventory import Inventory  # noqa: E402
from provision.playbook import load_playbook  # noqa: E402
from provision.report import Reporter  # noqa: E402
from provision.transport import COUNTERS, ConnectOptions  # noqa: E402
from tests.support.lab import Lab  # noqa: E402

PLAYBOOK = """\
- hosts: all
  gather_facts: false
  vars:
    base: bench
  tasks:
    - file: {path: "{{ base }}", state: directory, mode: "0755"}
    - file: {path: "{{ base }}/etc", state: directory, mode: "0700"}
    - copy: {content: "one\\n", dest: "{{ base }}/one.txt", mode: "0644"}
    - copy: {content: "two {{ inventory_hostname }}\\n", dest: "{{ base }}/etc/two.txt", mode: "0600"}
    - template: {src: t.j2, dest: "{{ base }}/three.txt"}
    - file: {path: "{{ base }}/gone", state: absent}
    - command: {cmd: "touch {{ base }}/marker", creates: "{{ base }}/marker"}
    - set_fact: {answer: 42}
    - assert: {that: "answer == 42"}
    - debug: {msg: "host {{ inventory_hostname }} converged"}
"""


def apply(inventory: Inventory, playbook: Path) -> tuple[float, int, dict[str, int], int]:
    plays = load_playbook(playbook)
    options = RunOptions(forks=50, connect=ConnectOptions())
    with open(os.devnull, "w") as sink:
        executor = Executor(inventory, options, Reporter(stream=sink), str(playbook.parent))
        before = COUNTERS.connections_opened
        started = time.perf_counter()
        summary = executor.run(plays)
        wall = time.perf_counter() - started
        commands = executor.commands_run()
        executor.close()
    if summary.exit_code():
        raise SystemExit(f"playbook failed: {summary.stats}")
    return wall, COUNTERS.connections_opened - before, commands, summary.changed_total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="provision-bench-") as tmp,
        Lab(args.hosts, Path(tmp) / "lab") as lab,
    ):
        os.environ["PROVISION_SSH_CONFIG"] = str(lab.ssh_config_path)
        work = Path(tmp)
        (work / "t.j2").write_text("three {{ inventory_hostname }}\n")
        playbook = work / "noop.yml"
        playbook.write_text(PLAYBOOK)
        inventory = Inventory.load([str(lab.inventory_path)])
        first, conns, _, changed = apply(inventory, playbook)
        print(f"converge: {first:.3f}s, {changed} changes, {conns} connections")
        walls = []
        for _ in range(args.repeat):
            wall, conns, commands, changed = apply(inventory, playbook)
            walls.append(wall)
            assert changed == 0, "a converged re-run reported changes"
        tasks = len(load_playbook(playbook)[0].tasks)
        per_host = sorted(set(commands.values()))
        print(f"hosts: {args.hosts}")
        print(f"tasks: {tasks}")
        print(f"no-op re-run wall seconds: best {min(walls):.3f}, median {statistics.median(walls):.3f}")
        print(f"ssh connections opened per run: {conns} ({conns / args.hosts:.1f} per host)")
        print(f"remote commands per host per run: {per_host}")


if __name__ == "__main__":
    main()
