"""The types of module arguments: a rendered value made the type its :class:`~provision.modules.base.Arg` says
(text, numbers, Ansible's boolean words, lists from comma-separated text, mappings, file modes) just before the
module runs, or :class:`~provision.modules.args.ArgError` naming the argument."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .args import ArgError
from .modes import parse_mode

BOOL_TRUE = {"yes", "true", "on", "1", "y"}
BOOL_FALSE = {"no", "false", "off", "0", "n"}


def to_bool(value: Any, name: str = "value") -> bool:
    """Ansible's boolean words (``yes``/``no``, ``on``/``off``, ``1``/``0``, ...) and bools; ArgError otherwise."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in BOOL_TRUE:
        return True
    if text in BOOL_FALSE:
        return False
    raise ArgError(f"{name}: {value!r} is not a boolean")


def coerce_value(value: Any, kind: str, name: str) -> Any:
    """``value`` (rendered) as an argument of type ``kind`` (:class:`~provision.modules.base.Arg`'s ``type``), or
    :class:`ArgError` naming ``name``."""
    try:
        if kind in ("str", "path"):
            if isinstance(value, (dict, list)):
                raise ArgError(f"{name} must be a string")
            return str(value)
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "bool":
            return to_bool(value, name)
        if kind == "list":
            if isinstance(value, str):
                return [v.strip() for v in value.split(",") if v.strip()]
            if isinstance(value, (list, tuple)):
                return list(value)
            return [value]
        if kind == "dict":
            if not isinstance(value, Mapping):
                raise ArgError(f"{name} must be a mapping")
            return dict(value)
        if kind == "mode":
            return parse_mode(value)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ArgError):
            raise
        raise ArgError(f"{name}: {value!r} is not a valid {kind}") from None
    return value
