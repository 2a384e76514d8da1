"""Multi-host servers: one SGLang server spanning several inventory hosts (``pd_instance``).

Every member host of one server says the same ``pd_instance: NAME`` and sits in the same group (``prefill`` or
``decode``); the first member in inventory order is the leader (node rank 0), the others get ranks 1, 2, ... in that
order, on distinct machines (``pd_instance_one_machine: true`` on every member lets the ranks share one machine on
disjoint GPUs, as SGLang allows: to try a multi-node server on one multi-GPU host). Each member runs
``launch_server`` with ``--nnodes N --node-rank R --dist-init-addr LEADER:PORT`` (``dist_init_port``, default
``server_port + 200`` of the leader). Only the leader serves HTTP and the bootstrap server, so only the leader is
listed to the router (and is the instance in ``Deployment.prefill`` / ``decode``); the other ranks are
``Deployment.ranks``, waited for through the leader's ``/health`` (it answers once every rank has joined).

Pure functions over :class:`~provision.pd.spec.Proc`; :func:`join` is called by ``spec.build``, :func:`check`
by ``validate_pd``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .addr import is_loopback, url_host
from .flags import PlanError, effective
from .vartypes import says_yes

if TYPE_CHECKING:
    from .spec import Deployment, Proc

# flags that differ between the members of one instance by design (the rest must agree)
PER_RANK = ("--nnodes", "--node-rank", "--dist-init-addr", "--host", "--port", "--base-gpu-id", "--nccl-port",
            "--disaggregation-bootstrap-port")  # fmt: skip
DIST_INIT_OFFSET = 200  # dist_init_port default: the leader's server_port + this


def instance_of(variables: Mapping[str, Any]) -> str | None:
    value = variables.get("pd_instance") if "pd_instance" in variables else None
    return None if value in (None, "") else str(value)


def one_machine_allowed(variables: Mapping[str, Any]) -> bool:
    """``pd_instance_one_machine``: the ranks of this host's instance may share a machine (on disjoint GPUs)."""
    return says_yes(variables.get("pd_instance_one_machine"))


def one_role(servers: list[Proc], hosts: Mapping[str, Mapping[str, Any]]) -> None:
    """PlanError when one ``pd_instance`` name has members in two groups."""
    roles: dict[str, str] = {}
    for proc in servers:
        name = instance_of(hosts[proc.host])
        if name is not None and roles.setdefault(name, proc.role) != proc.role:
            raise PlanError(f"pd_instance {name!r} has members in groups {roles[name]} and {proc.role}: the hosts of "
                            "one server are in one group")  # fmt: skip


def join(servers: list[Proc], hosts: Mapping[str, Mapping[str, Any]]) -> tuple[list[Proc], list[Proc]]:
    """(the servers the router lists: single-host ones and the leaders, the non-leader ranks). The members of
    each instance get their ``--nnodes``/``--node-rank``/``--dist-init-addr`` lines here."""
    members: dict[tuple[str, str], list[Proc]] = {}
    for proc in servers:
        name = instance_of(hosts[proc.host])
        if name is not None:
            members.setdefault((proc.role, name), []).append(proc)
    ranks: list[Proc] = []
    for (_, name), procs in members.items():
        leader = procs[0]
        port = _dist_port(leader, hosts[leader.host])
        for rank, proc in enumerate(procs):
            proc.instance, proc.node_rank, proc.nnodes, proc.leader = name, rank, len(procs), leader
            proc.instance_one_machine = one_machine_allowed(hosts[proc.host])
            proc.dist_init_port = port if rank == 0 else None
            proc.flags += [["--nnodes", str(len(procs)), "--node-rank", str(rank)],
                           ["--dist-init-addr", f"{url_host(leader.address)}:{port}"]]  # fmt: skip
            if rank:
                ranks.append(proc)
    return [p for p in servers if p not in ranks], ranks


def _dist_port(leader: Proc, variables: Mapping[str, Any]) -> int:
    value = variables.get("dist_init_port") if "dist_init_port" in variables else None
    port = leader.port + DIST_INIT_OFFSET if value is None else int(value)
    if not 1 <= port <= 65535:
        raise PlanError(f"{leader.host}: dist_init_port={port} is out of range 1..65535")
    return port


def shared_args(proc: Proc) -> list[str]:
    """The server's arguments without the per-rank ones: what every member of an instance must agree on."""
    out: list[str] = []
    for line in proc.flags:
        if line[0].split("=", 1)[0] not in PER_RANK:
            out += line
    return out


def check(d: Deployment) -> list[str]:
    """Problems of the multi-host instances: members that disagree, tp not divisible by the nodes, a leader
    the other ranks cannot reach."""
    problems: list[str] = []
    for leader in [p for p in d.servers if p.instance is not None]:
        members = [leader, *(r for r in d.ranks if r.leader is leader)]
        lead_model = d.hosts[leader.host].model_path
        for proc in members[1:]:
            model = d.hosts[proc.host].model_path
            if model != lead_model:
                problems.append(f"{proc.host}: pd_instance {leader.instance}: model_path {model!r} differs from the "
                                f"leader {leader.host}'s {lead_model!r}")  # fmt: skip
            elif shared_args(proc) != shared_args(leader):
                diff = _first_difference(shared_args(leader), shared_args(proc))
                problems.append(f"{proc.host}: pd_instance {leader.instance}: its server flags differ from the leader "
                                f"{leader.host}'s ({diff}): every rank of one server runs the same flags")  # fmt: skip
        tp = _int(effective(leader.args, "--tp-size", "--tp", "--tensor-parallel-size"), 1)
        if tp % leader.nnodes:
            problems.append(f"{leader.host}: pd_instance {leader.instance}: tp {tp} is not divisible by its "
                            f"{leader.nnodes} nodes (SGLang: tp_size must be divisible by number of "
                            "nodes)")  # fmt: skip
        dp = _int(effective(leader.args, "--dp-size", "--dp", "--data-parallel-size"), 1)
        if dp > 1 and "--enable-dp-attention" not in leader.args:
            problems.append(f"{leader.host}: pd_instance {leader.instance}: dp {dp} across {leader.nnodes} nodes needs "
                            "--enable-dp-attention (SGLang: multi-node data parallel is not supported unless dp "
                            "attention)")  # fmt: skip
        machines = {p.machine for p in members}
        if len(machines) < len(members) and not all(p.instance_one_machine for p in members):
            problems.append(f"{leader.host}: pd_instance {leader.instance}: two of its ranks are on one machine "
                            "(one rank per machine; several servers on a machine are several instances; "
                            "pd_instance_one_machine: true on every member: on disjoint GPUs)")  # fmt: skip
        if len(machines) > 1 and (is_loopback(leader.address) or is_loopback(leader.bind)):
            problems.append(f"{leader.host}: pd_instance {leader.instance} spans machines but its leader is reached "
                            f"at {leader.address} (listening on {leader.bind}), a loopback address: the other ranks "
                            "dial --dist-init-addr there; set ansible_host or pd_address")  # fmt: skip
    return problems


def _first_difference(a: list[str], b: list[str]) -> str:
    for x, y in zip(a, b, strict=False):
        if x != y:
            return f"{x} vs {y}"
    return f"{' '.join(a[len(b) :]) or '-'} vs {' '.join(b[len(a) :]) or '-'}"


def _int(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default
