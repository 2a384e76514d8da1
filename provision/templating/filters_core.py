"""Ansible's core filters that the environments register by their own names (``bool``, ``regex_replace``,
``regex_search``, ``b64encode``/``b64decode``, ``dict2items``/``items2dict``, ``mandatory``, ``combine``,
``to_yaml``/``to_nice_yaml``) and the result tests' helper; the rest are in :mod:`provision.templating.filters`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes
import jinja2.sandbox
import jinja2.visitor
import yaml

from ..errors import TemplateError
from .environment import Unsafe


# ------------------------------------------------------------------------------------ filters and tests
def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("yes", "true", "on", "1", "y")


def _regex_flags(ignorecase: bool, multiline: bool) -> int:
    return (re.IGNORECASE if ignorecase else 0) | (re.MULTILINE if multiline else 0)


def _regex_replace(value: Any, pattern: str, replacement: str = "", ignorecase: bool = False,
                   multiline: bool = False, count: int = 0, mandatory_count: int = 0) -> str:  # fmt: skip
    """Ansible's ``regex_replace``: ``count`` replacements at most (0: all); ``mandatory_count``: exactly that
    many matches, or the task fails."""
    text = "" if value is None else str(value)
    output, subs = re.compile(pattern, _regex_flags(ignorecase, multiline)).subn(replacement, text, count=count)
    if mandatory_count and mandatory_count != subs:
        raise TemplateError(
            f"regex_replace: {pattern!r} should match {mandatory_count} times, but matches {subs} times in {text!r}"
        )
    return output


def _regex_search(value: Any, pattern: str, *groups: str, ignorecase: bool = False,
                  multiline: bool = False) -> Any:  # fmt: skip
    """Ansible's ``regex_search``: the match, or None; with ``'\\1'``/``'\\g<name>'`` arguments, the list of
    those groups."""
    wanted: list[Any] = []
    for group in groups:
        named = re.match(r"\\g<(\S+)>", str(group))
        numbered = re.match(r"\\(\d+)", str(group))
        if named:
            wanted.append(named.group(1))
        elif numbered:
            wanted.append(int(numbered.group(1)))
        else:
            raise TemplateError(f"regex_search: unknown argument {group!r} (a group: '\\1' or '\\g<name>')")
    match = re.search(pattern, str(value), _regex_flags(ignorecase, multiline))
    if match is None:
        return None
    return [match.group(g) for g in wanted] if wanted else match.group(0)


def _dict2items(value: Any, key_name: str = "key", value_name: str = "value") -> list[dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise TemplateError(f"dict2items requires a mapping, got {type(value).__name__}")
    return [{key_name: k, value_name: v} for k, v in value.items()]


def _items2dict(items: Any, key_name: str = "key", value_name: str = "value") -> dict[Any, Any]:
    if not isinstance(items, (list, tuple)):
        raise TemplateError(f"items2dict requires a list, got {type(items).__name__}")
    out = {}
    for item in items:
        if not isinstance(item, Mapping) or key_name not in item or value_name not in item:
            raise TemplateError(f"items2dict: each item needs {key_name!r} and {value_name!r} keys, got {item!r}")
        out[item[key_name]] = item[value_name]
    return out


def _b64encode(value: Any, encoding: str = "utf-8", urlsafe: bool = False) -> str:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    return encode(str(value).encode(encoding, "surrogateescape")).decode()


def _b64decode(value: Any, encoding: str = "utf-8", urlsafe: bool = False) -> str:
    decode = base64.urlsafe_b64decode if urlsafe else base64.b64decode
    return decode(str(value).encode()).decode(encoding, "surrogateescape")


def _result_test(key: str) -> Any:
    def test(value: Any) -> bool:
        return isinstance(value, Mapping) and bool(value.get(key, False))

    return test


def _mandatory(value: Any, msg: str | None = None) -> Any:
    if isinstance(value, jinja2.Undefined):
        raise TemplateError(msg or "mandatory variable is not defined")
    return value


_LIST_MERGES = ("replace", "keep", "append", "prepend", "append_rp", "prepend_rp")


def _merge_lists(a: list[Any], b: list[Any], how: str) -> list[Any]:
    if how == "keep":
        return a
    if how == "append":
        return a + b
    if how == "prepend":
        return b + a
    if how == "append_rp":
        return [x for x in a if x not in b] + b
    if how == "prepend_rp":
        return b + [x for x in a if x not in b]
    return b


def _combine(*dicts: Any, recursive: bool = False, list_merge: str = "replace") -> dict[str, Any]:
    """Ansible's ``combine``: later mappings win; ``recursive`` merges nested mappings; ``list_merge`` says how
    two lists under one key meet (replace, keep, append, prepend, append_rp, prepend_rp), at any depth."""
    if list_merge not in _LIST_MERGES:
        raise TemplateError(f"combine: list_merge={list_merge!r} is not one of {', '.join(_LIST_MERGES)}")
    items: list[Any] = []
    for d in dicts:
        items += d if isinstance(d, list) else [d]

    def merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(a)
        for k, v in b.items():
            old = out.get(k)
            if k in out and isinstance(old, Mapping) and isinstance(v, Mapping):
                out[k] = merge(old, v) if recursive else v
            elif k in out and isinstance(old, list) and isinstance(v, list):
                out[k] = _merge_lists(old, v, list_merge)
            else:
                out[k] = v
        return out

    result: dict[str, Any] = {}
    for d in items:
        if not isinstance(d, Mapping):
            raise TemplateError(f"combine expects mappings, got {type(d).__name__}")
        result = merge(result, d)
    return result


def _plain(value: Any) -> Any:
    """Plain dicts and lists (the YAML dumper refuses the loader's line-numbered mappings)."""
    if isinstance(value, Unsafe):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _to_yaml(value: Any, **kw: Any) -> str:
    """Ansible's ``to_yaml``: flow style for the innermost collections, keys sorted."""
    kw.setdefault("default_flow_style", None)
    return str(yaml.safe_dump(_plain(value), allow_unicode=True, **kw))


def _to_nice_yaml(value: Any, indent: int = 4, **kw: Any) -> str:
    return str(yaml.safe_dump(_plain(value), indent=indent, allow_unicode=True, default_flow_style=False, **kw))
