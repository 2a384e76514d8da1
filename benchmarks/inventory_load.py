"""How long loading an inventory takes: 1k, 10k and 100k hosts, YAML and INI, a few groups with children
and ``group_vars/``. Loading must be linear in the number of hosts.

    python benchmarks/inventory_load.py [--sizes 1000,10000,100000] [--profile N]

Writes the inventories to a temporary directory, then times ``Inventory.load`` plus one ``select`` of a
group (what every run does), and ``--limit @file`` naming half the hosts (a retry file after a bad day).
Prints seconds; asserts nothing. ``--profile N`` runs cProfile on the YAML
inventory of N hosts and prints the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provision.inventory import Inventory  # noqa: E402

GROUPS = ("prefill", "decode", "router", "spare")


def write_yaml(directory: Path, n: int) -> Path:
    lines = ["all:", "  vars:", "    ansible_user: ops", "  children:", "    gpu:", "      children:"]
    for group in GROUPS:
        lines += [f"        {group}:", "          hosts:"]
        members = range(GROUPS.index(group), n, len(GROUPS))
        lines += [f"            node{i:06d}:\n              ansible_host: 10.{i >> 16}.{i >> 8 & 255}.{i & 255}"
                  for i in members]  # fmt: skip
    path = directory / "hosts.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_ini(directory: Path, n: int) -> Path:
    lines = ["[all:vars]", "ansible_user=ops", "[gpu:children]", *GROUPS]
    for group in GROUPS:
        lines.append(f"[{group}]")
        lines += [f"node{i:06d} ansible_host=10.{i >> 16}.{i >> 8 & 255}.{i & 255}"
                  for i in range(GROUPS.index(group), n, len(GROUPS))]  # fmt: skip
    path = directory / "hosts.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_group_vars(directory: Path) -> None:
    """group_vars/ for every group, and host_vars/ for two hosts (the directory is listed, not probed)."""
    (directory / "host_vars").mkdir(exist_ok=True)
    for host in ("node000000", "node000001"):
        (directory / "host_vars" / f"{host}.yml").write_text("tp: 4\n")
    (directory / "group_vars").mkdir(exist_ok=True)
    (directory / "group_vars" / "all.yml").write_text("venv_path: /opt/venv\n")
    for group in GROUPS:
        (directory / "group_vars" / f"{group}.yml").write_text(f"role: {group}\ntp: 8\n")


def measure(path: Path, n: int) -> tuple[float, float]:
    started = time.perf_counter()
    inventory = Inventory.load([str(path)])
    inventory.select("decode")
    elapsed = time.perf_counter() - started
    if len(inventory.hosts) != n:
        raise SystemExit(f"{path}: loaded {len(inventory.hosts)} hosts, expected {n}")
    limit = path.parent / "limit.retry"
    limit.write_text("".join(f"node{i:06d}\n" for i in range(0, n, 2)))
    started = time.perf_counter()
    selected = inventory.select(f"@{limit}")
    select_elapsed = time.perf_counter() - started
    if len(selected) != (n + 1) // 2:
        raise SystemExit(f"{limit}: selected {len(selected)} hosts, expected {(n + 1) // 2}")
    return elapsed, select_elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--profile", type=int, default=0, help="profile the YAML load of N hosts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.profile:
            base = Path(tmp)
            write_group_vars(base)
            path = write_yaml(base, args.profile)
            profiler = cProfile.Profile()
            profiler.runcall(Inventory.load, [str(path)])
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
            return
        print(f"{'hosts':>8}  {'yaml s':>8}  {'ini s':>8}  {'-l @file s':>10}")
        for n in (int(s) for s in args.sizes.split(",")):
            results = []
            for writer in (write_yaml, write_ini):
                base = Path(tmp) / f"{writer.__name__}-{n}"
                base.mkdir()
                write_group_vars(base)
                results.append(measure(writer(base, n), n))
            print(f"{n:>8}  {results[0][0]:>8.2f}  {results[1][0]:>8.2f}  {results[1][1]:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
