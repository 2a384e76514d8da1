"""``pd export`` as a verb: :func:`pd_export` → :class:`PdExport` (the plan as Kubernetes or Slurm files;
:mod:`provision.pd.export`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import (
    EXIT_OK,
    InputError,
)
from ..pd import PlanError, build

if TYPE_CHECKING:
    from typing_extensions import Unpack


from .fleet import Fleet, Options, PathLike, _extra, _fleet
from .layout import check_layout, inventory_pd_vars


@dataclass
class PdExport:
    """``pd_export``'s result: the files (relative path → text) and, when written, where."""

    target: str
    files: dict[str, str]
    validated: list[str]  # each custom object and the schema it was validated against
    modes: dict[str, int] = field(default_factory=dict)  # path → mode where not 0644 (the scripts: 0755)
    directory: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_OK


def pd_export(
    hosts: Fleet | PathLike | Sequence[PathLike],
    *,
    to: str,
    output: PathLike | None = None,
    name: str | None = None,
    image: str | None = None,
    router_image: str | None = None,
    wheelhouse: PathLike | None = None,
    **opts: Unpack[Options],
) -> PdExport:
    """The PD deployment as Kubernetes objects (``to="rbg"``: a RoleBasedGroup; ``"lws"``: LeaderWorkerSets)
    or a Slurm job (``"slurm"``), from the plan ``pd up`` runs: the layout checked first (the same refusals,
    :class:`InputError`), the custom objects validated against their CRDs' vendored schemas, every file written
    into ``output`` (atomically, never through a link) when given. Touches no host. ``name``, ``image``,
    ``router_image`` default to the vars ``pd_export_name``, ``pd_export_image``, ``pd_export_router_image``;
    ``wheelhouse``: a ``provision wheelhouse`` directory whose lock the Containerfile installs. docs/export.md."""
    from ..localfiles import replace_file
    from ..pd.export import ExportOptions, export
    from ..pd.export.common import first_var
    from ..stack.wheelhouse import WheelhouseError, read_manifest

    fleet = _fleet(hosts, opts.get("extra_vars"))
    extra = {**fleet.extra_vars, **_extra(opts.get("extra_vars"))}
    check_layout(fleet.inventory, extra)
    deployment = build(inventory_pd_vars(fleet.inventory, extra))
    options = ExportOptions()
    for attr, given, key in (("name", name, "pd_export_name"), ("image", image, "pd_export_image"),
                             ("router_image", router_image, "pd_export_router_image")):  # fmt: skip
        value = given if given is not None else first_var(deployment, key)
        if value is not None:
            setattr(options, attr, str(value))
    timeout = first_var(deployment, "pd_verify_timeout")
    if timeout is not None:
        options.verify_timeout = float(timeout)
    try:
        if wheelhouse is not None:
            options.wheelhouse = read_manifest(os.fspath(wheelhouse))
        result = export(deployment, to, options)
    except (PlanError, WheelhouseError) as exc:
        raise InputError(f"pd export: {exc}") from None
    directory = None
    if output is not None:
        root = Path(output)
        try:
            root.mkdir(parents=True, exist_ok=True)
            for rel, text in sorted(result.files.items()):
                path = root / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                replace_file(path, text, result.modes.get(rel, 0o644))
                os.chmod(path, result.modes.get(rel, 0o644))  # the umask narrowed it (a file replace_file just made)
        except OSError as exc:
            raise InputError(f"pd export: cannot write {output}: {exc.strerror or exc}") from None
        directory = str(root)
    return PdExport(to, result.files, result.validated, dict(result.modes), directory)
