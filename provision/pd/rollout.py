"""``provision pd rollout``: a rolling update of a serving PD deployment, batch by batch, canary first, with no
request lost.

The data flows one way: every PD host's vars → the plan (:func:`build`) → what differs on the hosts (the
rendered launch script and env file against those on disk, in check mode; a process that is down or runs a
script that changed since it started) → batches → per batch: (a) remove its servers from every router (the
router's worker API), (b) drain (no request running or waiting on the server, bounded), (c) keep the previous
script and env file, write the new ones, restart, (d) wait for ``/health``, (e) one real PD generation pinned
to the new server and a serving peer of the other role, (f) re-admit it to every router. A batch that fails
at (c)-(e) is rolled back: the previous files are put back, the servers restarted, verified and re-admitted,
and the rollout stops (exit 2) naming the host and the reason; hosts of later batches are not touched. The
previous files are removed when the rollout ends well. A multi-host server (``pd_instance``) is one server
here: a change of any rank restarts it whole (every rank stopped, then every rank started and waited for
through its leader), and only its leader is removed, drained, verified and re-admitted. An interrupt (Ctrl-C,
SIGTERM) in a batch stops the rollout after putting the batch's servers that answer ``/health`` back into the
routers (:meth:`Rollout.put_back`); the result says so (``interrupted``, exit 130 or 143).

Remote work goes through an injected ``run(hosts, tasks)`` (:data:`RunTasks`): a play of the given task dicts
on the given hosts, as the CLI (or the Python API) runs it with the executor; this module never imports the
engine above it. :func:`rollout` prints nothing; it returns a :class:`RolloutResult` (``to_dict()`` for
``--json``; :func:`render` for people).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import EXIT_INTERRUPTED, EXIT_TERMINATED, InputError, Interrupted, SigTerm, Terminated
from . import pairs
from .flags import PlanError
from .spec import SERVER_ROLES, Deployment, Proc, build, local_base, router_worker

EXIT_OK, EXIT_FAILED = 0, 2


def request_count(value: object) -> int | None:
    """A router's request counter as a host reported it: a finite, non-negative number, else None (unknown: a
    ``/metrics`` counter of ``inf`` or ``nan`` made ``int()`` raise and ended the rollout)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return int(value)


@dataclass
class Step:
    """One task's result on one host."""

    host: str
    task: str
    ok: bool
    changed: bool = False
    skipped: bool = False
    msg: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


# run(hosts, tasks) -> per host, the results of the tasks in order (a host's list ends at its failed task)
RunTasks = Callable[[list[str], list[dict[str, Any]]], dict[str, list[Step]]]


@dataclass
class RolloutOptions:
    batch: str = "1"  # servers per batch after the canary: N or N%
    canary: int = 1
    allow_downtime: bool = False
    drain_timeout: float = 120.0
    server_timeout: float | None = None  # a server's wait for /health; None: its host's pd_server_timeout
    verify_timeout: float = 180.0
    router_timeout: float = 120.0
    poll_interval: float = 0.25
    only: frozenset[str] | None = None  # roll only these hosts' servers (``-l``); the others are left as they are
    all_pairs: bool = True  # each batch verified through every prefill x decode pair (pd_verify_all_pairs)
    same_tokens: bool = True  # and, after the last batch, the same token ids from every pair
    parallel: int = pairs.PARALLEL


@dataclass
class ServerChange:
    host: str  # the server's host: a multi-host server's leader
    role: str
    name: str
    url: str
    reasons: list[str]  # a rank's own reasons as "HOST: reason"
    members: list[str] = field(default_factory=list)  # a multi-host server's other ranks' hosts (restarted with it)


@dataclass
class BatchReport:
    number: int
    canary: bool
    hosts: list[str]
    ok: bool = False
    removed_seconds: float | None = None
    drain: dict[str, dict[str, Any]] = field(default_factory=dict)  # host → seconds, drained, max_seen
    restart_seconds: dict[str, float] = field(default_factory=dict)
    health_seconds: dict[str, float] = field(default_factory=dict)
    verify: dict[str, dict[str, Any]] = field(default_factory=dict)  # host → peer, latency, text
    pairs: dict[str, Any] | None = None  # with all_pairs: the verdict on every pair (pairs.PairsReport.to_dict)
    readmit_seconds: float | None = None
    served: int | None = None  # requests the routers served while the batch ran
    seconds: float = 0.0
    failed_host: str | None = None
    reason: str | None = None
    rolled_back: bool = False
    rollback: dict[str, Any] = field(default_factory=dict)
    members: dict[str, list[str]] = field(default_factory=dict)  # a multi-host server's host → its other ranks' hosts
    stop_seconds: float | None = None  # every rank of the batch's multi-host servers stopped (before the start)
    interrupted: str | None = None  # "interrupted" (Ctrl-C) or "terminated (SIGTERM)": the batch stopped there
    put_back: list[str] = field(default_factory=list)  # interrupted: the batch's servers back in every router
    left_out: list[str] = field(default_factory=list)  # interrupted: those not answering /health, left out


