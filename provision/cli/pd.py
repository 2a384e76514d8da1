"""``provision pd up | down | status | logs | verify``: the PD deployment as one command each.

* ``up``: validate the layout on the inventory alone (exit 5 before anything runs), then
  ``playbooks/pd-up.yml`` (prefill → decode → router → a real generation). When the run fails, the processes
  THIS run started are stopped (``pd-down.yml`` with ``pd_only_run_id``) unless ``--keep-failed`` or
  ``-e pd_keep_failed=true``: nothing is left running that claims to be up. Exit 2.
* ``down``: ``playbooks/pd-down.yml`` (idempotent).
* ``status``: a table (host, role, state, pid, uptime, health, port); exit 0 when every process is up and
  healthy, 2 when one is not, 4 when a host is unreachable.
* ``logs``: the tail of each process's log (``--role``, ``-n``).
* ``verify``: one real generation through each router: text, latency, TTFT; ``--all-pairs``: one pinned to
  every prefill x decode pair instead (:mod:`provision.pd.pairs`): a table, exit 2 when a pair fails or
  disagrees.
* ``export``: the same validated plan as Kubernetes objects (``--to rbg|lws``) or a Slurm job (``--to slurm``)
  in ``-o DIR`` (:func:`provision.api.pd_export`; docs/export.md). Touches no host.
* ``rollout``: a rolling update of the changed servers, batch by batch, drained through the routers, verified,
  rolled back on failure (:func:`provision.api.pd_rollout` → :mod:`provision.pd.rollout`; this prints it).

Each command calls its verb in :mod:`provision.api` (``pd_up`` is ``plan_pd_up`` + ``clean_up_failed_up`` here, so
that the recap comes between the run and the clean-up) and prints the result. Registered in the main group by
``cli.add_command(pd)`` (:mod:`.app`). Imports :mod:`.common` and the API, never :mod:`.app`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from ..errors import EXIT_OK, InputError
from ..terminal import clipped
from .common import (
    Group,
    Seconds,
    api_options,
    common_options,
    execute,
    load_fleet,
    mask,
    mask_obj,
    parse_extra_vars,
    quiet_listener,
)

if TYPE_CHECKING:  # the commands import the engine when they run (`provision --help` does not)
    from ..api import Fleet, Options
    from ..pd.rollout import BatchReport, RolloutResult


def _setup(kw: dict[str, Any], *, query: bool = False) -> tuple[Fleet, Options]:
    """The fleet and the options; a query's own run is shown only with -v (on stderr)."""
    fleet = load_fleet(kw["inventories"], parse_extra_vars(kw["extra_vars"]))
    opts = api_options(kw)
    if query:
        opts["on_event"] = quiet_listener(kw["verbosity"])
    return fleet, opts


@click.group("pd", cls=Group)
def pd() -> None:
    """Bring up, stop, inspect and verify the PD deployment (prefill → decode → router over NIXL/UCX)."""


@pd.command("up")
@common_options
@click.option("--keep-failed", is_flag=True, help="leave what a failed run started running (for debugging)")
def up(keep_failed: bool, **kw: Any) -> int:
    """Validate, then start prefill → decode → router and verify one real generation."""
    from .. import api

    fleet, opts = _setup(kw)
    planned = api.plan_pd_up(fleet, **opts)
    code = execute(planned, json_mode=kw["json_mode"])
    if code == EXIT_OK and not kw["json_mode"] and not opts.get("check"):
        query = api_options(kw)
        query["on_event"] = quiet_listener(kw["verbosity"])
        show_serving_paths(api.pd_serving_paths(fleet, **query))
    stopped = api.clean_up_failed_up(planned, code, keep_failed=keep_failed, on_event=quiet_listener(kw["verbosity"]))
    if stopped is None:
        if code not in (EXIT_OK, 130):
            click.echo("pd up: the processes of this run were left running (--keep-failed)", err=True)
        return code
    click.echo(mask(api.stopped_line(stopped)), err=True)
    return code


