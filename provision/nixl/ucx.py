"""UCX environment: build it from inventory vars, check it before a transfer runs, read what UCX picked.

NIXL's UCX backend reads ``UCX_TLS`` and ``UCX_NET_DEVICES`` itself (SGLang's ``--disaggregation-ib-device``
is ignored by NIXL). Settings that look reasonable break or cripple the KV path; measured with nixl-cu13 1.5.1
(``/work/shared/reference/nixl.md``):

* ``UCX_TLS`` without ``tcp`` → backend creation fails with ``NIXL_ERR_BACKEND`` ("Destination is
  unreachable"), also reproduced here on a CPU box with ``UCX_TLS=sm``;
* a same-host GPU pair without ``cuda_ipc`` → 0.45 GB/s instead of 384 GB/s on H200 NVLink, still "correct";
* ``UCX_NET_DEVICES`` naming only RDMA ports (``mlx5_0:1``) → no tcp-capable device for UCX's wire-up.

``UCX_PROTO_INFO=y`` makes UCX print, per endpoint configuration, a table of the protocol and transport it
chose for each operation; :func:`parse_proto_info` reads the transports of the data path (the RMA put
NIXL's WRITE uses) out of it. Real samples: ``tests/fixtures/ucx/proto_info_*.txt``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# ---------------------------------------------------------------------------------------------- env checks
_RDMA_DEVICE_RE = re.compile(r"^(mlx\d*|mlx5|bnxt_re|irdma|rxe|siw|efa|qedr|hfi1|erdma|cxgb\d|ocrdma|i40iw)")
_PCIE_KINDS = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class Problem:
    level: Literal["error", "warning"]
    message: str


def split_list(value: str | Iterable[str] | None) -> list[str] | None:
    """``"a, b"`` or ``["a", "b"]`` → ``["a", "b"]``; ``None`` (unset) stays ``None``."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return [item.strip() for item in items if item.strip()]


def _tls_has(tls: list[str], name: str) -> bool:
    """Does the UCX_TLS list enable transport ``name``? Handles ``all``, aliases and ``^`` (exclusion)."""
    if not tls or tls == ["all"]:
        return True
    if tls[0].startswith("^"):  # "^a,b": everything except a and b
        excluded = {tls[0][1:], *tls[1:]}
        return name not in excluded
    aliases = {"tcp": {"tcp"}, "cuda_ipc": {"cuda_ipc", "cuda"}}.get(name, {name})
    return any(t in aliases or t == "all" for t in tls)


def _is_rdma_device(device: str) -> bool:
    """``mlx5_0:1`` (an RDMA port: HCA name + ':port') vs ``eth0`` / ``lo`` / ``ens1f0`` (tcp-capable)."""
    name = device.split(":")[0]
    return bool(_RDMA_DEVICE_RE.match(name)) or (":" in device and device.rsplit(":", 1)[1].isdigit())


def check_ucx_env(
    ucx_tls: str | list[str] | None,
    ucx_net_devices: str | list[str] | None,
    same_host_gpu_pair: bool,
) -> list[Problem]:
    """Problems with a UCX environment before anything runs; ``error`` ones make the transfer pointless."""
    problems: list[Problem] = []
    tls = split_list(ucx_tls)
    if tls and not _tls_has(tls, "tcp"):
        problems.append(
            Problem(
                "error",
                f"UCX_TLS={','.join(tls)} lacks tcp: backend creation fails with NIXL_ERR_BACKEND "
                "('Destination is unreachable') when UCX_TLS lacks tcp; add tcp",
            )
        )
    if same_host_gpu_pair and tls and not _tls_has(tls, "cuda_ipc"):
        problems.append(
            Problem(
                "error",
                f"UCX_TLS={','.join(tls)} lacks cuda_ipc: same-host GPU→GPU runs ~850× slower "  # noqa: RUF001
                "(0.45 vs 384 GB/s measured on H200) without cuda_ipc; add cuda_ipc or unset UCX_TLS",
            )
        )
    devices = split_list(ucx_net_devices)
    if devices and devices != ["all"] and all(_is_rdma_device(d) for d in devices):
        problems.append(
            Problem(
                "warning",
                f"UCX_NET_DEVICES={','.join(devices)} lists only RDMA devices: with no tcp-capable device "
                "(e.g. eth0 or lo) UCX may fail to create the backend (NIXL_ERR_BACKEND); add one",
            )
        )
    return problems


