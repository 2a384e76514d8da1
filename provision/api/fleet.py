"""The fleet and the options every verb takes: :class:`Fleet` (:func:`load`: the inventory, the extra vars, the
secrets registered with the masker), :class:`Options` (named as the command line's), :func:`run_options`,
:func:`parse_extra_vars` (``-e``), :func:`masked`.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from .. import yamlfile, yamlsafe
from ..commands import MASKER
from ..data import defaults
from ..errors import (
    InputError,
    UsageError,
)
from ..events import (
    Listener,
)
from ..inventory import MAX_DEPTH, Inventory, nesting_too_deep
from ..masking import register_inventory_secrets
from ..state import RunOptions
from ..transport import ConnectOptions

PD_HOSTS = "prefill:decode:serve:router"
PathLike = str | os.PathLike[str]


class Options(TypedDict, total=False):
    """The keyword options every verb takes, named as the command line's."""

    limit: str | None  # -l: names, groups, globs, ~regex, !exclude, &intersect, @file
    extra_vars: Mapping[str, Any] | None  # -e: always win
    forks: int  # -f (default 20)
    check: bool  # -C: predict, change nothing
    diff: bool  # -D
    tags: str | Iterable[str]  # -t: "a,b" or a list
    skip_tags: str | Iterable[str]  # --skip-tags
    start_at_task: str | None  # --start-at-task
    timeout: float  # -T: default timeout of each remote command, seconds (1800)
    connect_timeout: float  # --connect-timeout (10)
    accept_new_host_keys: bool  # --accept-new-host-keys: trust unknown host keys and save them
    persist: float  # --persist: seconds to keep the SSH connections after the run (0: not kept)
    ssh_config: str | None  # another ssh_config (default ~/.ssh/config or $PROVISION_SSH_CONFIG)
    verbosity: int  # -v count: only what the events' listeners do with it
    on_event: Listener | None  # receives every event of the run (provision.events)


