"""The PD deployment exported for an orchestrator: Kubernetes (RoleBasedGroup, LeaderWorkerSet) or Slurm.

The input is the plan ``pd up`` runs (:func:`provision.pd.spec.build`, after :func:`provision.pd.validate_pd`
accepted it: :func:`provision.api.pd_export` checks the layout first, with the same refusals); the output is a
mapping of file names to their text, which the caller writes into one directory. Nothing here touches a host.

* :mod:`.kube`: the ``RoleBasedGroup`` (workloads.x-k8s.io/v1alpha2) or the ``LeaderWorkerSet`` objects
  (leaderworkerset.x-k8s.io/v1), a Service for the router, the ConfigMap of provision's checks, the verify Job;
  every custom object validated against the CRD's vendored OpenAPI schema (:mod:`.schema`) before it is returned;
* :mod:`.slurm`: an sbatch script and one launcher per node that ``srun`` starts;
* :mod:`.containerfile`: the image the manifests expect, built from a ``provision wheelhouse`` lock.

Problems are :class:`~provision.pd.flags.PlanError` (one line naming the host and the var): the API turns
them into an ``InputError`` (exit 5) before any file is written.
"""

from __future__ import annotations

from ..flags import PlanError
from ..spec import Deployment
from .common import Export, ExportOptions

TARGETS = ("rbg", "lws", "slurm")


def export(deployment: Deployment, target: str, options: ExportOptions | None = None) -> Export:
    """The files of ``target`` for the (validated) deployment."""
    options = options or ExportOptions()
    check_name(options.name)
    if target in ("rbg", "lws"):
        from .kube import kube_export

        out = kube_export(deployment, target, options)
    elif target == "slurm":
        from .slurm import slurm_export

        out = slurm_export(deployment, options)
    else:
        raise PlanError(f"--to {target!r}: choose one of {', '.join(TARGETS)}")
    from .containerfile import containerfile, image_note

    if options.wheelhouse is not None:
        out.files["Containerfile"] = containerfile(options.wheelhouse, deployment)
    out.files["README.md"] = image_note(out, options, deployment)
    return out


def check_name(name: str) -> None:
    import re

    if not re.fullmatch(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?", name):
        raise PlanError(
            f"--name {name!r}: a name of at most 40 lowercase letters, digits and '-', starting with a letter "
            "(Kubernetes object and DNS names are built from it)"
        )


__all__ = ["TARGETS", "Export", "ExportOptions", "PlanError", "export"]