class Outcome:
    """What a rollout's or a scale's result shares: ``code`` (0 ok, 2 failed, 130 interrupted, 143 terminated)
    and ``to_dict`` (for ``--json``)."""

    ok: bool
    interrupted: str | None

    @property
    def code(self) -> int:
        if self.interrupted:
            return EXIT_TERMINATED if self.interrupted.startswith("terminated") else EXIT_INTERRUPTED
        return EXIT_OK if self.ok else EXIT_FAILED

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "code": self.code}  # type: ignore[call-overload]  # its subclasses are dataclasses


@dataclass
class RolloutResult(Outcome):
    ok: bool
    changes: list[ServerChange]
    unchanged: list[str]
    router_changes: list[str]
    batches: list[BatchReport] = field(default_factory=list)
    routers: list[dict[str, Any]] = field(default_factory=list)  # the routers restarted after the servers
    failed_host: str | None = None
    reason: str | None = None
    seconds: float = 0.0
    interrupted: str | None = None  # Ctrl-C or SIGTERM stopped it: what the batch in progress did then


Progress = Callable[[RolloutResult, "BatchReport | None"], None]


class BatchFailed(Exception):
    def __init__(self, host: str, reason: str) -> None:
        super().__init__(f"{host}: {reason}")
        self.host, self.reason = host, reason


INTERRUPTS = (KeyboardInterrupt, Interrupted)  # Ctrl-C or SIGTERM: raw, or as the executor re-raises it


def interruption(exc: BaseException) -> str:
    return "terminated (SIGTERM)" if isinstance(exc, (SigTerm, Terminated)) else "interrupted"


# ---------------------------------------------------------------------------------------------- the plan
DETECT_TASKS: list[dict[str, Any]] = [
    {"name": "pd", "pd_config": None, "register": "pd"},
    {"name": "env", "template": {"src": "pd.env.j2", "dest": "{{ pd.env_file }}", "mode": "0600"},
     "check_mode": True},
    {"name": "script", "template": {"src": "{{ pd.server.role }}.sh.j2", "dest": "{{ pd.server.script }}",
                                    "mode": "0700"}, "check_mode": True, "when": "pd.server is not none"},
    {"name": "router script", "template": {"src": "router.sh.j2", "dest": "{{ pd.router.script }}", "mode": "0700"},
     "check_mode": True, "when": "pd.router is not none"},
    {"name": "status", "pd_status": None},
    {"name": "stack", "pd_rollout_step": {"action": "stack", "request": {
        "python": "{{ pd.python }}", "pidfile": "{{ pd.pid_dir }}/{{ pd.server.name }}.json"}},
     "when": "pd.server is not none"},
]  # fmt: skip
PUT_BACK_TIMEOUT = 30.0  # an interrupted batch's servers back into one router (a healthy server is listed in ~1 s)
# the launch files a batch keeps for a rollback, and the venv link (see remote/pd_rollout.py ``files``)
KEPT = {"paths": ["{{ pd.server.script }}", "{{ pd.env_file }}"], "python": "{{ pd.python }}",
        "pidfile": "{{ pd.pid_dir }}/{{ pd.server.name }}.json"}  # fmt: skip


def _by_task(steps: list[Step]) -> dict[str, Step]:
    return {s.task: s for s in steps}


def members(deployment: Deployment, proc: Proc) -> list[Proc]:
    """The processes of one server: itself, and a multi-host server's other ranks (pd_instance) after it."""
    return [proc, *(r for r in deployment.ranks if r.leader is proc)]


def _reasons(proc: Proc, results: dict[str, list[Step]]) -> list[str]:
    """Why ``proc`` (one rank) needs a restart: its env or script would change, its stack moved, it is down or
    runs a script that changed since it started."""
    steps = _by_task(results.get(proc.host, []))
    status = steps.get("status")
    if status is None or not status.ok:
        failed = next((s for s in results.get(proc.host, []) if not s.ok), None)
        raise BatchFailed(proc.host, f"cannot read its state: {failed.msg if failed else 'no answer'}")
    reasons = [what for what in ("env", "script") if steps[what].changed]
    if "stack" in steps and steps["stack"].data.get("changed"):
        reasons.append("stack")  # it runs another venv than the one venv_path points at now
    row: dict[str, Any] = next((r for r in status.data.get("procs", []) if r.get("role") == proc.role), {})
    if not row.get("running"):
        reasons.append("down")
    elif row.get("script_changed"):
        reasons.append("stale (its script changed since it started)")
    return reasons


