"""provision as a Python library: the same engine, results and exit codes as the ``provision`` command line,
which is built on this module.

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

Imports the engine; never the command line (:mod:`provision.cli` is built on this module) nor click.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from . import templating, yamlfile, yamlsafe
from .commands import MASKER
from .data import defaults, find_playbook, playbook_path, shipped_playbooks
from .errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
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
from .events import (
    Event,
    EventStream,
    Listener,
    Message,
    PlayStarted,
    Progress,
    RunFinished,
    TaskFinished,
    TaskStarted,
)
from .executor import Executor, InternalError, playbook_dir_of, task_selected
from .inventory import MAX_DEPTH, Inventory, nesting_too_deep
from .magic import magic_vars
from .masking import register_inventory_secrets
from .modules.base import ModuleContext, to_bool
from .pd import PlanError, build, pd_host_names, validate_pd
from .pd.rollout import Progress as RolloutProgress
from .pd.rollout import RolloutOptions, RolloutResult, RunTasks, rollout
from .pd.rollout import Step as RolloutStep
from .pd.status import all_up
from .plan import check_plan
from .playbook import Play, Task, load_playbook, parse_task
from .report import write_retry_file
from .results import HostStats, RunSummary, Status, TaskResult
from .state import RunOptions
from .transport import ConnectOptions, open_connection

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .model.sync import SyncResult

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
    "find_playbook",
    "gather_facts",
    "load",
    "masked",
    "model_sync",
    "parse_extra_vars",
    "pd_bench",
    "pd_down",
    "pd_export",
    "pd_logs",
    "pd_rollout",
    "pd_serving_paths",
    "pd_status",
    "pd_targets",
    "pd_up",
    "pd_verify",
    "plan_module",
    "plan_pd_down",
    "plan_pd_up",
    "plan_playbook",
    "run_module",
    "run_playbook",
    "shipped_playbooks",
    "stop_run",
]

PD_HOSTS = "prefill:decode:serve:router"
PathLike = str | os.PathLike[str]


class Options(TypedDict, total=False):
    """The keyword options every verb takes, named as the command line's."""

    limit: str | None  # -l: names, groups, globs, ~regex, !exclude, &intersect, @file
    extra_vars: Mapping[str, Any] | None  # -e: always win
    forks: int  # -f (default 20)
    check: bool  # -C: predict, change nothing
    diff: bool  # -D
    tags: str | Iterable[str]  # -t: "a,b" or a list
    skip_tags: str | Iterable[str]  # --skip-tags
    start_at_task: str | None  # --start-at-task
    timeout: float  # -T: default timeout of each remote command, seconds (1800)
    connect_timeout: float  # --connect-timeout (10)
    accept_new_host_keys: bool  # --accept-new-host-keys: trust unknown host keys and save them
    persist: float  # --persist: seconds to keep the SSH connections after the run (0: not kept)
    ssh_config: str | None  # another ssh_config (default ~/.ssh/config or $PROVISION_SSH_CONFIG)
    verbosity: int  # -v count: only what the events' listeners do with it
    on_event: Listener | None  # receives every event of the run (provision.events)


