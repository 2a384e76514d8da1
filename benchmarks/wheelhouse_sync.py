"""What syncing a wheelhouse costs: ``provision wheelhouse`` for N lab hosts (read over SSH), then the
``wheel_sync`` of install.yml (``provision task wheel_sync ... manifest=true``) onto N hosts at once: fresh
(every file sent, sha256-checked on the host), converged (nothing sent: one listing per host), and with one
file lost on every host (only it is sent).

    python benchmarks/wheelhouse_sync.py [--hosts 1,4]

The wheels: the NIXL-only set of the lab tests (nixl-cu13, nixl, numpy for the lab's Python; ~76 MB),
from the cached wheel directory (no index). Needs root: it starts a lab of real sshd hosts (tests/support/lab.py).
Prints seconds and bytes; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.cli import run_cli  # noqa: E402
from tests.support.lab import Lab  # noqa: E402
from tests.support.stack import CACHE_ROOT, stack_inventory  # noqa: E402

WHEELS = CACHE_ROOT / "wheels-nixl-1.5.1"  # tests/integration/test_install.py's wheel_dir fixture fills it


def sync(inv: Path, house: Path) -> tuple[float, dict[str, Any]]:
    args = f"src={house} manifest=true dest=~/.provision/wheels python=/usr/bin/python3"
    started = time.perf_counter()
    result = run_cli(["task", "wheel_sync", "-a", args, "-i", str(inv), "-l", "all", "--json"])
    took = time.perf_counter() - started
    if result.code != 0:
        raise SystemExit(f"wheel_sync failed ({result.code}): {result.err[-2000:]}")
    hosts: dict[str, Any] = {}
    for play in json.loads(result.out)["plays"]:
        for task in play["tasks"]:
            hosts.update(task["hosts"])
    return took, hosts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="1,4", help="comma-separated host counts")
    opts = parser.parse_args()
    if not any(WHEELS.glob("numpy-*.whl")):
        raise SystemExit(f"no wheels in {WHEELS}: run tests/integration/test_install.py once (it downloads them)")
    numpy = next(WHEELS.glob("numpy-*.whl")).name.split("-")[1]
    counts = [int(n) for n in opts.hosts.split(",")]
    with tempfile.TemporaryDirectory(prefix="provision-bench-") as tmp, Lab(max(counts), Path(tmp) / "lab") as lab:
        os.environ["PROVISION_SSH_CONFIG"] = str(lab.ssh_config_path)
        for n in counts:
            hosts = list(range(n))
            for i in hosts:
                lab.run_as(i, ["rm", "-rf", ".provision"])
            plan = {"install_sglang": False, "wheelhouse_deps": False, "wheelhouse_packages": [f"numpy=={numpy}"]}
            inv = stack_inventory(lab, Path(tmp) / f"inv{n}", hosts, python="/usr/bin/python3", **plan)
            house = Path(tmp) / f"house{n}"
            started = time.perf_counter()
            made = run_cli(["wheelhouse", "-i", str(inv), "-d", str(house), "--find-links", str(WHEELS), "--no-index"])
            if made.code != 0:
                raise SystemExit(made.err)
            planned = time.perf_counter() - started
            fresh, res = sync(inv, house)
            sent = sum(r.get("bytes_sent", 0) for r in res.values())
            converged, res2 = sync(inv, house)
            assert all(not r.get("sent") for r in res2.values())
            lost = sorted(json.loads((house / "manifest.json").read_text())["files"])[0]
            for i in hosts:
                lab.run_as(i, ["rm", "-f", f".provision/wheels/{lost}"])
            one, res3 = sync(inv, house)
            resent = sum(r.get("bytes_sent", 0) for r in res3.values())
            print(f"{n} host(s): wheelhouse {planned:.2f} s (hosts read + local pip); sync fresh {fresh:.2f} s "
                  f"({sent / 1e6:.0f} MB sent, sha256-checked); converged {converged:.2f} s (0 B); "
                  f"one file lost per host {one:.2f} s ({resent / 1e3:.0f} kB)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