def detect(deployment: Deployment, run: RunTasks) -> tuple[list[ServerChange], list[str], list[str]]:
    """(the servers that need a restart and why, the unchanged ones, the routers whose script would change). A
    multi-host server changes as one: any rank's reason restarts every rank."""
    hosts = list(deployment.hosts)
    results = run(hosts, DETECT_TASKS)
    changes, unchanged, routers = [], [], []
    for proc in deployment.servers:
        ranks = members(deployment, proc)
        reasons = _reasons(proc, results)
        for rank in ranks[1:]:
            reasons += [f"{rank.host}: {why}" for why in _reasons(rank, results)]
        if reasons:
            changes.append(ServerChange(proc.host, proc.role, proc.name, proc.url, reasons,
                                        [r.host for r in ranks[1:]]))  # fmt: skip
        else:
            unchanged.append(proc.name)
    for proc in deployment.routers:
        steps = _by_task(results.get(proc.host, []))
        step, status = steps.get("router script"), steps.get("status")
        rows = status.data.get("procs", []) if status else []
        row: dict[str, Any] = next((r for r in rows if r.get("role") == "router"), {})
        if (step is not None and step.changed) or not row.get("running") or row.get("script_changed"):
            routers.append(proc.name)
    return changes, unchanged, routers


def batch_size(spec: str, total: int) -> int:
    text = str(spec).strip()
    try:
        if text.endswith("%"):
            pct = float(text[:-1])
            if not 0 < pct <= 100:
                raise ValueError
            return max(1, math.ceil(total * pct / 100))
        size = int(text)
        if size < 1:
            raise ValueError
        return size
    except ValueError:
        raise InputError(f"--batch {spec!r}: give a number of servers (N >= 1) or a percentage (N%)") from None


def plan_batches(
    deployment: Deployment, changes: list[ServerChange], options: RolloutOptions
) -> list[list[ServerChange]]:
    """Canary first, then batches of ``--batch``; a batch never holds every server of a role (unless
    ``--allow-downtime``): the routers always keep one prefill and one decode."""
    total = {role: sum(1 for p in deployment.servers if p.role == role) for role in SERVER_ROLES}
    if not options.allow_downtime:
        single = [c for c in changes if total[c.role] == 1]
        if single:
            c = single[0]
            raise InputError(
                f"{c.name} on {c.host} needs a restart and is the only {c.role} server: a rolling update would "
                "leave the routers without one (add a second one, or give --allow-downtime)"
            )
    queue = list(changes)
    size = batch_size(options.batch, len(changes))
    batches: list[list[ServerChange]] = []
    first = True
    while queue:
        want = options.canary if first and options.canary > 0 else size
        first = False
        batch: list[ServerChange] = []
        for change in list(queue):
            if len(batch) >= want:
                break
            taken = sum(1 for b in batch if b.role == change.role) + 1
            if options.allow_downtime or taken < total[change.role]:
                batch.append(change)
                queue.remove(change)
        if not batch:  # only reachable with a role of one server and --allow-downtime off: refused above
            batch.append(queue.pop(0))
        batches.append(batch)
    return batches


# -------------------------------------------------------------------------------------------- the steps
def _restart(key: str) -> dict[str, Any]:
    """The ``process`` task that restarts ``pd.<key>`` (server or router) under its supervisor, on the env the
    venv link points at now: the rollout is what moves a server to a new stack."""
    proc = f"pd.{key}"
    return {"name": f"{{{{ {proc}.name }}}}", "script": f"{{{{ {proc}.script }}}}", "log": f"{{{{ {proc}.log }}}}",
            "pidfile_dir": "{{ pd.pid_dir }}", "state": "restarted", "supervisor": "{{ pd.supervisor }}",
            "restart": "{{ pd.restart }}", "venv": f"{{{{ {proc}.venv }}}}", "group": f"{{{{ {proc}.group }}}}",
            "stop_timeout": "{{ pd.restart.stop_timeout }}"}  # fmt: skip


def _step(action: str, request: dict[str, Any], timeout: float, name: str | None = None) -> dict[str, Any]:
    return {"name": name or action, "pd_rollout_step": {"action": action, "request": request, "timeout": timeout}}


