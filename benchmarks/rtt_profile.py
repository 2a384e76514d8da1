"""Sequential round trips of one converged provision run, per host, through the delaying proxy.

    python benchmarks/rtt_profile.py [--hosts 1] [--rtt 20] [--extra "--persist 60"] [--changing]

Starts a lab, converges the fleet play once (RTT 0), then re-runs it at RTT 0 and at ``--rtt`` ms: prints the
proxy's turn count per host (each request the client waited for), the added wall time over the RTT (the
sequential round trips), and provision's own ``-vvv`` round-trip lines by phase (``rtt:`` lines).
``--changing``: every run writes new content into the play's ``copy`` (``-e port=N``), so each run changes one
file and runs its handler (a run that does something, instead of a converged one).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fleet import PLAYBOOK, TEMPLATE  # noqa: E402
from tests.support.lab import Lab  # noqa: E402
from tests.support.rtt_proxy import RttProxy  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--rtt", type=float, default=20.0)
    parser.add_argument("--extra", default="", help="more provision run arguments, one string ('--persist 60')")
    parser.add_argument("--changing", action="store_true", help="each run changes the copied file (-e port=N)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="provision-rtt-") as tmp, Lab(args.hosts, Path(tmp) / "lab") as lab:
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "motd.j2").write_text(TEMPLATE)
        play = PLAYBOOK.format(tool="provision")
        if args.changing:
            play = play.replace("port = 30000", "port = {{ port | default(30000) }}")
        (work / "play.yml").write_text(play)
        runs = iter(range(30001, 40000))
        with RttProxy(lab) as proxy:
            files = proxy.write_files(work / "proxied")
            env = {**os.environ, "PROVISION_SSH_CONFIG": str(files["ssh_config"]), "PYTHONPATH": str(ROOT)}
            argv = [sys.executable, "-m", "provision", "run", "play.yml", "-i", str(files["inventory"]),
                    "-f", "300", *shlex.split(args.extra)]  # fmt: skip

            def run(rtt: float, verbose: bool = False) -> tuple[float, str]:
                proxy.set_rtt(rtt)
                proxy.reset()
                started = time.perf_counter()
                change = ["-e", f"port={next(runs)}"] if args.changing else []
                proc = subprocess.run(argv + change + (["-vvv"] if verbose else []), env=env, cwd=work,
                                      capture_output=True, text=True, timeout=600)  # fmt: skip
                wall = time.perf_counter() - started
                if proc.returncode != 0:
                    raise SystemExit(proc.stdout[-2000:] + proc.stderr[-2000:])
                return wall, proc.stdout + proc.stderr

            run(0)  # converge (and with --persist, leave the connections kept)
            base = min(run(0)[0] for _ in range(3))
            slow, out = run(args.rtt, verbose=True)
            turns = proxy.turns()
            print(f"wall at RTT 0: {base:.2f}s, at RTT {args.rtt:g} ms: {slow:.2f}s "
                  f"-> {(slow - base) / (args.rtt / 1000):.1f} sequential RTT")  # fmt: skip
            print(f"proxy turns per host: min {min(turns.values(), default=0)} max {max(turns.values(), default=0)}; "
                  f"new connections per host: {max(proxy.connections().values(), default=0)}")  # fmt: skip
            for flow in [f for f in proxy.flows if f.turns]:
                marks = [round((m - flow.opened) * 1000) for m in flow.marks]
                print(f"{flow.host}: turns at ms {marks}, {flow.client_bytes} B up, {flow.server_bytes} B down")
            for line in out.splitlines():
                if "rtt:" in line:
                    print(line)


if __name__ == "__main__":
    main()