# ------------------------------------------------------------------------------------------------ inputs
def parse_extra_vars(values: Iterable[str]) -> dict[str, Any]:
    """``-e`` values as the command line takes them: ``k=v k2='v 2'``, ``@file.yml`` or ``'{"json": 1}'``;
    later ones win.

    Extra vars often carry secrets, so an error never quotes their text: it names the file, line and column.
    The secret-named values are registered with the masker as soon as they are parsed."""
    out: dict[str, Any] = {}
    for value in values:
        text = value.strip()
        if text.startswith("@"):
            out.update(_extra_vars_file(Path(text[1:])))
        elif text.startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(f"-e: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
            except RecursionError:
                raise InputError("-e: JSON nested too deeply") from None
            if not isinstance(data, dict):
                raise InputError("-e: JSON extra vars must be an object")
            out.update(data)
        else:
            try:
                words = shlex.split(text)
            except ValueError as exc:
                raise InputError(f"-e: cannot split key=value words: {exc}") from None
            for n, word in enumerate(words, 1):
                if "=" not in word:
                    raise InputError(f"-e: expected key=value, @file or JSON; word {n} has no '='")
                key, val = word.split("=", 1)
                if not key.isidentifier():
                    raise InputError(f"-e: word {n}: {key!r} is not a valid variable name")
                out[key] = val
        MASKER.add_vars(out)
    if nesting_too_deep(out):
        raise InputError(f"-e: values nested deeper than {MAX_DEPTH} levels")
    return out


def _extra_vars_file(path: Path) -> dict[str, Any]:
    try:
        text = yamlsafe.read_text(path)
    except OSError as exc:
        raise InputError(f"-e @file: cannot read: {exc.strerror}", file=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"-e @file: not UTF-8 text (byte {exc.start})", file=str(path)) from None
    try:
        data = yamlfile.plain(yamlfile.loads(text, str(path)))  # THE YAML reader: !unsafe, duplicate keys refused
    except yamlfile.YAMLFileError as exc:
        if exc.kind == "depth":
            raise InputError("-e @file: nested too deeply", file=str(path)) from None
        column = f", column {exc.column}" if exc.column else ""
        raise InputError(f"-e @file: invalid YAML{column}: {exc.problem}", file=str(path), line=exc.line) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else type(data).__name__
        raise InputError(f"-e @file must hold a mapping, not a {kind}", file=str(path))
    if not all(isinstance(k, str) for k in data):
        raise InputError("-e @file must hold a mapping of variable names", file=str(path))
    return data


def _extra(values: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(values or {})
    if not all(isinstance(k, str) for k in out):
        raise InputError("extra_vars must map variable names to values")
    if nesting_too_deep(out):
        raise InputError(f"-e: values nested deeper than {MAX_DEPTH} levels")
    MASKER.add_vars(out)
    return out


@dataclass
class Fleet:
    """The hosts a verb works on: an inventory (with the implicit ``router`` group), the extra vars it was
    loaded with and a default ``--limit``."""

    inventory: Inventory
    extra_vars: dict[str, Any] = field(default_factory=dict)
    limit: str | None = None

    @property
    def hosts(self) -> list[str]:
        """The host names the limit selects, in inventory order."""
        return [h.name for h in self.inventory.select(self.limit)]


def load(
    paths: PathLike | Sequence[PathLike] | None = None,
    *,
    extra_vars: Mapping[str, Any] | None = None,
    limit: str | None = None,
    trace: bool = False,
) -> Fleet:
    """Load inventory files or directories (Ansible YAML/INI, ``group_vars/``, ``host_vars/``) into a
    :class:`Fleet`. No paths: ``$PROVISION_INVENTORY``. ``limit`` is checked now (an :class:`InventoryError`
    when a part of it matches no host) and is the default ``limit`` of every verb given this fleet.
    ``trace``: also record where each host var came from (``fleet.inventory.origins``)."""
    if paths is None or (not isinstance(paths, (str, os.PathLike)) and not paths):
        env = os.environ.get("PROVISION_INVENTORY")
        if not env:
            raise UsageError("no inventory given: pass inventory paths (or set PROVISION_INVENTORY)")
        paths = env
    chosen = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
    extra = _extra(extra_vars)
    inventory = Inventory.load(chosen, extra, trace=trace)
    default_router(inventory)
    register_inventory_secrets(inventory, extra)
    if limit:
        inventory.select(limit)
    return Fleet(inventory, extra, limit)


def default_router(inventory: Inventory) -> None:
    """An inventory with a ``prefill`` group and no ``router`` group gets the router on its first prefill
    host (an implicit ``router`` group; ``provision inventory --graph`` shows it), so two hosts in
    ``prefill``/``decode`` are a whole deployment. A ``router`` group, even an empty one, is left as it is."""
    prefill = inventory.group_members("prefill")
    if prefill and "router" not in inventory.groups:
        inventory.add_group("router", prefill[:1])
    # the PD playbooks name every PD group (prefill, decode, serve, router): a PD inventory gets an empty
    # `serve` group, a colocated one (group serve) empty prefill/decode/router groups, so each play that has
    # no host here is skipped instead of naming a group the inventory lacks
    present = [g for g in ("prefill", "decode", "serve", "router") if g in inventory.groups]
    if present and present != ["router"]:
        for group in ("prefill", "decode", "serve", "router"):
            if group not in inventory.groups:
                inventory.add_group(group, [])


def _fleet(hosts: Fleet | PathLike | Sequence[PathLike], extra_vars: Mapping[str, Any] | None) -> Fleet:
    if isinstance(hosts, Fleet):
        return hosts
    return load(hosts, extra_vars=extra_vars)


def _split_tags(tags: str | Iterable[str] | None) -> set[str]:
    if not tags:
        return set()
    words = tags.split(",") if isinstance(tags, str) else list(tags)
    return {t.strip() for t in words if t.strip()}


def run_options(fleet: Fleet, opts: Options) -> RunOptions:
    """The engine's :class:`RunOptions` from the keyword options (the shipped defaults included: every run)."""
    forks = int(opts.get("forks", 20))
    timeout = float(opts.get("timeout", 1800.0))
    connect_timeout = float(opts.get("connect_timeout", 10.0))
    if forks < 1:
        raise UsageError(f"forks must be at least 1, not {forks}")
    for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
        if not (value > 0 and value != float("inf")):
            raise UsageError(f"{name} must be a number of seconds > 0, not {value!r}")
    extra = {**fleet.extra_vars, **_extra(opts.get("extra_vars"))}
    return RunOptions(
        forks=forks,
        check=bool(opts.get("check", False)),
        diff=bool(opts.get("diff", False)),
        tags=_split_tags(opts.get("tags")),
        skip_tags=_split_tags(opts.get("skip_tags")),
        start_at_task=opts.get("start_at_task"),
        limit=opts.get("limit", fleet.limit),
        extra_vars=extra,
        verbosity=int(opts.get("verbosity", 0)),
        command_timeout=timeout,
        defaults=defaults(),  # every run, shipped playbook or not: docs/architecture.md, "Defaults"
        connect=ConnectOptions(
            connect_timeout=connect_timeout,
            accept_new_host_keys=bool(opts.get("accept_new_host_keys", False)),
            ssh_config=opts.get("ssh_config"),
            persist=float(opts.get("persist") or 0.0),
        ),
    )


def masked(value: Any) -> Any:
    """``value`` (a string, or any JSON-like structure) with every registered secret replaced by ``********``."""
    return MASKER.mask(value) if isinstance(value, str) else MASKER.mask_obj(value)


# ------------------------------------------------------------------------------------------------ results
@dataclass
class RunResult:
    """What a run did: every host's task results, in order, and the summary (recap counts, exit code)."""

    summary: RunSummary
    results: list[TaskResult] = field(default_factory=list)
    playbook: str = ""
    internal_errors: list[InternalError] = field(default_factory=list)  # bugs of provision met on the way

    @property
    def exit_code(self) -> int:
        """0 ok, 2 failed hosts (or a bug of provision), 4 unreachable hosts and none failed, 130 interrupted."""
        code = self.summary.exit_code()
        if self.internal_errors and code in (EXIT_OK, EXIT_UNREACHABLE):
            return EXIT_FAILED
        return code

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def failed_hosts(self) -> list[str]:
        return self.summary.failed_hosts

    @property
    def unreachable_hosts(self) -> list[str]:
        return self.summary.unreachable_hosts

    @property
    def changed(self) -> int:
        """How many task results changed something (0 on a rerun of a converged playbook)."""
        return self.summary.changed_total

    @property
    def reason(self) -> str | None:
        """One line saying why the run is not ok (None when it is)."""
        if self.internal_errors:
            more = f" (and {len(self.internal_errors) - 1} more)" if len(self.internal_errors) > 1 else ""
            return f"{self.internal_errors[0].message}{more}"
        if not self.summary.exit_code():
            return None
        if self.summary.aborted:
            return self.summary.aborted
        if self.failed_hosts:
            return f"failed hosts: {', '.join(self.failed_hosts)}"
        return f"unreachable hosts: {', '.join(self.unreachable_hosts)}"

    def host_results(self, host: str) -> list[TaskResult]:
        return [r for r in self.results if r.host == host]

    def write_retry_file(self, directory: str | None = None) -> str | None:
        """The failed and unreachable hosts, one per line, in ``PLAYBOOK.retry`` (``limit="@that-file"``
        reruns just them); None when there are none. In the working directory unless ``directory``."""
        return write_retry_file(self.playbook or "adhoc.yml", self.summary, directory)


@dataclass
class PlannedRun:
    """Plays validated against the fleet (nothing contacted yet): ``run()`` applies them."""

    plays: list[Play]
    fleet: Fleet
    options: RunOptions
    playbook: str
    playbook_dir: str
    on_event: Listener | None = None

    def hosts(self, play: Play) -> list[str]:
        """The hosts ``play`` runs on (its pattern ∩ the limit)."""
        executor = Executor(self.fleet.inventory, self.options, EventStream(), self.playbook_dir)
        try:
            return executor.play_hosts(play)
        finally:
            executor.close()

    def tasks(self, play: Play) -> list[Task]:
        """The tasks of ``play`` the tags select."""
        return [t for t in play.tasks if task_selected(t, self.options.tags, self.options.skip_tags)]

    def run(self, on_event: Listener | None = None) -> RunResult:
        return execute(self.plays, self.fleet.inventory, self.options, self.playbook, self.playbook_dir,
                       on_event or self.on_event)  # fmt: skip


def execute(
    plays: list[Play],
    inventory: Inventory,
    options: RunOptions,
    playbook: str,
    playbook_dir: str,
    on_event: Listener | None = None,
) -> RunResult:
    """Run plays over the hosts (the engine: :class:`provision.executor.Executor`) and collect the results;
    prints nothing. ``on_event`` gets each event as it happens."""
    collected: list[TaskResult] = []

    def collect(event: Event) -> None:
        if isinstance(event, TaskFinished):
            collected.append(event.result)

    stream = EventStream(on_event, collect)
    executor = Executor(inventory, options, stream, playbook_dir)
    try:
        summary = executor.run(plays)
    finally:
        executor.close()
    result = RunResult(summary, collected, playbook, executor.internal_errors)
    try:
        stream.emit(RunFinished(summary))
    except Exception as exc:  # a listener's bug: the run happened; say so like any internal error
        result.internal_errors.append(InternalError(f"internal error in a listener: {type(exc).__name__}: {exc}", exc))
    return result


# ------------------------------------------------------------------------------------------------ playbooks
def plan_playbook(
    playbook: PathLike, hosts: Fleet | PathLike | Sequence[PathLike], **opts: Unpack[Options]
) -> PlannedRun:
    """Load and validate ``playbook`` (a file, else a shipped playbook of that name) for the fleet: YAML,
    modules and arguments, host patterns, variables per host, templates, and the PD layout when the playbook
    brings PD up. Raises :class:`InputError` (or :class:`UsageError`); contacts no host."""
    fleet = _fleet(hosts, opts.get("extra_vars"))
    path = str(find_playbook(os.fspath(playbook))[0])
    plays = load_playbook(path)
    options = run_options(fleet, opts)
    check_plan(plays, fleet.inventory, options.extra_vars, options.limit, options.start_at_task,
               playbook_dir_of(path), options.defaults)  # fmt: skip
    if any(task.module == "pd_validate" for play in plays for task in play.tasks):
        check_layout(fleet.inventory, options.extra_vars)  # site.yml, pd-up.yml: before the install, not after
    return PlannedRun(plays, fleet, options, path, playbook_dir_of(path), opts.get("on_event"))


def run_playbook(
    playbook: PathLike, hosts: Fleet | PathLike | Sequence[PathLike], **opts: Unpack[Options]
) -> RunResult:
    """Apply ``playbook`` (like ``provision run``): a file, or the name of a shipped playbook (``site.yml``,
    ``install.yml``, ... :func:`shipped_playbooks`) when no such file exists. Validates first (see
    :func:`plan_playbook`), then runs; the result's ``exit_code`` is the command line's."""
    return plan_playbook(playbook, hosts, **opts).run()


def plan_module(
    module: str,
    args: str | Mapping[str, Any] | None,
    hosts: Fleet | PathLike | Sequence[PathLike],
    *,
    become: bool = False,
    **opts: Unpack[Options],
) -> PlannedRun:
    """One module as a one-task play on the hosts of ``limit`` (all hosts without one), validated."""
    from .catalog import lookup, nearest

    fleet = _fleet(hosts, opts.get("extra_vars"))
    cls = lookup(module)
    if cls is None:
        raise InputError(f"unknown module {module!r}{nearest(module)}")
    raw: Any = dict(args) if isinstance(args, Mapping) else args
    if isinstance(raw, str):
        try:
            shlex.split(raw)
        except ValueError as exc:
            raise InputError(f"-a arguments: {exc} (the value is not shown: it may hold a secret)") from None
        if not cls.free_form:
            raw = raw or None
    parsed = parse_task({"name": module, module: raw}, "<command line>")
    options = run_options(fleet, opts)
    pattern = options.limit or "all"
    options.limit = None
    play = Play(name=f"ad hoc: {module}", hosts=pattern, file="<command line>", line=0, gather_facts=False,
                become=become, tasks=[parsed])  # fmt: skip
    check_plan([play], fleet.inventory, options.extra_vars, None, None, os.getcwd(), options.defaults)
    return PlannedRun([play], fleet, options, "adhoc.yml", playbook_dir_of("adhoc.yml"), opts.get("on_event"))


def run_module(
    module: str,
    args: str | Mapping[str, Any] | None,
    hosts: Fleet | PathLike | Sequence[PathLike],
    *,
    become: bool = False,
    **opts: Unpack[Options],
) -> RunResult:
    """Run one module on the hosts of ``limit`` (like ``provision task MODULE -a ARGS -l LIMIT``): ``args``
    as ``"k=v ..."`` / free-form text, or a mapping."""
    return plan_module(module, args, hosts, become=become, **opts).run()


# ------------------------------------------------------------------------------------------------ facts
@dataclass
class FactsResult:
    """Per host, in inventory order: its facts (a dict), or the :class:`HostError` that kept them from us."""

    hosts: dict[str, dict[str, Any] | HostError] = field(default_factory=dict)

    @property
    def facts(self) -> dict[str, dict[str, Any]]:
        return {name: value for name, value in self.hosts.items() if not isinstance(value, HostError)}

    @property
    def errors(self) -> dict[str, HostError]:
        return {name: value for name, value in self.hosts.items() if isinstance(value, HostError)}

    @property
    def exit_code(self) -> int:
        """0, 4 when a host was unreachable, else 2 when one failed (as ``provision facts``)."""
        codes = [EXIT_UNREACHABLE if isinstance(e, UnreachableError) else EXIT_FAILED for e in self.errors.values()]
        return max(codes, default=EXIT_OK)


def gather_facts(hosts: Fleet | PathLike | Sequence[PathLike], **opts: Unpack[Options]) -> FactsResult:
    """OS, Pythons, disk, GPUs, driver/CUDA, GPU topology, RDMA and NICs of every host of ``limit``, in
    parallel (like ``provision facts``); a read-only query (no run lock, no play: ``on_event`` gets nothing)."""
    from .facts import gather_hosts

    fleet = _fleet(hosts, opts.get("extra_vars"))
    options = run_options(fleet, opts)
    if options.limit:
        fleet.inventory.select(options.limit)
    return FactsResult(gather_hosts(fleet.inventory, options))


# ------------------------------------------------------------------------------------------------ PD
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


def _pd_run(path: Path, fleet: Fleet, options: RunOptions, on_event: Listener | None) -> PlannedRun:
    plays = load_playbook(path)
    check_plan(plays, fleet.inventory, options.extra_vars, options.limit, None, str(path.parent), options.defaults)
    return PlannedRun(plays, fleet, options, str(path), playbook_dir_of(str(path)), on_event)


def plan_pd_up(hosts: Fleet | PathLike | Sequence[PathLike], **opts: Unpack[Options]) -> PlannedRun:
    """``pd-up.yml`` for the fleet, the layout validated first; its ``pd_run_id`` marks what it starts."""
    fleet = _fleet(hosts, opts.get("extra_vars"))
    options = run_options(fleet, opts)
    options.extra_vars["pd_run_id"] = uuid.uuid4().hex[:12]
    check_layout(fleet.inventory, options.extra_vars)
    return _pd_run(playbook_path("pd-up.yml"), fleet, options, opts.get("on_event"))


def stop_run(planned: PlannedRun, on_event: Listener | None = None) -> list[str]:
    """Stop what the run of ``planned`` (a :func:`plan_pd_up`) started (``pd-down.yml`` with
    ``pd_only_run_id``): ``["prefill on gpu1", ...]``."""
    extra = {**planned.options.extra_vars, "pd_only_run_id": planned.options.extra_vars["pd_run_id"]}
    options = dataclasses.replace(planned.options, extra_vars=extra)
    path = playbook_path("pd-down.yml")
    result = execute(load_playbook(path), planned.fleet.inventory, options, str(path), str(path.parent), on_event)
    return [f"{r.data.get('name')} on {r.host}" for r in result.results
            if r.status is Status.CHANGED and r.data.get("action") == "stopped"]  # fmt: skip


def keep_failed_asked(planned: PlannedRun) -> bool:
    return to_bool(planned.options.extra_vars.get("pd_keep_failed", False), "pd_keep_failed")


@dataclass
class PdUpResult(RunResult):
    """``pd_up``'s run, and, when it failed, what of it was stopped again (``stopped``) unless kept."""

    stopped: list[str] = field(default_factory=list)
    kept: bool = False  # a failed run's processes were left running (keep_failed)


def pd_up(
    hosts: Fleet | PathLike | Sequence[PathLike], *, keep_failed: bool = False, **opts: Unpack[Options]
) -> PdUpResult:
    """Validate the PD layout, start prefill → decode → router and verify one real generation (like ``provision
    pd up``). When it fails, the processes THIS run started are stopped again unless ``keep_failed`` (or
    ``extra_vars={"pd_keep_failed": True}``)."""
    planned = plan_pd_up(hosts, **opts)
    run = planned.run()
    out = PdUpResult(run.summary, run.results, run.playbook, run.internal_errors)
    if out.exit_code in (EXIT_OK, EXIT_INTERRUPTED):
        return out
    if keep_failed or keep_failed_asked(planned):
        out.kept = True
        return out
    out.stopped = stop_run(planned)
    return out


def plan_pd_down(hosts: Fleet | PathLike | Sequence[PathLike], **opts: Unpack[Options]) -> PlannedRun:
    fleet = _fleet(hosts, opts.get("extra_vars"))
    return _pd_run(playbook_path("pd-down.yml"), fleet, run_options(fleet, opts), opts.get("on_event"))


def pd_down(hosts: Fleet | PathLike | Sequence[PathLike], **opts: Unpack[Options]) -> RunResult:
    """Stop router, decode and prefill (``pd-down.yml``; idempotent)."""
    return plan_pd_down(hosts, **opts).run()


def _quiet_play(module: str, hosts: str, args: dict[str, Any] | None = None) -> Play:
    task = parse_task({"name": module, module: args}, f"<pd {module}>")
    return Play(name=f"pd: {module}", hosts=hosts, file=f"<pd {module}>", line=0, gather_facts=False, tasks=[task])


def _query(play: Play, fleet: Fleet, opts: Options) -> list[TaskResult]:
    """A read-only PD query: no run lock (it may run beside a run holding the hosts)."""
    options = run_options(fleet, opts)
    options.run_lock = False
    path = playbook_path("pd-up.yml")
    return execute([play], fleet.inventory, options, str(path), str(path.parent), opts.get("on_event")).results


@dataclass
class PdStatus:
    """One row per process the inventory describes: ``host``, ``role``, ``name``, ``port``, ``running``,
    ``pid``, ``uptime``, ``health`` (HTTP status); ``unreachable``/``error`` when its host could not say."""

    rows: list[dict[str, Any]]
    errors: dict[str, str] = field(default_factory=dict)  # host → why it could not say

    @property
    def up(self) -> bool:
        return all_up(self.rows)

    @property
    def exit_code(self) -> int:
        if any(r.get("unreachable") for r in self.rows):
            return EXIT_UNREACHABLE
        return EXIT_OK if self.up else EXIT_FAILED


def _expected_rows(inventory: Inventory, extra: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per process the inventory describes (filled in from the hosts; unreachable ones stay so)."""
    try:
        deployment = build(inventory_pd_vars(inventory, extra))
    except PlanError as exc:
        raise InputError(str(exc)) from None
    return [{"host": p.host, "role": p.role, "name": p.name, "port": p.port, "running": False}
            for p in deployment.procs]  # fmt: skip


def pd_status(
    hosts: Fleet | PathLike | Sequence[PathLike], *, metrics: bool = False, **opts: Unpack[Options]
) -> PdStatus:
    """Each PD process: state, pid, uptime, health, port, supervisor, restarts (like ``provision pd status``).
    Read-only, but for one repair: a host's supervisor that died is started again (it adopts what runs).
    ``metrics``: each server's row also gets ``metrics`` (its ``sglang:`` samples from ``/metrics``, read on its
    host) or ``metrics_error``."""
    fleet = _fleet(hosts, opts.get("extra_vars"))
    extra = run_options(fleet, opts).extra_vars
    rows = _expected_rows(fleet.inventory, extra)
    if not rows:
        raise InputError("no PD process in the inventory: put hosts in the groups prefill, decode and router")
    limit = opts.get("limit", fleet.limit)
    allowed = {h.name for h in fleet.inventory.select(limit)} if limit else None
    results = _query(_quiet_play("pd_status", PD_HOSTS), fleet, opts)
    found = {(r["host"], r["role"]): r for res in results for r in res.data.get("procs", [])}
    broken = {res.host: res for res in results if res.status in (Status.UNREACHABLE, Status.FAILED)}
    out = []
    for row in rows:
        if allowed is not None and row["host"] not in allowed:
            continue
        if row["host"] in broken:
            res = broken[row["host"]]
            row = {**row, "unreachable": res.status is Status.UNREACHABLE, "error": res.msg}
        out.append({**row, **found.get((row["host"], row["role"]), {})})
    if metrics:
        answers = _query(_quiet_play("pd_metrics", PD_HOSTS), fleet, opts)
        read = {(res.host, res.data.get("role")): res for res in answers if res.status is not Status.SKIPPED}
        for row in out:
            got = read.get((row["host"], row["role"]))
            if got is not None:
                row["metrics"] = got.data.get("metrics") or {}
                row["metrics_error"] = got.data.get("metrics_error") or (got.msg if got.failed else None)
    return PdStatus(out, {host: res.msg for host, res in broken.items()})


def pd_serving_paths(hosts: Fleet | PathLike | Sequence[PathLike], **opts: Unpack[Options]) -> list[dict[str, Any]]:
    """What each server really runs, from its own ``/server_info`` (attention backend, CUDA graphs, sampling,
    radix cache, warm-up, quantization) and a warning per known slow fallback on a GPU
    (:func:`provision.pd.bench.serving_path`): ``[{"host", "role", "path"}]``; read-only."""
    fleet = _fleet(hosts, opts.get("extra_vars"))
    results = _query(_quiet_play("pd_serving_path", PD_HOSTS), fleet, opts)
    out = []
    for r in results:
        if r.status is Status.SKIPPED:
            continue
        path = r.data.get("path") if not r.failed else {"error": r.msg, "warnings": []}
        out.append({"host": r.host, "role": r.data.get("role", "?"), "path": path or {"warnings": []}})
    return out


def pd_targets(hosts: Fleet | PathLike | Sequence[PathLike], **opts: Unpack[Options]) -> list[dict[str, Any]]:
    """Prometheus ``file_sd`` JSON of every server (``/metrics`` on its port, ``pd_metrics``) and router (its
    ``router_prometheus_port``), labelled job/role/host/machine/name; from the inventory alone (no host touched)."""
    from .pd.bench import targets

    fleet = _fleet(hosts, opts.get("extra_vars"))
    extra = {**fleet.extra_vars, **_extra(opts.get("extra_vars"))}
    try:
        return targets(build(inventory_pd_vars(fleet.inventory, extra)))
    except PlanError as exc:
        raise InputError(str(exc)) from None


@dataclass
class PdLogs:
    """The tail of each process's log (``host``, ``role``, ``log``, ``lines``) and hosts that could not say."""

    entries: list[dict[str, Any]]
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if self.errors else EXIT_OK


def pd_logs(
    hosts: Fleet | PathLike | Sequence[PathLike], *, role: str = "all", lines: int = 50, **opts: Unpack[Options]
) -> PdLogs:
    """The last ``lines`` lines of each process's log (``role``: all, prefill, decode, router); read-only."""
    fleet = _fleet(hosts, opts.get("extra_vars"))
    results = _query(_quiet_play("pd_logs", PD_HOSTS, {"role": role, "lines": lines}), fleet, opts)
    entries = [entry for res in results for entry in res.data.get("logs", [])]
    failed = {res.host: res.msg for res in results if res.status in (Status.FAILED, Status.UNREACHABLE)}
    return PdLogs(entries, failed)


@dataclass
class PdVerify:
    """One real generation through each router: per router host its ``TaskResult`` (``data``: the completion,
    latency, TTFT)."""

    results: list[TaskResult]

    @property
    def exit_code(self) -> int:
        if any(r.status is Status.UNREACHABLE for r in self.results):
            return EXIT_UNREACHABLE
        return EXIT_FAILED if any(r.failed for r in self.results) else EXIT_OK


def pd_verify(
    hosts: Fleet | PathLike | Sequence[PathLike],
    *,
    prompt: str = "Hello world",
    max_new_tokens: int = 8,
    verify_timeout: float = 60.0,
    all_pairs: bool = False,
    parallel: int = 8,
    **opts: Unpack[Options],
) -> PdVerify:
    """Generate through each router (like ``provision pd verify``); read-only. With ``all_pairs``, instead, one
    generation pinned to every prefill x decode pair, sent from the first router host (``parallel`` at once):
    that host's result has ``data["pairs"]`` (:meth:`provision.pd.pairs.PairsReport.to_dict`).
    :class:`InputError` when no router host is left to verify through."""
    fleet = _fleet(hosts, opts.get("extra_vars"))
    args: dict[str, Any] = {"prompt": prompt, "max_new_tokens": max_new_tokens, "timeout": verify_timeout}
    if all_pairs:
        args.update(router=False, all_pairs=True, parallel=parallel,
                    same_tokens="{{ pd_verify_same_tokens | default(true) }}")  # fmt: skip
    results = [r for r in _query(_quiet_play("pd_verify", "router:serve", args), fleet, opts)
               if r.status is not Status.SKIPPED]  # fmt: skip
    if not results:
        raise InputError("no router host to verify through (group 'router' is empty or excluded by --limit)")
    return PdVerify(results)


def rollout_runner(fleet: Fleet, opts: Options) -> RunTasks:
    """``run(hosts, tasks)`` for :func:`provision.pd.rollout.rollout`: one play of the task dicts, run with the
    executor (a run lock per host, like any run); each host's results in task order."""
    options = run_options(fleet, opts)
    options.limit = None  # the rollout picks its hosts itself (``only``)
    path = playbook_path("pd-up.yml")  # templates resolve as in pd-up.yml

    def run(hosts: list[str], tasks: list[dict[str, Any]]) -> dict[str, list[RolloutStep]]:
        play = Play(name="pd rollout", hosts=":".join(hosts), file="<pd rollout>", line=0, gather_facts=False,
                    tasks=[parse_task(t, "<pd rollout>") for t in tasks])  # fmt: skip
        out: dict[str, list[RolloutStep]] = {}
        for r in execute([play], fleet.inventory, options, str(path), str(path.parent), opts.get("on_event")).results:
            ok = r.ignored or r.status not in (Status.FAILED, Status.UNREACHABLE)
            out.setdefault(r.host, []).append(RolloutStep(r.host, r.task, ok, r.changed, r.status is Status.SKIPPED,
                                                          r.msg, dict(r.data), r.duration))  # fmt: skip
        return out

    return run


def pd_rollout(
    hosts: Fleet | PathLike | Sequence[PathLike],
    *,
    rollout_options: RolloutOptions | None = None,
    progress: RolloutProgress | None = None,
    **opts: Unpack[Options],
) -> RolloutResult:
    """A change applied to a SERVING deployment batch by batch (``provision pd rollout``; docs/pd.md): the
    layout checked first (:class:`InputError`), then :func:`provision.pd.rollout.rollout`. ``limit`` picks
    the servers to roll; the plan, the routers and the peers stay the whole inventory. Prints nothing."""
    fleet = _fleet(hosts, opts.get("extra_vars"))
    extra = {**fleet.extra_vars, **_extra(opts.get("extra_vars"))}
    check_layout(fleet.inventory, extra)
    options = rollout_options or RolloutOptions()
    limit = opts.get("limit", fleet.limit)
    if limit:
        options.only = frozenset(h.name for h in fleet.inventory.select(limit))
    for name, key in (("server_timeout", "pd_server_timeout"), ("verify_timeout", "pd_verify_timeout")):
        if extra.get(key) is not None:
            setattr(options, name, float(extra[key]))
    pd_vars = inventory_pd_vars(fleet.inventory, extra)
    routers = [h for h in fleet.inventory.groups_map().get("router", ()) if h in pd_vars] or list(pd_vars)
    first = pd_vars[routers[0]] if routers else None  # the router's host sends the pairs: its vars say
    for name, key in (("all_pairs", "pd_verify_all_pairs"), ("same_tokens", "pd_verify_same_tokens")):
        if first is not None and first.get(key) is not None:
            setattr(options, name, to_bool(first.get(key), key))
    return rollout(pd_vars, rollout_runner(fleet, opts), options, progress=progress)


# ------------------------------------------------------------------------------------------------ model sync
MODEL_HOSTS = "prefill:decode"


def model_sync(
    hosts: Fleet | PathLike | Sequence[PathLike],
    src: str,
    *,
    fanout: bool = True,
    slots: int = 2,
    chunk_mb: int = 64,
    on_line: Callable[[str], None] | None = None,
    **opts: Unpack[Options],
) -> SyncResult:
    """Sync the model directory ``src`` (a controller directory, ``HOST:DIR`` on a seed host, or a hub id
    ``org/name[@rev]`` from the controller's Hugging Face cache) to every selected host's ``model_path``
    (:mod:`provision.model.sync`). The hosts: ``limit``, else the ``prefill`` and ``decode`` groups, else all.
    ``fanout``: hosts that completed serve the others; ``slots``: transfers at once per source. ``on_line``:
    progress lines. Bad input (no such source, a host without a directory ``model_path``) raises
    :class:`InputError` before any host is contacted; a host's failure is in the result (``exit_code``)."""
    from .model.source import SourceError, resolve
    from .model.sync import Sync, Target

    fleet = _fleet(hosts, opts.get("extra_vars"))
    options = run_options(fleet, opts)
    inventory = fleet.inventory
    if slots < 1 or chunk_mb < 1:
        raise UsageError("--slots and --chunk-mb must be at least 1")
    try:
        source = resolve(src, list(inventory.hosts))
    except SourceError as exc:
        raise InputError(str(exc)) from None
    limit = options.limit
    if not limit:
        groups = inventory.groups_map()
        limit = ":".join(g for g in MODEL_HOSTS.split(":") if groups.get(g)) or "all"
    names = [h.name for h in inventory.select(limit) if h.name != source.host]
    if not names:
        raise InputError(f"no host to sync to (limit {limit})")
    shipped = defaults()
    values = {n: templating.Vars(shipped, inventory.hosts[n].vars, options.extra_vars, magic_vars(inventory, n))
              for n in [*names, *([source.host] if source.host else [])]}  # fmt: skip
    problems = []
    for name in names:
        path = values[name]["model_path"]
        if not path:
            problems.append(f"{name}: model_path is not set (the directory to sync the model into)")
        elif not str(path).startswith(("/", "~")):
            problems.append(f"{name}: model_path {path} is not a directory path (/... or ~/...): a hub id is "
                            "resolved on the controller: pass it as --src, model_path is a directory")  # fmt: skip
    if problems:
        raise InputError("cannot sync the model:\n  - " + "\n  - ".join(problems))

    def address(name: str) -> str:
        v = values[name]
        return str(v.get("model_sync_address") or v.get("ansible_host") or name)

    def context(name: str) -> ModuleContext:
        conn = open_connection(name, inventory.hosts[name].vars, options.connect)
        return ModuleContext(host=name, conn=conn, variables=values[name], timeout=options.command_timeout)

    targets = []
    for name in names:
        reserve = int(float(values[name]["model_sync_reserve_gb"] or 0) * 1e9)
        targets.append(Target(name, context(name), str(values[name]["model_path"]), address(name), reserve))
    seed = context(source.host) if source.host else None
    sync = Sync(source, targets, seed=seed, fanout=fanout, slots=slots, chunk=chunk_mb << 20, check=options.check,
                forks=options.forks, timeout=options.command_timeout, on_line=on_line,
                seed_address=address(source.host) if source.host else "")  # fmt: skip
    try:
        return sync.run()
    finally:
        for target in targets:
            target.ctx.conn.close()
        if seed is not None:
            seed.conn.close()


@dataclass
class PdExport:
    """``pd_export``'s result: the files (relative path → text) and, when written, where."""

    target: str
    files: dict[str, str]
    validated: list[str]  # each custom object and the schema it was validated against
    modes: dict[str, int] = field(default_factory=dict)  # path → mode where not 0644 (the scripts: 0755)
    directory: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_OK


def pd_export(
    hosts: Fleet | PathLike | Sequence[PathLike],
    *,
    to: str,
    output: PathLike | None = None,
    name: str | None = None,
    image: str | None = None,
    router_image: str | None = None,
    wheelhouse: PathLike | None = None,
    **opts: Unpack[Options],
) -> PdExport:
    """The PD deployment as Kubernetes objects (``to="rbg"``: a RoleBasedGroup; ``"lws"``: LeaderWorkerSets)
    or a Slurm job (``"slurm"``), from the plan ``pd up`` runs: the layout checked first (the same refusals,
    :class:`InputError`), the custom objects validated against their CRDs' vendored schemas, every file written
    into ``output`` (atomically, never through a link) when given. Touches no host. ``name``, ``image``,
    ``router_image`` default to the vars ``pd_export_name``, ``pd_export_image``, ``pd_export_router_image``;
    ``wheelhouse``: a ``provision wheelhouse`` directory whose lock the Containerfile installs. docs/export.md."""
    from .localfiles import replace_file
    from .pd.export import ExportOptions, export
    from .pd.export.common import first_var
    from .stack.wheelhouse import WheelhouseError, read_manifest

    fleet = _fleet(hosts, opts.get("extra_vars"))
    extra = {**fleet.extra_vars, **_extra(opts.get("extra_vars"))}
    check_layout(fleet.inventory, extra)
    deployment = build(inventory_pd_vars(fleet.inventory, extra))
    options = ExportOptions()
    for attr, given, key in (("name", name, "pd_export_name"), ("image", image, "pd_export_image"),
                             ("router_image", router_image, "pd_export_router_image")):  # fmt: skip
        value = given if given is not None else first_var(deployment, key)
        if value is not None:
            setattr(options, attr, str(value))
    timeout = first_var(deployment, "pd_verify_timeout")
    if timeout is not None:
        options.verify_timeout = float(timeout)
    try:
        if wheelhouse is not None:
            options.wheelhouse = read_manifest(os.fspath(wheelhouse))
        result = export(deployment, to, options)
    except (PlanError, WheelhouseError) as exc:
        raise InputError(f"pd export: {exc}") from None
    directory = None
    if output is not None:
        root = Path(output)
        try:
            root.mkdir(parents=True, exist_ok=True)
            for rel, text in sorted(result.files.items()):
                path = root / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                replace_file(path, text, result.modes.get(rel, 0o644))
                os.chmod(path, result.modes.get(rel, 0o644))  # the umask narrowed it (a file replace_file just made)
        except OSError as exc:
            raise InputError(f"pd export: cannot write {output}: {exc.strerror or exc}") from None
        directory = str(root)
    return PdExport(to, result.files, result.validated, dict(result.modes), directory)


@dataclass
class BenchOptions:
    """What ``provision pd bench`` measures: the dataset (random token ids of ``input_len``, ``output_len``;
    ``num_prompts`` per point), the sweep (``concurrency`` and/or ``request_rate``: one point each), the
    ``warmup`` requests before each point, the SLO gates (:func:`provision.pd.bench.parse_slo`)."""

    input_len: int = 512
    output_len: int = 128
    num_prompts: int = 64
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 16])
    request_rate: list[float] = field(default_factory=list)
    warmup: int = 1
    timeout: float = 1800.0
    slo: str | None = None