def ucx_env(variables: Mapping[str, Any]) -> dict[str, str]:
    """``UCX_TLS`` / ``UCX_NET_DEVICES`` from inventory vars ``ucx_tls`` / ``ucx_net_devices`` (a list or a
    comma string; unset or ``None`` leaves the variable out, so UCX picks by itself)."""
    env: dict[str, str] = {}
    for var, name in (("ucx_tls", "UCX_TLS"), ("ucx_net_devices", "UCX_NET_DEVICES")):
        items = split_list(variables.get(var))
        if items:
            env[name] = ",".join(items)
    return env


# -------------------------------------------------------------------------------------------- floors
NVLINK_FULL_SIZE = 1 << 30  # below this an NVLink transfer is dominated by per-transfer overhead


def default_min_gbps(link_kind: str | None, size_bytes: int | None = None) -> float:
    """The bandwidth floor a transfer must reach, by link (``nvidia-smi topo -m`` names or ours).

    NVLink (``NV#``, ``nvlink``): 200 GB/s for transfers of 1 GiB or more, proportionally less below
    (measured on 2x H200 NV18, VRAM→VRAM over cuda_ipc, two processes: 64 MiB 83 GB/s, 256 MiB 195,
    1 GiB 346, 4 GiB 371 — about 0.6 ms of fixed cost per transfer; without cuda_ipc 0.40 at any size).
    Same-host PCIe (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``, ``pcie``): 10. ``cross-host``: 1.
    ``loopback`` / ``dram`` / unset: 0.05 — a floor for a CPU-only lab over loopback (measured 0.4-12 GB/s
    on a 2-core box); it catches a transfer that stalls, not one that is merely slow.
    """
    kind = (link_kind or "loopback").strip()
    upper = kind.upper()
    if upper.startswith("NV"):
        if size_bytes is not None and size_bytes < NVLINK_FULL_SIZE:
            return 200.0 * size_bytes / NVLINK_FULL_SIZE
        return 200.0
    if upper in _PCIE_KINDS or upper == "PCIE":
        return 10.0
    if kind.lower() in ("cross-host", "crosshost", "network", "net"):
        return 1.0
    if kind.lower() in ("loopback", "dram", "lab", "x", "self"):
        return 0.05
    raise ValueError(f"unknown link kind {link_kind!r} (nvlink, pcie, cross-host, loopback or NV#/PIX/...)")


# --------------------------------------------------------------------------------------- UCX_PROTO_INFO
# [1796011172.858641] [vm:7280 :0]   | initiator intra-node cfg#1                               |
_LINE_RE = re.compile(r"^\[[\d.]+\]\s+\[[^\]]*\]\s+(?P<body>[+|].*)$")
_TRANSPORT_RE = re.compile(r"\b([a-z][a-z0-9_]*)/([A-Za-z0-9_.\-]+(?::\d+)?)")
_RANGE_RE = re.compile(r"^\d+(\.\.(\d+|inf))?$")
# which tables carry a DRAM→DRAM or VRAM→VRAM WRITE: "... by ucp_put*(multi) from cuda/GPU0 to cuda/dev[3]"
_MEM_SOURCE = {"dram": "from host memory to host", "vram": "from cuda"}
DATA_PATH_OPS = ("remote memory write", "remote memory read")  # NIXL WRITE/READ → ucp_put*/ucp_get*


@dataclass
class ProtoTable:
    """One UCX_PROTO_INFO table: endpoint config, operation, rows of (range, protocol, config)."""

    endpoint: str  # "initiator intra-node cfg#1"
    operation: str  # "remote memory write by ucp_put*(multi) from host memory to host"
    rows: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def is_self(self) -> bool:
        """The agent's loopback endpoint to itself (not the peer)."""
        return " self " in f" {self.endpoint} "

    def transports(self) -> list[str]:
        return _unique(t for _, _, config in self.rows for t in transports_in(config))


