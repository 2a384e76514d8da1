"""Ansible inventories: YAML and INI files, directories, group_vars/host_vars, limit patterns.

Sources (``-i``, repeatable; hosts and groups of every source are merged):

* a file ending in ``.yml``, ``.yaml`` or ``.json`` is Ansible YAML; ``.ini`` / ``.cfg`` is INI; any other
  file is YAML when it parses as a mapping whose values are all mappings (or empty), INI otherwise;
* a directory: every file directly inside it (sorted; hidden, backup and ``.retry`` files skipped,
  subdirectories such as ``group_vars/`` never read as inventories);
* a path that does not exist but contains ``,`` is a host list (``-i web1,web2,``).

``group_vars/`` and ``host_vars/`` beside each file (inside a directory source) are read for every known
group / host: ``NAME``, ``NAME.yml``, ``NAME.yaml``, ``NAME.json``, then every such file under a ``NAME/``
directory in sorted order. Files naming unknown groups or hosts are ignored.

INI values (inline host ``k=v`` and ``[group:vars]``) are read with ``ast.literal_eval`` when possible
(``2222`` is an int, ``[1, 2]`` a list, ``"a b"`` the string ``a b``), else kept as strings, like Ansible;
``true``/``yes`` stay strings. ``host:2222`` (one ``:``, digits after it) sets ``ansible_port``.
Host ranges: ``gpu[01:16]`` (zero padding kept), ``node[a:c]``, ``h[1:10:2]`` (stride).

Variable precedence, lowest first; merging is shallow (a later value replaces the whole key):

1. ``all`` vars from inventory files, then ``group_vars/all``;
2. every other group of the host, ordered by depth (parents before children) then name: its inventory
   file vars, then its ``group_vars/`` files;
3. host vars from inventory files, then ``host_vars/`` files;
4. extra vars (``-e``): always win.

(Under all of these, the CLI applies the shipped defaults, ``provision/data/defaults.yml``: not an inventory
layer, a run's — see ``RunOptions.defaults``.)

``Group.vars`` holds the group's own vars (inventory file then group_vars/), not its ancestors'; every
host is a member of ``all``; ``ungrouped`` holds the hosts in no other group.

Limit patterns (``Inventory.select``): elements split on ``,`` (and on ``:`` when the element has no ``[``);
each is a host or group name, a glob over host and group names (``gpu*``), ``~regex`` (``re.match``), or
``@file`` (one name/glob per line, ``#`` comments). ``&elem`` intersects and ``!elem`` excludes; with only
``&``/``!`` elements the start set is ``all``. Group subscripts (``web[0]``) are not supported.

Every problem raises ``InventoryError`` (exit 5) naming file:line where known; no yaml exception escapes.
Stricter than Ansible: an unknown key in a YAML group (anything but hosts/vars/children) is an error.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import fnmatch
import gc
import os
import re
import shlex
import string
import warnings
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision import yamlfile, yamlsafe
from provision.errors import InventoryError, did_you_mean

__all__ = ["Group", "Host", "Inventory", "expand_hosts"]

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


class _Builder:
    """Collects groups, hosts and vars from every source, then resolves them into Host/Group records."""

    def __init__(self, trace: bool = False) -> None:
        self.trace = trace  # record where each var came from (Inventory.origins)
        self.groups: dict[str, _GroupData] = {"all": _GroupData(), "ungrouped": _GroupData()}
        self.hosts: dict[str, _HostData] = {}
        self.edges: dict[tuple[str, str], Where] = {}
        self.add_child("all", "ungrouped", ("", None))
        self.file: str | None = None  # the inventory file being read (None: a `-i host1,host2` list)

    def group(self, name: str) -> _GroupData:
        return self.groups.setdefault(name, _GroupData())

    def set_group_vars(self, name: str, variables: dict[str, Any], file: str) -> None:
        data = self.group(name)
        data.inv_vars.update(variables)
        if self.trace:
            data.inv_from.update(dict.fromkeys(variables, f"inventory {file} (group {name})"))

    def add_hosts(self, group: str, raw: str, hvars: dict[str, Any], where: Where) -> None:
        pattern, port = _split_port(raw)
        try:
            names = expand_hosts(pattern)
        except ValueError as exc:
            raise _fail(str(exc), where) from exc
        data = self.group(group)
        for name in names:
            host = self.hosts.setdefault(name, _HostData())
            host.source = host.source or self.file
            if port is not None:
                host.inv_vars["ansible_port"] = port
            host.inv_vars.update(_copy_vars(hvars))
            if self.trace:
                label = f"inventory {where[0]} (host {name})"
                host.inv_from.update(dict.fromkeys([*hvars, *(["ansible_port"] if port is not None else [])], label))
            if name not in data.members:
                data.members.add(name)
                data.hosts.append(name)

    def add_child(self, parent: str, child: str, where: Where) -> None:
        if child == "all":
            raise _fail(f"group 'all' cannot be a child of {parent!r}", where)
        self.group(child)
        self.edges.setdefault((parent, child), where)
        if child not in self.group(parent).children:
            self.groups[parent].children.append(child)
            self.groups[child].parents.append(parent)

    def check_cycles(self) -> None:
        state: dict[str, int] = {}

        def visit(name: str, path: list[str]) -> None:
            state[name] = 1
            for child in self.groups[name].children:
                if state.get(child) == 1:
                    chain = " -> ".join([*path[path.index(child) :], child])
                    raise _fail(f"group cycle: {chain}", self.edges[(name, child)])
                if child not in state:
                    visit(child, [*path, child])
            state[name] = 2

        for name in list(self.groups):
            if name not in state:
                visit(name, [name])

    def link_implicit(self) -> None:
        """Top-level groups become children of ``all``; hosts in no real group go to ``ungrouped``."""
        for name, data in self.groups.items():
            if name != "all" and not data.parents:
                self.add_child("all", name, ("", None))
        grouped = {h for g, d in self.groups.items() if g not in ("all", "ungrouped") for h in d.hosts}
        self.groups["ungrouped"].hosts = [h for h in self.hosts if h not in grouped]
        self.groups["all"].hosts = list(self.hosts)
        for data in self.groups.values():
            data.members = set(data.hosts)

    def depths(self) -> dict[str, int]:
        depth: dict[str, int] = {"all": 0}

        def of(name: str) -> int:
            if name not in depth:
                depth[name] = 1 + max(of(p) for p in self.groups[name].parents)
            return depth[name]

        return {name: of(name) for name in self.groups}

    def ancestors(self, group: str, _memo: dict[str, frozenset[str]] | None = None) -> frozenset[str]:
        memo = {} if _memo is None else _memo
        if group not in memo:
            found = {group}
            for parent in self.groups[group].parents:
                found |= self.ancestors(parent, memo)
            memo[group] = frozenset(found)
        return memo[group]

    def origins(
        self, host: str, member_of: list[str], extra_vars: dict[str, Any], depth: dict[str, int]
    ) -> dict[str, str]:
        """Where each of the host's merged vars came from: the same merge as build(), of the labels."""
        out: dict[str, str] = {}
        for group in sorted(member_of, key=lambda g: (depth[g], g)):
            out.update(self.groups[group].inv_from)
            out.update(self.groups[group].file_from)
        out.update(self.hosts[host].inv_from)
        out.update(self.hosts[host].file_from)
        out.update(dict.fromkeys(extra_vars, "-e"))
        return out

    def build(self, extra_vars: dict[str, Any]) -> tuple[dict[str, Host], dict[str, Group]]:
        self.check_cycles()
        self.link_implicit()
        depth = self.depths()
        memberships: dict[str, set[str]] = {h: {"all"} for h in self.hosts}
        memo: dict[str, frozenset[str]] = {}
        for name, data in self.groups.items():
            for host in data.hosts:
                memberships[host] |= self.ancestors(name, memo)
        hosts = {}
        for name, member_of in memberships.items():
            merged: dict[str, Any] = {}
            for group in sorted(member_of, key=lambda g: (depth[g], g)):
                merged.update(self.groups[group].inv_vars)
                merged.update(self.groups[group].file_vars)
            merged.update(self.hosts[name].inv_vars)
            merged.update(self.hosts[name].file_vars)
            merged.update(extra_vars)
            hosts[name] = Host(name, _copy_vars(merged), sorted(member_of), self.hosts[name].source)
        groups = {
            name: Group(name, {**d.inv_vars, **d.file_vars}, list(d.hosts), list(d.children), list(d.parents))
            for name, d in self.groups.items()
        }
        return hosts, groups


