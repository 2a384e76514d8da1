"""The PD deployment as data: inventory vars in, what runs where (commands, flags, ports, env, paths) out.

Pure functions, no I/O: the ``pd_config`` module, the ``pd`` command, the validation and the tests all read
the same plan. One inventory host runs at most one SGLang server (group ``prefill`` or ``decode``) and may
also run the router (group ``router``); to put several servers on one machine, give the machine several
inventory names with the same ``ansible_host`` (``inventory/single-host-4p4.yml``).

Every var has a default here (:data:`DEFAULTS`), so an inventory needs only its hosts and groups (plus
``model_path`` on GPU hosts). The launch scripts' flags are built as lists of words, one script line each;
templates render every word through ``quote``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..nixl.ucx import ucx_env
from ..sglang.cpu_compat import (
    CPU_DECODE_FLAGS,
    CPU_ROUTER_HEALTH_CHECK_TIMEOUT,
    CPU_TRANSFER_TIMEOUT,
    cpu_env,
    cpu_server_flags,
)
from . import instances, ports, vartypes
from .addr import address_of, is_ip, machine_of, url_host
from .flags import PlanError, effective, flag_lines, words

SERVER_ROLES = ("prefill", "decode", "serve")  # serve: a plain (colocated) server, the baseline of a PD one
ROLES = (*SERVER_ROLES, "router")
DEFAULTS: dict[str, Any] = {
    "sglang_device": "cuda",
    "venv_path": "~/.provision/venv",  # as provision/data/defaults.yml (a test keeps the two in step)
    "server_port": 30000,
    "bootstrap_port": 8998,
    "router_port": 8000,
    "router_prometheus_port": 29000,
    "router_health_check_interval": 5,
    "router_health_check_timeout": None,  # the router's own (5 s); CPU_ROUTER_HEALTH_CHECK_TIMEOUT in CPU mode
    "router_health_failure_threshold": None,  # the router's own (3 failed checks in a row)
    "pd_transfer_timeout": None,  # SGLang's own (300 s) on GPUs; CPU_TRANSFER_TIMEOUT in CPU mode (host_env)
    "router_policy": None,
    "tp": 1,
    "dp": 1,
    "base_gpu_id": 0,
    "page_size": None,
    "kv_cache_dtype": None,
    "sglang_extra_args": [],
    "router_extra_args": [],
    "pd_dir": "~/.provision/pd",
    "pd_pid_dir": "~/.provision/run",
    "pd_compat_dir": "~/.provision/pd/cpu_compat",
    "pd_tiny_model_dir": "~/.provision/models/tiny-llama",
    "pd_cpu_model_path": None,
    "cpu_max_total_tokens": 16384,
    "pd_nixl_backend": "UCX",
    "pd_env": {},
    "pd_supervisor": "auto",
    "pd_restart_delay": 5,
    "pd_restart_max_delay": 300,
    "pd_start_limit_burst": 5,
    "pd_start_limit_interval": 900,
    "pd_stop_timeout": 20,
    "nccl_port": None,  # --nccl-port: server_port + 100 (pd/ports.py: the port plan)
    "dist_init_port": None,  # a multi-host instance's --dist-init-addr port: the leader's server_port + 200
    "pd_instance": None,  # hosts with the same name are one server over several hosts (pd/instances.py)
    "pd_instance_one_machine": False,  # the ranks of one pd_instance may share a machine, on disjoint GPUs
    "pd_instance_grace": 30,  # a multi-host server's /health failing this long (s) restarts every rank of it
    "pd_server_timeout": 900,  # pd up's wait for a server's /health; the start gate's bound (pd_serial_start)
    "pd_serial_start": False,  # servers start (and restart in a rollout's batch) one at a time: shared GPUs
    "pd_metrics": True,  # --enable-metrics on every server (Prometheus /metrics; `pd targets`, `pd status --metrics`)
}
SUPERVISORS = ("auto", "systemd", "provision", "none")
GROUP_INTERVAL = 2.0  # how often a multi-host server's member's supervisor polls the server's health (s)
START_GATE = "start_gate.py"  # provision/remote/start_gate.py, shipped to pd_dir: pd_serial_start servers' gate
START_LOCK = "provision-pd-start"  # its lock: the abstract Unix socket of that name, one per machine (netns)
UNIT_PREFIX = "provision-pd-"  # a process's systemd unit is UNIT_PREFIX + its name + ".service" (process_ctl.py)
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.@-]")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def var(variables: Mapping[str, Any], name: str) -> Any:
    """The host's value of ``name``, or the default when it is unset or null."""
    value = variables.get(name) if name in variables else None
    return DEFAULTS.get(name) if value is None else value