def show_serving_paths(paths: list[dict[str, Any]]) -> None:
    """One line per server (what it runs), then one warning line per slow fallback (stderr)."""
    from ..pd.bench import path_line

    for entry in paths:
        click.echo(mask(path_line(entry["host"], entry["role"], entry["path"])))
        for warning in entry["path"].get("warnings", []):
            click.echo(mask(f"warning: {entry['host']} {entry['role']}: {warning}"), err=True)


@pd.command("down")
@common_options
def down(**kw: Any) -> int:
    """Stop router, decode and prefill (idempotent)."""
    from .. import api

    fleet, opts = _setup(kw)
    return execute(api.plan_pd_down(fleet, **opts), json_mode=kw["json_mode"])


@pd.command("status")
@common_options
@click.option("--metrics", "metrics", is_flag=True,
              help="also each server's /metrics: requests, KV cache usage, tokens, the PD gauges")  # fmt: skip
@click.option("--serving-path", "serving", is_flag=True,
              help="also what each server runs: attention, CUDA graphs, sampling; slow fallbacks warned")  # fmt: skip
def status(metrics: bool, serving: bool, **kw: Any) -> int:
    """One line per process: host, role, state, pid, uptime, health, port."""
    from .. import api

    fleet, opts = _setup(kw, query=True)
    status = api.pd_status(fleet, metrics=metrics, **opts)
    if kw["json_mode"]:
        click.echo(json.dumps(mask_obj({"procs": status.rows}), indent=2, default=str))
    else:
        click.echo(mask(status.table()))
        if metrics:
            from ..pd.bench import metrics_table

            click.echo("")
            click.echo(mask(metrics_table(status.rows)))
        if serving:
            click.echo("")
            show_serving_paths(api.pd_serving_paths(fleet, **opts))
        for line in status.error_lines():
            click.echo(mask(line), err=True)
    return status.exit_code


@pd.command("targets")
@common_options
@click.option("-o", "--output", "output", default=None, help="write the file_sd JSON there (atomically) instead")
def targets_cmd(output: str | None, **kw: Any) -> int:
    """Prometheus file_sd JSON: every server's /metrics and every router's metrics port, with role/host labels."""
    from pathlib import Path

    from .. import api

    fleet, opts = _setup(kw, query=True)
    text = json.dumps(api.pd_targets(fleet, **opts), indent=2) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return EXIT_OK
    path = Path(output)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    click.echo(f"wrote {path}", err=True)
    return EXIT_OK


@pd.command("logs")
@common_options
@click.option("--role", type=click.Choice(["all", "prefill", "decode", "serve", "router"]), default="all")
@click.option("-n", "--lines", type=click.IntRange(0, 100000), default=50, show_default=True)
def logs(role: str, lines: int, **kw: Any) -> int:
    """The last lines of each process's log."""
    from .. import api

    fleet, opts = _setup(kw, query=True)
    logs = api.pd_logs(fleet, role=role, lines=lines, **opts)
    if kw["json_mode"]:
        click.echo(json.dumps(mask_obj({"logs": logs.entries}), indent=2))
    for entry in [] if kw["json_mode"] else logs.entries:
        click.echo(mask(f"==> {entry['host']} {entry['role']} ({entry['log']}) <=="))
        click.echo(mask("\n".join(entry["lines"]), colour=True) or "(empty)")
    for host, msg in logs.errors.items():
        click.echo(mask(f"{host}: {msg}"), err=True)
    return logs.exit_code


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
@click.option(
    "--all-pairs",
    is_flag=True,
    help="one pinned generation through every prefill x decode pair: TTFT each, the same tokens from each",
)
@click.option("--parallel", type=click.IntRange(1, 64), default=8, show_default=True,
              help="with --all-pairs: pairs in flight at once")  # fmt: skip
