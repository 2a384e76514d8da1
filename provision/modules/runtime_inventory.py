"""``add_host`` and ``group_by``: changes to the in-memory inventory that later tasks and plays of the run see.

The modules only say what to change (the result's ``add_host`` / ``add_group``, as Ansible's action plugins);
the executor applies it to the inventory (:meth:`provision.inventory.Inventory.add_dynamic_host` and
``add_dynamic_group``) and reports ``changed`` when the inventory changed. ``add_host`` runs once per batch
(it bypasses the host loop, as in Ansible: the playbook reader marks it ``run_once``); ``group_by`` runs on
every host. Nothing is written anywhere: the next run starts from the inventory files again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .base import Arg, ArgError, Module, ModuleContext, ModuleResult, register

ADD_HOST_KEYS = {"name": "name", "host": "name", "hostname": "name", "groups": "groups", "group": "groups",
                 "groupname": "groups"}  # fmt: skip
_HOST_PORT = re.compile(r"^(?P<host>[^:\[\]\s]+):(?P<port>\d+)$")


def _names(value: Any, what: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        items: list[Any] = value.split(",")
    elif isinstance(value, list):
        items = value
    else:
        raise ArgError(f"{what} must be a name or a list of names, got {type(value).__name__}")
    return list(dict.fromkeys(str(i).strip() for i in items if str(i).strip()))


def unsafe_name(name: str) -> str:
    """Why an inventory name made at run time (often from host output) cannot be used, or "": a path separator
    or ``..`` would make ``fetch`` write outside its ``dest``, a line break would add another name to the retry
    file, a control character would reach the terminal."""
    if "/" in name or "\\" in name:
        return "has a path separator"
    if name in (".", ".."):
        return "is a relative directory name"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "has a line break or control character"
    return ""


@register
class AddHost(Module):
    """``add_host: {name: HOST[:PORT], groups: [...], VAR: VALUE, ...}``: the other arguments are the host's
    variables (kept as data: a value is never rendered again)."""

    name = "add_host"
    controller_only = True
    args = {"name": Arg("str", required=True, aliases=("host", "hostname")),
            "groups": Arg("raw", aliases=("group", "groupname"))}  # fmt: skip

    @classmethod
    def validate_static(cls, args: Mapping[str, Any], is_template: Callable[[Any], bool]) -> dict[str, Any]:
        known = {k: v for k, v in args.items() if k in ADD_HOST_KEYS}
        extra = {k: v for k, v in args.items() if k not in ADD_HOST_KEYS}
        for key in extra:
            if not isinstance(key, str) or not key.isidentifier():
                raise ArgError(f"add_host: host variable {key!r} is not a valid variable name")
        return {**super().validate_static(known, is_template), **extra}

    @classmethod
    def coerce(cls, args: Mapping[str, Any]) -> dict[str, Any]:
        extra = {k: v for k, v in args.items() if k not in ADD_HOST_KEYS}
        return {**super().coerce({k: v for k, v in args.items() if k in ADD_HOST_KEYS}), "_vars": extra}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        name = str(args["name"]).strip()
        host_vars = dict(args["_vars"])
        found = _HOST_PORT.match(name)
        if found:
            name = found["host"]
            host_vars.setdefault("ansible_port", int(found["port"]))
        if not name:
            return ModuleResult(failed=True, msg="add_host: name is empty")
        bad = unsafe_name(name)
        if bad:
            return ModuleResult(failed=True, msg=f"add_host: the name {name[:80]!r} {bad}")
        groups = _names(args.get("groups"), "add_host: groups")
        return ModuleResult(data={"add_host": {"host_name": name, "groups": groups, "host_vars": host_vars}})


@register
class GroupBy(Module):
    """``group_by: {key: GROUP, parents: [...]}``: the host joins GROUP (made a child of ``parents``, ``all``
    by default); spaces in the names become dashes, as in Ansible."""

    name = "group_by"
    controller_only = True
    args = {"key": Arg("str", required=True), "parents": Arg("raw", default=["all"])}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        key = str(args["key"]).replace(" ", "-")
        parents = [p.replace(" ", "-") for p in _names(args.get("parents"), "group_by: parents")] or ["all"]
        if not key:
            return ModuleResult(failed=True, msg="group_by: key is empty")
        return ModuleResult(data={"add_group": key, "parent_groups": parents})
