"""kill -9 one PD server and wait until its supervisor has it serving again (the GPU runbooks' supervised
restart; docs/gpu-validation/runbook-h200x2.md).

``python scripts/gpu_kill_wait.py INVENTORY NAME RESULT.json``: reads ``provision pd status --json``, sends
SIGKILL to NAME's pid (e.g. ``h200-decode-decode``; the host runs this script, ``ansible_connection: local``),
then polls the status every second (up to 900 s) until NAME runs with another pid and answers ``/health`` with
200; RESULT.json gets the old and new pid and the seconds to healthy. Run it under
``scripts/gpu_rollout_load.py`` to count the client's failed requests meanwhile. Not a test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.pd import serving_again


def status(inventory: str) -> dict[str, dict[str, Any]]:
    out = subprocess.run([sys.executable, "-m", "provision", "pd", "status", "-i", inventory, "--json"],
                         capture_output=True, text=True, timeout=120, check=False).stdout  # fmt: skip
    return {row["name"]: row for row in json.loads(out or "{}").get("procs", [])}


def main() -> int:
    inventory, name, result = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    old = status(inventory)[name]["pid"]
    os.kill(int(old), signal.SIGKILL)
    killed = time.monotonic()
    row: dict[str, Any] = {}
    while time.monotonic() - killed < 900:
        row = status(inventory).get(name, {})
        if serving_again(row, old):
            break
        time.sleep(1)
    ok = serving_again(row, old)
    doc = {"name": name, "old_pid": old, "new_pid": row.get("pid"), "healthy": ok,
           "seconds_to_healthy": round(time.monotonic() - killed, 1), "restarts": row.get("restarts")}  # fmt: skip
    result.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc))
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
