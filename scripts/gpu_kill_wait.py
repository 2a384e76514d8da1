"""kill -9 PD servers at once and wait until their supervisors have them serving again (the GPU runbooks'
supervised restart; docs/gpu-validation/runbook-h200x2.md).

``python scripts/gpu_kill_wait.py INVENTORY NAME[,NAME...] RESULT.json``: reads ``provision pd status --json``,
sends SIGKILL to each NAME's pid (e.g. ``h200-decode-decode``; the host runs this script,
``ansible_connection: local``), then polls the status every second (up to 900 s) until every NAME runs with
another pid and answers ``/health`` with 200; RESULT.json gets, per NAME, the old and new pid and the seconds to
healthy (one NAME: that row alone, as before). Run it under ``scripts/gpu_rollout_load.py`` to count the
client's failed requests meanwhile. Not a test.
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
    inventory, names, result = sys.argv[1], sys.argv[2].split(","), Path(sys.argv[3])
    rows = status(inventory)
    old = {name: rows[name]["pid"] for name in names}
    for name in names:
        os.kill(int(old[name]), signal.SIGKILL)
    killed = time.monotonic()
    docs: dict[str, dict[str, Any]] = {}
    while time.monotonic() - killed < 900 and len(docs) < len(names):
        rows = status(inventory)
        for name in names:
            row = rows.get(name, {})
            if name not in docs and serving_again(row, old[name]):
                docs[name] = {"name": name, "old_pid": old[name], "new_pid": row.get("pid"), "healthy": True,
                              "seconds_to_healthy": round(time.monotonic() - killed, 1),
                              "restarts": row.get("restarts")}  # fmt: skip
        time.sleep(1)
    for name in names:
        docs.setdefault(name, {"name": name, "old_pid": old[name], "healthy": False,
                               "seconds_to_healthy": round(time.monotonic() - killed, 1)})  # fmt: skip
    doc: Any = docs[names[0]] if len(names) == 1 else [docs[name] for name in names]
    result.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc))
    return 0 if all(d["healthy"] for d in docs.values()) else 2


if __name__ == "__main__":
    sys.exit(main())
