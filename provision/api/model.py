"""``model sync`` as a verb: :func:`model_sync` (``provision model sync``; :mod:`provision.model.sync`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .. import templating
from ..data import defaults
from ..errors import (
    InputError,
    UsageError,
)
from ..magic import magic_vars
from ..modules.base import ModuleContext
from ..transport import open_connection

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..model.sync import SyncResult

from .fleet import Fleet, Options, PathLike, _fleet, run_options

MODEL_HOSTS = "prefill:decode"


def model_sync(
    hosts: Fleet | PathLike | Sequence[PathLike],
    src: str,
    *,
    fanout: bool = True,
    slots: int = 2,
    chunk_mb: int = 64,
    on_line: Callable[[str], None] | None = None,
    **opts: Unpack[Options],
) -> SyncResult:
    """Sync the model directory ``src`` (a controller directory, ``HOST:DIR`` on a seed host, or a hub id
    ``org/name[@rev]`` from the controller's Hugging Face cache) to every selected host's ``model_path``
    (:mod:`provision.model.sync`). The hosts: ``limit``, else the ``prefill`` and ``decode`` groups, else all.
    ``fanout``: hosts that completed serve the others; ``slots``: transfers at once per source. ``on_line``:
    progress lines. Bad input (no such source, a host without a directory ``model_path``) raises
    :class:`InputError` before any host is contacted; a host's failure is in the result (``exit_code``)."""
    from ..model.source import SourceError, resolve
    from ..model.sync import Sync, Target

    fleet = _fleet(hosts, opts.get("extra_vars"))
    options = run_options(fleet, opts)
    inventory = fleet.inventory
    if slots < 1 or chunk_mb < 1:
        raise UsageError("--slots and --chunk-mb must be at least 1")
    try:
        source = resolve(src, list(inventory.hosts))
    except SourceError as exc:
        raise InputError(str(exc)) from None
    limit = options.limit
    if not limit:
        groups = inventory.groups_map()
        limit = ":".join(g for g in MODEL_HOSTS.split(":") if groups.get(g)) or "all"
    names = [h.name for h in inventory.select(limit) if h.name != source.host]
    if not names:
        raise InputError(f"no host to sync to (limit {limit})")
    shipped = defaults()
    values = {n: templating.Vars(shipped, inventory.hosts[n].vars, options.extra_vars, magic_vars(inventory, n))
              for n in [*names, *([source.host] if source.host else [])]}  # fmt: skip
    problems = []
    for name in names:
        path = values[name]["model_path"]
        if not path:
            problems.append(f"{name}: model_path is not set (the directory to sync the model into)")
        elif not str(path).startswith(("/", "~")):
            problems.append(f"{name}: model_path {path} is not a directory path (/... or ~/...): a hub id is "
                            "resolved on the controller: pass it as --src, model_path is a directory")  # fmt: skip
    if problems:
        raise InputError("cannot sync the model:\n  - " + "\n  - ".join(problems))

    def address(name: str) -> str:
        v = values[name]
        return str(v.get("model_sync_address") or v.get("ansible_host") or name)

    def context(name: str) -> ModuleContext:
        conn = open_connection(name, inventory.hosts[name].vars, options.connect)
        return ModuleContext(host=name, conn=conn, variables=values[name], timeout=options.command_timeout)

    targets = []
    for name in names:
        reserve = int(float(values[name]["model_sync_reserve_gb"] or 0) * 1e9)
        targets.append(Target(name, context(name), str(values[name]["model_path"]), address(name), reserve))
    seed = context(source.host) if source.host else None
    sync = Sync(source, targets, seed=seed, fanout=fanout, slots=slots, chunk=chunk_mb << 20, check=options.check,
                forks=options.forks, timeout=options.command_timeout, on_line=on_line,
                seed_address=address(source.host) if source.host else "")  # fmt: skip
    try:
        return sync.run()
    finally:
        for target in targets:
            target.ctx.conn.close()
        if seed is not None:
            seed.conn.close()