class Rollout:
    """One rollout's state: the plan, the runner, the clock, what each batch did."""

    def __init__(self, deployment: Deployment, run: RunTasks, options: RolloutOptions) -> None:
        self.d, self.run, self.o = deployment, run, options
        self.procs = {p.host: p for p in deployment.servers}

    def _ok(self, hosts: list[str], tasks: list[dict[str, Any]]) -> dict[str, dict[str, Step]]:
        """Run; raise BatchFailed for the first host whose tasks did not all succeed."""
        results = self.run(hosts, tasks)
        out = {}
        for host in hosts:
            steps = results.get(host, [])
            bad = next((s for s in steps if not s.ok), None)
            if bad is not None or len(steps) < len(tasks):
                why = f"{bad.task}: {bad.msg}" if bad else "did not run every step"
                raise BatchFailed(host, why)
            out[host] = _by_task(steps)
        return out

    def routers(self, action: str, request: dict[str, Any]) -> dict[str, dict[str, Step]]:
        if not self.d.routers:
            return {}
        hosts = [r.host for r in self.d.routers]
        out: dict[str, dict[str, Step]] = {}
        for router in self.d.routers:  # one play per router: each its own URL
            req = {**request, "router": local_base(router), "timeout": self.o.router_timeout}
            out.update(self._ok([router.host], [_step(action, req, self.o.router_timeout)]))
        assert set(out) == set(hosts)
        return out

    def served(self) -> int | None:
        """Requests the routers served (None: unknown, also when a router's counter is not a count)."""
        total = 0
        for router in self.d.routers:
            url = local_base(router, router.prometheus_port) + "/metrics"
            steps = self.run([router.host], [_step("router_metrics", {"metrics_url": url}, 10)]).get(router.host, [])
            count = request_count(steps[0].data.get("requests")) if steps and steps[0].ok else None
            if count is None:
                return None
            total += count
        return total

    def drain(self, batch: list[Proc], report: BatchReport) -> None:
        tasks_by_host = {
            p.host: [_step("drain", {"url": local_base(p), "timeout": self.o.drain_timeout,
                                     "interval": self.o.poll_interval, "settle": 1.0}, self.o.drain_timeout)]
            for p in batch
        }  # fmt: skip
        for host, tasks in tasks_by_host.items():  # each server its own URL; they drain at the same time anyway
            step = self._ok([host], tasks)[host]["drain"]
            report.drain[host] = {k: step.data.get(k) for k in ("seconds", "drained", "max_seen", "last")}

    def hosts_of(self, batch: list[Proc]) -> list[str]:
        """Every host the batch restarts: its servers', and the other ranks of its multi-host servers."""
        return [m.host for p in batch for m in members(self.d, p)]

    def start_groups(self, batch: list[Proc], hosts: list[str]) -> list[list[str]]:
        """The hosts that restart together, group after group: with ``pd_serial_start`` each server alone, after
        the one before answers ``/health`` (servers that share a GPU: SGLang sizes a server's KV cache from the
        memory free at its own start), in the batch's order; the others (and every rank of a multi-host server:
        its leader is healthy only once all have joined) together, first."""
        alone = [p.host for p in batch if p.starts_alone]
        together = [h for h in hosts if h not in alone]
        return ([together] if together else []) + [[h] for h in alone]

    def apply(self, batch: list[Proc], report: BatchReport, restore: bool = False) -> None:
        """Keep (or put back) the launch files, write the new ones, restart, wait for ``/health``. A multi-host
        server restarts whole: every rank stopped first (none rejoins a group whose other ranks still run), then
        every rank started together, as ``pd up`` starts them, and waited for through its leader."""
        files = {"op": "restore" if restore else "backup", **KEPT}
        config: dict[str, Any] = {"name": "pd", "pd_config": None, "register": "pd"}
        hosts = self.hosts_of(batch)
        tasks: list[dict[str, Any]] = [config, _step("files", files, 60)]
        whole = [m.host for p in batch if p.instance is not None for m in members(self.d, p)]
        if whole:  # the files first (the backup reads the running server's env), then every rank stopped
            self._ok(hosts, tasks)
            stop = {"name": "{{ pd.server.name }}", "state": "stopped", "pidfile_dir": "{{ pd.pid_dir }}",
                    "stop_timeout": "{{ pd.restart.stop_timeout }}"}  # fmt: skip
            t = time.monotonic()
            self._ok(whole, [config, {"name": "stop", "process": stop, "become": "{{ pd.become }}"}])
            report.stop_seconds = round(time.monotonic() - t, 3)
            tasks = [config]
        if not restore:
            tasks += [
                {"name": "env", "template": {"src": "pd.env.j2", "dest": "{{ pd.env_file }}", "mode": "0600"}},
                {"name": "script", "template": {"src": "{{ pd.server.role }}.sh.j2", "dest": "{{ pd.server.script }}",
                                                "mode": "0700"}},
            ]  # fmt: skip
        wait = "{{ pd.server_timeout }}" if self.o.server_timeout is None else self.o.server_timeout
        tasks += [
            {"name": "restart", "process": _restart("server"), "become": "{{ pd.become }}"},
            {"name": "health", "pd_wait": {"role": "server", "timeout": wait,
                                           "interval": self.o.poll_interval}},
        ]  # fmt: skip
        results: dict[str, list[Step]] = {}
        for group in self.start_groups(batch, hosts):  # every group, also after one failed: the rollback
            results.update(self.run(group, tasks))  # restores the whole batch from the files each host kept
        for host in hosts:
            steps = _by_task(results.get(host, []))
            if "restart" in steps:
                report.restart_seconds[host] = round(steps["restart"].seconds, 3)
            if "health" in steps:
                report.health_seconds[host] = round(steps["health"].seconds, 3)
            bad = next((s for s in results.get(host, []) if not s.ok), None)
            if bad is not None or len(steps) < len(tasks):
                raise BatchFailed(host, f"{bad.task}: {bad.msg}" if bad else "did not run every step")

    def peer(self, proc: Proc, batch: list[Proc]) -> Proc:
        others = [p for p in self.d.servers if p.role != proc.role]
        outside = [p for p in others if p not in batch]
        return (outside or others)[0]

    def verify(self, batch: list[Proc], report: BatchReport) -> None:
        if self.o.all_pairs:
            return self.verify_pairs(batch, report)
        where = self.d.routers[0].host if self.d.routers else None
        for proc in batch:
            peer = self.peer(proc, batch)
            prefill, decode = (proc, peer) if proc.role == "prefill" else (peer, proc)
            request = {"prefill": prefill.url, "decode": decode.url, "bootstrap_host": prefill.address,
                       "bootstrap_port": prefill.bootstrap_port, "prompt": "Hello world", "max_new_tokens": 8,
                       "timeout": self.o.verify_timeout}  # fmt: skip
            host = where or proc.host
            try:
                step = self._ok([host], [_step("pinned", request, self.o.verify_timeout)])[host]["pinned"]
            except BatchFailed as exc:
                raise BatchFailed(proc.host, f"no verified generation through {proc.name} (with {peer.name}): "
                                  f"{exc.reason}") from None  # fmt: skip
            report.verify[proc.host] = {
                "peer": peer.name,
                "latency": step.data.get("latency"),
                "text": step.data.get("text"),
                "tokens": step.data.get("completion_tokens"),
            }

    def verify_pairs(self, batch: list[Proc], report: BatchReport) -> None:
        """One generation pinned to every pair, from the first router's host: a pair of a batch server that fails
        fails the batch. Other tokens are noted only (a rollout may change the weights: the deployment is mixed
        until the last batch, whose verdict is the rollout's)."""
        planned = pairs.plan(self.d)
        where = self.d.routers[0].host if self.d.routers else batch[0].host
        request, timeout = pairs.host_request(planned, self.o.parallel, self.o.verify_timeout)
        try:
            step = self._ok([where], [_step("pairs", request, timeout)])[where]["pairs"]
        except BatchFailed as exc:
            raise BatchFailed(batch[0].host, f"the pairs could not be verified: {exc.reason}") from None
        verdict = pairs.judge(planned, step.data, self.o.same_tokens)
        report.pairs = verdict.to_dict()
        for proc in batch:
            peer = self.peer(proc, batch)
            mine = [r for r in verdict.pairs if proc.name in (r.prefill, r.decode)]
            failed = [r for r in mine if r.state == "failed"]
            if failed:
                raise BatchFailed(proc.host, f"no verified generation through {failed[0].name}: {failed[0].error}")
            r = next(r for r in mine if peer.name in (r.prefill, r.decode))
            report.verify[proc.host] = {"peer": peer.name, "latency": r.latency, "text": r.text, "tokens": r.tokens,
                                        "ttft": r.ttft}  # fmt: skip

    def files(self, hosts: list[str], op: str) -> None:
        self.run(hosts, [{"name": "pd", "pd_config": None, "register": "pd"},
                         _step("files", {"op": op, **KEPT}, 60)])  # fmt: skip

    def batch(self, number: int, changes: list[ServerChange]) -> BatchReport:
        procs = [self.procs[c.host] for c in changes]
        report = BatchReport(number, number == 1 and self.o.canary > 0, [p.host for p in procs])
        report.members = {p.host: [r.host for r in members(self.d, p)[1:]] for p in procs if p.instance is not None}
        started = time.monotonic()
        before = self.served()
        try:
            self._batch(procs, report)
        except INTERRUPTS as exc:  # Ctrl-C, SIGTERM: the batch back into the routers first (a second one: now)
            report.ok, report.interrupted = False, interruption(exc)
            self.put_back(procs, report)
            report.seconds = round(time.monotonic() - started, 3)
            return report
        try:
            after = self.served()
        except INTERRUPTS as exc:  # the batch is done and back in the routers
            report.interrupted, after = interruption(exc), None
        report.served = after - before if before is not None and after is not None else None
        report.seconds = round(time.monotonic() - started, 3)
        return report

    def _batch(self, procs: list[Proc], report: BatchReport) -> None:
        t = time.monotonic()
        try:
            self.routers("router_remove", {"urls": [p.url for p in procs]})
        except BatchFailed as exc:  # nothing was restarted: put back whatever left the routers, and stop
            report.failed_host, report.reason = exc.host, f"could not take the batch out of the routers: {exc.reason}"
            self.readmit(procs, report)
            return
        report.removed_seconds = round(time.monotonic() - t, 3)
        try:
            self.drain(procs, report)
            self.apply(procs, report)
            self.verify(procs, report)
        except BatchFailed as exc:
            report.failed_host, report.reason = exc.host, exc.reason
            self.roll_back(procs, report)
        else:
            report.ok = True
        if report.ok or report.rollback.get("ok"):
            self.readmit(procs, report)

    def put_back(self, procs: list[Proc], report: BatchReport) -> None:
        """After an interrupt: each of the batch's servers that answers ``/health`` (the old one still, or the
        new one already) back into every router, without waiting for a server that does not (one stopped or
        starting: the next ``pd up`` starts it and puts it back). Bounded by ``PUT_BACK_TIMEOUT``."""
        skipped: set[str] = set()
        request = {"workers": [router_worker(p) for p in procs], "healthy_only": True, "wait": "added"}
        try:
            for router in self.d.routers:
                req = {**request, "router": local_base(router), "timeout": PUT_BACK_TIMEOUT}
                step = self._ok([router.host], [_step("router_add", req, PUT_BACK_TIMEOUT)])[router.host]
                skipped.update(step["router_add"].data.get("skipped") or [])
        except BatchFailed as exc:
            report.failed_host, report.reason = exc.host, f"putting the batch back into the routers: {exc.reason}"
            return
        report.left_out = [p.host for p in procs if p.url.rstrip("/") in skipped]
        report.put_back = [p.host for p in procs if p.host not in report.left_out]

    def readmit(self, procs: list[Proc], report: BatchReport) -> None:
        """Back into every router; a router that will not take them fails the batch (they serve no traffic)."""
        t = time.monotonic()
        try:
            self.routers("router_add", {"workers": [router_worker(p) for p in procs]})
        except BatchFailed as exc:
            report.ok = False
            report.failed_host = report.failed_host or exc.host
            report.reason = (report.reason + "; " if report.reason else "") + f"re-admission: {exc.reason}"
            return
        report.readmit_seconds = round(time.monotonic() - t, 3)

    def restart_router(self, router: Proc) -> dict[str, Any]:
        """A changed router: new script, restart, ready, a generation through it; the previous script back on
        failure. Requests sent to it while it restarts fail (said up front): it is the routers' own change."""
        report: dict[str, Any] = {"host": router.host, "name": router.name, "ok": False}
        kept = {"paths": ["{{ pd.router.script }}"]}
        tasks: list[dict[str, Any]] = [
            {"name": "pd", "pd_config": None, "register": "pd"},
            _step("files", {"op": "backup", **kept}, 60),
            {"name": "script", "template": {"src": "router.sh.j2", "dest": "{{ pd.router.script }}", "mode": "0700"}},
            {"name": "restart", "process": _restart("router"), "become": "{{ pd.become }}"},
            {"name": "ready", "pd_wait": {"role": "router", "timeout": self.o.router_timeout,
                                          "interval": self.o.poll_interval}},
            {"name": "verify", "pd_verify": {"timeout": self.o.verify_timeout, "stream": False}},
        ]  # fmt: skip
        try:
            steps = self._ok([router.host], tasks)[router.host]
        except BatchFailed as exc:
            report["reason"] = exc.reason
            restore = [tasks[0], _step("files", {"op": "restore", **kept}, 60), *tasks[3:]]
            try:
                self._ok([router.host], restore)
                report["rolled_back"] = True
            except BatchFailed as again:
                report["rollback_reason"] = again.reason
            self.run([router.host], [tasks[0], _step("files", {"op": "discard", **kept}, 60)])
            return report
        self.run([router.host], [tasks[0], _step("files", {"op": "discard", **kept}, 60)])
        report.update(ok=True, restart_seconds=round(steps["restart"].seconds, 3),
                      ready_seconds=round(steps["ready"].seconds, 3),
                      verify_latency=steps["verify"].data.get("latency"))  # fmt: skip
        return report

    def roll_back(self, procs: list[Proc], report: BatchReport) -> None:
        report.rolled_back = True
        scratch = BatchReport(report.number, report.canary, report.hosts)
        try:
            self.apply(procs, scratch, restore=True)
            self.verify(procs, scratch)
        except BatchFailed as exc:
            report.rollback = {"ok": False, "host": exc.host, "reason": exc.reason}
            return
        report.rollback = {"ok": True, "restart_seconds": scratch.restart_seconds,
                           "health_seconds": scratch.health_seconds, "verify": scratch.verify}  # fmt: skip


