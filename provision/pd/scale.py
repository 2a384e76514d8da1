"""``provision pd scale``: servers added to or removed from a SERVING deployment, the routers never restarted.

The inventory says what is there: a host to add is already in it (group ``prefill`` or ``decode``), a host to
remove is still in it (take it out once the command has ended). Per call:

* **add**: each new server is prepared and started as ``pd up`` starts one (the injected ``start(hosts)``:
  ``pd-up.yml`` limited to those hosts, which skips the router and its verification), verified with one real
  generation pinned to it and a serving server of the other role (from the router's host), then registered
  with every router through the worker API (``POST /workers``) and waited for until listed healthy.
* **remove**: each server is taken out of every router (``DELETE /workers/{id}``), drained (no request
  running or waiting, bounded by ``drain_timeout``, as in ``pd rollout``) and stopped.
* **a multi-host server** (``pd_instance``) is one unit: any of its hosts names it; every rank is started (or
  stopped), only its leader is verified, registered, deregistered and drained (it alone serves HTTP).
* **the routers**: their launch scripts are rendered again for the deployment as it now is (without the
  removed hosts) and written, and the running router adopts the new script (its record's digest: the worker
  set it serves is already that script's), so neither now nor at the next ``pd up`` does it restart for this;
  it reads the new script at its next restart (a crash, a change of its own flags).

Like :mod:`.rollout`, remote work goes through injected runners and this module prints nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from .flags import PlanError
from .rollout import (
    INTERRUPTS,
    BatchFailed,
    BatchReport,
    Outcome,
    Rollout,
    RolloutOptions,
    RunTasks,
    _step,
    interruption,
    members,
)
from .spec import Deployment, Proc, build, router_worker
from .validate import validate_pd

EXCLUDED_VAR = "pd_scale_removed"  # hosts the plan leaves out (the routers' scripts after a removal)
StartServers = Callable[[list[str]], tuple[bool, str]]  # pd-up.yml on those hosts: (ok, why not)


@dataclass
class ScaleResult(Outcome):
    ok: bool
    added: list[dict[str, Any]] = field(default_factory=list)  # host, name, start/verify/register seconds, peer
    removed: list[dict[str, Any]] = field(default_factory=list)  # host, name, deregister/drain/stop seconds
    routers: list[str] = field(default_factory=list)  # the routers whose script now lists the new set
    failed_host: str | None = None
    reason: str | None = None
    seconds: float = 0.0
    interrupted: str | None = None  # Ctrl-C or SIGTERM stopped it (a server being removed is put back first)


def without(hosts: Mapping[str, Mapping[str, Any]], gone: list[str]) -> dict[str, Mapping[str, Any]]:
    return {h: v for h, v in hosts.items() if h not in gone}


def plan(hosts: Mapping[str, Mapping[str, Any]], add: list[str], remove: list[str]) -> tuple[Deployment, list[Proc],
                                                                                             list[Proc]]:  # fmt: skip
    """(the deployment as it is before, the servers to add, those to remove); InputError (exit 5) before any
    host is touched when a name is not a server of the inventory, or what is left could not serve."""
    if not add and not remove:
        raise InputError("pd scale: give --add HOST... or --remove HOST...")
    both = sorted(set(add) & set(remove))
    if both:
        raise InputError(f"pd scale: {both[0]} is given to both --add and --remove")
    try:
        d = build(hosts)
    except PlanError as exc:
        raise InputError(str(exc)) from None
    adding, removing = servers_of(d, add), servers_of(d, remove)
    problems = validate_pd(without(hosts, member_hosts(d, removing)))
    if problems:
        raise InputError("pd scale: the deployment after it would not be valid:\n  - " + "\n  - ".join(problems))
    if not d.routers:
        raise InputError("pd scale: no router in the inventory to register the servers with")
    return d, adding, removing


def servers_of(d: Deployment, names: list[str]) -> list[Proc]:
    """The servers the host names stand for, in order, once each: a host of a multi-host server (pd_instance),
    its leader or another rank, stands for the whole instance."""
    servers = {p.host: p for p in d.servers}
    out: list[Proc] = []
    for host in names:
        rank = next((r for r in d.ranks if r.host == host), None)
        proc = servers.get(host) or (rank.leader if rank is not None else None)
        if proc is None:
            raise InputError(f"pd scale: {host} is not a prefill or decode host of the inventory (add it to the "
                             "inventory first)")  # fmt: skip
        if proc not in out:
            out.append(proc)
    return out


def member_hosts(d: Deployment, procs: list[Proc]) -> list[str]:
    """Every host of those servers: a multi-host server's leader and its other ranks."""
    return [m.host for p in procs for m in members(d, p)]


def removed_hosts(hosts: Mapping[str, Mapping[str, Any]], remove: list[str]) -> list[str]:
    """``--remove``'s hosts with every rank of the multi-host servers among them (``pd_scale_removed``: the plan
    without them); the names as given when the plan cannot be built (``plan`` says why)."""
    try:
        d = build(hosts)
        return member_hosts(d, servers_of(d, remove))
    except (PlanError, InputError):
        return list(remove)