def int_var(variables: Mapping[str, Any], name: str, host: str, low: int = 0, high: int = 65535) -> int:
    value = var(variables, name)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise PlanError(f"{host}: {name}={value!r} is not an integer") from None
    if not low <= number <= high or isinstance(value, bool):
        raise PlanError(f"{host}: {name}={value!r} is out of range {low}..{high}")
    return number


@dataclass
class Proc:
    """One long-running process of the deployment."""

    host: str
    role: str  # prefill | decode | router
    name: str  # the process name on the host (pidfile, script and log names)
    address: str  # where the others reach it
    bind: str  # what it listens on
    port: int
    command: list[str]
    flags: list[list[str]]  # one script line each
    machine: str
    bootstrap_port: int | None = None
    prometheus_port: int | None = None
    venv: str | None = None  # the venv whose python the default command runs (the launch script pins it at start)
    nccl_port: int | None = None  # --nccl-port (servers)
    instance: str | None = None  # pd_instance: one server over several hosts (pd/instances.py)
    node_rank: int = 0
    nnodes: int = 1
    leader: Proc | None = field(default=None, repr=False, compare=False)  # rank 0 of its instance
    dist_init_port: int | None = None  # the leader's --dist-init-addr port
    instance_one_machine: bool = False  # pd_instance_one_machine: its ranks may share a machine (disjoint GPUs)
    serial_start: bool = False  # pd_serial_start: (re)started only after the one before answers /health

    @property
    def starts_alone(self) -> bool:
        """``pd up`` and ``pd rollout`` start it by itself, after the server before it answers ``/health``: a
        ``pd_serial_start`` server of one host (a multi-host server's ranks start together: its leader answers
        ``/health`` only once every rank has joined)."""
        return self.serial_start and self.instance is None

    @property
    def args(self) -> list[str]:
        return [w for line in self.flags for w in line]

    @property
    def argv(self) -> list[str]:
        return [*self.command, *self.args]

    @property
    def url(self) -> str:
        return f"http://{url_host(self.address)}:{self.port}"

    @property
    def health_path(self) -> str:
        return "/readiness" if self.role == "router" else "/health"


