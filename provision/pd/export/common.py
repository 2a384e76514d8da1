"""What every target reads from the plan the same way: a process's portable arguments (the host-specific
ones replaced), its GPUs, its instance size, its env split into plain values, secrets and the host's own IP,
and the shipped checks (``pd_verify.py``, ``nixl_probe.py``, with ``hostlib.py``) as text."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...remote import libraries_of, library, path
from ..flags import PlanError, effective
from ..spec import Deployment, HostPlan, Proc
from ..validate import DP_FLAGS, TP_FLAGS

WILDCARD = "0.0.0.0"
BIND_FLAGS = ("--host", "--prometheus-host")  # the address a process listens on: the pod's / node's own
DROPPED_FLAGS = ("--base-gpu-id",)  # the scheduler picks the GPUs: they are the container's 0..N-1
SECRET_ENV = re.compile(r"(TOKEN|PASSWORD|PASSWD|SECRET|_KEY|CREDENTIALS?)$", re.IGNORECASE)
HOST_IP_ENV = "SGLANG_HOST_IP"


@dataclass
class ExportOptions:
    name: str = "provision-pd"  # the object / job name (a DNS-1035 label)
    image: str = "provision-pd:latest"  # the image of every container (the Containerfile builds it)
    router_image: str | None = None  # the router's image (None: the same image)
    wheelhouse: Mapping[str, Any] | None = None  # a wheelhouse manifest (read_manifest): the Containerfile's lock
    prompt: str = "Hello world"
    max_new_tokens: int = 8
    verify_timeout: float = 600.0  # the verify Job / step: how long it waits for the router to serve


@dataclass
class Export:
    target: str
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text
    modes: dict[str, int] = field(default_factory=dict)  # relative path -> mode, where not 0o644
    validated: list[str] = field(default_factory=list)  # "kind name against schema" lines


def portable_args(args: Sequence[str], *, bind: str, urls: Mapping[str, str] | None = None,
                  dist: tuple[str, str] | None = None) -> list[str]:  # fmt: skip
    """``args`` with the host-specific words replaced: ``--host``/``--prometheus-host`` → ``bind``,
    ``--base-gpu-id`` dropped, a worker URL of the plan → its name in the cluster (``urls``), and for a
    multi-node instance (``dist``: leader address, node rank) ``--dist-init-addr``/``--node-rank``."""
    urls = urls or {}
    out: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        name, eq, value = word.partition("=")
        takes = i + 1 < len(args) and not eq
        if name in DROPPED_FLAGS:
            i += 1 if eq else 2
            continue
        if name in BIND_FLAGS and (eq or takes):
            out += [name, bind]
            i += 1 if eq else 2
            continue
        if dist and name in ("--dist-init-addr", "--node-rank") and (eq or takes):
            old = value if eq else args[i + 1]
            if name == "--dist-init-addr":
                port = old.rpartition(":")[2] if ":" in old else "5000"
                out += [name, f"{dist[0]}:{port}"]
            else:
                out += [name, dist[1]]
            i += 1 if eq else 2
            continue
        out.append(urls.get(word, word))
        i += 1
    return out


def command_of(proc: Proc, python: str = "python3") -> list[str]:
    """The process's command where the plan's default runs the venv's python: the image's ``python``."""
    return [python, *proc.command[1:]] if proc.venv else list(proc.command)


def _int(value: str | None, default: int, what: str) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise PlanError(f"{what}={value!r} is not an integer") from None


def nnodes(proc: Proc) -> int:
    """How many nodes one instance of this server spans (``--nnodes`` in sglang_extra_args; 1 by default)."""
    n = _int(effective(proc.args, "--nnodes"), 1, f"{proc.host}: --nnodes")
    if n < 1:
        raise PlanError(f"{proc.host}: --nnodes {n} must be at least 1")
    return n


def gpus_per_pod(proc: Proc, plan: HostPlan) -> int:
    """tp x dp GPUs per instance, spread over its nodes; 0 in CPU mode."""
    if plan.device != "cuda":
        return 0
    tp = _int(effective(proc.args, *TP_FLAGS), 1, f"{proc.host}: --tp-size")
    dp = _int(effective(proc.args, *DP_FLAGS), 1, f"{proc.host}: --dp-size")
    return max(1, math.ceil(tp * dp / nnodes(proc)))


@dataclass(frozen=True)
class EnvSplit:
    plain: dict[str, str]  # written as they are
    secret: tuple[str, ...]  # names whose values must come from a secret store, never from a file we write
    host_ip: bool  # SGLANG_HOST_IP: the pod's / node's own address at run time


def split_env(plan: HostPlan) -> EnvSplit:
    plain = {k: v for k, v in plan.env.items() if k != HOST_IP_ENV and not SECRET_ENV.search(k)}
    secret = tuple(sorted(k for k in plan.env if SECRET_ENV.search(k)))
    return EnvSplit(dict(sorted(plain.items())), secret, HOST_IP_ENV in plan.env)


def has_hf_token(deployment: Deployment) -> bool:
    """Does any PD host's inventory set ``hf_token`` (a secret: its value is never read into an export)?"""
    return any(bool(str(v.get("hf_token") or "")) for v in deployment.variables.values())


def first_var(deployment: Deployment, name: str, default: Any = None) -> Any:
    """A var as the first router host sees it (the run-wide settings: verify timeout, export options)."""
    hosts = [r.host for r in deployment.routers] or list(deployment.variables)
    for host in hosts:
        value = deployment.variables[host].get(name)
        if value is not None:
            return value
    return default


def group_by(procs: Sequence[Proc], key: Callable[[Proc], Any]) -> list[list[Proc]]:
    """Processes with the same key in one group, groups in the order of their first process."""
    groups: dict[str, list[Proc]] = {}
    for p in procs:
        groups.setdefault(json.dumps(key(p), sort_keys=True), []).append(p)
    return list(groups.values())


def shipped(*names: str) -> dict[str, str]:
    """Scripts of provision/remote that the exported deployment runs (stdlib-only checks, the tiny model), as
    files to put in one directory: each as it is, and beside them the host libraries they import (``hostlib.py``):
    ``python3 DIR/FILE ACTION`` puts ``DIR`` first on ``sys.path``, so the copies find them, and an operator reads
    each file as it is in provision (JSON request on stdin, one answer, exit 1 when it fails)."""
    files = {name: path(name).read_text(encoding="utf-8") for name in names}
    for text in list(files.values()):
        for lib in libraries_of(text):
            files[f"{lib}.py"] = library(lib).read_text(encoding="utf-8")
    return files


def verify_request(url: str, prompt: str, max_new_tokens: int, timeout: float) -> dict[str, Any]:
    """What ``pd_verify.py`` reads on stdin: the same request ``pd verify`` sends from the router's host."""
    return {"url": url, "prompt": prompt, "max_new_tokens": max_new_tokens, "timeout": timeout, "interval": 5,
            "stream": True}  # fmt: skip
