"""provision as a Python library: the same engine, results and exit codes as the ``provision`` command line,
which is built on this package.

    from provision import api

    fleet = api.load("inventory.yml", limit="gpu*", extra_vars={"sglang_device": "cpu"})
    result = api.run_playbook("site.yml", fleet, on_event=print)   # a file, or a shipped playbook by name
    if not result.ok:
        print(result.reason, result.exit_code)
    print(api.pd_status(fleet).rows)

Every verb takes the hosts as a :class:`Fleet` (from :func:`load`) or as inventory paths, plus keyword options
named as the command line's (:class:`Options`: ``limit``, ``extra_vars``, ``forks``, ``check``, ``diff``,
``tags``, ``skip_tags``, ``timeout``, ``connect_timeout``, ``accept_new_host_keys``, ``verbosity``), and
``on_event``: a callable that receives the run's events (:mod:`provision.events`) as they happen. Nothing is
printed; each verb returns a value:

* :func:`run_playbook`, :func:`run_module`, :func:`pd_down` → :class:`RunResult` (per-host ``TaskResult``\\ s,
  the ``RunSummary``, ``exit_code``); :func:`pd_up` → :class:`PdUpResult` (and what a failed ``up`` stopped);
* :func:`gather_facts` → :class:`FactsResult`; :func:`pd_status` → :class:`PdStatus` (the status rows);
  :func:`pd_logs` → :class:`PdLogs`; :func:`pd_verify` → :class:`PdVerify`;
* :func:`plan_playbook` validates everything (inventory, playbook, variables per host, PD layout) without
  touching a host and returns a :class:`PlannedRun` to ``run()`` later.

Errors are the tree of :mod:`provision.errors`: bad input (``InputError`` and its kinds, exit 5) and bad
options (``UsageError``, exit 3) raise before any host is contacted; a host that fails or cannot be reached is
not an exception but a result (``RunResult.failed_hosts``, ``.unreachable_hosts``, ``.exit_code``), as in
Fabric's ``GroupResult``; Ctrl-C raises ``Interrupted`` after every connection was closed.

Secrets (``hf_token``, ``*_password``, ``no_log`` vars) are registered with the masker when a fleet is loaded:
:func:`masked` hides them in anything before you print it.

The package: ``fleet`` (:class:`Fleet`, :class:`Options`), ``runs`` (playbooks, modules, facts), ``layout`` (the
PD layout check), ``pd`` (the PD verbs, rollout), ``model`` (model sync), ``export`` (pd export), ``bench``
(pd bench); every public name is here (``api.X``). Imports the engine; never the command line
(:mod:`provision.cli` is built on this package) nor click.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ..data import find_playbook, shipped_playbooks
from ..errors import (
    CommandTimeout,
    HostBusy,
    HostError,
    HostKeyChanged,
    HostKeyUnknown,
    InputError,
    Interrupted,
    InventoryError,
    ModuleError,
    PlaybookError,
    ProvisionError,
    TemplateError,
    Terminated,
    UnreachableError,
    UsageError,
)
from ..events import Event, Listener, Message, PlayStarted, Progress, RunFinished, TaskFinished, TaskStarted
from ..inventory import Inventory
from ..pd import PlanError
from ..results import HostStats, RunSummary, Status, TaskResult
from .fleet import Fleet, Options, default_router, load, masked, parse_extra_vars, run_options
from .layout import check_layout, inventory_pd_vars, pd_ports
from .runs import (
    FactsResult,
    PlannedRun,
    RunResult,
    execute,
    gather_facts,
    plan_module,
    plan_playbook,
    run_module,
    run_playbook,
)

if TYPE_CHECKING:  # imported on first use (below): what the type checker sees
    from .bench import BenchOptions, BenchResult, pd_bench
    from .export import PdExport, pd_export
    from .model import model_sync
    from .pd import (
        PdLogs,
        PdStatus,
        PdUpResult,
        PdVerify,
        clean_up_failed_up,
        keep_failed_asked,
        pd_down,
        pd_logs,
        pd_rollout,
        pd_scale,
        pd_serving_paths,
        pd_status,
        pd_targets,
        pd_up,
        pd_verify,
        plan_pd_down,
        plan_pd_up,
        rollout_runner,
        stop_run,
        stopped_line,
    )

# the verbs of PD, bench, export and model sync, imported on first use (PEP 562): a playbook run needs none of
# them, and importing them was ~25 ms of every command line's start
_PD = ("PdLogs", "PdStatus", "PdUpResult", "PdVerify", "clean_up_failed_up", "keep_failed_asked", "pd_down", "pd_logs",
       "pd_rollout", "pd_scale", "pd_serving_paths", "pd_status", "pd_targets", "pd_up", "pd_verify", "plan_pd_down",
       "plan_pd_up", "rollout_runner", "stop_run", "stopped_line")  # fmt: skip
_LAZY = {
    **dict.fromkeys(("BenchOptions", "BenchResult", "pd_bench"), "bench"),
    **dict.fromkeys(("PdExport", "pd_export"), "export"),
    "model_sync": "model",
    **dict.fromkeys(_PD, "pd"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "BenchOptions",
    "BenchResult",
    "CommandTimeout",
    "Event",
    "FactsResult",
    "Fleet",
    "HostBusy",
    "HostError",
    "HostKeyChanged",
    "HostKeyUnknown",
    "HostStats",
    "InputError",
    "Interrupted",
    "Inventory",
    "InventoryError",
    "Listener",
    "Message",
    "ModuleError",
    "Options",
    "PdExport",
    "PdLogs",
    "PdStatus",
    "PdUpResult",
    "PdVerify",
    "PlanError",
    "PlannedRun",
    "PlayStarted",
    "PlaybookError",
    "Progress",
    "ProvisionError",
    "RunFinished",
    "RunResult",
    "RunSummary",
    "Status",
    "TaskFinished",
    "TaskResult",
    "TaskStarted",
    "TemplateError",
    "Terminated",
    "UnreachableError",
    "UsageError",
    "check_layout",
    "clean_up_failed_up",
    "default_router",
    "execute",
    "find_playbook",
    "gather_facts",
    "inventory_pd_vars",
    "keep_failed_asked",
    "load",
    "masked",
    "model_sync",
    "parse_extra_vars",
    "pd_bench",
    "pd_down",
    "pd_export",
    "pd_logs",
    "pd_ports",
    "pd_rollout",
    "pd_scale",
    "pd_serving_paths",
    "pd_status",
    "pd_targets",
    "pd_up",
    "pd_verify",
    "plan_module",
    "plan_pd_down",
    "plan_pd_up",
    "plan_playbook",
    "rollout_runner",
    "run_module",
    "run_options",
    "run_playbook",
    "shipped_playbooks",
    "stop_run",
    "stopped_line",
]
