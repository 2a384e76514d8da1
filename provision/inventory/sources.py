"""The inventory sources, Ansible's inventory plugins and its ``host_group_vars`` vars plugin: the builder
(``_Builder``) that collects groups, hosts and vars from YAML and INI files and directories, then resolves them;
``group_vars/``/``host_vars/`` files beside a source or the playbook.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from provision.errors import InventoryError

from .data import (
    _INI_EXTS,
    _SECTION,
    _SKIP_SUFFIXES,
    _VARS_EXTS,
    _YAML_EXTS,
    Group,
    Host,
    Where,
    _copy_vars,
    _fail,
    _GroupData,
    _HostData,
    _kind,
    _line_of,
    _LineDict,
    _literal,
    _load_yaml,
    _plain,
    _read,
    _split_port,
    expand_hosts,
)


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
