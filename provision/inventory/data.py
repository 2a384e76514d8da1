"""The inventory's records and the pieces every source uses: :class:`Host`, :class:`Group`, host ranges
(:func:`expand_hosts`, ``web[01:20]``), ``MAX_DEPTH`` (:func:`nesting_too_deep`), the YAML read with
line numbers, and the per-source host/group data the builder collects.
"""

from __future__ import annotations

import ast
import copy
import re
import string
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision import yamlfile, yamlsafe
from provision.errors import InventoryError

_YAML_EXTS = (".yml", ".yaml", ".json")
_INI_EXTS = (".ini", ".cfg")
_VARS_EXTS = ("", ".yml", ".yaml", ".json")
_SKIP_SUFFIXES = ("~", ".bak", ".orig", ".retry", ".swp", ".pyc")
_RANGE = re.compile(r"\[([^\[\]]*)\]")
_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:[#;].*)?$")
_DIGITS = re.compile(r"[0-9]+")
_GLOB_CHARS = "*?["
MAX_HOSTS_PER_PATTERN = 100_000  # a host range expanding past this is a typo, not a fleet
Where = tuple[str, int | None]


@dataclass
class Host:
    name: str
    vars: dict[str, Any]
    groups: list[str]
    # the absolute path of the inventory file that first named it (inventory_file); not part of the host's identity
    source: str | None = field(default=None, compare=False)


@dataclass
class Group:
    name: str
    vars: dict[str, Any]
    hosts: list[str]
    children: list[str]
    parents: list[str]


_LineDict = yamlfile.LineDict  # THE YAML reader's mappings: their line and each key's line
_plain = yamlfile.plain


def _read(path: Path) -> str:
    try:
        return yamlsafe.read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(f"cannot read: {exc}", file=str(path)) from exc


MAX_DEPTH = 200  # nesting of YAML values: deeper is a mistake (and would overflow Python's recursion)


def nesting_too_deep(data: Any, limit: int = MAX_DEPTH) -> bool:
    """True when lists/mappings inside ``data`` nest deeper than ``limit`` (walked without recursion)."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(value, dict):
            stack += [(v, depth + 1) for v in value.values()]
        elif isinstance(value, list):
            stack += [(v, depth + 1) for v in value]
    return False


def _load_yaml(path: Path, text: str) -> Any:
    """An inventory or a group/host vars file through THE YAML reader (:mod:`provision.yamlfile`)."""
    try:
        data = yamlfile.loads(text, str(path))
    except yamlfile.YAMLFileError as exc:
        raise InventoryError(f"invalid YAML: {exc.problem}", file=str(path), line=exc.line) from exc
    if nesting_too_deep(data):
        raise InventoryError(f"invalid YAML: nested deeper than {MAX_DEPTH} levels", file=str(path))
    return data


def _fail(msg: str, where: Where) -> InventoryError:
    return InventoryError(msg, file=where[0], line=where[1])


def _kind(value: Any) -> str:
    return "list" if isinstance(value, list) else type(value).__name__


def _line_of(data: Any, key: str) -> int | None:
    if isinstance(data, _LineDict):
        return data.key_lines.get(key, data.line)
    return None


def expand_hosts(pattern: str) -> list[str]:
    """Expand ``gpu[01:16]``, ``node[a:c]``, ``h[1:10:2]`` (several ranges multiply). ValueError if bad,
    or if the pattern would give more than MAX_HOSTS_PER_PATTERN names (counted before expanding)."""
    count = 1
    for spec in _RANGE.findall(pattern):
        count *= _range_len(spec)
    if count > MAX_HOSTS_PER_PATTERN:
        raise ValueError(
            f"host pattern {pattern!r} expands to {count} hosts, more than the limit of "
            f"{MAX_HOSTS_PER_PATTERN} per pattern"
        )
    return _expand(pattern)


def _range_len(spec: str) -> int:
    """How many names a numeric range gives (1 for anything else: _range_items judges those)."""
    parts = spec.split(":")
    if len(parts) in (2, 3) and all(_DIGITS.fullmatch(p) for p in parts if p) and parts[1]:
        step = int(parts[2]) if len(parts) == 3 else 1
        return len(range(int(parts[0] or 0), int(parts[1]) + 1, step)) if step > 0 else 1
    return 1


def _expand(pattern: str) -> list[str]:
    match = _RANGE.search(pattern)
    head = pattern if match is None else pattern[: match.start()]
    if "[" in head or "]" in head:
        raise ValueError(f"unbalanced brackets in host pattern {pattern!r}")
    if match is None:
        return [pattern]
    tails = _expand(pattern[match.end() :])
    return [head + item + tail for item in _range_items(match.group(1), pattern) for tail in tails]


def _range_items(spec: str, pattern: str) -> list[str]:
    parts = spec.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and not _DIGITS.fullmatch(parts[2])):
        raise ValueError(f"bad host range {pattern!r}: expected [start:end] or [start:end:stride]")
    start, end, step = parts[0] or "0", parts[1], int(parts[2]) if len(parts) == 3 else 1
    if step == 0:
        raise ValueError(f"bad host range {pattern!r}: stride must be positive")
    if _DIGITS.fullmatch(start) and _DIGITS.fullmatch(end):
        width = len(start) if start.startswith("0") and len(start) > 1 else 0
        if width and len(end) != width:
            raise ValueError(f"bad host range {pattern!r}: zero-padded start and end must have equal width")
        items = [str(i).zfill(width) for i in range(int(start), int(end) + 1, step)]
    elif len(start) == len(end) == 1 and start in string.ascii_letters and end in string.ascii_letters:
        lo, hi = string.ascii_letters.index(start), string.ascii_letters.index(end)
        items = list(string.ascii_letters[lo : hi + 1 : step])
    else:
        raise ValueError(f"bad host range {pattern!r}: use numbers or single letters")
    if not items:
        raise ValueError(f"bad host range {pattern!r}: start is after end")
    return items


def _split_port(raw: str) -> tuple[str, int | None]:
    """``db1:2222`` → (``db1``, 2222) when there is exactly one ``:`` (outside ranges) and digits follow."""
    if _RANGE.sub("", raw).count(":") == 1:
        name, _, port = raw.rpartition(":")
        if name and _DIGITS.fullmatch(port):
            return name, int(port)
    return raw, None


def _literal(value: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return value


def _copy_vars(variables: dict[str, Any]) -> dict[str, Any]:
    """A copy no other host shares: containers are deep-copied, scalars (most values) are immutable."""
    return {k: copy.deepcopy(v) if isinstance(v, (dict, list, set)) else v for k, v in variables.items()}


@dataclass
class _HostData:
    inv_vars: dict[str, Any] = field(default_factory=dict)  # from inventory files
    file_vars: dict[str, Any] = field(default_factory=dict)  # from group_vars/ or host_vars/
    # where each var came from, kept only when tracing (`provision inventory --host`): no cost otherwise
    inv_from: dict[str, str] = field(default_factory=dict)
    file_from: dict[str, str] = field(default_factory=dict)
    source: str | None = None  # the inventory file that first named the host (Ansible's inventory_file)


@dataclass
class _GroupData(_HostData):
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    members: set[str] = field(default_factory=set)  # the names in `hosts`, for O(1) membership
