"""Checks of a PD deployment before any process starts. Each problem is one precise sentence.

:func:`validate_pd` is used twice: by ``provision pd up`` on the inventory alone, BEFORE anything runs
(problems → exit 5), and by the ``pd_validate`` module inside ``playbooks/pd-up.yml``, where the hosts' GPU
counts add the GPU check (problems → the task fails, exit 2). The rules:

* the groups: at least one prefill, one decode and one router; a host in only one server group;
* ports unique per listening address on a machine (server, bootstrap, router, router metrics), and the
  router's port not equal to a server's on the same machine (both default to 30000 upstream);
* the prefill's address reachable from its decode hosts and the workers' from the router (no loopback
  address or bind across machines: the decode dials the prefill's bootstrap server at the host of its URL);
* the bootstrap port the router passes for each prefill equal to the one that prefill listens on;
* the transfer backend ``nixl`` on every server (an extra arg must not switch it), the same page size and KV
  cache dtype on every prefill and decode (decode rejects a mismatched prefill);
* one device for all (``cpu`` and ``cuda`` servers cannot exchange KV);
* when the GPU count is known (``pd_config`` asks ``nvidia-smi``; or gathered facts): tp x dp GPUs from
  ``base_gpu_id`` on, within the GPUs the machine reports, and not shared by two servers of one machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import guards, instances, ports
from .addr import is_loopback
from .flags import PlanError, effective
from .spec import Deployment, Proc, build

TP_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size")
DP_FLAGS = ("--dp-size", "--dp", "--data-parallel-size")


def validate_pd(hosts: Mapping[str, Mapping[str, Any]], gpus: Mapping[str, int] | None = None) -> list[str]:
    """Problems of the deployment described by every host's vars (``group_names`` gives the roles).

    ``gpus`` maps a host to the number of GPUs its facts report; hosts whose vars hold ``ansible_facts``
    with a ``gpus`` list are counted too. Returns ``[]`` when the deployment can start."""
    try:
        deployment = build(hosts)
    except PlanError as exc:
        return [str(exc)]
    problems = check_groups(deployment)
    if problems:
        return problems
    problems += check_ports(deployment)
    problems += check_reachable(deployment)
    problems += check_flags(deployment)
    problems += check_gpus(deployment, {**_facts_gpus(hosts), **(gpus or {})})
    problems += instances.check(deployment) + ports.check(deployment) + guards.check(deployment, hosts)
    return problems


def check_groups(d: Deployment) -> list[str]:
    if d.serve:  # a colocated deployment (the baseline): plain servers, no disaggregation, no PD router
        if d.prefill or d.decode:
            return ["hosts in group 'serve' and in 'prefill'/'decode': an inventory is either a PD deployment or "
                    "a colocated one (group serve); put the baseline in its own inventory"]  # fmt: skip
        return []
    missing = [g for g, procs in (("prefill", d.prefill), ("decode", d.decode), ("router", d.routers)) if not procs]
    if missing:
        return [f"no host in group {', '.join(repr(m) for m in missing)}: a PD deployment needs at least one "
                "prefill, one decode and one router host"]  # fmt: skip
    return []


def _listeners(p: Proc) -> list[tuple[int, str]]:
    out = [(_int(effective(p.args, "--port"), p.port), f"{p.role} server port")]
    if p.role == "router":
        out = [(p.port, "router port")]
        if p.prometheus_port:
            out.append((p.prometheus_port, "router metrics port (--prometheus-port)"))
    elif p.role == "prefill":
        out.append((_int(effective(p.args, "--disaggregation-bootstrap-port"), p.bootstrap_port or 8998),
                    "prefill bootstrap port"))  # fmt: skip
    return out


def _bind(p: Proc) -> str:
    return p.bind if p.role == "router" else effective(p.args, "--host") or p.bind


def _clash(a: str, b: str) -> bool:
    wild = ("0.0.0.0", "::", "")
    return a == b or a in wild or b in wild


def check_ports(d: Deployment) -> list[str]:
    problems: list[str] = []
    seen: list[tuple[str, str, int, str, Proc]] = []
    for p in d.procs:
        for port, what in _listeners(p):
            for machine, bind, other_port, other_what, other in seen:
                if machine != p.machine or port != other_port or not _clash(bind, _bind(p)):
                    continue
                hint = ""
                if {p.role, other.role} & {"router"} and "server port" in what + other_what:
                    hint = " (router and server both default to 30000 upstream: set router_port)"
                elif "metrics" in what and "metrics" in other_what:
                    hint = (
                        " (a second router on one machine panics 'Address already in use': set router_prometheus_port)"
                    )
                problems.append(
                    f"port {port} on {p.machine} is used twice: {other_what} of {other.host} and {what} of "
                    f"{p.host}{hint}"
                )
            seen.append((p.machine, _bind(p), port, what, p))
    return problems


def check_reachable(d: Deployment) -> list[str]:
    problems: list[str] = []
    for pre in d.prefill:
        for dec in d.decode:
            if pre.machine == dec.machine:
                continue
            if is_loopback(pre.address):
                problems.append(
                    f"prefill {pre.host} is reached at {pre.address}, a loopback address, but decode {dec.host} is "
                    f"on another machine ({dec.machine}): the decode dials the prefill's bootstrap server at that "
                    "address; set ansible_host or pd_address to an address the decode can reach"
                )
            elif is_loopback(_bind(pre)):
                problems.append(
                    f"prefill {pre.host} listens on {_bind(pre)} (server_bind_host/--host), but decode {dec.host} "
                    f"is on another machine: its bootstrap server would not be reachable ('Could not fetch "
                    "prefill parallel info')"
                )
    for router in d.routers:
        for worker in d.servers:
            if worker.machine != router.machine and (is_loopback(worker.address) or is_loopback(_bind(worker))):
                problems.append(
                    f"{worker.role} {worker.host} is reached at {worker.address} (listening on {_bind(worker)}), "
                    f"which the router on {router.host} ({router.machine}) cannot reach"
                )
    return problems


def check_flags(d: Deployment) -> list[str]:
    problems: list[str] = []
    for p in d.servers:
        if p.role == "serve":  # a colocated server: no disaggregation (a flag that asks for it is refused)
            if effective(p.args, "--disaggregation-mode") not in (None, "null"):
                problems.append(f"{p.host} is in group serve (colocated) but its flags set --disaggregation-mode")
            continue
        backend = effective(p.args, "--disaggregation-transfer-backend")
        if backend != "nixl":
            problems.append(f"{p.role} {p.host}: transfer backend is {backend!r}, provision deploys nixl only")
        mode = effective(p.args, "--disaggregation-mode")
        if mode != p.role:
            problems.append(f"{p.host} is in group {p.role} but its flags say --disaggregation-mode {mode}")
    for what, names, default in (("page size", ("--page-size",), "SGLang's default"),
                                 ("KV cache dtype", ("--kv-cache-dtype",), "auto")):  # fmt: skip
        values = {p.host: effective(p.args, *names) or default for p in d.servers}
        if len(set(values.values())) > 1:
            shown = ", ".join(f"{h}={v}" for h, v in values.items())
            problems.append(f"the {what} differs between the servers ({shown}): prefill and decode must agree")
    for router in d.routers:
        given = _router_bootstraps(router)
        for pre in d.prefill:
            real = _int(effective(pre.args, "--disaggregation-bootstrap-port"), pre.bootstrap_port or 8998)
            passed = given.get(pre.url)
            if passed is not None and passed != real:
                problems.append(
                    f"router {router.host} passes bootstrap port {passed} for prefill {pre.host}, which listens "
                    f"on {real}: the decode would dial the wrong port"
                )
    for plan in d.hosts.values():
        if plan.server and not plan.model_path:
            problems.append(f"{plan.host}: model_path is not set (a model directory on the host, or a hub id)")
    devices = {plan.device for plan in d.hosts.values() if plan.server}
    if len(devices) > 1:
        problems.append("servers mix sglang_device cpu and cuda: a CPU server cannot exchange KV with a GPU server")
    return problems


def _router_bootstraps(router: Proc) -> dict[str, int]:
    out: dict[str, int] = {}
    args = router.args
    for i, word in enumerate(args):
        if word == "--prefill" and i + 2 < len(args) and not args[i + 2].startswith("--"):
            port = _int(args[i + 2], -1)
            if port >= 0:
                out[args[i + 1]] = port
    return out


def check_gpus(d: Deployment, gpus: Mapping[str, int]) -> list[str]:
    problems: list[str] = []
    used: dict[str, list[tuple[set[int], Proc]]] = {}
    for p in [*d.servers, *d.ranks]:
        if d.hosts[p.host].device != "cuda" or p.host not in gpus:
            continue
        count = gpus[p.host]
        tp = _int(effective(p.args, *TP_FLAGS), 1)
        dp = _int(effective(p.args, *DP_FLAGS), 1)
        base = _int(effective(p.args, "--base-gpu-id"), 0)
        step = _int(effective(p.args, "--gpu-id-step"), 1)
        ids = {base + i * step for i in range(max(1, tp * dp // p.nnodes))}  # a multi-host server: its share
        if count == 0:
            problems.append(f"{p.role} {p.host}: the host reports no GPU (to try without GPUs: sglang_device: cpu)")
            continue
        if max(ids) >= count:
            problems.append(
                f"{p.role} {p.host} needs GPUs {min(ids)}-{max(ids)} (tp {tp} x dp {dp}"
                + (f" over {p.nnodes} nodes" if p.nnodes > 1 else "")
                + f" from base_gpu_id {base}) "
                f"but the host reports {count} GPU{'s' if count != 1 else ''}"
            )
        for other_ids, other in used.get(p.machine, []):
            if ids & other_ids and not _memory_split(p, other):
                shared = ", ".join(map(str, sorted(ids & other_ids)))
                problems.append(
                    f"{p.role} {p.host} and {other.role} {other.host} share GPU {shared} on {p.machine}: "
                    "give them disjoint base_gpu_id ranges (e.g. 4+4: base_gpu_id 0 and 4), or split its memory "
                    "with --mem-fraction-static on both (summing to at most 0.9)"
                )
        used.setdefault(p.machine, []).append((ids, p))
    return problems


def _memory_split(a: Proc, b: Proc) -> bool:
    """Two servers may share a GPU when each says how much of its memory it takes and both fit."""
    try:
        fa, fb = (float(effective(p.args, "--mem-fraction-static") or "nan") for p in (a, b))
    except ValueError:
        return False
    return fa > 0 and fb > 0 and fa + fb <= 0.9


def _facts_gpus(hosts: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """GPU counts known from the hosts' vars: gathered facts, or ``pd_config``'s count (``pd.gpus``)."""
    out: dict[str, int] = {}
    for host, v in hosts.items():
        facts = v.get("ansible_facts") if "ansible_facts" in v else None
        if isinstance(facts, Mapping) and isinstance(facts.get("gpus"), list) and facts.get("gpus"):
            out[host] = len(facts["gpus"])
        registered = v.get("pd") if "pd" in v else None
        if isinstance(registered, Mapping) and isinstance(registered.get("gpus"), int):
            out[host] = registered["gpus"]
    return out


def _int(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default
