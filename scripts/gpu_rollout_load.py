"""Run a command (``pd rollout``) while a client sends requests through the router; count what failed.

``python scripts/gpu_rollout_load.py RESULT.json CMD...``: tests/support/cli.py's ``Client`` (``GPU_LOAD_THREADS``
threads, 2 by default: short and 64-token requests back to back through ``http://127.0.0.1:8000``; each request's
timeout ``GPU_LOAD_TIMEOUT`` seconds, 120 by default) runs for the whole command; the command's exit code is this
script's; RESULT.json gets served, failed (with the first errors), the latency max/p50, the requests that took
over 5 s and the seconds. For the GPU records (docs/gpu-validation/bench-h200x1.md, serial-start-h100x1.md),
not a test.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.cli import Client


def main() -> int:
    result, cmd = Path(sys.argv[1]), sys.argv[2:]
    started = time.monotonic()
    threads = int(os.environ.get("GPU_LOAD_THREADS", "2"))
    timeout = float(os.environ.get("GPU_LOAD_TIMEOUT", "120"))
    with Client("http://127.0.0.1:8000", threads_n=threads, timeout=timeout) as client:
        time.sleep(3)
        rc = subprocess.call(cmd)
        time.sleep(3)
    doc = {
        "command": cmd,
        "threads": threads,
        "request_timeout_s": timeout,
        "exit": rc,
        "seconds": round(time.monotonic() - started, 1),
        "served": client.served,
        "failed": len(client.failures),
        "first_failures": client.failures[:5],
        "latency_p50_s": round(statistics.median(client.latencies), 3) if client.latencies else None,
        "latency_max_s": round(max(client.latencies, default=0), 3),
        "served_after_over_5_s": sorted(round(t, 1) for t in client.latencies if t > 5),
    }
    result.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc), file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