def verify(prompt: str, max_new_tokens: int, verify_timeout: float, all_pairs: bool, parallel: int,
           **kw: Any) -> int:  # fmt: skip
    """One real generation through each router: completion, latency, TTFT (--all-pairs: through every pair)."""
    from .. import api

    fleet, opts = _setup(kw, query=True)
    try:
        verified = api.pd_verify(fleet, prompt=prompt, max_new_tokens=max_new_tokens, verify_timeout=verify_timeout,
                                 all_pairs=all_pairs, parallel=parallel, **opts)  # fmt: skip
    except InputError:  # no router host to verify through: with --json, the (empty) document first, as always
        if kw["json_mode"]:
            click.echo(json.dumps({}, indent=2))
        raise
    if all_pairs:
        _show_pairs(verified.results, kw["json_mode"])
    elif kw["json_mode"]:
        doc = {r.host: {"ok": not r.failed, "msg": r.msg, **{k: v for k, v in r.data.items() if not k.startswith("_")}}
               for r in verified.results}  # fmt: skip
        click.echo(json.dumps(mask_obj(doc), indent=2, default=str))
    else:
        for line in verified.lines(clipped):
            click.echo(mask(line))
    return verified.exit_code


def _show_pairs(results: list[Any], json_mode: bool) -> None:
    """``verify --all-pairs``: the table and the verdict's line (or the document), from the host that sent them."""
    from ..pd.pairs import PairsReport, summary, table

    for r in results:
        doc = r.data.get("pairs")
        if json_mode:
            click.echo(json.dumps(mask_obj({"host": r.host, "msg": r.msg, **(doc or {"ok": False})}), indent=2,
                                  default=str))  # fmt: skip
            continue
        if doc is None:  # the host could not send them
            click.echo(mask(f"{r.host}: FAILED: {r.msg}"))
            continue
        report = PairsReport.from_dict(doc)
        click.echo(mask(table(report)))
        click.echo(mask(f"{r.host}: {summary(report)}"), err=not report.ok)


@pd.command("rollout")
@common_options
@click.option("--batch", default="1", show_default=True, help="servers per batch after the canary: N or N%")
@click.option("--canary", type=click.IntRange(0, 1000), default=1, show_default=True, help="servers in batch 1")
@click.option("--allow-downtime", is_flag=True, help="roll a role that has a single server (it stops serving)")
@click.option("--drain-timeout", type=Seconds(), default=120.0, show_default=True,
              help="seconds to wait for a server's requests to finish before it is restarted")  # fmt: skip
def rollout_cmd(batch: str, canary: int, allow_downtime: bool, drain_timeout: float, **kw: Any) -> int:
    """Rolling update of the changed servers: drain, restart, verify, re-admit; roll back a failed batch."""
    from .. import api
    from ..pd.rollout import RolloutOptions, render, render_batch, render_end, render_plan

    fleet, opts = _setup(kw, query=True)  # its many small plays are shown only with -v
    json_mode = kw["json_mode"]

    def progress(result: RolloutResult, batch: BatchReport | None) -> None:
        text = render_plan(result) if batch is None else render_batch(batch)
        if text:
            click.echo(mask(text))

    options = RolloutOptions(batch=batch, canary=canary, allow_downtime=allow_downtime, drain_timeout=drain_timeout)
    result = api.pd_rollout(fleet, rollout_options=options, progress=None if json_mode else progress, **opts)
    if json_mode:
        click.echo(json.dumps(mask_obj(result.to_dict()), indent=2, default=str))
    elif not result.batches and not result.changes and not result.ok:
        click.echo(mask(render(result)))  # it stopped before the plan: nothing was printed yet
    else:
        click.echo(mask(render_end(result)))
    return result.code


