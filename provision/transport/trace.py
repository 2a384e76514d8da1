"""Round trips by phase, per host: ``PROVISION_TRACE_RTT=1`` (or ``-vvv``) prints one ``rtt:`` line per host
at the end of its connection, with the phases it waited for the network in and how long each took.

Through a link of known round-trip time (``benchmarks/rtt_profile.py`` puts a delaying proxy in front of the
lab) a phase's time over the RTT is its number of sequential round trips; the proxy counts them too.
"""

from __future__ import annotations

import os
import sys
import threading
import time

ENABLED = os.environ.get("PROVISION_TRACE_RTT", "") not in ("", "0")
_lock = threading.Lock()


class Phases:
    """One connection's phases: (name, seconds), in order."""

    def __init__(self) -> None:
        self.items: list[tuple[str, float]] = []

    def add(self, name: str, started: float) -> None:
        if ENABLED:
            self.items.append((name, time.monotonic() - started))

    def report(self, host: str) -> None:
        if not ENABLED or not self.items:
            return
        merged: dict[str, list[float]] = {}
        for name, took in self.items:
            merged.setdefault(name, []).append(took)
        parts = " ".join(f"{n}={len(t)}x/{sum(t) * 1000:.0f}ms" for n, t in merged.items())
        with _lock:
            sys.stderr.write(f"rtt: {host} {parts}\n")
        self.items.clear()


def enable() -> None:
    global ENABLED
    ENABLED = True
