"""``provision pd scale``: servers added to or removed from a SERVING deployment, the routers never restarted.

The inventory says what is there: a host to add is already in it (group ``prefill`` or ``decode``), a host to
remove is still in it (take it out once the command has ended). Per call:

* **add**: each new server is prepared and started as ``pd up`` starts one (the injected ``start(hosts)``:
  ``pd-up.yml`` limited to those hosts, which skips the router and its verification), verified with one real
  generation pinned to it and a serving server of the other role (from the router's host), then registered
  with every router through the worker API (``POST /workers``) and waited for until listed healthy.
* **remove**: each server is taken out of every router (``DELETE /workers/{id}``), drained (no request
  running or waiting, bounded by ``drain_timeout``, as in ``pd rollout``) and stopped.
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
from .rollout import BatchFailed, BatchReport, Outcome, Rollout, RolloutOptions, RunTasks, _step, _worker
from .spec import Deployment, Proc, build
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
    servers = {p.host: p for p in d.servers}
    for host in [*add, *remove]:
        if host not in servers:
            rank = next((r for r in d.ranks if r.host == host), None)
            why = (f"a non-leader rank of pd_instance {rank.instance} (scale the instance's leader)" if rank else
                   "not a prefill or decode host of the inventory (add it to the inventory first)")  # fmt: skip
            raise InputError(f"pd scale: {host} is {why}")
        if servers[host].instance is not None:
            raise InputError(f"pd scale: {host} leads a multi-host server (pd_instance {servers[host].instance}): "
                             "scaling whole instances is not supported; use pd up / pd down")  # fmt: skip
    problems = validate_pd(without(hosts, remove))
    if problems:
        raise InputError("pd scale: the deployment after it would not be valid:\n  - " + "\n  - ".join(problems))
    if not d.routers:
        raise InputError("pd scale: no router in the inventory to register the servers with")
    return d, [servers[h] for h in add], [servers[h] for h in remove]


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
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _add(engine: Rollout, start: StartServers, procs: list[Proc], result: ScaleResult) -> None:
    t = time.monotonic()
    ok, why = start([p.host for p in procs])
    if not ok:
        raise BatchFailed(procs[0].host, f"did not start: {why}")
    began = round(time.monotonic() - t, 3)
    report = BatchReport(0, False, [p.host for p in procs])
    engine.verify(procs, report)  # pinned to it and a serving server of the other role, from the router's host
    t = time.monotonic()
    engine.routers("router_add", {"workers": [_worker(p) for p in procs]})
    registered = round(time.monotonic() - t, 3)
    for p in procs:
        result.added.append({"host": p.host, "name": p.name, "start_seconds": began, "registered_seconds": registered,
                             **{f"verify_{k}": v for k, v in report.verify.get(p.host, {}).items()}})  # fmt: skip


def _remove(engine: Rollout, procs: list[Proc], result: ScaleResult) -> None:
    t = time.monotonic()
    engine.routers("router_remove", {"urls": [p.url for p in procs]})
    deregistered = round(time.monotonic() - t, 3)
    report = BatchReport(0, False, [p.host for p in procs])
    engine.drain(procs, report)
    t = time.monotonic()
    process = {"name": "{{ pd.server.name }}", "state": "stopped", "pidfile_dir": "{{ pd.pid_dir }}",
               "stop_timeout": "{{ pd.restart.stop_timeout }}"}  # fmt: skip
    stop = {"name": "stop", "process": process, "become": "{{ pd.become }}"}
    engine._ok([p.host for p in procs], [{"name": "pd", "pd_config": None, "register": "pd"}, stop])
    stopped = round(time.monotonic() - t, 3)
    for p in procs:
        result.removed.append(
            {
                "host": p.host,
                "name": p.name,
                "deregistered_seconds": deregistered,
                "stop_seconds": stopped,
                **{f"drain_{k}": v for k, v in report.drain[p.host].items()},
            }
        )


def render(result: ScaleResult) -> str:
    lines = []
    for a in result.added:
        lines.append(f"added {a['name']} on {a['host']}: started {a['start_seconds']:.1f}s, verified "
                     f"{a.get('verify_latency') or 0:.1f}s with {a.get('verify_peer')}, registered "
                     f"{a['registered_seconds']:.1f}s")  # fmt: skip
    for r in result.removed:
        lines.append(f"removed {r['name']} on {r['host']}: out of the routers {r['deregistered_seconds']:.1f}s, "
                     f"drained {r.get('drain_seconds') or 0:.1f}s, stopped {r['stop_seconds']:.1f}s")  # fmt: skip
    if result.routers:
        lines.append(f"router scripts updated, not restarted: {', '.join(result.routers)}")
    lines.append(f"pd scale ok in {result.seconds:.1f}s" if result.ok else
                 f"pd scale FAILED on {result.failed_host}: {result.reason}")  # fmt: skip
    return "\n".join(lines)
