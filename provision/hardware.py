"""Hardware facts: a host's GPUs, their topology, RDMA devices and NICs, as typed records with their parsers.

Each parser is pure: one section of the gather script's output in, records out (:mod:`provision.facts` runs the
script and assembles them into a ``HostFacts``; it re-exports every name here).

What a host's tools report is data, never trusted: device counts are capped (``MAX_*``: a fake ``nvidia-smi topo
-m`` with thousands of columns once made a million links) and the parsers stay linear. Stdlib only: nothing of
provision is imported here.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LINK_RE = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS)$")
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_IPV4_RE = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")


@dataclass
class GPU:
    index: int
    name: str
    memory_mib: int | None
    driver_version: str
    pci_bus_id: str
    uuid: str
    compute_capability: str | None = None  # "9.0" (absent on old drivers)


@dataclass
class GpuLink:
    a: str  # GPU0, or a NIC: its legend name (mlx5_0) when nvidia-smi gives one, else NIC0
    b: str
    kind: str  # NV#, PIX, PXB, PHB, NODE, SYS


@dataclass
class RdmaPort:
    port: int
    state: str  # ACTIVE, DOWN, INIT...
    rate: str  # "200 Gb/sec (4X HDR)"
    link_layer: str  # InfiniBand, Ethernet


@dataclass
class RdmaDevice:
    name: str
    ports: list[RdmaPort] = field(default_factory=list)


@dataclass
class NIC:
    name: str
    mac: str | None = None
    mtu: int | None = None
    state: str = ""  # operstate: up, down, unknown (lo)
    speed_mbps: int | None = None  # None when the kernel does not know (virtual NICs, lo)
    ipv4: list[str] = field(default_factory=list)


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return None


# caps on what a host's tools may report (a fake ``nvidia-smi topo -m`` with thousands of columns cost 1 GB):
# more than any machine has, and what the parsers keep; the rest is dropped, the parsers stay linear
MAX_GPUS = 64  # GPUs of one host
MAX_TOPO_DEVICES = 256  # devices (GPUs and NICs) of the topology matrix: at most 256 * 255 / 2 links
MAX_DEVICES = 1024  # RDMA devices, ports of one device, NICs, addresses of one NIC


def parse_gpu_csv(text: str) -> list[GPU]:
    """``nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version,pci.bus_id[,compute_cap]
    --format=csv,noheader,nounits`` → GPUs (a header line and ``MiB`` units, as plain ``--format=csv``
    prints them, are accepted too). Error text (driver not loaded...) gives no rows."""
    gpus: list[GPU] = []
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        cells = [c.strip() for c in row]
        if len(cells) < 6 or not cells[0].isdigit() or len(cells[0]) > 4:
            continue
        if len(gpus) >= MAX_GPUS:
            break
        cap = cells[6] if len(cells) > 6 and cells[6] not in ("", "[N/A]", "N/A") else None
        gpus.append(
            GPU(
                index=int(cells[0]),
                name=cells[1],
                uuid=cells[2],
                memory_mib=_int_or_none(cells[3].removesuffix("MiB").strip()),  # `--format=csv` keeps units
                driver_version=cells[4],
                pci_bus_id=cells[5],
                compute_capability=cap,
            )
        )
    return gpus


def parse_cuda_version(nvidia_smi_text: str) -> str | None:
    """The ``CUDA Version: 13.0`` of plain ``nvidia-smi``'s banner: the highest CUDA the driver supports."""
    m = re.search(r"CUDA Version:\s*(\d+\.\d+)", nvidia_smi_text)
    return m.group(1) if m else None


def parse_driver_version(nvidia_smi_text: str) -> str | None:
    m = re.search(r"Driver Version:\s*([\d.]+)", nvidia_smi_text)
    return m.group(1) if m else None


