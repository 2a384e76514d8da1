"""PD deployments in tests: a PD layout of hosts that must never be contacted (``inventory``), the rollout's host
helper (provision/remote/pd_rollout.py) run here as on a host (``helper``), and the rollout's hosts as a plan
sees them (``hosts``) with a scripted runner that records every call (``Hosts``), and a killed process's status
row once its supervisor has it serving again (``serving_again``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from provision import remote, templating
from provision.data import templates_dir
from provision.pd import build
from provision.pd.rollout import Step
from provision.pd.rollout_modules import ACTIONS

UNREACHABLE = "ansible_host: 127.0.0.1, ansible_port: 1, ansible_user: nobody"


def inventory(tmp_path: Path, router_port: int = 8000) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(
        "all:\n  children:\n"
        f"    prefill:\n      hosts:\n        p1: {{{UNREACHABLE}, sglang_device: cpu}}\n"
        f"    decode:\n      hosts:\n        d1: {{{UNREACHABLE}, sglang_device: cpu, server_port: 30010}}\n"
        f"    router:\n      hosts:\n        p1: {{router_port: {router_port}}}\n"
    )
    return path


def serving_again(row: Mapping[str, Any], old_pid: object) -> bool:
    """A ``pd status --json`` row of a process killed with pid ``old_pid``: running again, under another pid
    (restarted by its supervisor), and answering ``/health`` with 200."""
    return bool(row.get("running") and row.get("pid") != old_pid and row.get("health") == 200)


def helper(action: str, request: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(remote.path("pd_rollout.py")), action], input=json.dumps(request),
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout.splitlines()[-1]))


def hosts(prefill: int = 2, decode: int = 2) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i in range(prefill):
        groups = ["prefill", "router"] if i == 0 else ["prefill"]
        out[f"p{i}"] = {"group_names": groups, "ansible_host": f"10.0.0.{i + 1}", "sglang_device": "cpu"}
    for i in range(decode):
        out[f"d{i}"] = {"group_names": ["decode"], "ansible_host": f"10.0.1.{i + 1}", "sglang_device": "cpu"}
    return out


# the server URLs of :func:`hosts`' layouts (up to 4 of a role) → their host names
URL_HOSTS = {f"http://10.0.{r}.{i + 1}:30000": f"{'pd'[r]}{i}" for r in (0, 1) for i in range(4)}


class Hosts:
    """A scripted runner: every task succeeds unless ``fail`` names (host, task, attempt); records the calls.
    ``pairs``: every pair answers the same tokens, but those through a server of ``odd`` (after its restart, i.e.
    its ``process`` task) and those through a decode of ``down`` fail. ``interrupt``: (host, task) → the
    exception raised there, as a Ctrl-C or SIGTERM reaches the run; a ``router_add`` with ``healthy_only`` skips
    the servers on the hosts of ``unhealthy``."""

    def __init__(self, changed: set[str], fail: dict[tuple[str, str], str] | None = None,
                 stacked: frozenset[str] = frozenset(), odd: frozenset[str] = frozenset(),
                 down: frozenset[str] = frozenset(), interrupt: dict[tuple[str, str], BaseException] | None = None,
                 unhealthy: frozenset[str] = frozenset()) -> None:  # fmt: skip
        self.changed, self.fail, self.stacked, self.odd, self.down = changed, fail or {}, stacked, odd, down
        self.interrupt, self.unhealthy = interrupt or {}, unhealthy
        self.calls: list[tuple[str, str, str]] = []  # (host, task name, action or module)
        self.tasks: list[dict[str, Any]] = []  # the task dicts, as run
        self.plays: list[tuple[list[str], list[str]]] = []  # each call's hosts and task names

    def __call__(self, names: list[str], tasks: list[dict[str, Any]]) -> dict[str, list[Step]]:
        out: dict[str, list[Step]] = {}
        self.plays.append((list(names), [t["name"] for t in tasks]))
        for host in names:
            steps = out.setdefault(host, [])
            for task in tasks:
                module = next(k for k in task if k not in ("name", "register", "check_mode", "when"))
                action = (task[module] or {}).get("action", module) if module == "pd_rollout_step" else module
                assert module != "pd_rollout_step" or action in ACTIONS, action  # the module would refuse it
                self.calls.append((host, task["name"], action))
                self.tasks.append(task)
                if (host, task["name"]) in self.interrupt:
                    raise self.interrupt.pop((host, task["name"]))
                msg = self.fail.pop((host, task["name"]), None)
                steps.append(self.result(host, task["name"], action, msg))
                if action == "pairs" and msg is None:
                    steps[-1].data = self.pairs(task["pd_rollout_step"]["request"])
                if action == "router_add" and msg is None:
                    steps[-1].data = self.router_add(task["pd_rollout_step"]["request"])
                if msg is not None:
                    break
        return out

    def result(self, host: str, task: str, action: str, msg: str | None) -> Step:
        if msg is not None:
            return Step(host, task, False, msg=msg)
        data: dict[str, Any] = {}
        if task in ("env", "script") and action == "template":
            return Step(host, task, True, changed=host in self.changed)
        if task == "router script":
            return Step(host, task, True, changed="router" in self.changed)
        if task == "status":
            roles = ("prefill", "decode", "router")
            data = {"procs": [{"role": r, "running": True, "script_changed": False} for r in roles]}
        elif action == "stack":
            data = {"changed": host in self.stacked}
        elif action == "drain":
            data = {"seconds": 0.5, "drained": True, "max_seen": 1, "last": 0}
        elif action == "pinned":
            data = {"latency": 0.2, "text": "x", "completion_tokens": 8}
        elif action == "router_metrics":
            data = {"requests": 10 * len(self.calls)}
        return Step(host, task, True, data=data, seconds=1.0)

    def router_add(self, request: dict[str, Any]) -> dict[str, Any]:
        urls = [w["url"] for w in request["workers"]]
        skipped = [u for u in urls if request.get("healthy_only") and URL_HOSTS.get(u) in self.unhealthy]
        return {"added": [u for u in urls if u not in skipped], "skipped": skipped}

    def pairs(self, request: dict[str, Any]) -> dict[str, Any]:
        restarted = {h for h, _, a in self.calls if a == "process"}
        out = []
        for pair in request["pairs"]:
            names = {URL_HOSTS[pair["prefill"]], URL_HOSTS[pair["decode"]]}
            if names & self.down:
                out.append({"ok": False, "msg": f"decode {pair['decode']}: HTTP 500 boom"})
                continue
            ids = [9, 9] if names & self.odd & restarted else [1, 2]
            out.append({"ok": True, "output_ids": ids, "completion_tokens": 2, "latency": 0.3, "ttft": 0.1,
                        "text": "x"})  # fmt: skip
        return {"ok": True, "pairs": out, "seconds": 0.4, "parallel": min(8, len(out))}

    def actions(self, host: str | None = None) -> list[str]:
        return [a for h, _, a in self.calls if host is None or h == host]


def render_launch_template(name: str, host: str, hosts: dict[str, dict[str, Any]], home: str) -> str:
    """A shipped PD template (``provision/data/templates/NAME``) for ``host``, as the ``template`` module renders
    it (its includes found beside it)."""
    plan = build(hosts, {h: home for h in hosts}).hosts[host]
    path = templates_dir() / name
    variables = {"pd": plan.fact(), "inventory_hostname": host, "template_path": str(path)}
    return templating.render_file(path.read_text(), variables)
