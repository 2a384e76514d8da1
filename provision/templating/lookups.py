"""Ansible's lookup plugins that provision knows: ``lookup()``, ``query()``/``q()`` in templates and the
``with_<lookup>`` loops.

Lookups run on the controller, as in Ansible, with the playbook author's trust: ``pipe`` and ``lines`` run a
command of the playbook on the controller, ``file``/``template``/``fileglob``/``first_found`` read the
controller's files. A relative file name is looked for as Ansible looks: in the role (``ROLE/files`` or
``ROLE/templates``, then ``ROLE/``) when the task comes from a role, then beside the playbook
(``PLAYBOOK_DIR/files``, ``PLAYBOOK_DIR/``). What a lookup returns is data: it is never rendered again (a file
containing ``{{ ... }}`` stays text), except the ``template`` lookup, whose file is a template of the playbook.

Known: env, file, pipe, lines, template, first_found, fileglob, vars, items, list, dict, indexed_items, sequence,
together, nested, subelements, random_choice, ini, csvfile, varnames, password, inventory_hostnames. Any other name
is refused before the run (``PLUGINS`` is what the planner checks ``lookup('NAME', ...)`` and ``with_NAME``
against).
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import TemplateError
from .lookup_plugins import (
    _CSV_DEFAULTS,
    _INI_DEFAULTS,
    _PASSWORD_PARAMS,
    _PASSWORD_REFUSED,
    TEMPLATE_OPTIONS,
    LookupEnv,
    _csvfile,
    _env,
    _file,
    _fileglob,
    _first_found,
    _ini,
    _inventory_hostnames,
    _lines,
    _password,
    _pipe,
    _template,
    _unvault,
    _varnames,
    _vars,
)


def _items(terms: list[Any], env: LookupEnv, **_: Any) -> list[Any]:
    out: list[Any] = []
    for term in terms:
        out += term if isinstance(term, list) else [term]
    return out


def _dict(terms: list[Any], env: LookupEnv, **_: Any) -> list[dict[str, Any]]:
    out = []
    for term in terms:
        if not isinstance(term, Mapping):
            raise TemplateError(f"lookup 'dict' (with_dict) expects a mapping, got {type(term).__name__} {term!r}")
        out += [{"key": k, "value": v} for k, v in term.items()]
    return out


_SHORTCUT = re.compile(r"^(?:(-?\d+)-)?(-?\d+)(?:/(-?\d+))?(?::(.+))?$")


def _int(text: Any) -> int:
    return int(str(text))  # decimal only: ansible-core 2.19 refuses 0x.. and 0o.. here


def _sequence(terms: list[Any], env: LookupEnv, **kw: Any) -> list[str]:
    """``start=1 end=10 stride=2 format=host%02d``, ``count=N``, or the shortcut ``[START-]END[/STRIDE][:FORMAT]``."""
    out: list[str] = []
    for term in terms if terms else [""]:
        spec: dict[str, Any] = {"start": 1, "end": None, "count": None, "stride": 1, "format": "%d"}
        spec.update({k: v for k, v in kw.items() if k in spec})
        text = str(term).strip()
        match = _SHORTCUT.match(text) if text and "=" not in text else None
        if match:
            start, end, stride, fmt = match.groups()
            spec.update(end=end, **({"start": start} if start else {}), **({"stride": stride} if stride else {}))
            if fmt:
                spec["format"] = fmt
        elif text:
            for word in text.split():
                key, sep, value = word.partition("=")
                if not sep or key not in spec:
                    raise TemplateError(f"lookup 'sequence': cannot parse {word!r} in {text!r}")
                spec[key] = value
        try:
            start, stride = _int(spec["start"]), _int(spec["stride"])
            if spec["count"] is not None:
                if spec["end"] is not None:
                    raise TemplateError("lookup 'sequence': can't specify both count and end")
                count = _int(spec["count"])
                end = start + (count - 1) * stride if count else start - stride
            elif spec["end"] is not None:
                end = _int(spec["end"])
            else:
                raise TemplateError(f"lookup 'sequence': must specify count or end in {text!r}")
        except ValueError as exc:
            raise TemplateError(f"lookup 'sequence': {exc}") from None
        if stride == 0:
            continue
        if (stride > 0 and end < start) or (stride < 0 and end > start):
            raise TemplateError(f"lookup 'sequence': to count backwards make stride negative ({text!r})")
        stop = end + (1 if stride > 0 else -1)
        try:
            out += [spec["format"] % i for i in range(start, stop, stride)]
        except (TypeError, ValueError) as exc:
            raise TemplateError(f"lookup 'sequence': bad format {spec['format']!r}: {exc}") from None
    return out


def _lists(name: str, terms: list[Any]) -> list[list[Any]]:
    if not terms:
        raise TemplateError(f"lookup {name!r}: needs at least one list")
    return [t if isinstance(t, list) else [t] for t in terms]


def _together(terms: list[Any], env: LookupEnv, **_: Any) -> list[list[Any]]:
    return [list(t) for t in itertools.zip_longest(*_lists("together", terms))]


def _nested(terms: list[Any], env: LookupEnv, **_: Any) -> list[list[Any]]:
    return [list(t) for t in itertools.product(*_lists("nested", terms))]


def _indexed_items(terms: list[Any], env: LookupEnv, **_: Any) -> list[list[Any]]:
    return [[i, x] for i, x in enumerate(_items(terms, env))]


def _subelements(terms: list[Any], env: LookupEnv, **_: Any) -> list[list[Any]]:
    from .filters import subelements

    if len(terms) not in (2, 3) or not isinstance(terms[1], str):
        raise TemplateError("lookup 'subelements': expects a list (or mapping) of items, a key and optional flags")
    flags = terms[2] if len(terms) == 3 else {}
    if not isinstance(flags, Mapping) or set(flags) - {"skip_missing"}:
        raise TemplateError("lookup 'subelements': the only flag is skip_missing")
    data = terms[0]
    if isinstance(data, Mapping) and "skipped" in data and data.get("skipped"):
        return []
    return subelements(data, terms[1], bool(flags.get("skip_missing", False)))


PLUGINS: dict[str, Callable[..., list[Any]]] = {
    "env": _env,
    "file": _file,
    "unvault": _unvault,
    "pipe": _pipe,
    "lines": _lines,
    "template": _template,
    "first_found": _first_found,
    "fileglob": _fileglob,
    "vars": _vars,
    "items": _items,
    "list": lambda terms, env, **_: list(terms),
    "dict": _dict,
    "indexed_items": _indexed_items,
    "sequence": _sequence,
    "together": _together,
    "nested": _nested,
    "subelements": _subelements,
    "ini": _ini,
    "password": _password,
    "varnames": _varnames,
    "csvfile": _csvfile,
    "inventory_hostnames": _inventory_hostnames,
    "random_choice": lambda terms, env, **_: [random.SystemRandom().choice(terms)] if terms else [],
}


OPTIONS: dict[str, set[str]] = {  # the keyword options each lookup takes; any other is refused
    "env": {"default"},
    "file": {"lstrip", "rstrip"},
    "template": {"template_vars", *TEMPLATE_OPTIONS},
    "first_found": {"files", "paths", "skip"},
    "vars": {"default"},
    "sequence": {"start", "end", "count", "stride", "format"},
    "ini": set(_INI_DEFAULTS),
    "csvfile": set(_CSV_DEFAULTS),
    "password": _PASSWORD_PARAMS | _PASSWORD_REFUSED,
}


def plugin_name(name: Any) -> str:
    """``ansible.builtin.NAME`` and ``NAME`` are one plugin."""
    text = str(name)
    return text[len("ansible.builtin.") :] if text.startswith("ansible.builtin.") else text


def run(name: str, terms: list[Any], env: LookupEnv, *, wantlist: bool, errors: str = "strict",
        **kwargs: Any) -> Any:  # fmt: skip
    """Run lookup ``name`` as Ansible's ``lookup()`` does (``wantlist=True``: as ``query()``)."""
    plugin = PLUGINS.get(plugin_name(name))
    if plugin is None:
        raise TemplateError(f"lookup plugin {name!r} is not supported (known: {', '.join(sorted(PLUGINS))})")
    if errors not in ("strict", "warn", "ignore"):
        raise TemplateError(f"lookup {name!r}: errors={errors!r} is not one of strict, warn, ignore")
    unknown = sorted(set(kwargs) - OPTIONS.get(plugin_name(name), set()))
    if unknown:
        known = ", ".join(sorted(OPTIONS.get(plugin_name(name), set()))) or "none"
        raise TemplateError(f"lookup {name!r}: option {unknown[0]!r} is not supported (options: {known})")
    try:
        result = plugin(list(terms), env, **kwargs)
    except (TemplateError, OSError, UnicodeDecodeError, TypeError) as exc:
        if errors == "strict":
            if isinstance(exc, TemplateError):
                raise
            raise TemplateError(f"lookup {name!r}: {type(exc).__name__}: {exc}") from None
        return [] if wantlist else None
    if wantlist or not result:
        return result
    if len(result) == 1:
        return result[0]
    if all(isinstance(r, str) for r in result):
        return ",".join(result)
    return result