@pd.command("scale")
@common_options
@click.option("--add", "add", multiple=True, help="a prefill/decode host of the inventory to start and register")
@click.option("--remove", "remove", multiple=True, help="a server to take out of the routers, drain and stop")
@click.option("--drain-timeout", type=Seconds(), default=120.0, show_default=True,
              help="seconds to wait for a removed server's requests to finish")  # fmt: skip
def scale_cmd(add: tuple[str, ...], remove: tuple[str, ...], drain_timeout: float, **kw: Any) -> int:
    """Add or remove servers of a serving deployment through the routers' worker API: no router restart."""
    from .. import api
    from ..pd.rollout import RolloutOptions
    from ..pd.scale import render

    fleet, opts = _setup(kw, query=True)
    options = RolloutOptions(drain_timeout=drain_timeout, all_pairs=False)
    result = api.pd_scale(fleet, add=[n for a in add for n in a.split(",") if n],
                          remove=[n for r in remove for n in r.split(",") if n], rollout_options=options,
                          **opts)  # fmt: skip
    if kw["json_mode"]:
        click.echo(json.dumps(mask_obj(result.to_dict()), indent=2, default=str))
    else:
        click.echo(mask(render(result)))
    return result.code


@pd.command("export")
@common_options
@click.option(
    "--to",
    "target",
    type=click.Choice(["rbg", "lws", "slurm"]),
    required=True,
    help="rbg: a RoleBasedGroup; lws: LeaderWorkerSets; slurm: an sbatch script and per-node launchers",
)
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(file_okay=False),
    required=True,
    help="the directory the files are written to (created)",
)
@click.option("--name", default=None, help="object / job name (default: pd_export_name, else provision-pd)")
@click.option("--image", default=None, help="container image (default: pd_export_image, else provision-pd:latest)")
@click.option("--router-image", default=None, help="the router's image (default: the same image)")
@click.option("--wheelhouse", type=click.Path(file_okay=False, exists=True), default=None,
              help="a provision wheelhouse directory: write a Containerfile that installs its lock")  # fmt: skip
def export_cmd(target: str, output: str, name: str | None, image: str | None, router_image: str | None,
               wheelhouse: str | None, **kw: Any) -> int:  # fmt: skip
    """Export the validated deployment to Kubernetes (RoleBasedGroup, LeaderWorkerSet) or Slurm."""
    from .. import api

    fleet, opts = _setup(kw)
    result = api.pd_export(fleet, to=target, output=output, name=name, image=image, router_image=router_image,
                           wheelhouse=wheelhouse, **opts)  # fmt: skip
    if kw["json_mode"]:
        click.echo(json.dumps({"target": target, "directory": result.directory, "files": sorted(result.files),
                               "validated": result.validated}, indent=2))  # fmt: skip
        return result.exit_code
    for line in result.validated:
        click.echo(line)
    click.echo(f"pd export: {len(result.files)} files for {target} in {result.directory} (README.md says what next)")
    return result.exit_code


@pd.command("bench")
@common_options
@click.option("--input-len", type=click.IntRange(1, 1 << 20), default=512, show_default=True,
              help="prompt tokens (random ids from the model's own tokenizer)")  # fmt: skip
@click.option("--output-len", type=click.IntRange(1, 1 << 20), default=128, show_default=True)
@click.option("--num-prompts", type=click.IntRange(1, 1 << 20), default=64, show_default=True,
              help="requests per point")  # fmt: skip
@click.option("--concurrency", default=None, help="closed-loop sweep: 1,4,16 (default 1,4,16 without --request-rate)")
@click.option("--request-rate", default=None, help="open-loop sweep in requests/s: 2,8 (inf: all at once)")
@click.option("--warmup", type=click.IntRange(0, 10000), default=1, show_default=True,
              help="requests sent before each point's measured ones")  # fmt: skip
@click.option("--bench-timeout", type=Seconds(), default=1800.0, show_default=True, help="seconds per point")
@click.option("--slo", default=None, help="gates: ttft_p99=2s,itl_p99=50ms,failures=0 (exit 2 naming each miss)")
@click.option("-o", "--output-dir", "output_dir", default="bench-results", show_default=True,
              help="where bench.json and report.html go")  # fmt: skip