def rollout(hosts: Mapping[str, Mapping[str, Any]], run: RunTasks, options: RolloutOptions | None = None,
            progress: Progress | None = None) -> RolloutResult:  # fmt: skip
    """Roll the changed servers of the deployment that ``hosts`` (every PD host's vars) describes, batch by
    batch. ``progress(result, None)`` is called once the plan is known, ``progress(result, batch)`` after each
    batch (the CLI prints them as they come). Raises :class:`~provision.errors.InputError` (exit 5) before
    touching anything when the plan is invalid or the topology cannot keep serving; returns the result
    otherwise (``code`` 0 or 2; 130 or 143 when a Ctrl-C or SIGTERM stopped a batch, after it was put back into
    the routers: ``interrupted``). An interrupt before the first batch (while reading the hosts) is raised."""
    options = options or RolloutOptions()
    started = time.monotonic()
    try:
        deployment = build(hosts)
    except PlanError as exc:
        raise InputError(str(exc)) from None
    if not deployment.servers:
        raise InputError("no PD server in the inventory: put hosts in the groups prefill and decode")
    try:
        changes, unchanged, routers = detect(deployment, run)
    except BatchFailed as exc:
        return RolloutResult(False, [], [], [], failed_host=exc.host, reason=exc.reason)
    if options.only is not None:  # a multi-host server is limited in when any of its hosts is
        limited = [c for c in changes if options.only & {c.host, *c.members}]
        unchanged += [c.name for c in changes if c not in limited]
        changes = limited
    result = RolloutResult(True, changes, unchanged, routers)
    engine = Rollout(deployment, run, options)
    batches = plan_batches(deployment, changes, options)
    if progress is not None:
        progress(result, None)
    for number, batch in enumerate(batches, 1):
        report = engine.batch(number, batch)
        result.batches.append(report)
        if progress is not None:
            progress(result, report)
        if report.interrupted:
            result.ok, result.interrupted = False, report.interrupted
            result.failed_host, result.reason = report.failed_host, report.reason
            break
        if not report.ok:
            result.ok, result.failed_host, result.reason = False, report.failed_host, report.reason
            break
    final = result.batches[-1].pairs if result.ok and result.batches else None
    if final is not None and not final["ok"]:  # every server rolled: every pair must answer, the same tokens
        verdict = pairs.PairsReport.from_dict(final)
        bad = verdict.suspects or [verdict.bad[0].decode]
        result.ok, result.reason = False, f"after the last batch: {pairs.summary(verdict)}"
        result.failed_host = next((p.host for p in deployment.servers if p.name == bad[0]), None)
    if result.ok:  # the routers last, one at a time: only those whose own script changed
        for router in [r for r in deployment.routers if r.name in routers]:
            try:
                done = engine.restart_router(router)
            except INTERRUPTS as exc:
                result.ok, result.interrupted, result.failed_host = False, interruption(exc), router.host
                result.reason = f"while the router {router.name} restarted with its new script (see pd status)"
                break
            result.routers.append(done)
            if not done["ok"]:
                result.ok, result.failed_host = False, router.host
                result.reason = f"the router {router.name} did not come back with its new script: {done['reason']}"
                break
    touched = [host for b in result.batches for host in engine.hosts_of([engine.procs[h] for h in b.hosts])]
    if touched and not result.interrupted:  # the previous files are kept until the rollout ends (a rolled-back
        # host runs them again); an interrupted one leaves them for a rollback by hand (the next backup overwrites)
        engine.files(touched, "discard")
    result.seconds = round(time.monotonic() - started, 3)
    return result


