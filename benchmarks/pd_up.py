"""From ``provision pd up`` to a verified generation, split into phases, and the toolkit's own overhead.

    python benchmarks/pd_up.py [--json] [--keep]            # a 2-host lab in CPU mode (needs root)
    python benchmarks/pd_up.py -i inventory/local.yml -e venv_path=...   # any inventory

Phases: ``install`` (install.yml; seconds when the stack is present, reported as such), ``prepare``
(validation, files, the tiny model in CPU mode, SGLang's own check of the command lines), ``servers``
(prefill and decode started → both answer /health), ``router`` (started → /readiness 200) and ``verify``
(the real /generate through the router, with its latency and TTFT).

Overhead: a separate probe polls every server's /health and the router's /readiness from here every 20 ms
and notes when each first answered 200. The time from the LAST server's first 200 to the end of the wait
task (and the same for the router) is what provision's polling adds beyond the servers' readiness: it
should stay under one second each. The lab's addresses are loopback, so the probe sees what the hosts see.
Each run starts cold (``pd down`` first) and ends with ``pd down`` unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provision import api  # noqa: E402
from provision.api import Event, TaskFinished, TaskResult, TaskStarted, inventory_pd_vars  # noqa: E402
from provision.cli.common import parse_extra_vars  # noqa: E402
from provision.pd import build  # noqa: E402
from provision.pd.spec import health_url  # noqa: E402

VENV = "~/sglang-stack/venv"
sysconfig.get_config_vars()  # initialise once: CPython 3.11 races when the install threads do it first


class Timeline:
    """Records when each task started and when each host's result came in (monotonic seconds): a listener of
    the run's events (:mod:`provision.events`)."""

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self.starts: dict[str, float] = {}
        self.ends: dict[str, float] = {}
        self.results: dict[str, TaskResult] = {}

    def __call__(self, event: Event) -> None:
        now = time.monotonic()
        if isinstance(event, TaskStarted):
            self.starts.setdefault(event.name.split(" : ", 1)[-1], now)  # "role : task", as the results name it
            if self.verbose:
                print(f"TASK [{event.name}]", file=sys.stderr)
        elif isinstance(event, TaskFinished):
            result = event.result
            self.ends[result.task] = now
            self.results[f"{result.task}@{result.host}"] = result
            if self.verbose:
                print(f"  {result.status.value}: [{result.host}] {result.msg[:200]}", file=sys.stderr)


class Probe:
    """One thread per URL, polling every ``interval`` s: when each first answered 200 (the response's time)."""

    def __init__(self, urls: list[str], interval: float = 0.02) -> None:
        self.urls, self.interval = urls, interval
        self.first: dict[str, float] = {}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.poll, args=(url,), daemon=True) for url in urls]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def poll(self, url: str) -> None:
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    if resp.getcode() == 200:
                        self.first[url] = time.monotonic()
                        return
            except OSError:
                pass
            time.sleep(self.interval)


def run_playbook(name: str, inventory: Path, extra: dict[str, Any], verbose: bool) -> tuple[Timeline, float, int]:
    """A shipped playbook (or a file), as ``provision run`` runs it (the Python API): its timeline, start, exit."""
    timeline = Timeline(verbose)
    started = time.monotonic()
    result = api.run_playbook(name, inventory, extra_vars=extra, forks=20, on_event=timeline)
    return timeline, started, result.exit_code


def lab_inventory(work: Path) -> tuple[Any, Path]:
    from tests.support.lab import Lab
    from tests.support.stack import shared_dir

    lab = Lab(2, work / "lab").start()
    common = {
        "sglang_device": "cpu", "venv_path": VENV, "python": "/usr/bin/python3", "install_sglang": True,
        "nixl_no_deps": False, "uv_cache_dir": str(shared_dir("uv")),
    }  # fmt: skip
    inventory = lab.write_inventory(
        work / "hosts.yml",
        extra_host_vars={"lab0": common, "lab1": common},
        groups={"prefill": ["lab0"], "decode": ["lab1"], "router": ["lab0"]},
    )
    import os

    os.environ["PROVISION_SSH_CONFIG"] = str(lab.ssh_config_path)
    return lab, inventory


