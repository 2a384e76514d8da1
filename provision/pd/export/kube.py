"""The deployment as Kubernetes objects: a ``RoleBasedGroup`` (sgl-project/rbg, workloads.x-k8s.io/v1alpha2)
or ``LeaderWorkerSet`` objects (kubernetes-sigs/lws, leaderworkerset.x-k8s.io/v1).

Roles: the servers of one role whose pods would be identical (same command, arguments, env, GPUs) form one
role (``prefill``, ``decode``; ``prefill-1``, ``prefill-2``, ... when the inventory's servers of a role
differ), its replicas the number of those hosts; the routers form the role ``router``. An instance that
spans several nodes (``--nnodes N`` in ``sglang_extra_args``) is a leader with N-1 workers (RBG's
``leaderWorkerPattern``, LWS's ``size``); one that fits one node is RBG's ``standalonePattern`` (LWS: size 1).

Each pod: the server's arguments minus the host's (``--host`` → 0.0.0.0, no ``--base-gpu-id``), tp x dp GPUs
(over its nodes), the launch env (``SGLANG_HOST_IP`` from the pod's IP; secrets from a Secret, never
inline), a startup/readiness/liveness probe on the path ``pd up`` waits for, ``pd_stop_timeout`` as the
grace period, and, on the servers, the NIXL smoke gate (``nixl_probe.py``) as an init container. The router
reaches the workers through their stable per-pod DNS names. ``verify-job.yaml``: the end-to-end generation
``pd up`` ends with, as a Job (``pd_verify.py`` through the router's Service).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from ...commands import quote
from ..flags import PlanError
from ..spec import Deployment, Proc
from .common import (
    WILDCARD,
    Export,
    ExportOptions,
    command_of,
    gpus_per_pod,
    group_by,
    has_hf_token,
    nnodes,
    portable_args,
    shipped,
    split_env,
    verify_request,
)
from .schema import check

RBG_API = "workloads.x-k8s.io/v1alpha2"
LWS_API = "leaderworkerset.x-k8s.io/v1"
CHECKS_DIR = "/opt/provision"
# the leader's address and a pod's index in its group, as each controller puts them in the pod's env
LEADER_ENV = {
    "rbg": ("RBG_LWP_LEADER_ADDRESS", "RBG_LWP_WORKER_INDEX"),
    "lws": ("LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX"),
}


class _Role:
    def __init__(self, role: str, name: str, procs: list[Proc], size: int) -> None:
        self.role, self.name, self.procs, self.size = role, name, procs, size


def _signature(d: Deployment, p: Proc) -> Any:
    plan = d.hosts[p.host]
    return [p.role, command_of(p), portable_args(p.args, bind=WILDCARD), split_env(plan).plain,
            gpus_per_pod(p, plan), plan.restart.get("stop_timeout")]  # fmt: skip


def _roles(d: Deployment) -> list[_Role]:
    out: list[_Role] = []
    for role, procs in (("prefill", d.prefill), ("decode", d.decode)):
        groups = group_by(procs, lambda p: _signature(d, p))
        for i, group in enumerate(groups, 1):
            out.append(_Role(role, role if len(groups) == 1 else f"{role}-{i}", group, nnodes(group[0])))
    out.append(_Role("router", "router", list(d.routers), 1))
    return out


def _dns(target: str, name: str, role: _Role, index: int) -> str:
    """The stable DNS name of instance ``index``'s leader pod: RBG's pod ``NAME-ROLE-I`` under the headless
    Service ``s-NAME-ROLE``; LWS's leader ``SET-I`` under the headless Service ``SET``."""
    if target == "rbg":
        return f"{name}-{role.name}-{index}.s-{name}-{role.name}"
    return f"{name}-{role.name}-{index}.{name}-{role.name}"


def _labels(name: str, role: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": role,
            "app.kubernetes.io/managed-by": "provision"}  # fmt: skip


def _probe(path: str, port: int, period: int, failures: int, timeout: int = 5) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period, "timeoutSeconds": timeout,
            "failureThreshold": failures}  # fmt: skip