def _cells(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    return [c.strip() for c in re.split(r"\s{2,}", line.strip())]


def parse_topo(text: str) -> list[GpuLink]:
    """``nvidia-smi topo -m`` → one link per pair of devices (GPU-GPU, GPU-NIC, NIC-NIC), self cells skipped.

    The header row names the columns; the affinity columns after the devices and the legend are ignored.
    NIC columns are renamed after the ``NIC Legend`` (``NIC0: mlx5_0``) when there is one."""
    text = _ANSI_RE.sub("", text)
    lines = text.splitlines()
    legend = {m.group(1): m.group(2) for m in map(_NIC_LEGEND_RE.match, lines) if m}
    header_at = next((i for i, line in enumerate(lines) if re.search(r"\bGPU0\b", line)), None)
    if header_at is None:
        return []
    labels: list[str] = []
    for cell in _cells(lines[header_at]):
        if not cell and not labels:
            continue  # the empty corner cell
        if not cell or " " in cell:
            break  # "CPU Affinity", "NUMA Affinity", "GPU NUMA ID": the devices are over
        labels.append(cell)
        if len(labels) >= MAX_TOPO_DEVICES:
            break
    links: list[GpuLink] = []
    seen: set[frozenset[str]] = set()
    for line in lines[header_at + 1 : header_at + 1 + MAX_TOPO_DEVICES]:
        if not line.strip() or line.strip().startswith("Legend"):
            break
        row = _cells(line)
        source = row[0]
        for label, cell in zip(labels, row[1 : 1 + len(labels)], strict=False):
            if not _LINK_RE.match(cell) or cell == "X" or label == source:
                continue
            pair = frozenset((source, label))
            if pair in seen:
                continue
            seen.add(pair)
            links.append(GpuLink(legend.get(source, source), legend.get(label, label), cell))
    return links


def parse_rdma(text: str) -> list[RdmaDevice]:
    """``dev|port|state|rate|link_layer`` lines (or a bare ``dev``) → RDMA devices with their ports."""
    devices: dict[str, RdmaDevice] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        name = parts[0]
        if not name or any(ch.isspace() for ch in name):
            continue  # not ours (`ls -l` noise, blank lines)
        if name not in devices and len(devices) >= MAX_DEVICES:
            continue
        dev = devices.setdefault(name, RdmaDevice(name))
        if len(parts) >= 5 and parts[1].isdigit() and len(dev.ports) < MAX_DEVICES:
            state = parts[2].split(":", 1)[-1].strip()  # "4: ACTIVE"
            dev.ports.append(RdmaPort(int(parts[1]), state, parts[3].strip(), parts[4].strip()))
    return list(devices.values())


def parse_ipv4(text: str) -> dict[str, list[str]]:
    """``iface|address`` lines → {iface: [addresses]}; addresses of unknown NIC (``|addr``) under ``""``."""
    result: dict[str, list[str]] = {}
    for line in text.splitlines():
        iface, sep, addr = line.strip().partition("|")
        addr = addr.strip()
        if sep and _IPV4_RE.match(addr) and (iface.strip() in result or len(result) < MAX_DEVICES):
            found = result.setdefault(iface.strip(), [])
            if len(found) < MAX_DEVICES:
                found.append(addr)
    return result


def parse_nics(text: str, addresses: dict[str, list[str]] | None = None) -> list[NIC]:
    """``name|operstate|mtu|mac|speed`` lines (or bare names) → NICs, with their IPv4 ``addresses``."""
    addresses = addresses or {}
    nics: list[NIC] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.strip().split("|")]
        name = parts[0]
        if not name or any(ch.isspace() for ch in name) or name in (".", ".."):
            continue
        if len(nics) >= MAX_DEVICES:
            break
        parts += [""] * (5 - len(parts))
        speed = _int_or_none(parts[4])
        nics.append(
            NIC(
                name=name,
                state=parts[1],
                mtu=_int_or_none(parts[2]),
                mac=parts[3] or None,
                speed_mbps=speed if speed is not None and speed > 0 else None,
                ipv4=list(addresses.get(name, [])),
            )
        )
    return nics
