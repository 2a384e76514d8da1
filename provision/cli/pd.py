"""``provision pd up | down | status | logs | verify``: the PD deployment as one command each.

* ``up``: validate the layout on the inventory alone (exit 5 before anything runs), then
  ``playbooks/pd-up.yml`` (prefill → decode → router → a real generation). When the run fails, the processes
  THIS run started are stopped (``pd-down.yml`` with ``pd_only_run_id``) unless ``--keep-failed`` or
  ``-e pd_keep_failed=true``: nothing is left running that claims to be up. Exit 2.
* ``down``: ``playbooks/pd-down.yml`` (idempotent).
* ``status``: a table (host, role, state, pid, uptime, health, port); exit 0 when every process is up and
  healthy, 2 when one is not, 4 when a host is unreachable.
* ``logs``: the tail of each process's log (``--role``, ``-n``).
* ``verify``: one real generation through each router: text, latency, TTFT.
* ``rollout``: a rolling update of the changed servers, batch by batch, drained through the routers, verified,
  rolled back on failure (:mod:`provision.pd.rollout` does the work; this prints it).

Registered in the main group by ``cli.add_command(pd)`` (:mod:`.app`). Imports :mod:`.common` and the
engine, never :mod:`.app`.
"""

from __future__ import annotations

import io
import json
import sys
import uuid
from typing import Any

import click

from .. import templating
from ..commands import MASKER
from ..data import defaults, playbook_path
from ..errors import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, InputError
from ..executor import Executor
from ..inventory import Inventory
from ..magic import magic_vars
from ..modules.base import to_bool
from ..pd import PlanError, build, pd_host_names, validate_pd
from ..pd.rollout import (
    BatchReport,
    RolloutOptions,
    RolloutResult,
    RunTasks,
    Step,
    render,
    render_batch,
    render_end,
    render_plan,
    rollout,
)
from ..pd.status import all_up, table
from ..plan import check_plan
from ..playbook import Play, load_playbook, parse_task
from ..report import Reporter
from ..results import Status, TaskResult
from ..state import RunOptions
from .common import Seconds, common_options, execute, load_inventory, parse_extra_vars, run_options

PD_HOSTS = "prefill:decode:router"


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


class _Collector(Reporter):
    """A reporter that keeps every task result and writes its human output aside (shown with -v)."""

    def __init__(self, verbosity: int) -> None:
        super().__init__(stream=sys.stderr if verbosity else io.StringIO(), verbosity=max(0, verbosity - 1))
        self.results: list[TaskResult] = []

    def task_result(self, result: TaskResult) -> None:
        super().task_result(result)
        self.results.append(result)


def _quiet_play(module: str, hosts: str, args: dict[str, Any] | None = None) -> Play:
    task = parse_task({"name": module, module: args}, f"<pd {module}>")
    return Play(name=f"pd: {module}", hosts=hosts, file=f"<pd {module}>", line=0, gather_facts=False, tasks=[task])


def _run_quiet(plays: list[Play], inventory: Inventory, options: RunOptions) -> list[TaskResult]:
    reporter = _Collector(options.verbosity)
    executor = Executor(inventory, options, reporter, str(playbook_path("pd-up.yml").parent))
    try:
        executor.run(plays)
    finally:
        executor.close()
    return reporter.results


def _setup(kw: dict[str, Any], **more_extra: Any) -> tuple[Inventory, dict[str, Any], RunOptions]:
    extra = parse_extra_vars(kw["extra_vars"])
    inventory = load_inventory(kw["inventories"], extra)
    extra.update(more_extra)
    return inventory, extra, run_options(kw, extra)


@click.group("pd")
def pd() -> None:
    """Bring up, stop, inspect and verify the PD deployment (prefill → decode → router over NIXL/UCX)."""


