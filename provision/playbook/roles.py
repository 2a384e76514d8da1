"""Roles: where a role is found (the playbook's ``roles/``, the roles path, provision's own), its files
(``tasks/ handlers/ defaults/ vars/ meta/``, each ``main.yml`` or a ``*_from``), and what a role's task takes
from it (:func:`adopt`: its files, defaults, vars, parameters and the entry's ``when``/``become``). Reading a
role's task lists is :func:`~.tasks.read_role`'s, with the task lists it holds.

The per-play bookkeeping lives in context variables, set by the play (or an ``include_role``) that reads roles:
the handlers the roles bring, the defaults and vars they expose, the roles already run.
"""

from __future__ import annotations

import contextvars
import itertools
import os
from pathlib import Path
from typing import Any

from ..data import roles_dir
from .blocks import prepend_when
from .fields import _environment, _err, _flag, _mapping
from .objects import Task, load_yaml

# Ansible's role layout: tasks/ handlers/ defaults/ vars/ meta/ (dependencies) templates/ files/, each main.yml
ROLE_KEYS = {"role", "name", "tags", "when", "vars", "become", "become_user", "environment",
             "tasks_from", "vars_from", "defaults_from", "handlers_from"}  # fmt: skip
ROLE_FROM_KEYS = ("tasks_from", "vars_from", "defaults_from", "handlers_from")
_ROLE_HANDLERS: contextvars.ContextVar[list[Task]] = contextvars.ContextVar("role_handlers")
# the defaults and vars of each role read (dependencies too), in order: a play's static roles expose them
_ROLE_EXPOSED: contextvars.ContextVar[list[tuple[dict[str, Any], dict[str, Any]]]] = contextvars.ContextVar(
    "role_exposed"
)
_ROLES_SEEN: contextvars.ContextVar[set[str]] = contextvars.ContextVar("roles_seen")
_ROLES_CHECKING: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("roles_checking", default=frozenset())
_PLAYBOOK: contextvars.ContextVar[str | None] = contextvars.ContextVar("playbook", default=None)
_role_runs = itertools.count(1)


def roles_path(playbook: str) -> list[Path]:
    """Where roles are looked up, as Ansible: the playbook's ``roles/`` and its own directory, then
    ``$ANSIBLE_ROLES_PATH`` (or ``$PROVISION_ROLES_PATH``), ``~/.ansible/roles``, ``/usr/share/ansible/roles``,
    ``/etc/ansible/roles``; last, provision's own roles (``provision.*``, :func:`provision.data.roles_dir`)."""
    base = Path(playbook).parent
    env = os.environ.get("PROVISION_ROLES_PATH") or os.environ.get("ANSIBLE_ROLES_PATH") or ""
    extra = [Path(os.path.expanduser(p)) for p in env.split(os.pathsep) if p]
    defaults = [Path("~/.ansible/roles").expanduser(), Path("/usr/share/ansible/roles"), Path("/etc/ansible/roles")]
    return [base / "roles", base, *extra, *defaults, roles_dir()]


def role_dir(name: str, node: Any, path: str, search: list[Path] | None = None) -> Path:
    """``path``: the playbook (roles are found from its directory and the roles path, then in ``search``)."""
    if "/" in name:
        found = Path(path).parent / os.path.expanduser(name)
        if found.is_dir():
            return found.resolve()
    else:
        for where in [*roles_path(path), *(search or [])]:
            if (where / name).is_dir():
                return (where / name).resolve()
    searched = ", ".join(str(p) for p in roles_path(path))
    raise _err(f"role {name!r} not found (looked in {searched})", node, path)


def role_file(role: Path, folder: str, stem: str) -> Path | None:
    for suffix in ("", ".yml", ".yaml"):
        candidate = role / folder / f"{stem}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def role_mapping(role: Path, folder: str, stem: str) -> dict[str, Any]:
    found = role_file(role, folder, stem)
    if found is None:
        return {}
    data = load_yaml(found)
    if data is None:
        return {}
    return _mapping(data, f"{folder}/{found.name}", data, str(found))


def adopt(
    task: Task, directory: Path, name: str, defaults: dict[str, Any], role_vars: dict[str, Any],
    params: dict[str, Any], spec: dict[str, Any], where: Any, path: str, run: int,
) -> None:  # fmt: skip
    """A role's task: its files and templates come from the role; its defaults are under the inventory; the
    role's vars under the task's, its parameters over them (Ansible's order); the entry's when/become apply."""
    task.role_path = str(directory)
    if task.role_run is None:
        task.role_run = run
    task.role_defaults = {**defaults, **task.role_defaults}
    task.vars = {**role_vars, **task.vars, **params, "role_path": str(directory), "role_name": name}
    prepend_when(task, spec.get("when"))
    if task.become is None and "become" in spec:
        task.become = _flag(spec["become"], "become", where, path)
    if task.become_user is None and spec.get("become_user") is not None:
        task.become_user = str(spec["become_user"])
    if not task.environment and spec.get("environment") is not None:
        task.environment = _environment(spec["environment"], where, path)