@dataclass
class HostPlan:
    """Everything one inventory host runs, and where its files go."""

    host: str
    device: str
    address: str
    machine: str
    python: str
    dir: str
    pid_dir: str
    compat_dir: str
    model_path: str
    tiny_model: bool  # CPU mode with the generated model: make it on the host
    env: dict[str, str] = field(default_factory=dict)
    supervisor: str = "provision"  # pd_supervisor: auto | systemd | provision | none (auto: pd_config asks the host)
    restart: dict[str, float] = field(default_factory=dict)  # the supervisor's restart policy
    group_grace: float = 30.0  # pd_instance_grace: a multi-host server unhealthy this long restarts every rank
    server_timeout: float = float(DEFAULTS["pd_server_timeout"])  # a server's wait (pd up, pd rollout, the start gate)
    server: Proc | None = None
    router: Proc | None = None

    @property
    def procs(self) -> list[Proc]:
        return [p for p in (self.server, self.router) if p is not None]

    @property
    def env_file(self) -> str:
        return f"{self.dir}/{_safe(self.host)}.env"

    @property
    def env_digest(self) -> str:
        """sha256 of the env file's variables: the server scripts carry it, so a changed ``pd_env`` (or UCX/NIXL
        setting) changes them and restarts those servers through their supervisor, as a changed flag does."""
        return hashlib.sha256(json.dumps(sorted(self.env.items())).encode()).hexdigest()

    @property
    def hf_token_file(self) -> str:
        return f"{self.dir}/{_safe(self.host)}.hf_token"

    @property
    def log_dir(self) -> str:
        return f"{self.dir}/logs"

    def script(self, proc: Proc) -> str:
        return f"{self.dir}/{proc.name}.sh"

    def log(self, proc: Proc) -> str:
        return f"{self.log_dir}/{proc.name}.log"

    def proc_fact(self, proc: Proc) -> dict[str, Any]:
        return {
            "role": proc.role, "name": proc.name, "script": self.script(proc), "log": self.log(proc),
            "command": proc.command, "flags": proc.flags, "args": proc.args, "address": proc.address,
            "bind": proc.bind, "port": proc.port, "url": proc.url, "health_url": health_url(proc),
            "bootstrap_port": proc.bootstrap_port, "venv": proc.venv, "instance": proc.instance,
            "node_rank": proc.node_rank, "nnodes": proc.nnodes,
            "serial_start": proc.serial_start, "starts_alone": proc.starts_alone,
            "ports": [{"port": u.port, "bind": u.bind, "what": u.what, "name": u.name,
                       "pidfile": f"{self.pid_dir}/{proc.name}.json",
                       "unit": f"{UNIT_PREFIX}{proc.name}.service"}
                      for u in ports.of(proc)],
            "command_tail": proc.command[1:] if proc.venv else proc.command, "group": self.group(proc),
        }  # fmt: skip

    def group(self, proc: Proc) -> dict[str, Any] | None:
        """A multi-host server's member: the server's health as this host reaches it (its leader's ``/health``),
        watched by the member's supervisor (``process``'s ``group``); None for a single-host server."""
        if proc.instance is None:
            return None
        return {"instance": proc.instance, "node_rank": proc.node_rank, "health": health_url(proc),
                "grace": self.group_grace, "interval": GROUP_INTERVAL}  # fmt: skip

    def fact(self) -> dict[str, Any]:
        """The ``pd`` fact: what templates and playbook tasks read."""
        return {
            "host": self.host, "device": self.device, "cpu": self.device == "cpu", "address": self.address,
            "python": self.python, "dir": self.dir, "log_dir": self.log_dir, "pid_dir": self.pid_dir,
            "compat_dir": self.compat_dir, "model_path": self.model_path, "tiny_model": self.tiny_model,
            "env": dict(sorted(self.env.items())), "env_file": self.env_file,
            "env_digest": self.env_digest, "hf_token_file": self.hf_token_file,
            "server": self.proc_fact(self.server) if self.server else None,
            "router": self.proc_fact(self.router) if self.router else None,
            "procs": [self.proc_fact(p) for p in self.procs],
            "ports": [u for p in self.procs for u in self.proc_fact(p)["ports"]],
            "dirs": [self.dir, self.log_dir, self.pid_dir],
            "supervisor": self.supervisor, "restart": dict(self.restart), "server_timeout": self.server_timeout,
            "start_gate": {"script": f"{self.dir}/{START_GATE}", "key": START_LOCK, "timeout": self.server_timeout},
        }  # fmt: skip


