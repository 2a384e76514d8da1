"""The port plan: every port each process of the deployment binds, derived per process, unique per machine.

A server binds its HTTP port (``server_port``, ``--port``), the prefill its bootstrap port, every server the
torch.distributed port of its TP group (``--nccl-port``: ``nccl_port``, default ``server_port + 100``; left to
SGLang, a free-port probe, two servers starting together race for it), the leader of a multi-host instance its
``--dist-init-addr`` port, and with ``--enable-dp-attention`` SGLang derives a block of ZMQ ports (from the
dist-init port across hosts, else ``--port + 233``: SGLang's ``ZMQ_TCP_PORT_DELTA``). A router binds its port
and its Prometheus port. The plan is read from each process's final argv (an extra arg wins, as in argparse).

:func:`plan` lists them, :func:`check` refuses a derived port that another planned port of the machine takes
(the plain HTTP/bootstrap/router clashes are ``validate.check_ports``'s, with their hints), :func:`host_rows`
is what ``provision inventory --host`` shows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .flags import effective

if TYPE_CHECKING:
    from .spec import Deployment, Proc

NCCL_OFFSET = 100  # nccl_port default: server_port + this
DP_ATTENTION_DELTA = 233  # SGLang's ZMQ_TCP_PORT_DELTA (server_args.py) for single-node DP attention
DP_ATTENTION_PORTS = 7  # the dist-init port and the six SGLang derives after it (port base, detokenizer, ...)
DERIVED = ("nccl", "dist-init", "dp-attention")
WILD = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class PortUse:
    machine: str
    bind: str
    port: int
    what: str  # http, bootstrap, nccl, dist-init, dp-attention, router, router-metrics
    host: str
    name: str  # the process

    @property
    def derived(self) -> bool:
        return self.what in DERIVED


def _int(value: str | None, default: int | None) -> int | None:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def of(proc: Proc) -> list[PortUse]:
    """The ports ``proc`` binds, in the order it binds them."""
    uses: list[tuple[int | None, str]] = []
    if proc.role == "router":
        uses += [(proc.port, "router"), (proc.prometheus_port, "router-metrics")]
        bind = proc.bind
    else:
        args = proc.args
        bind = effective(args, "--host") or proc.bind
        port = _int(effective(args, "--port"), proc.port) or proc.port
        if proc.node_rank == 0:
            uses.append((port, "http"))
            if proc.role == "prefill":
                uses.append(
                    (_int(effective(args, "--disaggregation-bootstrap-port"), proc.bootstrap_port), "bootstrap")
                )
        uses.append((_int(effective(args, "--nccl-port"), proc.nccl_port), "nccl"))
        dist = _int((effective(args, "--dist-init-addr") or "").rpartition(":")[2] or None, None)
        if proc.node_rank == 0 and proc.nnodes > 1:
            uses.append((dist, "dist-init"))
        if "--enable-dp-attention" in args and proc.node_rank == 0:
            base = dist if proc.nnodes > 1 and dist else port + DP_ATTENTION_DELTA
            start = 1 if proc.nnodes > 1 else 0  # the dist-init port itself is listed above
            uses += [(base + i, "dp-attention") for i in range(start, DP_ATTENTION_PORTS)]
    wild = {"nccl", "dist-init"}  # torch.distributed's TCPStore listens on every address
    return [PortUse(proc.machine, "0.0.0.0" if what in wild else bind, p, what, proc.host, proc.name)
            for p, what in uses if p is not None]  # fmt: skip


def assign(servers: list[Proc]) -> None:
    """Give every server its ``--nccl-port``: ``nccl_port`` when set (or an extra ``--nccl-port``), else the
    first port from ``server_port + 100`` up that no planned port of its machine takes (inventory order: the
    same inventory, the same ports). torch.distributed's store listens on every address, so two inventory
    names of one machine never share it, whatever addresses they serve on."""
    taken: dict[str, set[int]] = {}
    for proc in servers:
        taken.setdefault(proc.machine, set()).update(u.port for u in of(proc) if u.what != "nccl")
    for proc in servers:
        given = _int(effective(proc.args, "--nccl-port"), proc.nccl_port)
        if given is None:
            given = proc.port + NCCL_OFFSET
            while given in taken[proc.machine] and given < 65535:
                given += 1
        if effective(proc.args, "--nccl-port") is None:  # after --tp-size: before the extra args
            at = next((i + 1 for i, line in enumerate(proc.flags) if line[0] == "--tp-size"), len(proc.flags))
            proc.flags.insert(at, ["--nccl-port", str(given)])
        proc.nccl_port = given
        taken[proc.machine].add(given)


def plan(d: Deployment) -> list[PortUse]:
    return [use for proc in [*d.procs, *d.ranks] for use in of(proc)]


def _clash(a: PortUse, b: PortUse) -> bool:
    return a.machine == b.machine and a.port == b.port and (a.bind == b.bind or a.bind in WILD or b.bind in WILD)


def check(d: Deployment) -> list[str]:
    """A derived port (nccl, dist-init, DP attention) that another planned port of its machine also takes."""
    problems: list[str] = []
    uses = plan(d)
    for i, a in enumerate(uses):
        for b in uses[:i]:
            if (a.derived or b.derived) and _clash(a, b):
                fix = {"nccl": "nccl_port", "dist-init": "dist_init_port"}.get(a.what if a.derived else b.what,
                                                                                 "server_port")  # fmt: skip
                problems.append(f"port {a.port} on {a.machine} is planned twice: {b.what} of {b.name} and {a.what} "
                                f"of {a.name} (set {fix} on one of them)")  # fmt: skip
    return problems


def host_rows(d: Deployment, host: str) -> list[dict[str, Any]]:
    """The ports of ``host``'s processes, and which other processes share its machine (``inventory --host``)."""
    return [asdict(u) for u in plan(d) if u.host == host]