# ------------------------------------------------------------------------------------------- the report
def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def render_batch(b: BatchReport) -> str:
    head = f"batch {b.number}{' (canary)' if b.canary else ''}: {', '.join(b.hosts)}"
    verdict = b.interrupted.upper() if b.interrupted else "ok" if b.ok else "FAILED"
    lines = [
        f"{head}: {verdict} in {_secs(b.seconds)}"
        + (f", {b.served} requests served by the routers meanwhile" if b.served is not None else "")
    ]
    lines.append(f"  removed from the routers {_secs(b.removed_seconds)}")
    if b.members:
        ranks = "; ".join(f"{h} with {', '.join(m)}" for h, m in b.members.items())
        lines.append(f"  multi-host servers restarted whole ({ranks}): every rank stopped {_secs(b.stop_seconds)}")
    for host in b.hosts:
        drain = b.drain.get(host, {})
        verify = b.verify.get(host, {})
        state = "" if drain.get("drained", True) else " (timed out: restarted with requests in flight)"
        lines.append(
            f"  {host}: drain {_secs(drain.get('seconds'))}{state}, restart {_secs(b.restart_seconds.get(host))}, "
            f"health {_secs(b.health_seconds.get(host))}, verified {_secs(verify.get('latency'))}"
            + (f" with {verify['peer']}: {verify.get('text')!r}" if verify else "")
        )
    if b.pairs is not None:
        lines.append(f"  pairs: {pairs.summary(pairs.PairsReport.from_dict(b.pairs))}")
    if b.reason:
        lines.append(f"  FAILED on {b.failed_host}: {b.reason}")
    if b.rolled_back:
        rb = b.rollback
        lines.append("  rolled back: previous script and env restored, restarted, verified and re-admitted"
                     if rb.get("ok") else f"  ROLLBACK FAILED on {rb.get('host')}: {rb.get('reason')} (left out "
                     "of the routers)")  # fmt: skip
    if b.readmit_seconds is not None:
        lines.append(f"  re-admitted to the routers {_secs(b.readmit_seconds)}")
    if b.interrupted and not b.reason:
        if b.put_back:
            lines.append(f"  {b.interrupted}: put back into the routers: {', '.join(b.put_back)}")
        if b.left_out:
            lines.append(f"  {b.interrupted}: LEFT OUT of the routers (no answer on /health): {', '.join(b.left_out)}; "
                         "`provision pd up` starts what is down and puts it back")  # fmt: skip
    return "\n".join(lines)


