"""The keyword checks shared by plays, blocks, tasks and roles (Ansible's field attributes): tags, strings,
lists, booleans, numbers, ``environment``, conditions, loops, ``module_defaults``, the ``action:`` form; each
error names file:line.
"""

from __future__ import annotations

import contextvars
import math
import re
from typing import Any

from .. import templating
from ..catalog import lookup, nearest
from ..errors import PlaybookError
from .objects import ACTION_KEYS, LineDict


def _err(msg: str, node: Any, path: str) -> PlaybookError:
    return PlaybookError(msg, file=getattr(node, "file", "") or path, line=getattr(node, "line", None) or None)


def _tags(value: Any, node: Any, path: str) -> set[str]:
    if value is None:
        return set()
    if isinstance(value, str):
        return {t.strip() for t in value.split(",") if t.strip()}
    if isinstance(value, list) and all(isinstance(t, (str, int)) for t in value):
        return {str(t) for t in value}
    raise _err("tags must be a string or a list of strings", node, path)


def _optional_str(value: Any, key: str, node: Any, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _err(f"{key} must be a user name, got {_kind(value)}", node, path)
    return value


def _strlist(value: Any, key: str, node: Any, path: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise _err(f"{key} must be a string or a list of strings", node, path)


def _bool(value: Any, key: str, node: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("yes", "true", "no", "false"):
        return value.lower() in ("yes", "true")
    raise _err(f"{key} must be true or false, got {value!r}", node, path)


def _flag(value: Any, key: str, node: Any, path: str) -> bool | str:
    """A boolean key that may also be one template (rendered at run time, per host)."""
    if templating.is_template(value):
        return str(value)
    return _bool(value, key, node, path)


def _mapping(value: Any, key: str, node: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _err(f"{key} must be a mapping, got {_kind(value)}", node, path)
    for name in value:
        if not isinstance(name, str):
            raise _err(f"{key}: key {name!r} is not a string", value if isinstance(value, LineDict) else node, path)
    return dict(value)


def _kind(value: Any) -> str:
    return "a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else repr(value)


_NUMBER_KINDS = {
    "count": "a whole number >= 0", "seconds": "a number of seconds >= 0",
    "timeout": "a number of seconds > 0", "percent": "a percentage from 0 to 100",
}  # fmt: skip


def _number(value: Any, key: str, kind: str, node: Any, path: str) -> float | None:
    """A finite number of the given kind (see _NUMBER_KINDS); numeric strings are accepted, templates not."""
    if value is None:
        return None
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and not templating.is_template(value):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    ok = number is not None and math.isfinite(number) and number >= 0
    if number is not None and ok:
        ok = (
            (kind != "count" or number.is_integer())
            and (kind != "timeout" or number > 0)
            and (kind != "percent" or number <= 100)
        )
    if not ok or number is None:
        hint = " (a template is not supported here)" if templating.is_template(value) else ""
        raise _err(f"{key} must be {_NUMBER_KINDS[kind]}{hint}, got {_kind(value)}", node, path)
    return number


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _environment(value: Any, node: Any, path: str) -> dict[str, Any] | str:
    if templating.is_template(value):
        return str(value)  # one template giving the mapping, rendered at run time
    env = _mapping(value, "environment", node, path)
    for name, item in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise _err(f"environment: {name!r} is not a valid variable name (letters, digits, _)", node, path)
        if isinstance(item, (dict, list)):
            raise _err(f"environment: {name} must be a string or number, got {_kind(item)}", node, path)
    return env


def _condition(value: Any, key: str, node: Any, path: str) -> Any:
    """``when``-style keys: a string, a bool, or a list of them (all must hold)."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if item is not None and not isinstance(item, (str, bool)):
            got = templating.unquoted_kind(item)
            raise _err(f"{key} must be an expression, true/false, or a list of them, got {got}", node, path)
    return value


def _loop(value: Any, key: str, node: Any, path: str) -> Any:
    """A literal list, or a template string checked at run time (``with_items`` also takes a bare string)."""
    if value is None or isinstance(value, list) or templating.is_template(value):
        return value
    if key == "with_items" and isinstance(value, (str, int, float)):
        return [value]
    if key.startswith("with_") and key != "with_items" and isinstance(value, (str, int, float, dict)):
        return value  # a lookup's terms: a bare value is its one term
    raise _err(f"{key} must be a list or a template giving one, got {_kind(value)}", node, path)


# the module_defaults in force where tasks are being read (a block or play sets it around its tasks)
_MODULE_DEFAULTS: contextvars.ContextVar[dict[str, dict[str, Any]]] = contextvars.ContextVar("module_defaults")


def module_defaults(value: Any, node: Any, path: str, inherited: dict[str, dict[str, Any]] | None = None
                    ) -> dict[str, dict[str, Any]]:  # fmt: skip
    """``module_defaults`` (a mapping or a list of them) over the ``inherited`` ones: module name (``copy``,
    ``ansible.builtin.copy``, ``ansible.legacy.copy``) -> default arguments, the nearer level winning per module
    as in Ansible. ``group/NAME`` entries are accepted: no built-in module is in an action group, so they apply to
    none (as in Ansible). The defaults must be literal mappings (a template as the whole value is refused)."""
    out = {k: dict(v) for k, v in (inherited or {}).items()}
    if value is None:
        return out
    for entry in value if isinstance(value, list) else [value]:
        if not isinstance(entry, dict):
            raise _err(f"module_defaults must be a mapping of module names to arguments, got {_kind(entry)}",
                       node, path)  # fmt: skip
        for name, defaults in entry.items():
            if not isinstance(name, str) or templating.is_template(name):
                raise _err(f"module_defaults: {name!r} is not a module name", node, path)
            if not isinstance(defaults, dict):
                hint = " (a template is not supported here)" if templating.is_template(defaults) else ""
                raise _err(f"module_defaults: {name} must be a mapping of arguments{hint}, got {_kind(defaults)}",
                           node, path)  # fmt: skip
            if name.startswith("group/"):
                continue
            cls = lookup(name.removeprefix("ansible.legacy."))
            if cls is None:
                raise _err(f"module_defaults: unknown module {name!r}{nearest(name)}", node, path)
            out[cls.name] = dict(defaults)
    return out


def _action_form(node: dict[str, Any], path: str) -> dict[str, Any]:
    """``action: MODULE ARGS`` / ``action: {module: M, ...}`` and ``local_action:`` (the same, delegated to
    localhost) rewritten as the ordinary ``MODULE: ARGS`` task."""
    keys = [k for k in ACTION_KEYS if k in node]
    if len(keys) > 1:
        raise _err("action and local_action are mutually exclusive", node, path)
    key = keys[0]
    value = node[key]
    if isinstance(value, dict):
        rest = dict(value)
        module = rest.pop("module", None)
        args: Any = rest or None
    elif isinstance(value, str) and value.strip():
        module, _, text = value.strip().partition(" ")
        args = text.strip() or None
    else:
        module, args = None, None
    if not isinstance(module, str) or not module:
        raise _err(f"{key} needs a module name (`{key}: MODULE ARGS` or `{key}: {{module: MODULE, ...}}`)", node, path)
    if module in node or module in ACTION_KEYS:
        raise _err(f"{key}: module {module!r} is also a key of the task", node, path)
    out = LineDict({k: v for k, v in node.items() if k != key})
    out.file, out.line = getattr(node, "file", path), getattr(node, "line", 0)
    out[module] = args
    if key == "local_action":
        if out.get("delegate_to") not in (None, "localhost", "127.0.0.1"):
            raise _err("local_action and delegate_to are mutually exclusive", node, path)
        out["delegate_to"] = "localhost"
    return out


def _is_with(key: Any) -> bool:
    """``with_items``, ``with_dict``, ...: a loop over a lookup's results (:mod:`provision.templating.lookups`)."""
    return isinstance(key, str) and key.startswith("with_") and len(key) > 5
