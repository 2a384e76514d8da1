"""The prefill/decode (PD) deployment.

The plan from inventory vars (:mod:`.spec`, with :mod:`.flags` and :mod:`.addr`), its checks before anything
starts (:mod:`.validate`), the status table (:mod:`.status`), supervised processes (:mod:`.process`: the
``process`` module over ``provision/remote/process_ctl.py``) and the PD task modules (:mod:`.modules`:
``pd_config``, ``pd_validate``, ``pd_wait``, ``pd_verify``, ``pd_status``, ``pd_logs``). The modules, the
playbooks (``pd-*.yml``) and the ``provision pd`` command (:mod:`provision.cli.pd`) all read the same plan.

May import: :mod:`provision.modules.base`, :mod:`provision.templating`, :mod:`provision.commands`,
:mod:`provision.nixl.ucx` and :mod:`provision.sglang.cpu_compat` (launch env and flags). Never the executor,
the task runner, the playbook loader or the CLI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..templating import Vars
from .flags import PlanError
from .spec import DEFAULTS, Deployment, HostPlan, Proc, build
from .validate import validate_pd

PD_GROUPS = ("prefill", "decode", "serve", "router")


def pd_host_names(groups: Mapping[str, Iterable[str]]) -> list[str]:
    """Every host of the PD groups, each once, in group order (prefill, decode, serve, router)."""
    names: dict[str, None] = {}
    for group in PD_GROUPS:
        for host in groups.get(group, ()):
            names[host] = None
    return list(names)


def hosts_from_task_vars(variables: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Every PD host's vars as a task sees them (``hostvars`` and ``groups``).

    The magic vars are read raw: rendering ``hostvars`` through :class:`~provision.templating.Vars` walks
    every host's vars, ``hostvars`` included, without end."""
    raw = variables.raw() if isinstance(variables, Vars) else variables
    hostvars = raw["hostvars"]
    gone = raw.get("pd_scale_removed") or ()  # `pd scale --remove`: the plan as it is after (pd/scale.py)
    return {h: hostvars[h] for h in pd_host_names(raw["groups"]) if h not in gone}


__all__ = [
    "DEFAULTS",
    "PD_GROUPS",
    "Deployment",
    "HostPlan",
    "PlanError",
    "Proc",
    "build",
    "hosts_from_task_vars",
    "pd_host_names",
    "validate_pd",
]