def scale(hosts: Mapping[str, Mapping[str, Any]], run: RunTasks, run_after: RunTasks, start: StartServers,
          add: list[str], remove: list[str], options: RolloutOptions | None = None) -> ScaleResult:  # fmt: skip
    """Add, then remove (the new ones serve before the old ones leave). ``run`` sees the whole inventory,
    ``run_after`` the deployment without the removed hosts (``pd_scale_removed``): the routers' scripts."""
    options = options or RolloutOptions(all_pairs=False)
    options.all_pairs = False  # one pinned pair per new server: the others serve meanwhile, untouched
    started = time.monotonic()
    d, adding, removing = plan(hosts, add, remove)
    result = ScaleResult(True)
    engine = Rollout(d, run, options)
    try:
        if adding:
            _add(engine, start, adding, result)
        if removing:
            _remove(engine, removing, result)
        routers = [r.host for r in d.routers]
        script = {"name": "script", "template": {"src": "router.sh.j2", "dest": "{{ pd.router.script }}",
                                                 "mode": "0700"}}  # fmt: skip
        adopt = _step("adopt", {"pidfile": "{{ pd.pid_dir }}/{{ pd.router.name }}.json",
                                "script": "{{ pd.router.script }}"}, 30)  # fmt: skip
        Rollout(build(without(hosts, remove)), run_after, options)._ok(
            routers, [{"name": "pd", "pd_config": None, "register": "pd"}, script, adopt]
        )
        result.routers = routers
    except BatchFailed as exc:
        result.ok, result.failed_host, result.reason = False, exc.host, exc.reason
    except INTERRUPTS as exc:  # e.g. a server added and started, not yet registered: the same command finishes it
        result.ok, result.interrupted = False, interruption(exc)
        result.reason = result.reason or "before the routers' scripts were rewritten"
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _add(engine: Rollout, start: StartServers, procs: list[Proc], result: ScaleResult) -> None:
    t = time.monotonic()
    ok, why = start(member_hosts(engine.d, procs))  # every rank of a multi-host server, started as pd up does
    if not ok:
        raise BatchFailed(procs[0].host, f"did not start: {why}")
    began = round(time.monotonic() - t, 3)
    report = BatchReport(0, False, [p.host for p in procs])
    engine.verify(procs, report)  # pinned to it and a serving server of the other role, from the router's host
    t = time.monotonic()
    engine.routers("router_add", {"workers": [router_worker(p) for p in procs]})
    registered = round(time.monotonic() - t, 3)
    for p in procs:
        result.added.append({"host": p.host, "name": p.name, "ranks": [m.host for m in members(engine.d, p)[1:]],
                             "start_seconds": began, "registered_seconds": registered,
                             **{f"verify_{k}": v for k, v in report.verify.get(p.host, {}).items()}})  # fmt: skip


def _remove(engine: Rollout, procs: list[Proc], result: ScaleResult) -> None:
    report = BatchReport(0, False, [p.host for p in procs])
    try:
        t = time.monotonic()
        engine.routers("router_remove", {"urls": [p.url for p in procs]})
        deregistered = round(time.monotonic() - t, 3)
        engine.drain(procs, report)
    except INTERRUPTS:  # not stopped yet: back into the routers, the removal not done
        engine.put_back(procs, report)
        back = f"put back into the routers: {', '.join(report.put_back) or 'none'}"
        result.reason = report.reason or back + (f"; left out: {', '.join(report.left_out)}" if report.left_out else "")
        raise
    t = time.monotonic()
    process = {"name": "{{ pd.server.name }}", "state": "stopped", "pidfile_dir": "{{ pd.pid_dir }}",
               "stop_timeout": "{{ pd.restart.stop_timeout }}"}  # fmt: skip
    stop = {"name": "stop", "process": process, "become": "{{ pd.become }}"}
    engine._ok(member_hosts(engine.d, procs), [{"name": "pd", "pd_config": None, "register": "pd"}, stop])
    stopped = round(time.monotonic() - t, 3)
    for p in procs:
        result.removed.append(
            {
                "host": p.host,
                "name": p.name,
                "ranks": [m.host for m in members(engine.d, p)[1:]],
                "deregistered_seconds": deregistered,
                "stop_seconds": stopped,
                **{f"drain_{k}": v for k, v in report.drain[p.host].items()},
            }
        )


def render(result: ScaleResult) -> str:
    lines = []
    for a in result.added:
        whole = f" (with its ranks on {', '.join(a['ranks'])})" if a.get("ranks") else ""
        lines.append(f"added {a['name']} on {a['host']}{whole}: started {a['start_seconds']:.1f}s, verified "
                     f"{a.get('verify_latency') or 0:.1f}s with {a.get('verify_peer')}, registered "
                     f"{a['registered_seconds']:.1f}s")  # fmt: skip
    for r in result.removed:
        whole = f" (with its ranks on {', '.join(r['ranks'])})" if r.get("ranks") else ""
        lines.append(f"removed {r['name']} on {r['host']}{whole}: out of the routers {r['deregistered_seconds']:.1f}s, "
                     f"drained {r.get('drain_seconds') or 0:.1f}s, stopped {r['stop_seconds']:.1f}s")  # fmt: skip
    if result.routers:
        lines.append(f"router scripts updated, not restarted: {', '.join(result.routers)}")
    if result.interrupted:
        lines.append(f"pd scale {result.interrupted}: {result.reason}; the same pd scale again finishes it")
    else:
        lines.append(f"pd scale ok in {result.seconds:.1f}s" if result.ok else
                     f"pd scale FAILED on {result.failed_host}: {result.reason}")  # fmt: skip
    return "\n".join(lines)
