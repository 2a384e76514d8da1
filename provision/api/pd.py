"""The PD verbs: ``pd up`` (:func:`plan_pd_up`, :func:`pd_up`, the cleanup policy of a failed up:
:func:`clean_up_failed_up`), ``pd down``, :func:`pd_status`, :func:`pd_logs`, :func:`pd_verify`,
:func:`pd_serving_paths`, :func:`pd_targets`, :func:`pd_rollout` (over :func:`rollout_runner`), :func:`pd_scale`.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..data import playbook_path
from ..errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    InputError,
)
from ..events import (
    Listener,
)
from ..executor import playbook_dir_of
from ..inventory import Inventory
from ..modules.arg_types import to_bool
from ..pd import PlanError, build
from ..pd.rollout import Progress as RolloutProgress
from ..pd.rollout import RolloutOptions, RolloutResult, RunTasks, rollout
from ..pd.rollout import Step as RolloutStep
from ..pd.scale import ScaleResult, removed_hosts, scale
from ..pd.status import all_up, mark_unrouted, table
from ..plan import check_plan
from ..playbook import Play, load_playbook, parse_task
from ..results import Status, TaskResult
from ..state import RunOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack


from .fleet import PD_HOSTS, Fleet, Options, PathLike, _extra, _fleet, run_options
from .layout import check_layout, inventory_pd_vars
from .runs import PlannedRun, RunResult, execute


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


def clean_up_failed_up(
    planned: PlannedRun, exit_code: int, *, keep_failed: bool = False, on_event: Listener | None = None
) -> list[str] | None:
    """THE cleanup policy of a ``pd up`` run (the API's, the CLI's and the Fabric task's): when it failed (not
    ok, not interrupted), what it started is stopped again unless ``keep_failed`` or ``-e pd_keep_failed=true``.
    Returns what was stopped, or None when nothing was (the run passed, was interrupted, or is kept)."""
    if exit_code in (EXIT_OK, EXIT_INTERRUPTED) or keep_failed or keep_failed_asked(planned):
        return None
    return stop_run(planned, on_event)


def stopped_line(stopped: list[str]) -> str:
    """The one line a front end shows after :func:`clean_up_failed_up` stopped ``stopped``."""
    what = ", ".join(stopped) if stopped else "nothing was left running"
    return f"pd up failed; stopped what this run started: {what}"


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
    stopped = clean_up_failed_up(planned, out.exit_code, keep_failed=keep_failed)
    if stopped is None:
        out.kept = out.exit_code not in (EXIT_OK, EXIT_INTERRUPTED)
    else:
        out.stopped = stopped
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
    ``pid``, ``uptime``, ``health`` (HTTP status); ``unreachable``/``error`` when its host could not say; a
    running router's ``workers`` (``url``, ``healthy``: what it lists) or ``workers_error``; a server's
    ``unrouted``: the routers that do not list it (then not :attr:`up`)."""

    rows: list[dict[str, Any]]
    errors: dict[str, str] = field(default_factory=dict)  # host → why it could not say

    @property
    def up(self) -> bool:
        return all_up(self.rows)

    def table(self) -> str:
        """The status table, as ``provision pd status`` and the Fabric task print it."""
        return table(self.rows)

    def error_lines(self) -> list[str]:
        """One ``HOST: why`` line per host that could not say (for stderr)."""
        return [f"{host}: {msg}" for host, msg in self.errors.items()]

    @property
    def exit_code(self) -> int:
        if any(r.get("unreachable") for r in self.rows):
            return EXIT_UNREACHABLE
        return EXIT_OK if self.up else EXIT_FAILED


def _expected_rows(inventory: Inventory, extra: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """One row per process the inventory describes (filled in from the hosts; unreachable ones stay so), and
    the servers every router must list (name → URL)."""
    try:
        deployment = build(inventory_pd_vars(inventory, extra))
    except PlanError as exc:
        raise InputError(str(exc)) from None
    rows = [{"host": p.host, "role": p.role, "name": p.name, "port": p.port, "running": False}
            for p in deployment.procs]  # fmt: skip
    return rows, {p.name: p.url for p in (*deployment.prefill, *deployment.decode)}


def pd_status(
    hosts: Fleet | PathLike | Sequence[PathLike], *, metrics: bool = False, **opts: Unpack[Options]
) -> PdStatus:
    """Each PD process: state, pid, uptime, health, port, supervisor, restarts (like ``provision pd status``).
    Read-only, but for one repair: a host's supervisor that died is started again (it adopts what runs).
    ``metrics``: each server's row also gets ``metrics`` (its ``sglang:`` samples from ``/metrics``, read on its
    host) or ``metrics_error``."""
    fleet = _fleet(hosts, opts.get("extra_vars"))
    extra = run_options(fleet, opts).extra_vars
    rows, workers = _expected_rows(fleet.inventory, extra)
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
    mark_unrouted(out, workers)
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
    from ..pd.bench import targets

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

    def lines(self, clip: Callable[[str], str] = str) -> list[str]:
        """One ``HOST: ok|FAILED: message`` line per router host (``clip`` shortens the message)."""
        return [f"{r.host}: {'ok' if not r.failed else 'FAILED'}: {clip(str(r.msg))}" for r in self.results]

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
    if extra.get("pd_verify_timeout") is not None:  # pd_server_timeout: each host's own, from its pd fact
        options.verify_timeout = float(extra["pd_verify_timeout"])
    pd_vars = inventory_pd_vars(fleet.inventory, extra)
    routers = [h for h in fleet.inventory.groups_map().get("router", ()) if h in pd_vars] or list(pd_vars)
    first = pd_vars[routers[0]] if routers else None  # the router's host sends the pairs: its vars say
    for name, key in (("all_pairs", "pd_verify_all_pairs"), ("same_tokens", "pd_verify_same_tokens")):
        if first is not None and first.get(key) is not None:
            setattr(options, name, to_bool(first.get(key), key))
    return rollout(pd_vars, rollout_runner(fleet, opts), options, progress=progress)


# ------------------------------------------------------------------------------------------------ model sync


def pd_scale(
    hosts: Fleet | PathLike | Sequence[PathLike],
    *,
    add: Sequence[str] = (),
    remove: Sequence[str] = (),
    rollout_options: RolloutOptions | None = None,
    **opts: Unpack[Options],
) -> ScaleResult:
    """Servers added to / removed from a serving deployment, the routers not restarted (``provision pd scale``;
    :mod:`provision.pd.scale`). The new servers start as ``pd up`` starts them (``pd-up.yml`` on them alone)."""
    fleet = _fleet(hosts, opts.get("extra_vars"))
    extra = {**fleet.extra_vars, **_extra(opts.get("extra_vars"))}
    pd_vars = inventory_pd_vars(fleet.inventory, extra)
    after: Options = {**opts, "extra_vars": {**extra, "pd_scale_removed": removed_hosts(pd_vars, list(remove))}}

    def start(names: list[str]) -> tuple[bool, str]:
        only: Options = {**opts, "limit": ",".join(names)}
        planned = plan_pd_up(fleet, **only)
        done = planned.run(opts.get("on_event"))
        failed = next((r for r in done.results if r.status in (Status.FAILED, Status.UNREACHABLE) and not r.ignored),
                      None)  # fmt: skip
        return done.ok, (f"{failed.host}: {failed.task}: {failed.msg}" if failed else "")

    return scale(pd_vars, rollout_runner(fleet, opts), rollout_runner(fleet, after), start, list(add), list(remove),
                 rollout_options)  # fmt: skip