@pd.command("up")
@common_options
@click.option("--keep-failed", is_flag=True, help="leave what a failed run started running (for debugging)")
def up(keep_failed: bool, **kw: Any) -> int:
    """Validate, then start prefill → decode → router and verify one real generation."""
    run_id = uuid.uuid4().hex[:12]
    inventory, extra, options = _setup(kw, pd_run_id=run_id)
    check_layout(inventory, extra)
    path = playbook_path("pd-up.yml")
    plays = load_playbook(path)
    check_plan(plays, inventory, extra, options.limit, None, str(path.parent), options.defaults)
    code = execute(plays, inventory, options, json_mode=kw["json_mode"], playbook=str(path))
    if code in (EXIT_OK, 130) or keep_failed or to_bool(extra.get("pd_keep_failed", False), "pd_keep_failed"):
        if code not in (EXIT_OK, 130):
            click.echo("pd up: the processes of this run were left running (--keep-failed)", err=True)
        return code
    down_options = run_options(kw, {**extra, "pd_only_run_id": run_id})
    results = _run_quiet(load_playbook(playbook_path("pd-down.yml")), inventory, down_options)
    stopped = [f"{r.data.get('name')} on {r.host}" for r in results
               if r.status is Status.CHANGED and r.data.get("action") == "stopped"]  # fmt: skip
    what = ", ".join(stopped) if stopped else "nothing was left running"
    click.echo(MASKER.mask(f"pd up failed; stopped what this run started: {what}"), err=True)
    return code


@pd.command("down")
@common_options
def down(**kw: Any) -> int:
    """Stop router, decode and prefill (idempotent)."""
    inventory, extra, options = _setup(kw)
    path = playbook_path("pd-down.yml")
    plays = load_playbook(path)
    check_plan(plays, inventory, extra, options.limit, None, str(path.parent), options.defaults)
    return execute(plays, inventory, options, json_mode=kw["json_mode"], playbook=str(path))


