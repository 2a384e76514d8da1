"""The PD layout of an inventory, checked before anything runs: :func:`check_layout` (roles, model path, the
plan's validation), :func:`inventory_pd_vars` (each PD host's vars, as the plan reads them) and :func:`pd_ports`
(a host's port plan).
"""

from __future__ import annotations

from typing import Any

from .. import templating
from ..data import defaults
from ..errors import (
    InputError,
)
from ..inventory import Inventory
from ..magic import magic_vars
from ..pd import build, pd_host_names, validate_pd
from ..pd.ports import host_rows as host_port_rows


def inventory_pd_vars(inventory: Inventory, extra: dict[str, Any]) -> dict[str, templating.Vars]:
    """Every PD host's vars as a task would see them before facts (enough for the plan and its checks)."""
    groups = inventory.groups_map()
    shipped = defaults()  # lowest, as in a task
    out: dict[str, templating.Vars] = {}
    for name in pd_host_names(groups):
        out[name] = templating.Vars(
            shipped, inventory.hosts[name].vars, extra, magic_vars(inventory, name, groups=groups)
        )
    return out


def pd_ports(inventory: Inventory, extra: dict[str, Any], host: str) -> list[dict[str, Any]] | None:
    """The port plan of ``host``'s PD processes (``provision inventory --host``); None: not a PD host."""
    pd_vars = inventory_pd_vars(inventory, extra)
    return host_port_rows(build(pd_vars), host) if host in pd_vars else None


MODEL_PATH_MISSING = "model_path is not set (a model directory on the host, or a hub id)"


def check_layout(inventory: Inventory, extra: dict[str, Any]) -> None:
    """The PD layout on the inventory alone (``pd up``, and ``run`` of a playbook with ``pd_validate``):
    InputError (exit 5) listing every problem, before any host is touched. A problem several hosts share is
    one line naming them; a missing ``model_path`` says what to add."""
    problems = validate_pd(inventory_pd_vars(inventory, extra))
    if not problems:
        return
    hosts_of: dict[str, list[str]] = {}
    for problem in problems:
        host, sep, text = problem.partition(": ")
        if sep and host in inventory.hosts:
            hosts_of.setdefault(text, []).append(host)
        else:
            hosts_of.setdefault(problem, [])
    lines = []
    for text, hosts in hosts_of.items():
        if text == MODEL_PATH_MISSING:
            lines.append(
                f"model_path is not set for {', '.join(hosts)}: add `model_path: /path/to/model` (a model directory "
                "on the hosts, or a hub id) to the inventory's vars (or -e model_path=...), or "
                "`sglang_device: cpu` for CPU mode"
            )
        else:
            lines += [f"{host}: {text}" for host in hosts] if hosts else [text]
    raise InputError("the PD deployment is not valid:\n  - " + "\n  - ".join(lines))
