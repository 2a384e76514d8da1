"""Guardrails for the parallelism flags, on the inventory alone (before any host is touched): DP attention,
DeepEP expert parallelism across hosts, and the KV staging buffer when prefill and decode TP differ.

The installed SGLang's own parser (``sglang_args``: ``prepare_server_args`` + ``check_server_args``) still
checks every command line on its host at ``pd up``; these say it earlier, in one line, and cover what that
parser cannot see (the other hosts' facts, the other role's TP).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .flags import effective
from .spec import Deployment, Proc

TP_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size")
DP_FLAGS = ("--dp-size", "--dp", "--data-parallel-size")
STAGING = "SGLANG_DISAGG_STAGING_BUFFER"


def _size(proc: Proc, names: tuple[str, ...]) -> int:
    try:
        return int(effective(proc.args, *names) or 1)
    except ValueError:
        return 1


def check(d: Deployment, hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    problems: list[str] = []
    for proc in d.servers:
        tp, dp = _size(proc, TP_FLAGS), _size(proc, DP_FLAGS)
        if "--enable-dp-attention" in proc.args and (dp < 2 or tp % dp):
            problems.append(f"{proc.host}: --enable-dp-attention needs dp > 1 and tp divisible by dp (tp {tp}, dp "
                            f"{dp}): set dp (e.g. dp: {tp}) or drop the flag")  # fmt: skip
        if effective(proc.args, "--moe-a2a-backend") == "deepep" and proc.nnodes > 1:
            members = [proc, *(r for r in d.ranks if r.leader is proc)]
            problems += [p for m in members if (p := _deepep(m.host, hosts.get(m.host, {})))]
    problems += _staging(d)
    return problems


def _deepep(host: str, variables: Mapping[str, Any]) -> str | None:
    """DeepEP across hosts moves tokens GPU to GPU over RDMA: the host's facts must show an ACTIVE RDMA port and
    GPU peer memory (``nvidia_peermem`` / dma-buf), or ``pd_peer_memory: true`` said after checking."""
    facts = variables.get("ansible_facts") if "ansible_facts" in variables else None
    rdma = facts.get("rdma") if isinstance(facts, Mapping) else None
    if not isinstance(rdma, list):
        return (f"{host}: --moe-a2a-backend deepep across hosts needs RDMA, and no facts are known for {host} "
                "(gather them: provision facts -i INV)")  # fmt: skip
    active = [
        d
        for d in rdma
        if isinstance(d, Mapping)
        and any(isinstance(p, Mapping) and str(p.get("state", "")).upper() == "ACTIVE" for p in d.get("ports") or [])
    ]
    if not active:
        return f"{host}: --moe-a2a-backend deepep across hosts needs an ACTIVE RDMA port; its facts show none"
    peer = variables.get("pd_peer_memory") if "pd_peer_memory" in variables else None
    if peer is not True and str(peer).lower() not in ("true", "yes", "1"):
        return (f"{host}: --moe-a2a-backend deepep across hosts needs GPU peer memory (nvidia_peermem or dma-buf); "
                "check `lsmod | grep nvidia_peermem` there and set pd_peer_memory: true")  # fmt: skip
    return None


def _staging(d: Deployment) -> list[str]:
    """Prefill and decode TP differ: SGLang gathers the KV through a staging buffer on non-MLA models (GQA,
    MHA), and refuses the buffer on MLA ones, so the inventory must say which: provision cannot see the model."""
    tps = {p.host: _size(p, TP_FLAGS) for p in [*d.prefill, *d.decode]}
    if len({tps[p.host] for p in d.prefill}) + len({tps[p.host] for p in d.decode}) < 2:
        return []
    pre, dec = {tps[p.host] for p in d.prefill}, {tps[p.host] for p in d.decode}
    if pre == dec:
        return []
    unset = [p.host for p in [*d.prefill, *d.decode] if STAGING not in d.hosts[p.host].env]
    if not unset:
        return []
    return [f"prefill tp {'/'.join(map(str, sorted(pre)))} and decode tp {'/'.join(map(str, sorted(dec)))} differ: "
            f"set pd_env {STAGING}: '1' for a non-MLA model (GQA, MHA: the KV is regrouped through a staging buffer) "
            f"or '0' for an MLA one (DeepSeek: SGLang refuses the buffer there) on {', '.join(unset)}"]  # fmt: skip