def _parse_yaml_inventory(b: _Builder, path: Path, data: Any) -> None:
    if data is None:
        return
    if not isinstance(data, dict):
        raise InventoryError(f"inventory must be a mapping of groups, not a {_kind(data)}", file=str(path), line=1)
    for name, group_data in data.items():
        _yaml_group(b, path, str(name), group_data, _line_of(data, str(name)))


def _yaml_group(b: _Builder, path: Path, name: str, data: Any, line: int | None) -> None:
    b.group(name)
    if data is None:
        return
    if not isinstance(data, dict):
        msg = f"group {name!r} must be a mapping of hosts/vars/children, not a {_kind(data)}"
        raise InventoryError(msg, file=str(path), line=line)
    for key, value in data.items():
        where = (str(path), _line_of(data, str(key)))
        if key not in ("hosts", "vars", "children"):
            raise _fail(f"group {name!r}: unknown key {key!r} (expected hosts, vars or children)", where)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise _fail(f"group {name!r}: {key!r} must be a mapping, not a {_kind(value)}", where)
        if key == "vars":
            _check_var_names(value, f"group {name!r}: vars", str(path))
            b.set_group_vars(name, _plain(value), str(path))
        elif key == "hosts":
            _yaml_hosts(b, path, name, value)
        else:
            for child, child_data in value.items():
                child_line = _line_of(value, str(child))
                b.add_child(name, str(child), (str(path), child_line))
                _yaml_group(b, path, str(child), child_data, child_line)