def local_url(proc: Proc) -> str:
    """The process's base URL from its own host: its bind address (a wildcard bind → loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(proc.bind, proc.bind)
    return f"http://{url_host(host)}:{proc.port}"


def health_url(proc: Proc) -> str:
    """Where a process is probed from its own host; a non-leader rank of a multi-host server through its leader
    (it serves no HTTP; the leader answers once every rank has joined)."""
    if proc.leader is not None and proc.leader is not proc:
        return f"{proc.leader.url}{proc.health_path}"
    return f"{local_url(proc)}{proc.health_path}"


def _safe(name: str) -> str:
    return _NAME_BAD.sub("_", name)


def roles_of(variables: Mapping[str, Any]) -> list[str]:
    groups = set(variables.get("group_names") or ())
    return [r for r in ROLES if r in groups]


def _home(path: str, home: str | None) -> str:
    if home and (path == "~" or path.startswith("~/")):
        return home.rstrip("/") + path[1:]
    return path


def _command(
    variables: Mapping[str, Any], key: str, module: str, home: str | None, host: str
) -> tuple[list[str], str | None]:
    """The process's command, and the venv it runs from when it runs ``VENV/bin/python`` (the default, which
    the shipped defaults spell as ``{{ venv_path }}/bin/python -m ...``): the launch script pins that env."""
    venv = _home(str(var(variables, "venv_path")).rstrip("/"), home)
    value = variables.get(key)
    if value is None:
        value = [f"{venv}/bin/python", "-m", module]
    cmd = [_home(w, home) for w in words(value, f"{host}: {key}")]
    if not cmd:
        raise PlanError(f"{host}: {key} is empty")
    return cmd, venv if cmd[0] == f"{venv}/bin/python" else None


def server_proc(host: str, role: str, v: Mapping[str, Any], home: str | None, model: str) -> Proc:
    address = address_of(host, v)
    bind = str(v.get("server_bind_host") or address)
    port = int_var(v, "server_port", host, 1)
    flags: list[list[str]] = [["--model-path", model]]
    if role != "serve":
        flags += [["--disaggregation-mode", role], ["--disaggregation-transfer-backend", "nixl"]]
    bootstrap = None
    if role == "prefill":
        bootstrap = int_var(v, "bootstrap_port", host, 1)
        flags.append(["--disaggregation-bootstrap-port", str(bootstrap)])
    flags.append(["--host", bind, "--port", str(port)])
    cpu = var(v, "sglang_device") == "cpu"
    nccl = int_var(v, "nccl_port", host, 1) if var(v, "nccl_port") is not None else None  # else ports.assign
    flags.append(["--tp-size", str(int_var(v, "tp", host, 1, 1024))])
    if int_var(v, "dp", host, 1, 1024) != 1:
        flags.append(["--dp-size", str(int_var(v, "dp", host, 1, 1024))])
    if not cpu:
        flags.append(["--base-gpu-id", str(int_var(v, "base_gpu_id", host, 0, 1023))])
    if var(v, "page_size") is not None:
        flags.append(["--page-size", str(int_var(v, "page_size", host, 1, 1 << 20))])
    if var(v, "kv_cache_dtype") is not None:
        flags.append(["--kv-cache-dtype", str(var(v, "kv_cache_dtype"))])
    if cpu:
        flags += cpu_server_flags(int_var(v, "cpu_max_total_tokens", host, 128, 1 << 30))
        if role == "decode":
            flags += [list(f) for f in CPU_DECODE_FLAGS]
    if not vartypes.says_no(var(v, "pd_metrics")):
        flags.append(["--enable-metrics"])
    flags += flag_lines(words(var(v, "sglang_extra_args"), f"{host}: sglang_extra_args"))
    command, venv = _command(v, "sglang_server_cmd", "sglang.launch_server", home, host)
    return Proc(host, role, f"{_safe(host)}-{role}", address, bind, port, command, flags, machine_of(host, v),
                bootstrap_port=bootstrap, venv=venv, nccl_port=nccl,
                serial_start=vartypes.says_yes(var(v, "pd_serial_start")))  # fmt: skip


def router_proc(host: str, v: Mapping[str, Any], home: str | None, prefill: list[Proc], decode: list[Proc]) -> Proc:
    address = address_of(host, v)
    bind = str(v.get("router_bind_host") or address)
    port = int_var(v, "router_port", host, 1)
    prometheus = int_var(v, "router_prometheus_port", host, 1)
    flags: list[list[str]] = [["--pd-disaggregation"]]
    flags += [["--prefill", p.url, str(_bootstrap(p))] for p in prefill]
    flags += [["--decode", d.url] for d in decode]
    flags.append(["--host", bind, "--port", str(port)])
    flags.append(["--prometheus-host", bind, "--prometheus-port", str(prometheus)])
    interval = int_var(v, "router_health_check_interval", host, 1, 86400)
    flags.append(["--health-check-interval-secs", str(interval)])
    timeout = None
    if var(v, "router_health_check_timeout") is not None:
        timeout = int_var(v, "router_health_check_timeout", host, 1, 86400)
    elif var(v, "sglang_device") == "cpu":
        timeout = CPU_ROUTER_HEALTH_CHECK_TIMEOUT
    if timeout is not None:
        flags.append(["--health-check-timeout-secs", str(timeout)])
    if var(v, "router_health_failure_threshold") is not None:
        threshold = int_var(v, "router_health_failure_threshold", host, 1, 1000)
        flags.append(["--health-failure-threshold", str(threshold)])
    if var(v, "router_policy"):
        flags.append(["--policy", str(var(v, "router_policy"))])
    flags += flag_lines(words(var(v, "router_extra_args"), f"{host}: router_extra_args"))
    command, venv = _command(v, "sglang_router_cmd", "sglang_router.launch_router", home, host)
    return Proc(host, "router", f"{_safe(host)}-router", address, bind, port, command, flags, machine_of(host, v),
                prometheus_port=prometheus, venv=venv)  # fmt: skip


def router_worker(proc: Proc) -> dict[str, Any]:
    """The router's worker API entry of a server (``POST /workers``): its URL, role and, for a prefill, the
    bootstrap port it really listens on, as the router's own ``--prefill URL PORT`` flag gives it."""
    return {"url": proc.url, "worker_type": proc.role,
            "bootstrap_port": _bootstrap(proc) if proc.role == "prefill" else None}  # fmt: skip


