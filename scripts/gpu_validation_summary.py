"""Summarise a `scripts/gpu_validation.sh pd` run directory as one JSON document (stdout)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any


def load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def results(doc: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(task, host, result) of a --json run report."""
    out = []
    for play in (doc or {}).get("plays", []):
        for task in play.get("tasks", []):
            for host, res in task.get("hosts", {}).items():
                out.append((task["task"]["name"], host, res))
                for item in res.get("results") or []:  # a looped task's items (the preflight: one per decode host)
                    if isinstance(item, dict):
                        out.append((task["task"]["name"], host, item))
    return out


def pids(doc: Any) -> dict[str, Any]:
    return {f"{p.get('host')}/{p.get('role')}": p.get("pid") for p in (doc or {}).get("procs", [])}


def main(out: Path) -> dict[str, Any]:
    summary: dict[str, Any] = {"env": (out / "env.txt").read_text().splitlines() if (out / "env.txt").exists() else []}
    steps = {}
    for line in (out / "steps.txt").read_text().splitlines() if (out / "steps.txt").exists() else []:
        m = re.match(r"(\S+) rc=(\d+) seconds=([\d.]+)", line)
        if m:
            steps[m.group(1)] = {"rc": int(m.group(2)), "seconds": float(m.group(3))}
    summary["steps"] = steps
    manifest = load(out / "wheelhouse" / "manifest.json") or {}
    summary["wheelhouse"] = {
        host: {k: v[k] for k in ("release", "reason", "deps", "target")} | {"files": len(v["files"])}
        for host, v in manifest.get("hosts", {}).items()
    }
    files = manifest.get("files", {})
    summary["wheelhouse"].update(total_files=len(files), total_bytes=sum(f["size"] for f in files.values()))
    for name in ("install", "install-rerun", "smoke", "preflight", "pd-up-rerun", "pd-up-decode-flag", "pd-down"):
        doc = load(out / f"{name}.out")
        summary[name] = {
            "stats": (doc or {}).get("stats"),
            "changed": [f"{h}: {t}" for t, h, r in results(doc) if r.get("changed")],
            "failed": [f"{h}: {t}: {r.get('msg')}" for t, h, r in results(doc) if r.get("failed")],
            "msgs": [f"{h}: {t}: {r.get('msg')}" for t, h, r in results(doc) if r.get("msg")][:12],
        }
        if name == "install":
            for task, _host, res in results(doc):
                if task.split(" : ")[-1].startswith("Wheel directory"):  # a role's task: "ROLE : NAME"
                    summary[name]["sync"] = {k: res.get(k) for k in ("files", "bytes_sent", "msg")} | {
                        "sent": len(res.get("sent") or [])
                    }
    for name in ("pd-verify", "pd-verify-4k", "pd-verify-after"):
        summary[name] = load(out / f"{name}.out")
    before, after = pids(load(out / "pd-status.out")), pids(load(out / "pd-status-after.out"))
    summary["pids_before_flag_change"], summary["pids_after_flag_change"] = before, after
    summary["restarted_by_flag_change"] = sorted(k for k in before if before.get(k) != after.get(k))
    summary["status_after_down"] = load(out / "pd-status-down.out")
    summary["ucx_gpu_protocols"] = ucx_gpu_protocols(out / "server-logs")
    return summary


OPERATION = re.compile(r"\|\s+(remote memory (?:write|read) by \S+ from (\S+ ?\S*) to (\S+))\s+\|")
ROW = re.compile(r"\|\s*([0-9.]+(?:inf|\d))\s*\|\s*([\w -]+?)\s*\|\s*(\S+)\s*\|")


def ucx_gpu_protocols(logs: Path) -> list[dict[str, str]]:
    """The UCX_PROTO_INFO rows of GPU-to-GPU operations in the servers' logs: what moved the KV cache."""
    found: list[dict[str, str]] = []
    for log in sorted(logs.glob("*.log")) if logs.exists() else []:
        operation = None
        for line in log.read_text(errors="replace").splitlines():
            m = OPERATION.search(line)
            if m:
                operation = m.group(1) if "cuda" in m.group(2) and "cuda" in m.group(3) else None
                continue
            row = ROW.search(line)
            if operation and row:
                entry = {"log": log.name, "operation": operation, "range": row.group(1), "protocol": row.group(2),
                         "transport": row.group(3)}  # fmt: skip
                if entry not in found:
                    found.append(entry)
    return found


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1])), indent=1, default=str))