# ------------------------------------------------------------------------------------------------ inputs
def parse_extra_vars(values: Iterable[str]) -> dict[str, Any]:
    """``-e`` values as the command line takes them: ``k=v k2='v 2'``, ``@file.yml`` or ``'{"json": 1}'``;
    later ones win.

    Extra vars often carry secrets, so an error never quotes their text: it names the file, line and column.
    The secret-named values are registered with the masker as soon as they are parsed."""
    out: dict[str, Any] = {}
    for value in values:
        text = value.strip()
        if text.startswith("@"):
            out.update(_extra_vars_file(Path(text[1:])))
        elif text.startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(f"-e: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
            except RecursionError:
                raise InputError("-e: JSON nested too deeply") from None
            if not isinstance(data, dict):
                raise InputError("-e: JSON extra vars must be an object")
            out.update(data)
        else:
            try:
                words = shlex.split(text)
            except ValueError as exc:
                raise InputError(f"-e: cannot split key=value words: {exc}") from None
            for n, word in enumerate(words, 1):
                if "=" not in word:
                    raise InputError(f"-e: expected key=value, @file or JSON; word {n} has no '='")
                key, val = word.split("=", 1)
                if not key.isidentifier():
                    raise InputError(f"-e: word {n}: {key!r} is not a valid variable name")
                out[key] = val
        MASKER.add_vars(out)
    if nesting_too_deep(out):
        raise InputError(f"-e: values nested deeper than {MAX_DEPTH} levels")
    return out


def _extra_vars_file(path: Path) -> dict[str, Any]:
    try:
        text = yamlsafe.read_text(path)
    except OSError as exc:
        raise InputError(f"-e @file: cannot read: {exc.strerror}", file=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"-e @file: not UTF-8 text (byte {exc.start})", file=str(path)) from None
    try:
        data = yamlfile.plain(yamlfile.loads(text, str(path)))  # THE YAML reader: !unsafe, duplicate keys refused
    except yamlfile.YAMLFileError as exc:
        if exc.kind == "depth":
            raise InputError("-e @file: nested too deeply", file=str(path)) from None
        column = f", column {exc.column}" if exc.column else ""
        raise InputError(f"-e @file: invalid YAML{column}: {exc.problem}", file=str(path), line=exc.line) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else type(data).__name__
        raise InputError(f"-e @file must hold a mapping, not a {kind}", file=str(path))
    if not all(isinstance(k, str) for k in data):
        raise InputError("-e @file must hold a mapping of variable names", file=str(path))
    return data


def _extra(values: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(values or {})
    if not all(isinstance(k, str) for k in out):
        raise InputError("extra_vars must map variable names to values")
    if nesting_too_deep(out):
        raise InputError(f"-e: values nested deeper than {MAX_DEPTH} levels")
    MASKER.add_vars(out)
    return out


@dataclass
class Fleet:
    """The hosts a verb works on: an inventory (with the implicit ``router`` group), the extra vars it was
    loaded with and a default ``--limit``."""

    inventory: Inventory
    extra_vars: dict[str, Any] = field(default_factory=dict)
    limit: str | None = None

    @property
    def hosts(self) -> list[str]:
        """The host names the limit selects, in inventory order."""
        return [h.name for h in self.inventory.select(self.limit)]


def load(
    paths: PathLike | Sequence[PathLike] | None = None,
    *,
    extra_vars: Mapping[str, Any] | None = None,
    limit: str | None = None,
    trace: bool = False,
) -> Fleet:
    """Load inventory files or directories (Ansible YAML/INI, ``group_vars/``, ``host_vars/``) into a
    :class:`Fleet`. No paths: ``$PROVISION_INVENTORY``. ``limit`` is checked now (an :class:`InventoryError`
    when a part of it matches no host) and is the default ``limit`` of every verb given this fleet.
    ``trace``: also record where each host var came from (``fleet.inventory.origins``)."""
    if paths is None or (not isinstance(paths, (str, os.PathLike)) and not paths):
        env = os.environ.get("PROVISION_INVENTORY")
        if not env:
            raise UsageError("no inventory given: pass inventory paths (or set PROVISION_INVENTORY)")
        paths = env
    chosen = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
    extra = _extra(extra_vars)
    inventory = Inventory.load(chosen, extra, trace=trace)
    default_router(inventory)
    register_inventory_secrets(inventory, extra)
    if limit:
        inventory.select(limit)
    return Fleet(inventory, extra, limit)


def default_router(inventory: Inventory) -> None:
    """An inventory with a ``prefill`` group and no ``router`` group gets the router on its first prefill
    host (an implicit ``router`` group; ``provision inventory --graph`` shows it), so two hosts in
    ``prefill``/``decode`` are a whole deployment. A ``router`` group, even an empty one, is left as it is."""
    prefill = inventory.group_members("prefill")
    if prefill and "router" not in inventory.groups:
        inventory.add_group("router", prefill[:1])
    # the PD playbooks name every PD group (prefill, decode, serve, router): a PD inventory gets an empty
    # `serve` group, a colocated one (group serve) empty prefill/decode/router groups, so each play that has
    # no host here is skipped instead of naming a group the inventory lacks
    present = [g for g in ("prefill", "decode", "serve", "router") if g in inventory.groups]
    if present and present != ["router"]:
        for group in ("prefill", "decode", "serve", "router"):
            if group not in inventory.groups:
                inventory.add_group(group, [])


def _fleet(hosts: Fleet | PathLike | Sequence[PathLike], extra_vars: Mapping[str, Any] | None) -> Fleet:
    if isinstance(hosts, Fleet):
        return hosts
    return load(hosts, extra_vars=extra_vars)


def _split_tags(tags: str | Iterable[str] | None) -> set[str]:
    if not tags:
        return set()
    words = tags.split(",") if isinstance(tags, str) else list(tags)
    return {t.strip() for t in words if t.strip()}


def run_options(fleet: Fleet, opts: Options) -> RunOptions:
    """The engine's :class:`RunOptions` from the keyword options (the shipped defaults included: every run)."""
    forks = int(opts.get("forks", 20))
    timeout = float(opts.get("timeout", 1800.0))
    connect_timeout = float(opts.get("connect_timeout", 10.0))
    if forks < 1:
        raise UsageError(f"forks must be at least 1, not {forks}")
    for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
        if not (value > 0 and value != float("inf")):
            raise UsageError(f"{name} must be a number of seconds > 0, not {value!r}")
    extra = {**fleet.extra_vars, **_extra(opts.get("extra_vars"))}
    return RunOptions(
        forks=forks,
        check=bool(opts.get("check", False)),
        diff=bool(opts.get("diff", False)),
        tags=_split_tags(opts.get("tags")),
        skip_tags=_split_tags(opts.get("skip_tags")),
        start_at_task=opts.get("start_at_task"),
        limit=opts.get("limit", fleet.limit),
        extra_vars=extra,
        verbosity=int(opts.get("verbosity", 0)),
        command_timeout=timeout,
        defaults=defaults(),  # every run, shipped playbook or not: docs/architecture.md, "Defaults"
        connect=ConnectOptions(
            connect_timeout=connect_timeout,
            accept_new_host_keys=bool(opts.get("accept_new_host_keys", False)),
            ssh_config=opts.get("ssh_config"),
            persist=float(opts.get("persist") or 0.0),
        ),
    )


def masked(value: Any) -> Any:
    """``value`` (a string, or any JSON-like structure) with every registered secret replaced by ``********``."""
    return MASKER.mask(value) if isinstance(value, str) else MASKER.mask_obj(value)


# ------------------------------------------------------------------------------------------------ results
