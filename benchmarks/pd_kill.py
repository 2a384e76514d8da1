"""A decode killed with SIGKILL under a client's load: the requests lost, with ``pd_transfer_timeout`` (CPU mode's
15 s) beside SGLang's own 300 s (the anchor).

    python benchmarks/pd_kill.py [--kills 2] [--timeout 90] [--settings 15,300]    # a 3-host lab (needs root)

The lab: a prefill and the router on lab0, a decode on lab1 and one on lab2, CPU mode, provision's supervisor
(``pd_restart_delay: 1``). For each setting (``pd up -e pd_transfer_timeout=S``: its servers restart on the new
env), ``--kills`` times: a client sends requests through the router back to back on two threads (short ones and
64-token ones, 0.1 s apart, each with a ``--timeout`` s timeout), lab2's decode is killed with SIGKILL 4 s in,
the client goes on for 25 s and stops; then the supervisor's restart is awaited before the next kill. Each line:
the requests served and failed, and those that took over 3 s (sent at s after the kill, how long, the error).

What it shows: a request that met the dead decode (in flight on it, or sent to it before the router's health
checks took it out) waits for its prefill's half of the transfer to time out; then the router retries it on the
other decode. Waits longer than the client's timeout lose it. CPU-mode numbers are plumbing: on a GPU the time
also depends on how long requests queue (docs/pd.md, ``pd_transfer_timeout``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.cli import Client, run_cli_in  # noqa: E402
from tests.support.lab import Lab  # noqa: E402
from tests.support.pd import serving_again  # noqa: E402
from tests.support.stack import VENV, install_sglang_stack  # noqa: E402
from tests.support.waiting import until  # noqa: E402


def status(work: Path, inventory: Path) -> dict[str, dict[str, Any]]:
    result = run_cli_in(work, ["pd", "status", "--json", "-i", str(inventory)])
    return {row["name"]: row for row in json.loads(result.out)["procs"]}


def one_kill(lab: Lab, work: Path, inventory: Path, timeout: float) -> dict[str, Any]:
    pid = status(work, inventory)["lab2-decode"]["pid"]
    with Client(f"http://{lab.hosts[0].address}:8000", timeout=timeout) as client:
        time.sleep(4)
        killed = time.monotonic()
        lab.run_as(2, ["kill", "-9", str(pid)])
        time.sleep(25)
    slow = [(round(s - killed, 1), round(e - s, 1), err) for s, e, err in client.events if e - s > 3]

    until(
        "lab2's decode restarted by its supervisor, before the next kill",
        lambda: serving_again(status(work, inventory)["lab2-decode"], pid),
        timeout=400,
        interval=2,
    )
    time.sleep(12)  # the router's health checks take it back
    return {"served": client.served, "failed": len(client.failures), "slow": slow}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=90.0, help="the client's timeout per request (s)")
    parser.add_argument("--settings", default="15,300", help="pd_transfer_timeout values, comma-separated")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pd-kill-"))
    lab = Lab(3, work / "lab").start()
    rows: list[tuple[str, dict[str, Any]]] = []
    try:
        install_sglang_stack(lab, [0, 1, 2], work / "install")
        common = {"sglang_device": "cpu", "venv_path": VENV, "python": "/usr/bin/python3", "pd_restart_delay": 1}
        inventory = lab.write_inventory(
            work / "hosts.yml",
            extra_host_vars={name: common for name in ("lab0", "lab1", "lab2")},
            groups={"prefill": ["lab0"], "decode": ["lab1", "lab2"], "router": ["lab0"]},
        )
        with lab.pointed_at():
            for setting in args.settings.split(","):
                up = run_cli_in(work, ["pd", "up", "-i", str(inventory), "-e", f"pd_transfer_timeout={setting}",
                                       "-e", "pd_verify_all_pairs=false"])  # fmt: skip
                if up.code != 0:
                    raise SystemExit(f"pd up failed (exit {up.code}): {up.out[-2000:]}{up.err[-2000:]}")
                for k in range(args.kills):
                    row = one_kill(lab, work, inventory, args.timeout)
                    rows.append((setting, row))
                    print(f"pd_transfer_timeout={setting:>4} s, kill {k + 1}: {row['served']} served, "
                          f"{row['failed']} failed; over 3 s: {row['slow']}", flush=True)  # fmt: skip
            run_cli_in(work, ["pd", "down", "-i", str(inventory)])
    finally:
        lab.stop()
    print(f"\nrequests failed per kill of a decode (client timeout {args.timeout:.0f} s; SGLang's own wait: 300 s)")
    for setting in args.settings.split(","):
        failed = [r["failed"] for s, r in rows if s == setting]
        print(f"  pd_transfer_timeout {setting:>4} s: {', '.join(map(str, failed))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