def _expected_rows(inventory: Inventory, extra: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per process the inventory describes (filled in from the hosts; unreachable ones stay so)."""
    try:
        deployment = build(inventory_pd_vars(inventory, extra))
    except PlanError as exc:
        raise InputError(str(exc)) from None
    return [{"host": p.host, "role": p.role, "name": p.name, "port": p.port, "running": False}
            for p in deployment.procs]  # fmt: skip


@pd.command("status")
@common_options
def status(**kw: Any) -> int:
    """One line per process: host, role, state, pid, uptime, health, port."""
    inventory, extra, options = _setup(kw)
    rows = _expected_rows(inventory, extra)
    if not rows:
        raise InputError("no PD process in the inventory: put hosts in the groups prefill, decode and router")
    allowed = {h.name for h in inventory.select(options.limit)} if options.limit else None
    options.run_lock = False  # a read-only query: it may run beside a run holding the hosts
    results = _run_quiet([_quiet_play("pd_status", PD_HOSTS)], inventory, options)
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
    if kw["json_mode"]:
        click.echo(json.dumps(MASKER.mask_obj({"procs": out}), indent=2, default=str))
    else:
        click.echo(table(out))
        for res in broken.values():
            click.echo(MASKER.mask(f"{res.host}: {res.msg}"), err=True)
    if any(r.get("unreachable") for r in out):
        return EXIT_UNREACHABLE
    return EXIT_OK if all_up(out) else EXIT_FAILED


@pd.command("logs")
@common_options
@click.option("--role", type=click.Choice(["all", "prefill", "decode", "router"]), default="all")
@click.option("-n", "--lines", type=click.IntRange(0, 100000), default=50, show_default=True)
def logs(role: str, lines: int, **kw: Any) -> int:
    """The last lines of each process's log."""
    inventory, _, options = _setup(kw)
    options.run_lock = False  # a read-only query: it may run beside a run holding the hosts
    results = _run_quiet([_quiet_play("pd_logs", PD_HOSTS, {"role": role, "lines": lines})], inventory, options)
    entries = [entry for res in results for entry in res.data.get("logs", [])]
    if kw["json_mode"]:
        click.echo(json.dumps(MASKER.mask_obj({"logs": entries}), indent=2))
    for entry in [] if kw["json_mode"] else entries:
        click.echo(f"==> {entry['host']} {entry['role']} ({entry['log']}) <==")
        click.echo(MASKER.mask("\n".join(entry["lines"])) or "(empty)")
    failed = [res for res in results if res.status in (Status.FAILED, Status.UNREACHABLE)]
    for res in failed:
        click.echo(MASKER.mask(f"{res.host}: {res.msg}"), err=True)
    return EXIT_FAILED if failed else EXIT_OK


@pd.command("verify")
@common_options
@click.option("--prompt", default="Hello world", show_default=True)
@click.option("--max-new-tokens", type=click.IntRange(1, 4096), default=8, show_default=True)
@click.option(
    "--verify-timeout",
    "verify_timeout",
    type=Seconds(),
    default=60.0,
    show_default=True,
    help="seconds for the generation (-T/--timeout bounds each remote command)",
)
def verify(prompt: str, max_new_tokens: int, verify_timeout: float, **kw: Any) -> int:
    """One real generation through each router: completion, latency, TTFT."""
    inventory, _, options = _setup(kw)
    args = {"prompt": prompt, "max_new_tokens": max_new_tokens, "timeout": verify_timeout}
    options.run_lock = False  # a read-only query: it may run beside a run holding the hosts
    results = [r for r in _run_quiet([_quiet_play("pd_verify", "router", args)], inventory, options)
               if r.status is not Status.SKIPPED]  # fmt: skip
    if kw["json_mode"]:
        doc = {r.host: {"ok": not r.failed, "msg": r.msg, **{k: v for k, v in r.data.items() if not k.startswith("_")}}
               for r in results}  # fmt: skip
        click.echo(json.dumps(MASKER.mask_obj(doc), indent=2, default=str))
    else:
        for r in results:
            click.echo(MASKER.mask(f"{r.host}: {'ok' if not r.failed else 'FAILED'}: {r.msg}"))
    if not results:
        raise InputError("no router host to verify through (group 'router' is empty or excluded by --limit)")
    if any(r.status is Status.UNREACHABLE for r in results):
        return EXIT_UNREACHABLE
    return EXIT_FAILED if any(r.failed for r in results) else EXIT_OK


def task_runner(inventory: Inventory, options: RunOptions) -> RunTasks:
    """``run(hosts, tasks)`` for :func:`provision.pd.rollout.rollout`: one quiet play of the task dicts."""

    def run(hosts: list[str], tasks: list[dict[str, Any]]) -> dict[str, list[Step]]:
        play = Play(name="pd rollout", hosts=":".join(hosts), file="<pd rollout>", line=0, gather_facts=False,
                    tasks=[parse_task(t, "<pd rollout>") for t in tasks])  # fmt: skip
        out: dict[str, list[Step]] = {}
        for r in _run_quiet([play], inventory, options):
            ok = r.ignored or r.status not in (Status.FAILED, Status.UNREACHABLE)
            out.setdefault(r.host, []).append(Step(r.host, r.task, ok, r.changed, r.status is Status.SKIPPED,
                                                   r.msg, dict(r.data), r.duration))  # fmt: skip
        return out

    return run


@pd.command("rollout")
@common_options
@click.option("--batch", default="1", show_default=True, help="servers per batch after the canary: N or N%")
@click.option("--canary", type=click.IntRange(0, 1000), default=1, show_default=True, help="servers in batch 1")
@click.option("--allow-downtime", is_flag=True, help="roll a role that has a single server (it stops serving)")
@click.option("--drain-timeout", type=Seconds(), default=120.0, show_default=True,
              help="seconds to wait for a server's requests to finish before it is restarted")  # fmt: skip
def rollout_cmd(batch: str, canary: int, allow_downtime: bool, drain_timeout: float, **kw: Any) -> int:
    """Rolling update of the changed servers: drain, restart, verify, re-admit; roll back a failed batch."""
    inventory, extra, options = _setup(kw)
    check_layout(inventory, extra)
    hosts = inventory_pd_vars(inventory, extra)
    opts = RolloutOptions(batch=batch, canary=canary, allow_downtime=allow_downtime, drain_timeout=drain_timeout)
    if options.limit:  # -l picks the servers to roll; the plan, the routers and the peers are the whole inventory
        opts.only = frozenset(h.name for h in inventory.select(options.limit))
        options.limit = None
    for name, key in (("server_timeout", "pd_server_timeout"), ("verify_timeout", "pd_verify_timeout")):
        if extra.get(key) is not None:
            setattr(opts, name, float(extra[key]))
    json_mode = kw["json_mode"]

    def progress(result: RolloutResult, batch: BatchReport | None) -> None:
        text = render_plan(result) if batch is None else render_batch(batch)
        if text:
            click.echo(MASKER.mask(text))

    result = rollout(hosts, task_runner(inventory, options), opts, progress=None if json_mode else progress)
    if json_mode:
        click.echo(json.dumps(MASKER.mask_obj(result.to_dict()), indent=2, default=str))
    elif not result.batches and not result.changes and not result.ok:
        click.echo(MASKER.mask(render(result)))  # it stopped before the plan: nothing was printed yet
    else:
        click.echo(MASKER.mask(render_end(result)))
    return result.code