@click.option("--label", default=None, help="this run's name in the report and bench.json (default: the -o folder's)")
@click.option("--compare", "compare", multiple=True,
              help="another inventory (benched the same way) or a bench.json: on the same plots")  # fmt: skip
def bench_cmd(input_len: int, output_len: int, num_prompts: int, concurrency: str | None, request_rate: str | None,
              warmup: int, bench_timeout: float, slo: str | None, output_dir: str, label: str | None,
              compare: tuple[str, ...], **kw: Any) -> int:  # fmt: skip
    """Measure the deployment: SGLang's bench_serving from the router's host, a sweep, SLO gates, a report."""
    import time
    from pathlib import Path

    from .. import api
    from ..pd import bench as pdbench
    from ..pd import bench_report

    try:
        conc = [int(c) for c in pdbench.parse_sweep(concurrency, "--concurrency", integer=True)]
        rates = pdbench.parse_sweep(request_rate, "--request-rate", integer=False)
        pdbench.parse_slo(slo)
    except pdbench.PlanError as exc:
        raise InputError(str(exc)) from None
    if not conc and not rates:
        conc = [1, 4, 16]
    others = [Path(c) for c in compare]
    for other in others:
        if not other.exists():
            raise InputError(f"--compare {other}: no such file (an inventory or a bench.json)")
    options = api.BenchOptions(input_len=input_len, output_len=output_len, num_prompts=num_prompts,
                               concurrency=conc, request_rate=rates, warmup=warmup, timeout=bench_timeout,
                               slo=slo)  # fmt: skip
    json_mode = kw["json_mode"]

    def progress(done: int, total: int, point: dict[str, Any], elapsed: float) -> None:
        if not json_mode:
            click.echo(mask(f"[{done}/{total} points, {elapsed:.0f}s] {bench_report.point_line(point)}"), err=True)

    def run(inventories: list[str], label: str) -> api.BenchResult:
        fleet = load_fleet(tuple(inventories), parse_extra_vars(kw["extra_vars"]))
        opts = api_options(kw)
        opts["on_event"] = quiet_listener(kw["verbosity"])
        if not json_mode:
            click.echo(f"pd bench {label}: {len(conc) + len(rates)} points, {num_prompts} prompts each, "
                       f"{input_len} in / {output_len} out tokens", err=True)  # fmt: skip
        result = api.pd_bench(fleet, bench=options, progress=progress, **opts)
        result.doc["inventories"] = inventories
        result.doc["label"] = label
        return result

    started = time.monotonic()
    result = run(list(kw["inventories"]), label or Path(output_dir).resolve().name)
    baselines: list[dict[str, Any]] = []
    for other in others:
        if other.suffix == ".json":
            try:
                baselines.append(bench_report.load(other))
            except pdbench.PlanError as exc:
                raise InputError(str(exc)) from None
        else:
            baselines.append(run([str(other)], other.stem).doc)
    written = bench_report.write(result.doc, Path(output_dir), baselines)
    if json_mode:
        click.echo(json.dumps(mask_obj({**result.doc, "errors": result.errors, "files": written}), indent=2,
                              default=str))  # fmt: skip
    else:
        click.echo(mask(bench_report.table([result.doc, *baselines])))
        click.echo(f"wrote {', '.join(written)} in {time.monotonic() - started:.0f}s")
        for line in result.errors:
            click.echo(mask(f"FAILED: {line}"), err=True)
        for miss in result.misses:
            click.echo(mask(pdbench.miss_text(miss)), err=True)
        for url, path in result.doc.get("serving_path", {}).items():
            for warning in path.get("warnings", []):
                click.echo(mask(f"warning: {url}: {warning}"), err=True)
    return result.exit_code
