"""Two (or more) checkouts of provision side by side on ONE lab: the fleet play's converged re-run, alternated
round by round, so that the machine's speed swings (~1.5x over minutes here) fall on every checkout alike.

    python benchmarks/fleet_ab.py --hosts 64 --rtt 20 --rounds 5 [--persist] /path/to/old/checkout .

Each checkout runs as its own command line (``python -m provision run``, with ``PYTHONPATH`` set to the
checkout: its provision is the one imported, its agent the one that travels); with ``--persist`` each has a
keeper of its own (``XDG_RUNTIME_DIR`` a private directory per checkout), warmed by two runs at the chosen RTT,
so that no checkout is served by a resident agent another one started. Needs root (the lab), as
``benchmarks/fleet.py``, whose play and proxy it uses. Prints, per checkout, the median wall time and the median
CPU of the command line's process tree, and every round's wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import fleet  # noqa: E402

from tests.support.lab import Lab  # noqa: E402
from tests.support.rtt_proxy import RttProxy  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="+", type=Path, help="provision checkouts (repository roots)")
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--rtt", type=float, default=20.0, help="round-trip time to add (ms)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--persist", action="store_true", help="kept connections (each checkout its own keeper)")
    args = parser.parse_args()
    trees = [str(p.resolve()) for p in args.checkouts]
    walls: dict[str, list[float]] = {t: [] for t in trees}
    cpus: dict[str, list[float]] = {t: [] for t in trees}
    with tempfile.TemporaryDirectory(prefix="provision-ab-") as tmp, Lab(args.hosts, Path(tmp) / "lab") as lab, \
            RttProxy(lab) as proxy:  # fmt: skip
        work = Path(tmp) / "work"
        work.mkdir()
        tools = fleet.Tools(lab, work, proxy)
        argv = [sys.executable, "-m", "provision", "run", "provision.yml", "-i", str(tools.inventory),
                "-f", tools.forks, "--json"] + (["--persist", "120"] if args.persist else [])  # fmt: skip
        envs = {}
        for i, tree in enumerate(trees):
            runtime = Path(tmp) / f"runtime-{i}"
            runtime.mkdir(mode=0o700)
            envs[tree] = {**tools.env, "PYTHONPATH": tree, "XDG_RUNTIME_DIR": str(runtime)}
        try:
            for tree in trees:  # converge (each checkout's own directory on the hosts is the same play's)
                subprocess.run(argv, env=envs[tree], cwd=work, capture_output=True, check=True, timeout=900)
            proxy.set_rtt(args.rtt)
            if args.persist:
                for tree in trees:  # each keeper's connections made at this RTT
                    for _ in range(2):
                        subprocess.run(argv, env=envs[tree], cwd=work, capture_output=True, check=True, timeout=900)
            for _ in range(args.rounds):
                for tree in trees:
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    started = time.perf_counter()
                    proc = subprocess.run(argv, env=envs[tree], cwd=work, capture_output=True, text=True,
                                          timeout=900)  # fmt: skip
                    walls[tree].append(time.perf_counter() - started)
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpus[tree].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                    if proc.returncode != 0:
                        raise SystemExit(f"{tree}: rc={proc.returncode}\n{proc.stderr[-3000:]}")
        finally:
            if args.persist:
                for tree in trees:
                    subprocess.run([sys.executable, "-m", "provision", "persist", "stop"], env=envs[tree],
                                   capture_output=True, timeout=60, check=False)  # fmt: skip
    mode = "kept (--persist)" if args.persist else "fresh"
    print(f"{args.hosts} hosts, RTT {args.rtt:g} ms, {mode}, {args.rounds} rounds alternated; cores: {os.cpu_count()}")
    for tree in trees:
        rounds = " ".join(f"{w:.2f}" for w in walls[tree])
        print(f"  wall {statistics.median(walls[tree]):.3f} s  CPU {statistics.median(cpus[tree]):.3f} s  "
              f"({rounds})  {tree}")  # fmt: skip


if __name__ == "__main__":
    main()
