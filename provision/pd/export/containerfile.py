"""The image the exported manifests run, and how to build it: a Containerfile from a ``provision wheelhouse``
lock (the exact wheels install.yml would install on the PD hosts), and the README of the export directory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...commands import quote
from ..flags import PlanError
from ..spec import Deployment

CPU_NOTE = "CPU mode (sglang_device: cpu): the compatibility files and the tiny model are made by node-K.sh"


def _lock(manifest: Mapping[str, Any], d: Deployment) -> tuple[list[str], list[str], Mapping[str, Any]]:
    """(wheel files, hosts, target) of the PD hosts' one lock in the manifest."""
    hosts = manifest.get("hosts") or {}
    pd = [h for h in d.hosts if h in hosts]
    if not pd:
        raise PlanError(
            "--wheelhouse: its manifest.json has none of the PD hosts: run provision wheelhouse -i INV -d DIR for them"
        )
    locks = {tuple(hosts[h].get("files") or ()) for h in pd}
    if len(locks) > 1:
        raise PlanError(
            f"--wheelhouse: the PD hosts have {len(locks)} different locks ({', '.join(pd)}): one image needs one; "
            "give them one wheelhouse_target"
        )
    files = sorted(locks.pop())
    if not files:
        raise PlanError("--wheelhouse: the PD hosts' lock is empty")
    return files, pd, hosts[pd[0]].get("target") or {}


def containerfile(manifest: Mapping[str, Any], d: Deployment) -> str:
    files, hosts, target = _lock(manifest, d)
    python = str(target.get("python") or "3.11")
    sums = manifest.get("files") or {}
    lines = [
        "# The image of the exported PD deployment, built from the wheelhouse lock of "
        f"{', '.join(hosts)} (provision pd export --wheelhouse).",
        "# The build context is the wheelhouse directory:  docker build -f Containerfile -t IMAGE WHEELHOUSE_DIR",
        "# The wheels are installed exactly (--no-index --no-deps), as install.yml installs them on a host; each is",
        "# checked against the manifest's sha256 first. A lock resolved without its dependencies (wheelhouse_deps:",
        "# false: the hosts bring torch) needs a BASE that brings them.",
        f"ARG BASE=docker.io/library/python:{python}-slim",
        "FROM ${BASE}",
        "COPY " + " ".join(quote(f) for f in files) + " /wheels/",
    ]
    checks = [f"{sums[f]['sha256']}  /wheels/{f}" for f in files if isinstance(sums.get(f), Mapping)]
    if checks:
        lines.append("RUN printf '%s\\n' " + " ".join(quote(c) for c in checks) + " | sha256sum -c -")
    lines += [
        "RUN python3 -m pip install --no-cache-dir --no-index --no-deps /wheels/*.whl && rm -rf /wheels",
        'CMD ["python3", "-m", "sglang.launch_server", "--help"]',
    ]
    return "\n".join(lines) + "\n"


def image_note(out: Any, options: Any, d: Deployment) -> str:
    """README.md of the export directory: what is there, the image, what to run."""
    lines = [f"# {options.name}: the PD deployment exported with `provision pd export --to {out.target}`", ""]
    lines += ["Files:", ""] + [f"- `{name}`" for name in sorted(out.files)] + [""]
    if out.target in ("rbg", "lws"):
        crd = "RoleBasedGroup (sgl-project/rbg)" if out.target == "rbg" else "LeaderWorkerSet (kubernetes-sigs/lws)"
        main = "rolebasedgroup.yaml" if out.target == "rbg" else "leaderworkersets.yaml"
        lines += [
            f"Needs the {crd} controller. Validated against the vendored CRD schemas:", "",
            *[f"- {v}" for v in out.validated], "",
            f"Image: `{options.image}`" + (f" (router: `{options.router_image}`)" if options.router_image else "")
            + ": SGLang, sglang-router and NIXL in the versions of the wheelhouse lock"
            + (" (`Containerfile`)." if "Containerfile" in out.files else
               "; `provision pd export --wheelhouse DIR` writes a Containerfile that builds it from the lock."),
            "",
            "```sh",
        ]  # fmt: skip
        secrets = sorted({k for plan in d.hosts.values() for k in plan.env if _secret(k)})
        from .common import has_hf_token

        if has_hf_token(d):
            lines.append(f"kubectl create secret generic {options.name}-hf-token --from-file=token=PATH_OF_THE_TOKEN")
        if secrets:
            lines.append(f"kubectl create secret generic {options.name}-env "
                         + " ".join(f"--from-literal={k}=..." for k in secrets))  # fmt: skip
        lines += [f"kubectl apply -f {main}", "kubectl apply -f verify-job.yaml   # after the roles are ready",
                  f"kubectl logs -f job/{options.name}-verify", "```", ""]  # fmt: skip
    else:
        lines += [
            "Slurm: `pd.sbatch` starts `node-K.sh` on each node with srun (the venv install.yml made, under a shared",
            "home), then runs `verify.sh` on the router's node. Secrets come from the submitting environment",
            "(`HF_TOKEN` or `PD_HF_TOKEN_FILE`).", "",
            "```sh", "sbatch pd.sbatch", "```", "",
        ]  # fmt: skip
    lines.append("What carries over and what does not: docs/export.md in provision.")
    return "\n".join(lines) + "\n"


def _secret(name: str) -> bool:
    from .common import SECRET_ENV

    return bool(SECRET_ENV.search(name))