def measure(inventory_path: Path, extra: dict[str, Any], install: bool, verbose: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if install:
        timeline, started, code = run_playbook("install.yml", inventory_path, extra, verbose)
        changed = any(r.changed for r in timeline.results.values())
        out["install"] = {"seconds": round(time.monotonic() - started, 2), "present": not changed, "rc": code}
    run_playbook("pd-down.yml", inventory_path, extra, verbose)
    deployment = build(inventory_pd_vars(api.load(inventory_path, extra_vars=extra).inventory, extra))
    servers = [health_url(p) for p in deployment.servers]
    routers = [health_url(p) for p in deployment.routers]
    probe = Probe(servers + routers)
    probe.start()
    timeline, t0, code = run_playbook(
        "pd-up.yml", inventory_path, {**extra, "pd_run_id": uuid.uuid4().hex[:12]}, verbose
    )
    probe.stop.set()
    s, e = timeline.starts, timeline.ends
    if code != 0 or "A real generation through the router" not in e:
        raise SystemExit(f"pd-up.yml failed (exit {code}); the tasks that ended: {sorted(e)}")
    verify = next((r for k, r in timeline.results.items() if k.startswith("A real generation")), None)
    phases = {
        "prepare": e["SGLang accepts the server command line"] - t0,
        "servers": e["Server answers /health"] - s["Prefill server running"],
        "router": e["Router ready (it listens 10-20 s after start)"] - s["Router running"],
        "verify": e["A real generation through the router"] - s["A real generation through the router"],
        "total": e["A real generation through the router"] - t0,
    }
    out["rc"] = code
    out["phases"] = {k: round(v, 2) for k, v in phases.items()}
    if verify is not None:
        out["verify"] = {k: verify.data.get(k) for k in ("latency", "ttft", "text", "completion_tokens")}
    if all(u in probe.first for u in servers + routers):
        router_ready = e["Router ready (it listens 10-20 s after start)"]
        out["overhead"] = {
            "servers": round(e["Server answers /health"] - max(probe.first[u] for u in servers), 3),
            "router": round(router_ready - max(probe.first[u] for u in routers), 3),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-i", "--inventory", help="an inventory (default: a 2-host lab in CPU mode)")
    parser.add_argument("-e", "--extra-vars", action="append", default=[])
    parser.add_argument("--no-install", action="store_true", help="skip install.yml")
    parser.add_argument("--keep", action="store_true", help="leave the deployment running")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    extra = parse_extra_vars(tuple(args.extra_vars))
    work = Path(tempfile.mkdtemp(prefix="pd-bench-"))
    lab = None
    try:
        if args.inventory:
            inventory = Path(args.inventory)
        else:
            lab, inventory = lab_inventory(work)
        report = measure(inventory, extra, not args.no_install, args.verbose)
        if not args.keep:
            run_playbook("pd-down.yml", inventory, extra, args.verbose)
    finally:
        if lab is not None and not args.keep:
            lab.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        if "install" in report:
            inst = report["install"]
            state = "present: nothing to do" if inst["present"] else "installed"
            print(f"install           {inst['seconds']:7.2f} s  ({state})")
        for name, seconds in report["phases"].items():
            print(f"{name:17} {seconds:7.2f} s")
        if "verify" in report:
            v = report["verify"]
            print(f"verify request    latency {v['latency']} s, TTFT {v['ttft']} s, {v['completion_tokens']} tokens")
        for name, seconds in report.get("overhead", {}).items():
            print(f"overhead {name:8} {seconds:7.3f} s beyond readiness (target < 1 s)")
    return 0 if report["rc"] == 0 else 2


if __name__ == "__main__":
    sys.exit(main())