def _check_var_names(variables: dict[Any, Any], what: str, path: str) -> None:
    for key in variables:
        if not isinstance(key, str):
            line = variables.line if isinstance(variables, _LineDict) else None
            raise InventoryError(f"{what}: variable name {key!r} is not a string", file=path, line=line)


def _yaml_hosts(b: _Builder, path: Path, group: str, hosts: dict[Any, Any]) -> None:
    for host, hvars in hosts.items():
        where = (str(path), _line_of(hosts, str(host)))
        if hvars is not None and not isinstance(hvars, dict):
            raise _fail(f"host {host!r} in group {group!r}: vars must be a mapping, not a {_kind(hvars)}", where)
        _check_var_names(hvars or {}, f"host {host!r}", str(path))
        b.add_hosts(group, str(host), _plain(hvars or {}), where)


def _parse_ini(b: _Builder, path: Path, text: str) -> None:
    group, kind = "ungrouped", "hosts"
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = (str(path), lineno)
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            group, kind = _ini_section(line, where)
            b.group(group)
        elif kind == "hosts":
            _ini_host(b, group, line, where)
        elif kind == "vars":
            key, value = _ini_var(line, where)
            b.set_group_vars(group, {key: value}, str(path))
        elif len(line.split()) != 1:
            raise _fail(f"expected one group name per line, got {line!r}", where)
        else:
            b.add_child(group, line, where)


def _ini_section(line: str, where: Where) -> tuple[str, str]:
    match = _SECTION.match(line)
    kind = (match.group(2) or "hosts") if match else ""
    if not match or kind not in ("hosts", "vars", "children"):
        raise _fail(f"bad section header {line!r}: expected [group], [group:vars] or [group:children]", where)
    return match.group(1), kind