def transports_in(config: str) -> list[str]:
    """``"52% on tcp/lo and 48% on tcp/eth0"`` → ``["tcp/lo", "tcp/eth0"]``."""
    return [f"{tl}/{dev}" for tl, dev in _TRANSPORT_RE.findall(config)]


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def parse_proto_tables(text: str) -> list[ProtoTable]:
    """Every UCX_PROTO_INFO table in a process's output; other lines (NIXL's log, tracebacks) are ignored.

    A table is header lines (endpoint config, operation: on two lines in UCX 1.19+, as two cells of one
    line before) then rows whose first cell is a size range (``0..8184``, ``65529..inf``, ``0``).
    """
    tables: list[ProtoTable] = []
    header: list[str] = []
    current: ProtoTable | None = None
    for raw in text.splitlines():
        match = _LINE_RE.match(raw.rstrip())
        if not match or match.group("body").lstrip().startswith("+"):
            continue
        cells = [c.strip() for c in match.group("body").strip().strip("|").split("|")]
        if len(cells) >= 3 and _RANGE_RE.match(cells[0]):
            if current is None:
                current = ProtoTable(header[0] if header else "", " ".join(header[1:]))
                tables.append(current)
            current.rows.append((cells[0], cells[1], " ".join(cells[2:])))
        elif cells[:3] != ["Range", "Description", "Config"]:
            if current is not None:  # a header after rows: the next table begins
                current, header = None, []
            header.extend(c for c in cells if c)
    return tables


def parse_proto_info(text: str, mem: str | None = None, data_path_only: bool = True) -> list[str]:
    """Transports UCX reported in ``UCX_PROTO_INFO=y`` output, in order seen, e.g. ``["tcp/lo"]``.

    With ``data_path_only`` (default): only the RMA tables (``remote memory write/read``: what NIXL's
    WRITE/READ use) of endpoints to a peer — not the agent's ``self`` endpoints, not the active messages that
    carry notifications. ``mem`` (``dram``/``vram``) keeps the tables whose SOURCE is that memory: UCX also
    prints host→GPU tables that a VRAM→VRAM transfer never uses (``software emulation | tcp/lo``, seen on
    H200). Each filter is dropped when it would leave nothing.
    """
    tables = [t for t in parse_proto_tables(text) if not t.is_self]
    if data_path_only:
        tables = [t for t in tables if t.operation.startswith(DATA_PATH_OPS)] or tables
        source = _MEM_SOURCE.get(mem or "")
        if source:
            tables = [t for t in tables if source in t.operation] or tables
    return _unique(t for table in tables for t in table.transports())


# ------------------------------------------------------------------------------------------ diagnostics
_UCX_LOG_RE = re.compile(r"\bUCX\s+(?P<level>WARN|ERROR|FATAL)\s+(?P<msg>.*)$")
_GLOG_RE = re.compile(r"^(?P<level>[EWF])\d{4} [\d:.]+\s+\d+ [^\]]+\] (?P<msg>.*)$")


def diagnostics(text: str, limit: int = 6) -> list[str]:
    """UCX's and NIXL's own warning/error lines in a process's output, shortened — they say what is wrong
    (``UCX WARN network device 'x' is not available, please use one or more of: 'eth0'(tcp), 'lo'(tcp)``)
    where the Python exception only says ``NIXL_ERR_BACKEND``."""
    found: list[str] = []
    for line in text.splitlines():
        if m := _UCX_LOG_RE.search(line):
            found.append(f"UCX {m['level']}: {m['msg'].strip()}")
        elif m := _GLOG_RE.match(line.strip()):
            found.append(f"NIXL {'ERROR' if m['level'] != 'W' else 'WARN'}: {m['msg'].strip()}")
    return _unique(found)[:limit]