def _env(d: Deployment, p: Proc, name: str) -> list[dict[str, Any]]:
    env = split_env(d.hosts[p.host])
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.plain.items()]
    if env.host_ip:
        out.append({"name": "SGLANG_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    out += [{"name": k, "valueFrom": {"secretKeyRef": {"name": f"{name}-env", "key": k}}} for k in env.secret]
    if p.role != "router" and has_hf_token(d):
        out.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": f"{name}-hf-token", "key": "token"}}})
    return out


def _container(d: Deployment, target: str, p: Proc, role: _Role, options: ExportOptions,
               urls: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    plan = d.hosts[p.host]
    dist = None
    if role.size > 1:
        leader, index = LEADER_ENV[target]
        dist = (f"$({leader})", f"$({index})")
    args = portable_args(p.args, bind=WILDCARD, urls=urls, dist=dist)
    if role.size > 1 and "--dist-init-addr" not in args:
        args += ["--dist-init-addr", f"$({LEADER_ENV[target][0]}):5000"]
    if role.size > 1 and "--node-rank" not in args:
        args += ["--node-rank", f"$({LEADER_ENV[target][1]})"]
    ports = [{"name": "http", "containerPort": p.port}]
    if p.role == "prefill" and p.bootstrap_port:
        ports.append({"name": "bootstrap", "containerPort": p.bootstrap_port})
    if p.role == "router" and p.prometheus_port:
        ports.append({"name": "metrics", "containerPort": p.prometheus_port})
    c: dict[str, Any] = {
        "name": "router" if p.role == "router" else "sglang",
        "image": (options.router_image or options.image) if p.role == "router" else options.image,
        "command": command_of(p), "args": args, "env": _env(d, p, options.name), "ports": ports,
    }  # fmt: skip
    if p.role == "router":
        c["readinessProbe"] = _probe("/readiness", p.port, 5, 3)
        c["livenessProbe"] = _probe("/health", p.port, 30, 3)
    else:
        # model loading: up to its host's pd_server_timeout (as pd up's wait), then the readiness pd_wait checked
        startup = int(d.hosts[p.host].server_timeout)
        c["startupProbe"] = _probe("/health", p.port, 10, max(1, startup // 10))
        c["readinessProbe"] = _probe("/health", p.port, 10, 3)
        c["livenessProbe"] = _probe("/health", p.port, 30, 5, timeout=10)
        c["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    gpus = gpus_per_pod(p, plan) if p.role != "router" else 0
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}}
    return c


def _pod(d: Deployment, target: str, role: _Role, options: ExportOptions, urls: dict[str, str]) -> dict[str, Any]:
    p = role.procs[0]
    plan = d.hosts[p.host]
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": int(plan.restart.get("stop_timeout", 20)),
        "containers": [_container(d, target, p, role, options, urls)],
    }
    if p.role != "router":
        backends = str(plan.env.get("SGLANG_DISAGGREGATION_NIXL_BACKEND", "UCX")).split(",")
        request = {"backends": [b.strip() for b in backends if b.strip()], "require_vram": plan.device == "cuda"}
        gate = f"echo {quote(json.dumps(request))} | python3 {CHECKS_DIR}/nixl_probe.py probe"  # exit 1: not ok
        spec["initContainers"] = [{
            "name": "nixl-probe", "image": options.image, "command": ["sh", "-c", gate],
            "env": [e for e in _env(d, p, options.name) if "value" in e],
            "volumeMounts": [{"name": "provision-checks", "mountPath": CHECKS_DIR, "readOnly": True}],
        }]  # fmt: skip
        spec["volumes"] = [
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {"name": "provision-checks", "configMap": {"name": f"{options.name}-provision-checks"}},
        ]
    return {"metadata": {"labels": _labels(options.name, role.role)}, "spec": spec}


def _urls(d: Deployment, target: str, name: str, roles: list[_Role]) -> dict[str, str]:
    """The plan's worker URLs → their cluster names (what the router's --prefill/--decode get)."""
    out: dict[str, str] = {}
    for role in roles:
        for i, p in enumerate(role.procs if role.role != "router" else ()):
            out[p.url] = f"http://{_dns(target, name, role, i)}:{p.port}"
    return out


def _rbg(d: Deployment, roles: list[_Role], options: ExportOptions, urls: dict[str, str]) -> dict[str, Any]:
    out_roles: list[dict[str, Any]] = []
    servers = [r.name for r in roles if r.role != "router"]
    for role in roles:
        pod = _pod(d, "rbg", role, options, urls)
        entry: dict[str, Any] = {"name": role.name, "replicas": len(role.procs)}
        if role.role == "router":
            entry["dependencies"] = servers  # pd up: prefill → decode → router
        if role.size > 1:
            entry["leaderWorkerPattern"] = {"size": role.size, "template": pod}
        else:
            entry["standalonePattern"] = {"template": pod}
        out_roles.append(entry)
    return {"apiVersion": RBG_API, "kind": "RoleBasedGroup",
            "metadata": {"name": options.name, "labels": _labels(options.name, "pd")},
            "spec": {"roles": out_roles}}  # fmt: skip


def _lws(d: Deployment, role: _Role, options: ExportOptions, urls: dict[str, str]) -> dict[str, Any]:
    pod = _pod(d, "lws", role, options, urls)
    template: dict[str, Any] = {"size": role.size, "restartPolicy": "RecreateGroupOnPodRestart", "workerTemplate": pod}
    return {"apiVersion": LWS_API, "kind": "LeaderWorkerSet",
            "metadata": {"name": f"{options.name}-{role.name}", "labels": _labels(options.name, role.role)},
            "spec": {"replicas": len(role.procs), "startupPolicy": "LeaderCreated",
                     "leaderWorkerTemplate": template}}  # fmt: skip


def _router_service(d: Deployment, options: ExportOptions) -> dict[str, Any]:
    router = d.routers[0]
    ports = [{"name": "http", "port": router.port, "targetPort": "http"}]
    if router.prometheus_port:
        ports.append({"name": "metrics", "port": router.prometheus_port, "targetPort": "metrics"})
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{options.name}-router", "labels": _labels(options.name, "router")},
            "spec": {"selector": _labels(options.name, "router"), "ports": ports}}  # fmt: skip


def _checks_configmap(d: Deployment, options: ExportOptions) -> dict[str, Any]:
    router = d.routers[0]
    request = verify_request(f"http://{options.name}-router:{router.port}", options.prompt, options.max_new_tokens,
                             options.verify_timeout)  # fmt: skip
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{options.name}-provision-checks", "labels": _labels(options.name, "checks")},
            "data": {**shipped("pd_verify.py", "nixl_probe.py"),
                     "verify-request.json": json.dumps(request, indent=1) + "\n"}}  # fmt: skip


def _verify_job(options: ExportOptions) -> dict[str, Any]:
    gate = f"python3 {CHECKS_DIR}/pd_verify.py verify < {CHECKS_DIR}/verify-request.json"  # exit 1: not ok
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{options.name}-verify", "labels": _labels(options.name, "verify")},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": int(options.verify_timeout) + 120,
                     "template": {"metadata": {"labels": _labels(options.name, "verify")}, "spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "verify", "image": options.router_image or options.image,
                                         "command": ["sh", "-c", gate],
                                         "volumeMounts": [{"name": "provision-checks", "mountPath": CHECKS_DIR,
                                                           "readOnly": True}]}],
                         "volumes": [{"name": "provision-checks",
                                      "configMap": {"name": f"{options.name}-provision-checks"}}]}}}}  # fmt: skip


class _Dumper(yaml.SafeDumper):
    pass


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def dump(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096)


def kube_export(d: Deployment, target: str, options: ExportOptions) -> Export:
    for plan in d.hosts.values():
        if plan.server and plan.device != "cuda":
            raise PlanError(
                f"{plan.host}: sglang_device={plan.device} exports to slurm only (CPU mode's tiny model and "
                "compatibility files are made on each host by pd up; a pod has neither)"
            )
    roles = _roles(d)
    urls = _urls(d, target, options.name, roles)
    custom = [_rbg(d, roles, options, urls)] if target == "rbg" else [_lws(d, r, options, urls) for r in roles]
    out = Export(target)
    out.validated = [check(obj) for obj in custom]
    header = f"# provision pd export --to {target}: {', '.join(r.name for r in roles)} (docs/export.md)\n"
    objects = [*custom, _router_service(d, options), _checks_configmap(d, options)]
    out.files[f"{'rolebasedgroup' if target == 'rbg' else 'leaderworkersets'}.yaml"] = header + dump(objects)
    out.files["verify-job.yaml"] = "# after the roles are ready: kubectl apply -f verify-job.yaml\n" + dump(
        [_verify_job(options)]
    )
    return out