def _ini_var(line: str, where: Where) -> tuple[str, Any]:
    key, sep, value = line.partition("=")
    if not sep or not key.strip():
        raise _fail(f"expected key=value, got {line!r}", where)
    return key.strip(), _literal(value.strip())


def _ini_host(b: _Builder, group: str, line: str, where: Where) -> None:
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as exc:
        raise _fail(f"cannot parse host line: {exc}", where) from exc
    hvars: dict[str, Any] = {}
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise _fail(f"expected key=value after host {tokens[0]!r}, got {token!r}", where)
        hvars[key] = _literal(value)
    if tokens:
        b.add_hosts(group, tokens[0], hvars, where)


def _load_file(b: _Builder, path: Path) -> None:
    b.file = os.path.abspath(path)
    text = _read(path)
    suffix = path.suffix.lower()
    if suffix in _YAML_EXTS:
        _parse_yaml_inventory(b, path, _load_yaml(path, text))
        return
    if suffix not in _INI_EXTS:
        try:
            data = _load_yaml(path, text)
        except InventoryError:
            data = None
        if isinstance(data, dict) and all(v is None or isinstance(v, dict) for v in data.values()):
            _parse_yaml_inventory(b, path, data)
            return
    _parse_ini(b, path, text)


def _load_source(b: _Builder, source: str) -> Path | None:
    """Parse one ``-i`` source; return the directory holding its group_vars/ and host_vars/."""
    path = Path(source)
    if path.is_dir():
        files = [
            item
            for item in sorted(path.iterdir())
            if item.is_file() and not item.name.startswith(".") and not item.name.endswith(_SKIP_SUFFIXES)
        ]
        if not files:
            raise InventoryError("inventory directory holds no inventory file", file=source)
        for item in files:
            _load_file(b, item)
        return path
    if path.is_file():
        _load_file(b, path)
        return path.parent
    if "," in source:
        b.file = None
        for name in (n.strip() for n in source.split(",")):
            if name:
                b.add_hosts("ungrouped", name, {}, (source, None))
        return None
    raise InventoryError("inventory source not found", file=source)


def _vars_files(directory: Path, name: str, present: set[str]) -> list[Path]:
    """``present``: the names in ``directory`` (listed once: no stat per host of a 100k-host inventory)."""
    files = [directory / f"{name}{ext}" for ext in _VARS_EXTS if f"{name}{ext}" in present]
    files = [f for f in files if f.is_file()]
    if name in present and (subdir := directory / name).is_dir():
        files += sorted(
            p
            for p in subdir.rglob("*")
            if p.is_file() and p.suffix.lower() in _VARS_EXTS and not p.name.startswith(".")
        )
    return files


