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

import contextlib
import copy
import fnmatch
import gc
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import InventoryError, did_you_mean

from .data import _GLOB_CHARS, Group, Host, _read
from .host_checks import check_connection_vars, check_port
from .sources import _apply_vars_files, _Builder, _load_source


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
    # per host, the variables add_host gave it during the run (data: never rendered, see TaskVariables.host_vars)
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
            check_port(host, extra_vars or {})
            check_connection_vars(host, extra_vars or {})
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