def render_plan(result: RolloutResult) -> str:
    lines = []
    if not result.changes and result.ok:
        lines.append("nothing to roll: every server runs its current launch script and env")
    for c in result.changes:
        whole = f" (a multi-host server: restarts whole, with {', '.join(c.members)})" if c.members else ""
        lines.append(f"{c.name} on {c.host}{whole}: {', '.join(c.reasons)}")
    if result.unchanged:
        lines.append(f"unchanged (not restarted): {', '.join(result.unchanged)}")
    if result.router_changes:
        lines.append(f"router changed: {', '.join(result.router_changes)} restarts after the servers (requests sent "
                     "to it while it restarts fail: seconds)")  # fmt: skip
    return "\n".join(lines)


def render_end(result: RolloutResult) -> str:
    lines = []
    for r in result.routers:
        if r["ok"]:
            lines.append(f"router {r['name']}: restarted {_secs(r['restart_seconds'])}, "
                         f"ready {_secs(r['ready_seconds'])}, verified {_secs(r['verify_latency'])}")  # fmt: skip
        else:
            back = "previous script restored" if r.get("rolled_back") else f"NOT restored: {r.get('rollback_reason')}"
            lines.append(f"router {r['name']}: FAILED ({back})")
    return "\n".join([*lines, _outcome(result)])


def _outcome(result: RolloutResult) -> str:
    if result.interrupted:
        where = f" ({result.failed_host}: {result.reason})" if result.reason else ""
        last = result.batches[-1] if result.batches else None
        when = f" in batch {last.number}" if last is not None and last.interrupted else ""
        return f"rollout {result.interrupted}{when}{where}"
    if result.ok:
        n, m = len(result.changes), len(result.batches)
        return f"rollout ok: {n} servers in {m} batches, {_secs(result.seconds)}"
    return f"rollout FAILED on {result.failed_host}: {result.reason}"


def render(result: RolloutResult) -> str:
    """The whole report: the plan, each batch's timeline, the outcome."""
    parts = [render_plan(result), *(render_batch(b) for b in result.batches), render_end(result)]
    return "\n".join(p for p in parts if p)
