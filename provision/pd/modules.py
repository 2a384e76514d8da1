"""The PD deployment's own modules. Each reads the plan (:mod:`provision.pd.spec`) built from every PD host's
vars, so a task needs no arguments to know what its host runs.

* ``pd_config``: its host's part of the plan (processes, flags, env, paths; ``~`` made absolute; on GPU
  servers the GPU count from ``nvidia-smi``) as the task's result: ``register: pd`` makes it the ``pd`` var
  the templates and the later tasks read.
* ``pd_validate`` (controller, ``run_once``, after ``pd_config``): every check of
  :mod:`provision.pd.validate`, with the GPU counts; fails with one line per problem before anything starts.
* ``pd_wait``: waits ON the host until its processes answer (servers ``/health``, router ``/readiness``),
  polling every ``interval`` (0.25 s); fails at once, with the log tail, when a process dies.
* ``pd_verify`` (router hosts): a real ``/generate`` through the router, run on the router's host: the
  completion, its latency and the TTFT of a streaming request; with ``all_pairs``, also one generation pinned
  to every prefill x decode pair (:mod:`.pairs`), sent from the play's first router host, at most ``parallel``
  at once: each pair's TTFT, and (``same_tokens``) the same token ids from every pair.
* ``pd_status`` / ``pd_logs``: each process's state and health / the tail of its log (for ``provision pd``).
* ``pd_start_gate``: ships ``provision/remote/start_gate.py``, the start gate of ``pd_serial_start`` servers.
"""

from __future__ import annotations

import json
from typing import Any

from .. import remote, templating
from ..commands import Command
from ..modules.base import Arg, HelperError, Module, ModuleContext, ModuleResult, register
from ..modules.files import ship_files
from ..templating import Vars
from . import HostPlan, PlanError, build, hosts_from_task_vars, pairs, validate_pd
from .addr import url_host
from .process import format_tail, helper, supervisor_request
from .spec import START_GATE, Deployment, Proc, health_url, local_base, resolve_supervisor, router_worker


def deployment(ctx: ModuleContext) -> Deployment | None:
    """The whole deployment, from every PD host's vars (None when this host is in no PD group)."""
    hosts = hosts_from_task_vars(ctx.variables)
    if ctx.host not in hosts:
        return None
    return build(hosts, {ctx.host: ctx.expand("~")})


def _select(plan: HostPlan, role: str) -> list[Proc]:
    if role == "all":
        return plan.procs
    if role == "server":
        return [plan.server] if plan.server else []
    return [p for p in plan.procs if p.role == role]


def _procs_or_result(ctx: ModuleContext, role: str) -> tuple[Deployment, HostPlan, list[Proc]] | ModuleResult:
    """The whole deployment (built once), the host's plan and its processes of ``role``; or the result to return
    (bad plan, nothing to do)."""
    found = _whole_or_result(ctx)
    if isinstance(found, ModuleResult):
        return found
    procs = _select(found[1], role)
    if not procs:
        return ModuleResult(skipped=True, msg=f"no {role} process on {ctx.host}")
    return (*found, procs)


def _plan_or_result(ctx: ModuleContext) -> HostPlan | ModuleResult:
    found = _whole_or_result(ctx)
    return found if isinstance(found, ModuleResult) else found[1]


def _whole_or_result(ctx: ModuleContext) -> tuple[Deployment, HostPlan] | ModuleResult:
    try:
        whole = deployment(ctx)
    except PlanError as exc:
        return ModuleResult(failed=True, msg=str(exc))
    plan = whole.hosts.get(ctx.host) if whole is not None else None
    if whole is None or plan is None:
        return ModuleResult(skipped=True, msg=f"{ctx.host} is in none of the groups prefill, decode, router")
    return whole, plan


def gpu_count(ctx: ModuleContext) -> int:
    """GPUs ``nvidia-smi`` lists on the host (0 when it is missing or fails): for the tp x instances check."""
    result = ctx.run(Command.of("nvidia-smi", "--query-gpu=index", "--format=csv,noheader"), timeout=60)
    return len([line for line in result.stdout.splitlines() if line.strip()]) if result.rc == 0 else 0


