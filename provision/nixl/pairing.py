"""The preflight's choice for one prefill → decode pair: which memory, which GPUs, which link.

One place in code for what ``preflight.yml`` used to compute in seven Jinja variables. Inputs are what a
task sees of the two hosts (their vars: ``ansible_facts``, ``base_gpu_id``, ``tp``):

* memory: VRAM when both hosts have GPUs (their facts list at least one), else DRAM;
* GPUs: the source is the prefill's ``base_gpu_id``; the destination is the decode's ``base_gpu_id``, or, when
  prefill and decode are the same inventory host, the GPU right after the prefill's ``tp`` GPUs;
* link: for a same-host GPU pair, the kind ``nvidia-smi topo -m`` reports between the two GPUs (``NV#`` →
  ``nvlink``, anything else → ``pcie``); otherwise ``None``, and ``nixl_transfer`` picks by distance
  (``cross-host``, or ``loopback`` for DRAM on one machine). The bandwidth floor follows from the link
  (:func:`provision.nixl.ucx.default_min_gbps`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Pair:
    mem: str  # "vram" | "dram"
    src_gpu: int
    dst_gpu: int
    link: str | None


def _gpus(host: Mapping[str, Any]) -> list[Any]:
    facts = host.get("ansible_facts") or {}
    return list(facts.get("gpus") or []) if isinstance(facts, Mapping) else []


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def topology_kind(facts: Mapping[str, Any], a: str, b: str) -> str:
    """The link kind between GPUs ``a`` and ``b`` (``"GPU0"``) in ``nvidia-smi topo -m`` facts, or ``""``."""
    for entry in facts.get("topology") or []:
        if isinstance(entry, Mapping) and {entry.get("a"), entry.get("b")} == {a, b}:
            return str(entry.get("kind") or "")
    return ""


def choose_pair(src: Mapping[str, Any], dst: Mapping[str, Any], *, same_inventory_host: bool) -> Pair:
    """The preflight's pair for prefill host vars ``src`` and decode host vars ``dst``."""
    gpus = bool(_gpus(src)) and bool(_gpus(dst))
    src_gpu = _int(src.get("base_gpu_id"))
    if not gpus:
        return Pair("dram", src_gpu, 0, None)
    if not same_inventory_host:
        return Pair("vram", src_gpu, _int(dst.get("base_gpu_id")), None)
    dst_gpu = src_gpu + _int(src.get("tp"), 1)
    kind = topology_kind(src.get("ansible_facts") or {}, f"GPU{src_gpu}", f"GPU{dst_gpu}")
    return Pair("vram", src_gpu, dst_gpu, "nvlink" if kind.startswith("NV") else "pcie")
