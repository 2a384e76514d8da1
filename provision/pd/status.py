"""The ``provision pd status`` table: one row per process, read at a glance."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

COLUMNS = ("HOST", "ROLE", "STATE", "PID", "UPTIME", "HEALTH", "PORT", "SUPERVISOR", "RESTARTS")


def uptime_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def state_text(row: Mapping[str, Any]) -> str:
    if row.get("unreachable"):
        return "unreachable"
    if row.get("error"):
        return "error"
    if row.get("running"):
        return "up"
    if row.get("crash_looping"):
        return "crash-looping"
    if row.get("state") == "backoff":
        return "restarting"
    if row.get("orphans"):
        return f"dead ({len(row['orphans']) if isinstance(row['orphans'], list) else '?'} left)"
    return "down"


def health_text(row: Mapping[str, Any]) -> str:
    if not row.get("running"):
        return "-"
    status = row.get("health")
    if status == 200:
        return "ok, not routed" if row.get("unrouted") else "ok"
    return "no answer" if status is None else f"HTTP {status}"


def restarts_text(row: Mapping[str, Any]) -> str:
    """``3 (last: killed by SIGKILL after 41.2s, 5m ago)``; ``0``; ``-`` without a supervisor."""
    if row.get("supervisor") in (None, "none"):
        return "-"
    count = str(row.get("restarts") or 0)
    last = row.get("last_exit") or {}
    if not row.get("last_reason"):
        return count
    ago = ""
    if isinstance(last.get("at"), (int, float)) and isinstance(row.get("now"), (int, float)):
        ago = f", {uptime_text(max(0.0, row['now'] - last['at']))} ago"
    return f"{count} (last: {row['last_reason']}{ago})"


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows (host, role, running, pid, uptime, health, port, ...) → an aligned text table."""
    cells = [
        (
            str(r.get("host", "?")), str(r.get("role", "?")), state_text(r),
            str(r["pid"]) if r.get("running") and r.get("pid") else "-",
            uptime_text(r.get("uptime")), health_text(r), str(r.get("port") or "-"),
            str(r.get("supervisor") or "-"), restarts_text(r),
        )
        for r in rows
    ]  # fmt: skip
    widths = [max(len(c[i]) for c in [COLUMNS, *cells]) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(col.ljust(w) for col, w in zip(line, widths, strict=True)).rstrip() for line in [COLUMNS, *cells]
    ]
    return "\n".join(lines)


def mark_unrouted(rows: Sequence[dict[str, Any]], workers: Mapping[str, str]) -> None:
    """Each running server of ``workers`` (name → URL: the prefills and decodes the routers must list) gets
    ``unrouted``, the routers whose worker list (their row's ``workers``, read from their API) lacks its URL: a
    server that answers ``/health`` but gets no request (a rollout or scale cut off between taking it out of the
    routers and putting it back). Routers whose list could not be read mark nothing."""
    listed = {
        str(r.get("name")): {str(w.get("url", "")).rstrip("/") for w in r["workers"]}
        for r in rows
        if r.get("role") == "router" and isinstance(r.get("workers"), list)
    }
    for row in rows:
        url = workers.get(str(row.get("name")))
        if url is not None and row.get("running"):
            missing = [name for name, urls in listed.items() if url.rstrip("/") not in urls]
            if missing:
                row["unrouted"] = missing


def all_up(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Every process running and healthy, and every server listed by every router that said."""
    return bool(rows) and all(r.get("running") and r.get("health") == 200 and not r.get("unrouted") for r in rows)
