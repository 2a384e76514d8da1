"""``provision pd bench``: load points measured by the installed SGLang's own ``bench_serving``, SLO gates, and
what each server really runs (its serving path).

* :func:`parse_sweep` / :func:`parse_slo`: the command line's ``--concurrency 1,4,16`` / ``--request-rate`` and
  ``--slo ttft_p99=2s,itl_p99=50ms,failures=0``; bad input is a :class:`PlanError` (exit 5 before any host).
* :func:`point_record`: one point's numbers from ``bench_serving``'s own result document (latencies in ms,
  p50/p90/p99; requests/s, input and output tok/s; failures = prompts not completed).
* :func:`check_slo`: each miss as (point, metric, value, limit).
* :func:`serving_path`: the attention backend, CUDA graphs, sampling backend, ... of a server from its
  ``/server_info``, and one line per known slow fallback on a GPU, with what it cost where it was measured.
* ``pd_bench`` (module, router hosts; colocated inventories: serve hosts): runs ``remote/pd_bench.py`` there
  with the deployment's env and interpreter, for ONE point; :func:`provision.api.pd_bench` runs the sweep.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..modules.base import Arg, HelperError, Module, ModuleContext, ModuleResult, register
from .addr import url_host
from .flags import PlanError
from .spec import Deployment, Proc

STATS = ("p50", "p90", "p99", "mean")
LATENCIES = {"ttft": "ttft", "itl": "itl", "tpot": "tpot", "e2e": "e2e_latency"}  # our name → bench_serving's
FLOORS = {"output_tps": "output tok/s", "requests_per_s": "requests/s", "input_tps": "input tok/s"}
_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|)\s*$")


@dataclass(frozen=True)
class Slo:
    metric: str  # ttft_p99, itl_p50, failures, output_tps, ...
    limit: float  # ms for latencies; a count for failures; a floor for the throughputs
    text: str  # as the user wrote it

    @property
    def floor(self) -> bool:
        return self.metric in FLOORS


def parse_sweep(text: str | None, what: str, *, integer: bool) -> list[float]:
    """``1,4,16`` → [1, 4, 16]; each > 0 (``inf`` allowed for a request rate)."""
    if text is None or str(text).strip() == "":
        return []
    out: list[float] = []
    for part in str(text).split(","):
        word = part.strip()
        try:
            number = float(word) if not integer else int(word)
        except ValueError:
            raise PlanError(f"{what}={text!r}: {word!r} is not {'an integer' if integer else 'a number'}") from None
        if not number > 0 or (integer and number > 100000) or (math.isinf(number) and integer):
            raise PlanError(f"{what}={text!r}: {word!r} must be above 0")
        out.append(number)
    return out


def parse_slo(text: str | None) -> list[Slo]:
    """``ttft_p99=2s,itl_p99=50ms,failures=0,output_tps=100`` → the gates. Latencies take ``s`` or ``ms``
    (no unit: ms); ``failures`` a count; ``output_tps``/``input_tps``/``requests_per_s`` are floors."""
    if text is None or str(text).strip() == "":
        return []
    gates: list[Slo] = []
    names = [f"{m}_{s}" for m in LATENCIES for s in STATS] + ["failures", *FLOORS]
    for part in str(text).split(","):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or name not in names:
            raise PlanError(f"--slo {part.strip()!r}: expected NAME=VALUE with NAME one of {', '.join(names)}")
        match = _UNIT.match(value)
        if match is None:
            raise PlanError(f"--slo {part.strip()!r}: {value.strip()!r} is not a number (latencies: 2s, 50ms)")
        number, unit = float(match.group(1)), match.group(2)
        if name.rsplit("_", 1)[0] in LATENCIES:
            number = number * 1000.0 if unit == "s" else number
        elif unit:
            raise PlanError(f"--slo {part.strip()!r}: {name} takes a plain number, not {unit}")
        gates.append(Slo(name, number, part.strip()))
    return gates


def _num(doc: Mapping[str, Any], key: str) -> float | None:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def point_record(raw: Mapping[str, Any], num_prompts: int) -> dict[str, Any]:
    """One point's numbers from ``bench_serving``'s result (its keys ``p99_ttft_ms``, ``median_itl_ms``, ...)."""
    rec: dict[str, Any] = {}
    for ours, theirs in LATENCIES.items():
        rec[f"{ours}_ms"] = {
            "p50": _num(raw, f"median_{theirs}_ms"), "p90": _num(raw, f"p90_{theirs}_ms"),
            "p99": _num(raw, f"p99_{theirs}_ms"), "mean": _num(raw, f"mean_{theirs}_ms"),
        }  # fmt: skip
    completed = _num(raw, "completed")
    rec.update(
        requests_per_s=_num(raw, "request_throughput"), input_tps=_num(raw, "input_throughput"),
        output_tps=_num(raw, "output_throughput"), duration_s=_num(raw, "duration"),
        completed=None if completed is None else int(completed),
        failures=None if completed is None else max(0, num_prompts - int(completed)),
        total_input_tokens=_num(raw, "total_input_tokens"), total_output_tokens=_num(raw, "total_output_tokens"),
    )  # fmt: skip
    return rec


def metric(point: Mapping[str, Any], name: str) -> float | None:
    if name == "failures" or name in FLOORS:
        value = point.get(name)
        return float(value) if isinstance(value, (int, float)) else None
    base, stat = name.rsplit("_", 1)
    value = (point.get(f"{base}_ms") or {}).get(stat)
    return float(value) if isinstance(value, (int, float)) else None


def point_label(point: Mapping[str, Any]) -> str:
    if point.get("request_rate") is not None:
        return f"rate {point['request_rate']:g}/s" + (
            f" c{point['concurrency']}" if point.get("concurrency") is not None else ""
        )
    return f"concurrency {point.get('concurrency')}"


def check_slo(points: Sequence[Mapping[str, Any]], gates: Sequence[Slo]) -> list[dict[str, Any]]:
    """Every miss: ``{"point", "metric", "value", "limit", "unit"}`` (a point that failed outright misses all)."""
    misses: list[dict[str, Any]] = []
    for point in points:
        for gate in gates:
            value = metric(point, gate.metric) if point.get("ok", True) else None
            bad = value is None or (value < gate.limit if gate.floor else value > gate.limit)
            if bad:
                unit = "ms" if gate.metric not in FLOORS and gate.metric != "failures" else ""
                misses.append({"point": point_label(point), "metric": gate.metric, "value": value,
                               "limit": gate.limit, "unit": unit, "slo": gate.text})  # fmt: skip
    return misses


def miss_text(miss: Mapping[str, Any]) -> str:
    value = "no value" if miss["value"] is None else f"{miss['value']:.4g}{miss['unit']}"
    rel = "below the floor" if miss["metric"] in FLOORS else "over the limit"
    return f"SLO miss: {miss['point']}: {miss['metric']} = {value}, {rel} {miss['limit']:g}{miss['unit']}"


# --- the serving path: what each server really runs ------------------------------------------------------------

SLOW = {  # what the fallbacks cost where it was measured (docs/gpu-validation/, one H200, SGLang 0.5.17)
    "attention": "triton/torch-native attention with CUDA graphs off ran 7-8x slower than flashinfer with them "
    "on (60 vs 491 output tok/s at concurrency 1)",
    "cuda_graph": "CUDA graphs off: each decode step launches every kernel (ITL 17 ms vs 2.0 ms measured)",
    "sampling": "the pytorch sampling backend is slower than flashinfer's fused sampling",
}


def serving_path(info: Mapping[str, Any] | None, device: str) -> dict[str, Any]:
    """From a server's ``/server_info``: ``{"attention", "cuda_graph", "sampling", "radix_cache", "warmup",
    "quantization", "warnings"}``; the warnings only on a GPU (CPU mode runs the CPU paths by design)."""
    info = info or {}
    attention = info.get("attention_backend") or info.get("state_attention_backend")
    path: dict[str, Any] = {
        "attention": attention or "(SGLang's default)",
        "cuda_graph": None if "disable_cuda_graph" not in info else not info["disable_cuda_graph"],
        "prefill_cuda_graph": info.get("cuda_graph_backend_prefill"),
        "sampling": info.get("sampling_backend") or "(default)",
        "radix_cache": None if "disable_radix_cache" not in info else not info["disable_radix_cache"],
        "warmup": None if "skip_server_warmup" not in info else not info["skip_server_warmup"],
        "quantization": info.get("quantization"),
        "dtype": info.get("dtype"),
        "version": info.get("version"),
        "warnings": [],
    }
    if info.get("error"):
        path["error"] = info["error"]
    if device != "cuda":
        return path
    if attention in ("triton", "torch_native"):
        path["warnings"].append(f"{attention} attention on a GPU: a slow fallback ({SLOW['attention']})")
    if info.get("disable_cuda_graph") is True:
        path["warnings"].append(SLOW["cuda_graph"])
    if info.get("sampling_backend") == "pytorch":
        path["warnings"].append(SLOW["sampling"])
    return path


def layout(deployment: Deployment) -> list[dict[str, Any]]:
    """Every process: host, role, name, url and its full argv (the server flags), for bench.json."""
    return [{"host": p.host, "role": p.role, "name": p.name, "url": p.url, "machine": p.machine, "argv": p.argv}
            for p in deployment.procs]  # fmt: skip


def bench_target(deployment: Deployment, host: str) -> Proc | None:
    plan = deployment.hosts.get(host)
    if plan is None:
        return None
    if plan.router is not None:
        return plan.router
    return plan.server if plan.server is not None and plan.server.role == "serve" else None


@register
class PdBench(Module):
    """One load point through this host's router (or its colocated server), with bench_serving ON this host."""

    name = "pd_bench"
    args = {
        "input_len": Arg("int", default=512),
        "output_len": Arg("int", default=128),
        "num_prompts": Arg("int", default=64),
        "concurrency": Arg("int", default=None),
        "request_rate": Arg("float", default=None),
        "warmup": Arg("int", default=1),
        "timeout": Arg("float", default=1800.0),
        "seed": Arg("int", default=1),
        "server_info": Arg("bool", default=False),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        from . import build, hosts_from_task_vars

        try:
            deployment = build(hosts_from_task_vars(ctx.variables), {ctx.host: ctx.expand("~")})
        except PlanError as exc:
            return ModuleResult(failed=True, msg=str(exc))
        target = bench_target(deployment, ctx.host)
        if target is None:
            return ModuleResult(skipped=True, msg=f"no router or colocated server on {ctx.host}")
        if ctx.check:
            return ModuleResult(skipped=True, msg="check mode: no load sent")
        plan = deployment.hosts[ctx.host]
        v = deployment.variables[ctx.host]
        servers = deployment.servers
        # the model's own tokenizer on THIS host: its server's model, else the first server's path (the same
        # path on every machine of a typical layout), or pd_bench_tokenizer
        model = plan.model_path if plan.server else deployment.hosts[servers[0].host].model_path
        tokenizer = v.get("pd_bench_tokenizer") or model
        local = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(target.bind, target.bind)
        request = {
            "python": str(v.get("pd_bench_python") or plan.python), "env": plan.env,
            "url": f"http://{url_host(local)}:{target.port}", "tokenizer": str(tokenizer),
            "input_len": args["input_len"], "output_len": args["output_len"], "num_prompts": args["num_prompts"],
            "concurrency": args["concurrency"], "request_rate": args["request_rate"], "warmup": args["warmup"],
            "timeout": args["timeout"], "seed": args["seed"], "pd": target.role == "router", "dir": plan.dir,
            "servers": [p.url for p in servers] if args["server_info"] else [],
        }  # fmt: skip
        try:
            with ctx.waiting(f"bench_serving through {target.name} ({request['url']})", args["timeout"]):
                answer = ctx.call_helper("pd_bench.py", "bench", stdin=json.dumps(request).encode(),
                                         timeout=args["timeout"] + 180, what="pd_bench", check_rc=False)  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        answer["target"] = {"host": ctx.host, "role": target.role, "name": target.name, "url": request["url"]}
        if not answer.get("ok"):
            tail = "\n".join(f"  {line}" for line in (answer.get("tail") or [])[-12:])
            msg = f"bench_serving through {target.name}: {answer.get('msg') or 'no result'}"
            return ModuleResult(failed=True, msg=f"{msg}\n{tail}" if tail else msg, data={"bench": answer})
        return ModuleResult(msg=f"bench_serving through {target.name}: done in {answer.get('seconds')}s",
                            data={"bench": answer})  # fmt: skip


# --- metrics: what each server's /metrics says (``pd status --metrics``) and where Prometheus finds them ------

METRICS = (  # (column, SGLang's sample name): the PD gauges where the SGLang version has them
    ("RUNNING", "sglang:num_running_reqs"), ("QUEUED", "sglang:num_queue_reqs"),
    ("KV-USAGE", "sglang:token_usage"), ("GEN-TOK/S", "sglang:gen_throughput"),
    ("PROMPT-TOK", "sglang:prompt_tokens_total"), ("GEN-TOK", "sglang:generation_tokens_total"),
    ("REQUESTS", "sglang:num_requests_total"),
    ("KV-XFER-GB/S", "sglang:kv_transfer_speed_gb_s"), ("KV-XFER-MS", "sglang:kv_transfer_latency_ms"),
    ("PREALLOC-Q", "sglang:num_decode_prealloc_queue_reqs"), ("XFER-Q", "sglang:num_decode_transfer_queue_reqs"),
    ("BOOTSTRAP-Q", "sglang:num_prefill_bootstrap_queue_reqs"),
    ("INFLIGHT-Q", "sglang:num_prefill_inflight_queue_reqs"),
)  # fmt: skip


def metrics_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """HOST ROLE and one column per :data:`METRICS` entry ('-' where the server has no such sample)."""
    head = ("HOST", "ROLE", *(c for c, _ in METRICS))
    cells = [head]
    for r in rows:
        if r.get("role") == "router":
            continue
        m = r.get("metrics") or {}
        if not isinstance(m, Mapping):
            m = {}
        line = [str(r.get("host", "?")), str(r.get("role", "?"))]
        for _, name in METRICS:
            v = m.get(name)
            line.append("-" if not isinstance(v, (int, float)) else f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}")
        if r.get("metrics_error"):
            line[2] = f"({str(r['metrics_error'])[:60]})"
            line[3:] = ["-"] * (len(head) - 3)
        cells.append(tuple(line))
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def targets(deployment: Deployment) -> list[dict[str, Any]]:
    """Prometheus ``file_sd`` entries: every server's ``/metrics`` (its ``--port``; SGLang serves them there with
    ``--enable-metrics``, ``pd_metrics``) and every router's Prometheus port, labelled role/host/name."""
    out = []
    for p in deployment.procs:
        port = p.prometheus_port if p.role == "router" else p.port
        if port is None:
            continue
        job = "sglang-router" if p.role == "router" else "sglang"
        labels = {"job": job, "role": p.role, "host": p.host, "machine": p.machine, "name": p.name}
        out.append({"targets": [f"{url_host(p.address)}:{port}"], "labels": labels})
    return out


def _local_server(ctx: ModuleContext) -> tuple[Any, str] | ModuleResult:
    """This host's plan (it has a server) and the server's URL from the host, or the result to return."""
    from . import build, hosts_from_task_vars
    from .spec import local_url

    try:
        deployment = build(hosts_from_task_vars(ctx.variables), {ctx.host: ctx.expand("~")})
    except PlanError as exc:
        return ModuleResult(failed=True, msg=str(exc))
    plan = deployment.hosts.get(ctx.host)
    if plan is None or plan.server is None:
        return ModuleResult(skipped=True, msg=f"no server on {ctx.host}")
    return plan, local_url(plan.server)


@register
class PdMetrics(Module):
    """The ``sglang:`` samples of this host's server, read on the host (its bind address)."""

    name = "pd_metrics"
    args = {"timeout": Arg("float", default=10.0)}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        found = _local_server(ctx)
        if isinstance(found, ModuleResult):
            return found
        plan, url = found
        server = plan.server
        request = {"urls": [url], "timeout": args["timeout"]}
        try:
            answer = ctx.call_helper("pd_metrics.py", "read", stdin=json.dumps(request).encode(),
                                     timeout=args["timeout"] + 60, what="pd_metrics")  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        got = (answer.get("servers") or {}).get(url) or {}
        samples = got.get("metrics") or {}
        data = {"role": server.role, "metrics": samples, "metrics_error": got.get("error")}
        return ModuleResult(msg=f"{len(samples)} samples from {url}", data=data)


def path_line(host: str, role: str, path: Mapping[str, Any]) -> str:
    """``h1 prefill: attention flashinfer, CUDA graphs on, sampling flashinfer, radix cache on, warm-up on``."""
    if path.get("error"):
        return f"{host} {role}: serving path unknown ({path['error']})"
    word = {True: "on", False: "off", None: "?"}
    parts = [f"attention {path.get('attention')}", f"CUDA graphs {word.get(path.get('cuda_graph'), '?')}",
             f"sampling {path.get('sampling')}", f"radix cache {word.get(path.get('radix_cache'), '?')}",
             f"warm-up {word.get(path.get('warmup'), '?')}"]  # fmt: skip
    if path.get("quantization"):
        parts.append(f"quantization {path['quantization']}")
    return f"{host} {role}: " + ", ".join(parts)


@register
class PdServingPath(Module):
    """What this host's server really runs, from its own ``/server_info`` (read on the host)."""

    name = "pd_serving_path"
    args = {"timeout": Arg("float", default=10.0)}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        found = _local_server(ctx)
        if isinstance(found, ModuleResult):
            return found
        plan, url = found
        server = plan.server
        request = {"servers": [url], "timeout": args["timeout"]}
        try:
            answer = ctx.call_helper("pd_bench.py", "server_info", stdin=json.dumps(request).encode(),
                                     timeout=args["timeout"] + 60, what="pd_serving_path")  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        info = (answer.get("server_info") or {}).get(url)
        path = serving_path(info if isinstance(info, Mapping) else {"error": "no answer"}, plan.device)
        return ModuleResult(msg=path_line(ctx.host, server.role, path), data={"role": server.role, "path": path})