def local_base(proc: Proc, port: int | None = None) -> str:
    """The process's URL as seen from its own host (a wildcard bind → loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(proc.bind, proc.bind)
    return f"http://{url_host(host)}:{port or proc.port}"


def _bootstrap(proc: Proc) -> int:
    """The bootstrap port the prefill really listens on (an extra arg may override the var)."""
    value = effective(proc.args, "--disaggregation-bootstrap-port")
    try:
        return int(value) if value is not None else int(proc.bootstrap_port or 8998)
    except ValueError:
        return int(proc.bootstrap_port or 8998)


TRANSFER_TIMEOUT_ENV = ("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT")


def transfer_timeout_env(host: str, v: Mapping[str, Any]) -> dict[str, str]:
    """``pd_transfer_timeout``: how long a PD server waits for its peer's half of a request's KV transfer (the
    prefill for the decode's metadata, the decode for the KV) before it fails the request, so that the router
    retries it on another pair. SGLang waits 300 s for each: a request in flight when its decode dies (or whose
    handshake is lost) hangs that long, longer than most clients wait. Unset on GPUs: SGLang's own; in CPU mode
    ``CPU_TRANSFER_TIMEOUT``. ``pd_env`` still wins over it."""
    if var(v, "pd_transfer_timeout") is not None:
        seconds = int_var(v, "pd_transfer_timeout", host, 1, 86400)
    elif var(v, "sglang_device") == "cpu":
        seconds = CPU_TRANSFER_TIMEOUT
    else:
        return {}
    return dict.fromkeys(TRANSFER_TIMEOUT_ENV, str(seconds))


def host_env(host: str, v: Mapping[str, Any], address: str, compat_dir: str) -> dict[str, str]:
    env = {"SGLANG_DISAGGREGATION_NIXL_BACKEND": str(var(v, "pd_nixl_backend"))}
    env.update(ucx_env(v))
    host_ip = v.get("pd_host_ip") or (address if is_ip(address) else None)
    if host_ip:
        env["SGLANG_HOST_IP"] = str(host_ip)
    if var(v, "sglang_device") == "cpu":
        env.update(cpu_env(compat_dir))
    env.update(transfer_timeout_env(host, v))
    extra = var(v, "pd_env")
    if not isinstance(extra, Mapping):
        raise PlanError(f"{host}: pd_env must be a mapping of variable names to values")
    env.update({str(k): str(val) for k, val in extra.items()})
    bad = [k for k in env if not _ENV_NAME.match(k)]
    if bad:
        raise PlanError(f"{host}: invalid environment variable name {bad[0]!r} in pd_env")
    return env


@dataclass
class Deployment:
    hosts: dict[str, HostPlan]
    prefill: list[Proc]
    decode: list[Proc]
    routers: list[Proc]
    variables: dict[str, Mapping[str, Any]]
    serve: list[Proc] = field(default_factory=list)  # colocated servers (group serve): the baseline
    ranks: list[Proc] = field(default_factory=list)  # the non-leader ranks of multi-host servers (pd_instance)

    @property
    def colocated(self) -> bool:
        return bool(self.serve)

    @property
    def servers(self) -> list[Proc]:
        return [*self.prefill, *self.decode, *self.serve]

    @property
    def procs(self) -> list[Proc]:
        return [*self.prefill, *self.decode, *self.serve, *self.routers]


def build(hosts: Mapping[str, Mapping[str, Any]], homes: Mapping[str, str] | None = None) -> Deployment:
    """The whole deployment from every PD host's vars (``group_names`` says the roles). ``homes`` maps a host
    to its home directory, to turn ``~/`` paths into absolute ones (a quoted ``~`` does not expand)."""
    homes = homes or {}
    plans: dict[str, HostPlan] = {}
    prefill: list[Proc] = []
    decode: list[Proc] = []
    serve: list[Proc] = []
    for host, v in hosts.items():
        roles = roles_of(v)
        if not roles:
            continue
        vartypes.check(host, v)  # before any value is turned into text and used on a host
        plan = _host_plan(host, v, homes.get(host))
        servers = [r for r in roles if r in SERVER_ROLES]
        if len(servers) > 1:
            raise PlanError(
                f"{host} is in more than one of the groups prefill, decode and serve: one inventory host runs one "
                "server (give the machine two inventory names with the same ansible_host)"
            )
        if servers:
            plan.server = server_proc(host, servers[0], v, homes.get(host), plan.model_path)
            {"prefill": prefill, "decode": decode, "serve": serve}[servers[0]].append(plan.server)
        plans[host] = plan
    instances.one_role([*prefill, *decode, *serve], hosts)
    prefill, prefill_ranks = instances.join(prefill, hosts)
    decode, decode_ranks = instances.join(decode, hosts)
    serve, serve_ranks = instances.join(serve, hosts)
    ports.assign([*prefill, *prefill_ranks, *decode, *decode_ranks, *serve, *serve_ranks])
    routers: list[Proc] = []
    for host, plan in plans.items():
        if "router" in roles_of(hosts[host]) and (prefill or decode):
            plan.router = router_proc(host, hosts[host], homes.get(host), prefill, decode)
            routers.append(plan.router)
    return Deployment(plans, prefill, decode, routers, {h: hosts[h] for h in plans}, serve,
                      [*prefill_ranks, *decode_ranks, *serve_ranks])  # fmt: skip


def _host_plan(host: str, v: Mapping[str, Any], home: str | None) -> HostPlan:
    device = str(var(v, "sglang_device"))
    if device not in ("cuda", "cpu"):
        raise PlanError(f"{host}: sglang_device={device!r} must be cuda or cpu")
    path: Callable[[str], str] = lambda name: _home(str(var(v, name)).rstrip("/"), home)  # noqa: E731
    tiny = False
    if device == "cpu":
        model = var(v, "pd_cpu_model_path")
        tiny = model is None
        model = path("pd_tiny_model_dir") if model is None else _home(str(model), home)
    else:
        model = _home(str(v.get("model_path") or ""), home)  # unset: a problem for validate_pd, not for pd down
    address = address_of(host, v)
    compat = path("pd_compat_dir")
    return HostPlan(
        host=host, device=device, address=address, machine=machine_of(host, v),
        python=_home(str(var(v, "venv_path")).rstrip("/"), home) + "/bin/python", dir=path("pd_dir"),
        pid_dir=path("pd_pid_dir"), compat_dir=compat, model_path=str(model), tiny_model=tiny,
        env=host_env(host, v, address, compat), supervisor=supervisor_of(host, v), restart=restart_policy(host, v),
        group_grace=_seconds(v, "pd_instance_grace", host, 1.0, 86400.0),
        server_timeout=_seconds(v, "pd_server_timeout", host, 1.0, 86400.0),
    )  # fmt: skip


def _seconds(v: Mapping[str, Any], name: str, host: str, low: float, high: float) -> float:
    """The number ``name`` (a bool or a value outside [low, high] refused naming the host and the var)."""
    value = var(v, name)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not low <= number <= high:
        raise PlanError(f"{host}: {name}={value!r} must be a number from {low:g} to {high:g}")
    return number


def supervisor_of(host: str, v: Mapping[str, Any]) -> str:
    """pd_supervisor, checked. ``auto`` stays so: only the host can say whether systemd runs it and the run may
    be root there (``pd_config`` resolves it, :func:`resolve_supervisor`)."""
    value = var(v, "pd_supervisor")
    if value not in SUPERVISORS:
        raise PlanError(f"{host}: pd_supervisor={value!r} must be one of {', '.join(SUPERVISORS)}")
    return str(value)


def resolve_supervisor(host: str, wanted: str, probe: Mapping[str, Any]) -> tuple[str, bool]:
    """(supervisor, become): ``auto`` is systemd where systemd runs the host and the run is root or may become
    (``become_allowed`` and ``sudo -n`` works there), else provision's own; ``systemd`` where it cannot be is an
    error naming what is missing. ``become``: the unit steps need sudo (systemd, not root)."""
    root = probe.get("uid") == 0
    can = bool(probe.get("systemd")) and (root or bool(probe.get("sudo")))
    if wanted == "systemd" and not can:
        why = "systemd does not run this host"
        if probe.get("systemd"):
            why = "the unit needs root: connect as root, or set become_allowed: true with passwordless sudo"
        raise PlanError(f"{host}: pd_supervisor=systemd, but {why}")
    if wanted == "auto":
        wanted = "systemd" if can else "provision"
    return wanted, wanted == "systemd" and not root


def restart_policy(host: str, v: Mapping[str, Any]) -> dict[str, float]:
    """The supervisor's restart policy: first delay, its cap, the start limit (burst within interval), stop time."""
    policy: dict[str, float] = {}
    for key, name, low, high in (
        ("delay", "pd_restart_delay", 0.1, 86400.0), ("max_delay", "pd_restart_max_delay", 0.1, 86400.0),
        ("burst", "pd_start_limit_burst", 0, 1000), ("interval", "pd_start_limit_interval", 1.0, 7 * 86400.0),
        ("stop_timeout", "pd_stop_timeout", 1.0, 3600.0),
    ):  # fmt: skip
        number = _seconds(v, name, host, low, high)
        policy[key] = int(number) if key == "burst" else number
    if policy["max_delay"] < policy["delay"]:
        raise PlanError(f"{host}: pd_restart_max_delay must not be below pd_restart_delay")
    return policy
