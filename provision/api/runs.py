"""Runs of playbooks and modules: :class:`PlannedRun` (:func:`plan_playbook`, :func:`plan_module`: validated,
nothing contacted), :func:`execute`, :class:`RunResult` (:func:`run_playbook`, :func:`run_module`),
:class:`FactsResult` (:func:`gather_facts`).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..data import find_playbook
from ..errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    HostError,
    InputError,
    UnreachableError,
)
from ..events import (
    Event,
    EventStream,
    Listener,
    Message,
    RunFinished,
    TaskFinished,
)
from ..executor import Executor, InternalError, playbook_dir_of, task_selected
from ..inventory import Inventory
from ..plan import check_plan
from ..playbook import Play, Task, load_playbook, parse_task
from ..report import write_retry_file
from ..results import RunSummary, TaskResult
from ..state import RunOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack


from .fleet import Fleet, Options, PathLike, _fleet, run_options
from .layout import check_layout


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
    for warning in dict.fromkeys(w for play in plays for w in play.warnings):  # what the checks put off
        stream.emit(Message(f"[WARNING]: {warning}"))
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
    from ..catalog import lookup, nearest

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
    from ..facts import gather_hosts

    fleet = _fleet(hosts, opts.get("extra_vars"))
    options = run_options(fleet, opts)
    if options.limit:
        fleet.inventory.select(options.limit)
    return FactsResult(gather_hosts(fleet.inventory, options))


# ------------------------------------------------------------------------------------------------ PD