def _read_vars(path: Path) -> dict[str, Any]:
    data = _load_yaml(path, _read(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InventoryError(f"vars file must hold a mapping, not a {_kind(data)}", file=str(path), line=1)
    return {str(k): v for k, v in _plain(data).items()}


def _apply_vars_files(directory: Path, entities: Mapping[str, _HostData], trace: bool = False) -> None:
    if directory.is_dir():
        present = {item.name for item in directory.iterdir()}
        for name, entity in entities.items():
            for file in _vars_files(directory, name, present):
                variables = _read_vars(file)
                entity.file_vars.update(variables)
                if trace:
                    entity.file_from.update(dict.fromkeys(variables, f"{directory.name} {file}"))


def _split_pattern(pattern: str) -> list[str]:
    elements: list[str] = []
    for part in pattern.split(","):
        keep_colons = "[" in part or part.strip().lstrip("!&").startswith(("@", "~"))
        elements += [p.strip() for p in ([part] if keep_colons else part.split(":")) if p.strip()]
    return elements


def _matcher(body: str) -> Callable[[str], bool]:
    if body.startswith("~"):
        try:
            regex = re.compile(body[1:])
        except re.error as exc:
            raise InventoryError(f"bad regular expression in host pattern {body!r}: {exc}") from exc
        return lambda name: regex.match(name) is not None
    if any(c in body for c in _GLOB_CHARS):
        return lambda name: fnmatch.fnmatchcase(name, body)
    return lambda name: name == body


def _check_port(host: Host, extra_vars: Mapping[str, Any]) -> None:
    """``ansible_port``: an int or a string of digits, 1-65535 (not a template: it is read as is)."""
    port = host.vars.get("ansible_port")
    if port is None:
        return
    text = str(port).strip() if isinstance(port, (int, str)) and not isinstance(port, bool) else ""
    if _DIGITS.fullmatch(text) and 1 <= int(text) <= 65535:
        return
    origin = " (from -e)" if "ansible_port" in extra_vars else ""
    raise InventoryError(f"host {host.name}: ansible_port {port!r}{origin} is not a port number (1-65535)")


CONNECTIONS = ("ssh", "paramiko", "smart", "local")  # what provision.transport.open_connection accepts
_SCALAR_CONNECTION_VARS = ("ansible_host", "ansible_user", "ansible_ssh_private_key_file", "ansible_python_interpreter")


def _check_connection_vars(host: Host, extra_vars: Mapping[str, Any]) -> None:
    """The connection vars a host is reached with: a known ``ansible_connection``, text for the others."""
    kind = host.vars.get("ansible_connection")
    if kind is not None and kind not in CONNECTIONS:
        origin = " (from -e)" if "ansible_connection" in extra_vars else ""
        raise InventoryError(
            f"host {host.name}: ansible_connection {kind!r}{origin} is not one of {', '.join(CONNECTIONS)}"
        )
    for name in _SCALAR_CONNECTION_VARS:
        value = host.vars.get(name)
        origin = " (from -e)" if name in extra_vars else ""
        key_file_number = name == "ansible_ssh_private_key_file" and isinstance(value, (int, float))
        if isinstance(value, (dict, list, bool)) or key_file_number:
            raise InventoryError(f"host {host.name}: {name} must be a string, got {value!r}{origin}")
        if name == "ansible_host" and isinstance(value, str) and "{" not in value:
            problem = _host_name_problem(value)
            if problem:
                raise InventoryError(f"host {host.name}: ansible_host {value[:80]!r}{origin} {problem}")


def _host_name_problem(name: str) -> str:
    """Why ``name`` cannot be connected to as a host name ("" when it can be tried): the IDNA encoding a
    resolver needs fails for empty or over-long labels (``a..b``, 64+ characters between dots)."""
    if name.count(":") == 1:
        return "holds a port: give it as ansible_port"
    if not name.strip() or name.startswith("[") or ":" in name:  # empty: the inventory name; IPv6 literals
        return ""
    if any(ord(c) < 33 or ord(c) == 127 for c in name):
        return "has a space or a control character"
    try:
        name.encode("idna")
    except UnicodeError:
        return "is not a valid host name (an empty or over-long label)"
    return ""


@contextlib.contextmanager
def _gc_paused() -> Generator[None, None, None]:
    """Loading allocates millions of small containers and no garbage cycles: with the cyclic GC on, its full
    collections rescan the growing heap again and again (a 100k-host YAML inventory took 3x longer)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_MISSING = object()


@dataclass
class Inventory:
    hosts: dict[str, Host]
    groups: dict[str, Group]
    sources: list[str]
    # per host, where each var came from ("inventory FILE (group G)", "group_vars FILE", "host_vars FILE",
    # "inventory FILE (host H)", "-e"); only from load(..., trace=True)
    origins: dict[str, dict[str, str]] = field(default_factory=dict, repr=False, compare=False)
    _members: dict[str, list[str]] | None = field(default=None, init=False, repr=False, compare=False)
    # per host, the variables add_host gave it during the run (data: never rendered, see taskrun.host_vars)
    runtime_vars: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, repr=False, compare=False)
    # the changes made after loading (add_group, add_host, group_by), in order: refresh() makes them again
    _changes: list[tuple[Any, ...]] = field(default_factory=list, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, paths: list[str], extra_vars: dict[str, Any] | None = None, *, trace: bool = False) -> Inventory:
        """Parse every source, read group_vars/host_vars beside them, merge vars (see module docstring).
        ``trace``: also record where each host var came from (``origins``)."""
        builder = _Builder(trace)
        bases: dict[Path, Path] = {}
        with _gc_paused():
            for source in paths:
                base = _load_source(builder, source)
                if base is not None:
                    bases.setdefault(base.resolve(), base)
            for base in bases.values():
                _apply_vars_files(base / "group_vars", builder.groups, trace)
                _apply_vars_files(base / "host_vars", builder.hosts, trace)
            hosts, groups = builder.build(dict(extra_vars or {}))
        for host in hosts.values():
            _check_port(host, extra_vars or {})
            _check_connection_vars(host, extra_vars or {})
        origins: dict[str, dict[str, str]] = {}
        if trace:
            depth = builder.depths()
            origins = {n: builder.origins(n, h.groups, extra_vars or {}, depth) for n, h in hosts.items()}
        return cls(hosts, groups, list(paths), origins)

    def select(self, pattern: str | None) -> list[Host]:
        """Hosts matching an Ansible limit pattern, in inventory order; None, "", "all", "*" mean all."""
        if pattern is None or pattern.strip() in ("", "all", "*"):
            return list(self.hosts.values())
        elements = _split_pattern(pattern)
        positive = [e for e in elements if e[0] not in "!&"]
        chosen: set[str] = set() if positive else set(self.hosts)
        for element in positive:
            chosen |= self._resolve(element, element, strict=True)
        for element in (e for e in elements if e[0] == "&"):
            chosen &= self._resolve(element[1:], element, strict=True)
        for element in (e for e in elements if e[0] == "!"):
            chosen -= self._resolve(element[1:], element, strict=False)
        return [host for name, host in self.hosts.items() if name in chosen]

    def add_group(self, name: str, hosts: list[str]) -> None:
        """A new top-level group (a child of ``all``, no vars) holding ``hosts``: for conventions applied after
        loading (the CLI's implicit ``router`` group). ValueError when the group exists or a host does not."""
        if name in self.groups or any(h not in self.hosts for h in hosts):
            raise ValueError(f"cannot add group {name!r} with hosts {hosts!r}")
        self._changes.append(("group", name, list(hosts)))
        self.groups[name] = Group(name, {}, list(hosts), [], ["all"])
        self.groups["all"].children.append(name)
        for host in hosts:
            self.hosts[host].groups = sorted({*self.hosts[host].groups, name})
            if "ungrouped" in self.groups and host in self.groups["ungrouped"].hosts:
                self.groups["ungrouped"].hosts.remove(host)
        self._members = None

    # ------------------------------------------------------------------ changes during a run (add_host, group_by)
    def _new_group(self, name: str, parents: list[str]) -> bool:
        changed = False
        for parent in parents:
            if parent not in self.groups:
                self._new_group(parent, ["all"])
                changed = True
        if name not in self.groups:
            self.groups[name] = Group(name, {}, [], [], [])
            changed = True
        group = self.groups[name]
        for parent in parents:
            if parent != name and parent not in group.parents:
                group.parents.append(parent)
                self.groups[parent].children.append(name)
                changed = True
        return changed

    def _ancestors(self, group: str) -> list[str]:
        out: list[str] = []
        todo = [group]
        while todo:
            name = todo.pop()
            if name in out or name not in self.groups:
                continue
            out.append(name)
            todo += self.groups[name].parents
        return out

    def _depth(self, group: str, seen: frozenset[str] = frozenset()) -> int:
        if group == "all" or group in seen or group not in self.groups:
            return 0
        parents = [p for p in self.groups[group].parents if p in self.groups] or ["all"]
        return 1 + max(self._depth(p, seen | {group}) for p in parents)

    def _join(self, host: str, group: str, *, new: bool = False) -> bool:
        """``host`` into ``group`` (and the group's ancestors). A ``new`` host gets its vars afterwards (from all
        its groups, :meth:`add_dynamic_host`); a known one gets the group's vars only for the names it does not
        have yet (its own and closer groups' values are kept). True when something changed."""
        entry = self.hosts[host]
        changed = False
        if group != "all" and host not in self.groups[group].hosts:
            self.groups[group].hosts.append(host)
            changed = True
        ancestors = self._ancestors(group)
        if set(ancestors) - set(entry.groups):
            entry.groups = sorted({*entry.groups, *ancestors})
            changed = True
        for name in [] if new else ancestors:
            for key, value in self.groups[name].vars.items():
                entry.vars.setdefault(key, copy.deepcopy(value))
        if changed and "ungrouped" in self.groups and group not in ("all", "ungrouped"):
            if host in self.groups["ungrouped"].hosts:
                self.groups["ungrouped"].hosts.remove(host)
            entry.groups = [g for g in entry.groups if g != "ungrouped"]  # as Ansible's reconcile
        self._members = None
        return changed

    def add_dynamic_host(self, name: str, groups: list[str], host_vars: dict[str, Any]) -> bool:
        """``add_host``: a new host (the ``all`` group's vars, then its groups'), or new vars and groups for a
        known one. ``host_vars`` are kept in :attr:`runtime_vars` (data, never rendered). True when changed."""
        self._changes.append(("add_host", name, list(groups), dict(host_vars)))
        changed = new = name not in self.hosts
        if new:
            self.hosts[name] = Host(name, {}, [])
        self._join(name, "all", new=new)
        current = self.runtime_vars.setdefault(name, {})
        if any(current.get(k, _MISSING) != v for k, v in host_vars.items()):
            current.update(host_vars)
            changed = True
        for group in groups:
            changed = self._new_group(group, ["all"]) if group not in self.groups else changed
            changed = self._join(name, group, new=new) or changed
        if new:  # the groups' vars, the farther first (a child group's value wins), as the inventory merges them
            merged: dict[str, Any] = {}
            for group in sorted(self.hosts[name].groups, key=lambda g: (self._depth(g), g)):
                merged.update(copy.deepcopy(self.groups[group].vars))
            self.hosts[name].vars = merged
        lone = not groups and len(self.hosts[name].groups) <= 1 and "ungrouped" in self.groups
        if lone and name not in self.groups["ungrouped"].hosts:
            self.groups["ungrouped"].hosts.append(name)
            self.hosts[name].groups = sorted({*self.hosts[name].groups, "ungrouped"})
        self._members = None
        return changed

    def add_dynamic_group(self, host: str, group: str, parents: list[str]) -> bool:
        """``group_by``: ``host`` joins ``group`` (a child of ``parents``). True when the inventory changed."""
        self._changes.append(("group_by", host, group, list(parents)))
        changed = self._new_group(group, parents)
        return self._join(host, group) or changed

    def refresh(self, extra_vars: dict[str, Any] | None = None) -> None:
        """``meta: refresh_inventory``: read the sources again, then make the run's changes again (add_host,
        group_by, add_group), as Ansible keeps its dynamic hosts and groups across a refresh."""
        fresh = Inventory.load(self.sources, extra_vars)
        changes = self._changes
        self.hosts, self.groups = fresh.hosts, fresh.groups
        self.runtime_vars, self._changes, self._members = {}, [], None
        for change in changes:
            kind, *rest = change
            if kind == "add_host":
                self.add_dynamic_host(*rest)
            elif kind == "group_by" and rest[0] in self.hosts:
                self.add_dynamic_group(*rest)
            elif kind == "group":
                with contextlib.suppress(ValueError):
                    self.add_group(*rest)

    def connection_vars(self, host: str) -> dict[str, Any]:
        """The variables a connection to ``host`` is opened with: the inventory's, then what ``add_host`` set."""
        known = self.hosts[host].vars
        extra = self.runtime_vars.get(host)
        return {**known, **extra} if extra else known

    def group_members(self, group: str) -> list[str]:
        """Hosts in ``group`` or any of its descendants, in inventory order ([] for an unknown group)."""
        return list(self._group_index().get(group, []))

    def groups_map(self) -> dict[str, list[str]]:
        index = self._group_index()
        return {name: list(index.get(name, [])) for name in self.groups}

    def _group_index(self) -> dict[str, list[str]]:
        """Members of every group, built once in one pass over the hosts (not one pass per group and call:
        every task on every host asks for ``groups``)."""
        if self._members is None:
            index: dict[str, list[str]] = {name: [] for name in self.groups}
            for name, host in self.hosts.items():
                for group in host.groups:
                    index.setdefault(group, []).append(name)
            self._members = index
        return self._members

    def to_list_json(self) -> dict[str, Any]:
        """Like ``ansible-inventory --list``; empty keys and empty groups are left out."""
        out: dict[str, Any] = {"_meta": {"hostvars": {name: h.vars for name, h in self.hosts.items()}}}
        for name, group in self.groups.items():
            entry: dict[str, Any] = {}
            if group.hosts and name != "all":
                entry["hosts"] = list(group.hosts)
            if group.vars:
                entry["vars"] = dict(group.vars)
            if group.children:
                entry["children"] = list(group.children)
            if entry:
                out[name] = entry
        return out

    def graph(self, group: str = "all", depth: int = 0) -> str:
        """Like ``ansible-inventory --graph``: child groups then hosts, each sorted by name."""
        indent, child_indent = f"{'  |' * depth}--" if depth else "", f"{'  |' * (depth + 1)}--"
        lines = [
            f"{indent}@{group}:",
            *(self.graph(child, depth + 1) for child in sorted(self.groups[group].children)),
        ]
        if group != "all":
            lines += [child_indent + host for host in sorted(self.groups[group].hosts)]
        return "\n".join(lines)

    def _resolve(self, body: str, element: str, *, strict: bool) -> set[str]:
        if not body:
            raise InventoryError(f"empty host pattern element {element!r}")
        names, matched = self._match_file(body[1:]) if body.startswith("@") else self._match(body)
        if strict and not matched:
            where = ", ".join(self.sources) or "the inventory"
            hint = did_you_mean(body, [*self.hosts, *self.groups])
            raise InventoryError(f"host pattern {element!r} matches no host or group in {where}{hint}")
        return names

    def _match(self, body: str) -> tuple[set[str], bool]:
        if not body.startswith("~") and not any(c in body for c in _GLOB_CHARS):
            # a plain name: looked up, not compared with every host (a retry file may list 100k of them)
            names = {body} if body in self.hosts else set()
            if body in self.groups:
                names.update(self.group_members(body))
            return names, body in self.hosts or body in self.groups
        test = _matcher(body)
        hosts = [h for h in self.hosts if test(h)]
        groups = [g for g in self.groups if test(g)]
        names = set(hosts)
        for group in groups:
            names.update(self.group_members(group))
        return names, bool(hosts or groups)

    def _match_file(self, file: str) -> tuple[set[str], bool]:
        path = Path(file)
        if not path.is_file():
            raise InventoryError("limit file not found", file=file)
        names: set[str] = set()
        matched = False
        for line in _read(path).splitlines():
            entry = line.strip()
            if entry and not entry.startswith("#"):
                found, hit = self._match(entry)
                names |= found
                matched = matched or hit
        return names, matched
