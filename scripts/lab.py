"""Run the test lab by hand: N real sshd hosts on loopback (see tests/support/lab.py). Needs root.

Usage:
    python scripts/lab.py up -n 4 --dir .lab     # prints the inventory path, stays up until Ctrl-C
    python scripts/lab.py down --dir .lab        # from another shell: stops it (or cleans up a crash)
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.lab import Lab, LabError


def up(n: int, base_dir: Path, prefix: str) -> int:
    owner = Lab.owner_pid(base_dir)
    if owner is not None:
        print(f"a lab is already up in {base_dir} (pid {owner}); run `down` first", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    lab = Lab(n, base_dir, prefix)
    try:
        lab.start()
        print(lab.inventory_path, flush=True)
        for h in lab.hosts:
            print(
                f"  {h.name}: ssh -F {lab.ssh_config_path} {h.name}   ({h.user}@{h.address}:{h.port})",
                file=sys.stderr,
            )
        print("up; Ctrl-C or `down` to stop", file=sys.stderr, flush=True)
        stop.wait()
    except LabError as exc:
        print(f"lab failed to start: {exc}", file=sys.stderr)
        return 1
    finally:
        lab.stop()
    return 0


def down(base_dir: Path) -> int:
    if Lab.cleanup_stale(base_dir):
        print(f"lab in {base_dir} is down")
    else:
        print(f"no lab in {base_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start a lab and keep it up until Ctrl-C or `down`")
    p_up.add_argument("-n", type=int, default=4, help="number of hosts (default 4)")
    p_up.add_argument("--dir", type=Path, default=Path(".lab"), help="lab directory (default .lab)")
    p_up.add_argument("--prefix", default="plab", help="Unix user name prefix (default plab)")
    p_down = sub.add_parser("down", help="stop the lab in --dir (also cleans up after a crashed one)")
    p_down.add_argument("--dir", type=Path, default=Path(".lab"), help="lab directory (default .lab)")
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(args.n, args.dir.absolute(), args.prefix)
    return down(args.dir.absolute())


if __name__ == "__main__":
    sys.exit(main())