@register
class PdValidate(Module):
    name = "pd_validate"
    controller_only = True

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        hosts = hosts_from_task_vars(ctx.variables)
        problems = validate_pd(hosts)
        if problems:
            body = "\n".join(f"  - {p}" for p in problems)
            return ModuleResult(
                failed=True, msg=f"the PD deployment is not valid:\n{body}", data={"problems": problems}
            )
        return ModuleResult(msg=f"{len(hosts)} hosts: the PD layout is valid", data={"problems": []})


@register
class PdConfig(Module):
    name = "pd_config"

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        plan = _plan_or_result(ctx)
        if isinstance(plan, ModuleResult):
            return plan
        fact = plan.fact()
        fact["gpus"] = gpu_count(ctx) if plan.device == "cuda" and plan.server else None
        fact["become"] = False
        if plan.supervisor in ("auto", "systemd"):
            may = templating.truthy(ctx.variables.get("become_allowed") or False)
            probe = helper(ctx, "probe", {"sudo": may})
            if not probe.get("ok"):
                return ModuleResult(failed=True, msg=f"pd_config: {probe.get('msg')}")
            try:
                fact["supervisor"], fact["become"] = resolve_supervisor(ctx.host, plan.supervisor, probe)
            except PlanError as exc:
                return ModuleResult(failed=True, msg=str(exc))
            fact["systemd_version"] = probe.get("version") or None
        parts = [f"{p.role} on {p.bind}:{p.port}" + (f" (bootstrap {p.bootstrap_port})" if p.bootstrap_port else "")
                 for p in plan.procs]  # fmt: skip
        return ModuleResult(msg=f"{', '.join(parts)}; {plan.device}; supervisor {fact['supervisor']}", data=fact)


@register
class PdStartGate(Module):
    """Put the start gate of ``pd_serial_start`` servers (``provision/remote/start_gate.py``) into ``dest``:
    their launch scripts run it before they exec SGLang, so that the servers of one machine start one after
    another, a supervisor's restarts included."""

    name = "pd_start_gate"
    args = {"dest": Arg("path", required=True)}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        return ship_files(ctx, ctx.expand(args["dest"]).rstrip("/"), {START_GATE: remote.path(START_GATE).read_bytes()})