@dataclass
class BenchResult:
    """``doc``: bench.json (:func:`provision.pd.bench_report.write`); ``misses``: the SLO misses; ``errors``:
    points that failed outright (a host's answer)."""

    doc: dict[str, Any]
    misses: list[dict[str, Any]]
    errors: list[str]

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if self.misses or self.errors else EXIT_OK


BenchProgress = Callable[[int, int, dict[str, Any], float], None]  # (done, total, point, elapsed seconds)


def pd_bench(
    hosts: Fleet | PathLike | Sequence[PathLike],
    *,
    bench: BenchOptions | None = None,
    progress: BenchProgress | None = None,
    **opts: Unpack[Options],
) -> BenchResult:
    """Sweep load points through each router (a colocated inventory: each ``serve`` server) with the installed
    SGLang's ``bench_serving``, run on that host; read-only for the deployment. Bad options or layout raise
    :class:`InputError` before any host is touched. Prints nothing; ``progress`` is called after each point."""
    from .pd import bench as pdbench

    options = bench or BenchOptions()
    fleet = _fleet(hosts, opts.get("extra_vars"))
    extra = {**fleet.extra_vars, **_extra(opts.get("extra_vars"))}
    try:
        gates = pdbench.parse_slo(options.slo)
        for name, value, low, high in (("--input-len", options.input_len, 1, 1 << 20),
                                       ("--output-len", options.output_len, 1, 1 << 20),
                                       ("--num-prompts", options.num_prompts, 1, 1 << 20),
                                       ("--warmup", options.warmup, 0, 10000)):  # fmt: skip
            if not low <= int(value) <= high:
                raise PlanError(f"{name}={value} is out of range {low}..{high}")
        deployment = build(inventory_pd_vars(fleet.inventory, extra))
    except PlanError as exc:
        raise InputError(str(exc)) from None
    check_layout(fleet.inventory, extra)
    points: list[tuple[int | None, float | None]] = [(int(c), None) for c in options.concurrency]
    points += [(None, float(r)) for r in options.request_rate]
    if not points:
        raise InputError("pd bench: nothing to measure: give --concurrency and/or --request-rate")
    started, done_points, errors = time.monotonic(), [], []
    info: dict[str, Any] = {}
    versions: dict[str, Any] = {}
    for i, (conc, rate) in enumerate(points):
        args = {"input_len": options.input_len, "output_len": options.output_len,
                "num_prompts": options.num_prompts, "concurrency": conc, "request_rate": rate,
                "warmup": options.warmup, "timeout": options.timeout, "server_info": i == 0}  # fmt: skip
        results = [r for r in _query(_quiet_play("pd_bench", "router:serve", args), fleet, opts)
                   if r.status is not Status.SKIPPED]  # fmt: skip
        if not results:
            raise InputError("pd bench: no router (or colocated serve) host to measure through")
        for r in results:
            answer = r.data.get("bench") or {}
            point: dict[str, Any] = {"concurrency": conc, "request_rate": rate, "host": r.host,
                                     "target": answer.get("target"), "ok": not r.failed,
                                     "argv": answer.get("argv"), "seconds": answer.get("seconds")}  # fmt: skip
            if answer.get("result"):
                point.update(pdbench.point_record(answer["result"], options.num_prompts))
            if r.failed:
                point["error"] = r.msg
                errors.append(f"{r.host}: {pdbench.point_label(point)}: {r.msg}")
            info.update(answer.get("server_info") or {})
            versions = versions or answer.get("versions") or {}
            done_points.append(point)
            if progress is not None:
                progress(i + 1, len(points), point, time.monotonic() - started)
    device = next((p.device for p in deployment.hosts.values() if p.server), "cuda")
    paths = {url: pdbench.serving_path(doc, device) for url, doc in info.items()}
    misses = pdbench.check_slo(done_points, gates)
    doc = {
        "kind": "colocated" if deployment.colocated else "pd",
        "device": device,
        "dataset": {"name": "random-ids", "input_len": options.input_len, "output_len": options.output_len,
                    "num_prompts": options.num_prompts, "warmup": options.warmup, "range_ratio": 1},
        "versions": versions, "layout": pdbench.layout(deployment), "serving_path": paths,
        "points": done_points, "slo": [g.text for g in gates], "slo_misses": misses,
        "seconds": round(time.monotonic() - started, 3),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip
    return BenchResult(masked(doc), misses, errors)
