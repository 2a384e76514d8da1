"""Ansible's ``ansible.builtin`` tests beyond Jinja2's own (:data:`TESTS`, registered by
:mod:`provision.templating.environment`, also under the ``ansible.builtin.`` names): results, versions, URIs,
regex, paths (controller side, as in Ansible).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from ..errors import TemplateError
from .filters import _impure


# -------------------------------------------------------------------------------------------- tests
def _result(name: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TemplateError(f"the {name!r} test expects a task result (a mapping), got {type(value).__name__}")
    return value


def _async_state(key: str) -> Any:
    def test(value: Any) -> bool:
        result = _result(key, value)
        return bool(result[key]) if key in result else True  # a task that was not async: done

    return test


def _truthy(value: Any, convert_bool: bool = False) -> bool:
    if convert_bool and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        text = str(value).strip().lower()
        if text in ("yes", "on", "1", "true", "y", "t", "1.0"):
            return True
        if text in ("no", "off", "0", "false", "n", "f", "0.0", ""):
            return False
    return bool(value)


def regex_test(value: Any, pattern: str = "", ignorecase: bool = False, multiline: bool = False,
               match_type: str = "search") -> bool:  # fmt: skip
    flags = (re.IGNORECASE if ignorecase else 0) | (re.MULTILINE if multiline else 0)
    if match_type not in ("search", "match", "fullmatch"):
        raise TemplateError(f"regex test: match_type {match_type!r} is not one of search, match, fullmatch")
    return bool(getattr(re.compile(pattern, flags), match_type)(str(value)))


def _is_uri(value: Any, schemes: list[str] | None = None) -> bool:
    try:
        parts = urlparse(str(value))
    except ValueError:
        return False
    return not schemes or parts.scheme in schemes


def _is_url(value: Any, schemes: list[str] | None = None) -> bool:
    if not _is_uri(value, schemes):
        return False
    parts = urlparse(str(value))
    return bool(parts.netloc or parts.scheme == "file")


def _loose_version(text: str) -> list[Any]:
    """Ansible's default (LooseVersion): runs of digits are numbers, runs of lowercase letters and anything else
    are text, dots separate."""
    parts = [p for p in re.split(r"(\d+|[a-z]+|\.)", text) if p and p != "."]
    return [int(p) if p.isdigit() else p for p in parts]


def _strict_version(text: str) -> tuple[Any, ...]:
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:([ab])(\d+))?$", text)
    if m is None:
        raise ValueError(f"invalid version number {text!r}")
    release = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    pre = (m.group(4), int(m.group(5))) if m.group(4) else ("~",)  # "~" sorts after "a" and "b": a release wins
    return (*release, pre)


def _semantic_version(text: str) -> tuple[Any, ...]:
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$", text)
    if m is None:
        raise ValueError(f"invalid semantic version {text!r}")
    release = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if not m.group(4):
        return (*release, 1, ())
    # pre-release identifiers: numbers before text, numbers by value, text by ASCII; more of them sorts later
    ids = tuple((0, int(i), "") if i.isdigit() else (1, 0, i) for i in m.group(4).split("."))
    return (*release, 0, ids)


def _pep440_version(text: str) -> Any:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        raise ValueError(f"invalid PEP 440 version {text!r}") from None


_VERSION_KINDS = {"loose": _loose_version, "strict": _strict_version, "semver": _semantic_version,
                  "semantic": _semantic_version, "pep440": _pep440_version}  # fmt: skip
_VERSION_OPS = {"==": "eq", "=": "eq", "eq": "eq", "<": "lt", "lt": "lt", "<=": "le", "le": "le", ">": "gt",
                "gt": "gt", ">=": "ge", "ge": "ge", "!=": "ne", "<>": "ne", "ne": "ne"}  # fmt: skip


def version_compare(value: Any, version: Any, operator: str = "eq", strict: Any = None,
                    version_type: str | None = None) -> bool:  # fmt: skip
    """``version``/``version_compare``: Ansible's comparison (LooseVersion unless ``strict`` or ``version_type``
    says strict, semver/semantic or pep440)."""
    if strict is not None and version_type is not None:
        raise TemplateError("version test: cannot specify both 'strict' and 'version_type'")
    if not value:
        raise TemplateError("version test: the version to test cannot be empty")
    if not version:
        raise TemplateError("version test: the version to compare against cannot be empty")
    kind = "strict" if strict else version_type or "loose"
    if kind not in _VERSION_KINDS:
        raise TemplateError(f"version test: invalid version type {kind!r} (one of {', '.join(_VERSION_KINDS)})")
    if operator not in _VERSION_OPS:
        raise TemplateError(f"version test: invalid operator {operator!r} (one of {', '.join(_VERSION_OPS)})")
    parse = _VERSION_KINDS[kind]
    try:
        a, b = parse(str(value)), parse(str(version))
        order = 0 if a == b else -1 if a < b else 1  # text against a number in one place: TypeError, as Ansible
    except (TypeError, ValueError) as exc:
        raise TemplateError(f"version test: version comparison failed: {exc}") from None
    allowed = {"eq": (0,), "ne": (-1, 1), "lt": (-1,), "le": (-1, 0), "gt": (1,), "ge": (0, 1)}
    return order in allowed[_VERSION_OPS[operator]]


TESTS: dict[str, Any] = {
    "version": version_compare,
    "version_compare": version_compare,
    "successful": lambda r: not bool(_result("successful", r).get("failed")),
    "failure": lambda r: bool(_result("failure", r).get("failed")),
    "reachable": lambda r: not bool(_result("reachable", r).get("unreachable")),
    "unreachable": lambda r: bool(_result("unreachable", r).get("unreachable")),
    "timedout": lambda r: bool(_result("timedout", r).get("timedout") and r["timedout"].get("period")),
    "finished": _async_state("finished"),
    "started": _async_state("started"),
    "skip": lambda r: bool(_result("skip", r).get("skipped")),
    "regex": regex_test,
    "contains": lambda seq, value: value in seq,
    "any": lambda seq: any(seq),
    "all": lambda seq: all(seq),
    "truthy": _truthy,
    "falsy": lambda v, convert_bool=False: not _truthy(v, convert_bool),
    "issubset": lambda a, b: set(a) <= set(b),
    "subset": lambda a, b: set(a) <= set(b),
    "issuperset": lambda a, b: set(a) >= set(b),
    "superset": lambda a, b: set(a) >= set(b),
    "nan": lambda v: isinstance(v, float) and math.isnan(v),
    "isnan": lambda v: isinstance(v, float) and math.isnan(v),
    "uri": _is_uri,
    "url": _is_url,
    "urn": lambda v: _is_uri(v, ["urn"]),
    # controller-side path tests (the controller's file system, as in Ansible)
    "directory": _impure(os.path.isdir),
    "is_dir": _impure(os.path.isdir),
    "file": _impure(os.path.isfile),
    "is_file": _impure(os.path.isfile),
    "link": _impure(os.path.islink),
    "is_link": _impure(os.path.islink),
    "exists": _impure(os.path.exists),
    "link_exists": _impure(os.path.lexists),
    "abs": os.path.isabs,
    "is_abs": os.path.isabs,
    "same_file": _impure(os.path.samefile),
    "is_same_file": _impure(os.path.samefile),
    "mount": _impure(os.path.ismount),
    "is_mount": _impure(os.path.ismount),
    # ``!vault`` values are decrypted when loaded (provision.vault): no value a template sees is still encrypted
    "vault_encrypted": lambda v: False,
}