@register
class PdWait(Module):
    name = "pd_wait"
    args = {
        "role": Arg(default="all", choices=("all", "server", "prefill", "decode", "router")),
        "timeout": Arg("float", default=900.0),
        "interval": Arg("float", default=0.25),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        found = _procs_or_result(ctx, args["role"])
        if isinstance(found, ModuleResult):
            return found
        _, plan, procs = found
        if ctx.check:
            return ModuleResult(skipped=True, msg="check mode: not waiting")
        request = {
            "procs": [
                {"name": p.name, "piddir": plan.pid_dir, "url": health_url(p), "log": plan.log(p)} for p in procs
            ],
            "timeout": args["timeout"],
            "interval": args["interval"],
            "log_lines": 40,
        }
        what = f"{', '.join(p.name for p in procs)} to answer {', '.join(health_url(p) for p in procs)} with 200"
        with ctx.waiting(what, args["timeout"]):
            answer = helper(ctx, "wait", request, timeout=args["timeout"] + 60)
        if answer.get("ok"):
            ready = answer.get("ready", {})
            parts = [f"{p.name} ready after {ready.get(p.name, '?')}s" for p in procs]
            return ModuleResult(msg="; ".join(parts), data={"ready": ready, "elapsed": answer.get("elapsed")})
        return ModuleResult(failed=True, msg=self.why(plan, procs, answer, args["timeout"]), data=answer)

    @staticmethod
    def why(plan: HostPlan, procs: list[Proc], answer: dict[str, Any], timeout: float) -> str:
        if "why" not in answer:
            return f"pd_wait: {answer.get('msg', 'no answer from process_ctl')}"
        proc = next((p for p in procs if p.name == answer.get("name")), procs[0])
        what = f"the {proc.role} {'server' if proc.role != 'router' else ''}".rstrip() + f" {proc.name} on {plan.host}"
        if answer["why"] == "exited":
            head = f"{what} is not running (it exited while starting, pid {answer.get('pid')})"
        else:
            last = answer.get("last_status") or answer.get("last_error") or "no answer"
            head = f"{what} did not answer {answer.get('url')} with 200 within {timeout:g}s (last: {last})"
        tail = format_tail(answer.get("log_tail") or [])
        return f"{head}\n  last lines of {answer.get('log')}:\n{tail}" if tail else head


@register
class PdRouterWorkers(Module):
    """Router hosts: every prefill and decode of the deployment listed by the host's router. A server that is
    running but missing from it (a rollout or scale cut off between taking it out and putting it back, a
    worker deleted through the API by hand) is added back through the worker API (``POST /workers``, as the
    rollout re-admits) and waited for until the router lists it healthy: ``changed``, ``added``. One round
    trip when nothing is missing; never run in check mode (skipped)."""

    name = "pd_router_workers"
    args = {"timeout": Arg("float", default=300.0)}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        found = _procs_or_result(ctx, "router")
        if isinstance(found, ModuleResult):
            return found
        whole, _, routers = found
        if ctx.check:
            return ModuleResult(skipped=True, msg="check mode: the routers' workers not read")
        workers = [router_worker(p) for p in (*whole.prefill, *whole.decode)]
        added: list[str] = []
        for router in routers:
            request = {"router": local_base(router), "workers": workers, "timeout": args["timeout"], "wait": "added"}
            try:
                with ctx.waiting(f"{router.name} to list every server", args["timeout"]):
                    answer = ctx.call_helper(
                        "pd_rollout.py", "router_add", stdin=json.dumps(request).encode(),
                        timeout=args["timeout"] + 60, what="pd_rollout", check_rc=False,
                    )  # fmt: skip
            except HelperError as exc:
                return exc.as_result()
            if not answer.get("ok"):
                return ModuleResult(failed=True, msg=f"{router.name}: {answer.get('msg', 'no answer')}", data=answer)
            added += answer.get("added") or []
        if added:
            msg = f"re-admitted to the router: {', '.join(added)} (running, but not routed to)"
        else:
            msg = f"the router lists all {len(workers)} servers"
        return ModuleResult(changed=bool(added), msg=msg, data={"added": added})


@register
class PdVerify(Module):
    name = "pd_verify"
    args = {
        "prompt": Arg(default="Hello world"),
        "max_new_tokens": Arg("int", default=8),
        "timeout": Arg("float", default=180.0),
        "interval": Arg("float", default=0.25),
        "stream": Arg("bool", default=True),
        "router": Arg("bool", default=True),  # a generation through the router
        "all_pairs": Arg("bool", default=False),  # and one pinned to every prefill x decode pair (pairs.py)
        "same_tokens": Arg("bool", default=True),  # every pair must return the same token ids
        "parallel": Arg("int", default=pairs.PARALLEL),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        plan = _plan_or_result(ctx)
        if isinstance(plan, ModuleResult):
            return plan
        target = plan.router or (plan.server if plan.server and plan.server.role == "serve" else None)
        if target is None:
            return ModuleResult(skipped=True, msg=f"no router on {ctx.host}")
        if ctx.check:
            return ModuleResult(skipped=True, msg="check mode: no request sent")
        done = self.through_router(ctx, target, args) if args["router"] else None
        if target.role == "serve":  # a colocated server: one generation from it, no pairs
            return done or ModuleResult(skipped=True, msg="no generation asked for")
        if not args["all_pairs"]:
            return done or ModuleResult(skipped=True, msg="neither the router nor the pairs asked for")
        if done is not None and done.failed:
            return done
        checked = self.all_pairs(ctx, args)
        if checked is None:  # another router host sends the pairs' requests
            return done or ModuleResult(skipped=True, msg=f"the pairs are verified from another router than {ctx.host}")
        if done is None or checked.failed:
            return checked
        return ModuleResult(msg=f"{done.msg}\n{checked.msg}", data={**done.data, **checked.data})

    @staticmethod
    def through_router(ctx: ModuleContext, router: Proc, args: dict[str, Any]) -> ModuleResult:
        local = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(router.bind, router.bind)
        request = {
            "url": f"http://{url_host(local)}:{router.port}",
            "prompt": args["prompt"],
            "max_new_tokens": args["max_new_tokens"],
            "timeout": args["timeout"],
            "interval": args["interval"],
            "stream": args["stream"],
        }
        what = "the router" if router.role == "router" else "the colocated server"
        try:  # a failed generation is reported in the answer
            with ctx.waiting(f"a generation through {what} {router.name} ({request['url']})", args["timeout"]):
                report = ctx.call_helper("pd_verify.py", "verify", stdin=json.dumps(request).encode(),
                                         timeout=args["timeout"] + 90, what="pd_verify", check_rc=False)  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        data = {k: report.get(k) for k in ("text", "output_ids", "completion_tokens", "latency", "ttft",
                                           "stream_latency", "attempts", "waited", "status", "url")}  # fmt: skip
        if not report.get("ok"):
            msg = (f"no verified generation through {what} {router.name} ({request['url']}): "
                   f"{answer_text(report.get('status'), report.get('error') or report.get('msg'))}")  # fmt: skip
            return ModuleResult(failed=True, msg=msg, data=data)
        ttft = f", TTFT {report['ttft']}s" if report.get("ttft") is not None else ""
        path = "router → prefill → decode" if router.role == "router" else f"colocated server {router.name}"
        msg = (f"{path}: {report.get('text')!r} ({report.get('completion_tokens')} tokens) "
               f"in {report.get('latency')}s{ttft}")  # fmt: skip
        return ModuleResult(msg=msg, data={**data, "_show_msg": True})

    @staticmethod
    def all_pairs(ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult | None:
        """Every prefill x decode pair, from the first router host of the play (None on the others)."""
        try:
            deployment = build(hosts_from_task_vars(ctx.variables))
        except PlanError as exc:
            return ModuleResult(failed=True, msg=str(exc))
        raw = ctx.variables.raw() if isinstance(ctx.variables, Vars) else ctx.variables
        if pairs.runner(deployment, raw.get("ansible_play_hosts")) != ctx.host:
            return None
        planned = pairs.plan(deployment)
        request, seconds = pairs.host_request(planned, args["parallel"], args["timeout"], args["prompt"],
                                              args["max_new_tokens"])  # fmt: skip
        try:
            answer = ctx.call_helper("pd_rollout.py", "pairs", stdin=json.dumps(request).encode(), timeout=seconds,
                                     what="pd_verify pairs")  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        if not answer.get("ok"):
            return ModuleResult(failed=True, msg=f"pd_verify pairs: {answer.get('msg', 'no answer')}", data=answer)
        report = pairs.judge(planned, answer, args["same_tokens"])
        msg = f"{pairs.summary(report)}\n{pairs.table(report)}"
        return ModuleResult(failed=not report.ok, msg=msg, data={"pairs": report.to_dict(), "_show_msg": True})


def answer_text(status: object, error: object) -> str:
    """What a request got, in words: "HTTP 503 <error>", or "no answer (<error>)" when no HTTP answer came
    (the helpers report None, or -1, then: never "HTTP None")."""
    if not isinstance(status, int) or status < 0:
        return f"no answer ({error})" if error else "no answer"
    return f"HTTP {status} {error or ''}".rstrip()


@register
class PdStatus(Module):
    name = "pd_status"
    args = {"health_timeout": Arg("float", default=2.0)}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        plan = _plan_or_result(ctx)
        if isinstance(plan, ModuleResult):
            return plan
        items = [{"name": p.name, "piddir": plan.pid_dir, "script": plan.script(p), "log": plan.log(p),
                  "health": health_url(p),
                  "health_timeout": args["health_timeout"], **supervisor_request(plan.supervisor)}
                 for p in plan.procs]  # fmt: skip
        answer = helper(ctx, "status", {"procs": items})
        if not answer.get("ok"):
            return ModuleResult(failed=True, msg=f"pd_status: {answer.get('msg')}")
        if not isinstance(answer.get("procs"), list):
            return ModuleResult(failed=True, msg="pd_status: the host's answer is malformed (no list of processes)")
        rows = []
        for proc, info in zip(plan.procs, [_typed_status(i) for i in answer["procs"]], strict=False):
            changed = bool(info.get("running")) and info.get("started_sha256") != info.get("script_sha256")
            rows.append({**info, "host": plan.host, "role": proc.role, "port": proc.port, "url": proc.url,
                         "script_changed": changed})  # fmt: skip
            if proc.role == "router" and info.get("running"):
                rows[-1].update(self.router_workers(ctx, proc, args["health_timeout"]))
        up = sum(1 for r in rows if r.get("running"))
        return ModuleResult(msg=f"{up} of {len(rows)} running", data={"procs": rows})

    @staticmethod
    def router_workers(ctx: ModuleContext, router: Proc, timeout: float) -> dict[str, Any]:
        """``workers``: what the router lists (``url``, ``healthy``), read from its worker API on its host; or
        ``workers_error``. A host's answer is data: an entry without a text URL makes the list unread."""
        request = json.dumps({"router": local_base(router)}).encode()
        try:
            answer = ctx.call_helper("pd_rollout.py", "router_list", stdin=request, timeout=timeout + 30,
                                     what="pd_rollout", check_rc=False)  # fmt: skip
        except HelperError as exc:
            return {"workers_error": exc.msg}
        listed = answer.get("workers") if answer.get("ok") else None
        if not isinstance(listed, list):
            return {"workers_error": str(answer.get("msg") or "no list of workers")}
        if not all(isinstance(w, dict) and isinstance(w.get("url"), str) for w in listed):
            return {"workers_error": "malformed answer from the host (a worker without a URL)"}
        return {"workers": [{"url": w["url"], "healthy": w.get("is_healthy") is True} for w in listed]}


# the type each value of a process_ctl status answer must have (a host's answer is data: a value of another
# type is dropped and the row says so, the table still prints)
_STATUS_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "recorded": (bool,), "running": (bool,), "pid": (int,), "uptime": (int, float),
    "started_at": (int, float, str), "script": (str,), "started_sha256": (str,), "script_sha256": (str,),
    "log": (str,), "run_id": (str,), "orphans": (list,), "health": (int,), "restarts": (int,),
    "crash_looping": (bool,), "supervisor": (str,), "state": (str,), "last_reason": (str,), "last_exit": (dict,),
    "now": (int, float), "group_restarts": (int,),
}  # fmt: skip


def _typed_status(info: Any) -> dict[str, Any]:
    """One process's status from the host, with only values of the expected types (bool is not an int here)."""
    if not isinstance(info, dict):
        return {"running": False, "error": "malformed answer from the host"}
    out: dict[str, Any] = {}
    bad = []
    for key, value in info.items():
        want = _STATUS_TYPES.get(key)
        if want is None:
            out[key] = value  # a key this table does not read: kept for --json as the host gave it
            continue
        if value is None or (isinstance(value, want) and not (isinstance(value, bool) and bool not in want)):
            out[key] = value
        else:
            bad.append(key)
    if bad:
        out["error"] = f"malformed answer from the host ({', '.join(sorted(bad)[:5])})"
    return out


def _text_lines(item: Any) -> list[str]:
    """A log's lines from the host: text only."""
    lines = item.get("lines") if isinstance(item, dict) else None
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        return ["(malformed answer from the host)"]
    return lines


@register
class PdLogs(Module):
    name = "pd_logs"
    args = {"role": Arg(default="all", choices=("all", "server", "prefill", "decode", "serve", "router")),
            "lines": Arg("int", default=50)}  # fmt: skip

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        found = _procs_or_result(ctx, args["role"])
        if isinstance(found, ModuleResult):
            return found
        _, plan, procs = found
        items = [{"name": p.name, "piddir": plan.pid_dir, "log": plan.log(p)} for p in procs]
        answer = helper(ctx, "tail", {"procs": items, "lines": args["lines"]})
        if not answer.get("ok"):
            return ModuleResult(failed=True, msg=f"pd_logs: {answer.get('msg')}")
        if not isinstance(answer.get("procs"), list):
            return ModuleResult(failed=True, msg="pd_logs: the host's answer is malformed (no list of logs)")
        logs = [{"name": p.name, "log": plan.log(p), "lines": _text_lines(item), "host": plan.host, "role": p.role}
                for p, item in zip(procs, answer["procs"], strict=False)]  # fmt: skip
        return ModuleResult(msg=f"{len(logs)} logs", data={"logs": logs})
