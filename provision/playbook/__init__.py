"""Playbooks, Ansible's playbook stage: the Ansible subset loaded into typed plays and tasks, validated before any
host is touched (structure, module names and arguments, Jinja2 syntax, ``import_playbook``; every error names
file:line).

- ``objects`` — :class:`Play`, :class:`Task`, :class:`BlockRef`, the keyword sets, :func:`load_yaml`.
- ``fields`` — the keyword checks shared by plays, blocks, tasks and roles; ``module_defaults``.
- ``tasks`` — task lists, read recursively: a task (:func:`parse_task`), blocks, ``import_tasks``/
  ``include_tasks``, roles (:func:`load_role`, :func:`load_included`), handlers (:func:`parse_handlers`).
- ``task_keys`` — one task's keys checked and built; ``blocks`` — a block's keywords and what its tasks inherit;
  ``roles`` — where a role and its files are (:func:`roles_path`), what a role's task takes from it;
  ``taskfiles`` — the files of includes and imports (:func:`include_path`).
- ``play`` — :func:`parse_play`, :func:`load_playbook`, :func:`nearest_playbook`.

Imports the catalog, ``modules`` (the argument contract), ``templating``, ``plugins``, ``yamlfile``, ``data`` and
``errors``; never the executor, the task runner or the CLI.
"""

from .fields import module_defaults
from .objects import (
    ACTION_KEYS,
    HOST_ORDERS,
    PLAY_CONNECTIONS,
    PLAY_KEYS,
    STRATEGIES,
    TASK_KEYS,
    BlockRef,
    LineDict,
    Play,
    Task,
    load_yaml,
    text_line_of,
)
from .play import load_playbook, nearest_playbook, parse_play
from .roles import roles_path
from .taskfiles import include_path
from .tasks import load_included, load_role, parse_handlers, parse_task, parse_tasks

__all__ = [
    "ACTION_KEYS",
    "HOST_ORDERS",
    "PLAY_CONNECTIONS",
    "PLAY_KEYS",
    "STRATEGIES",
    "TASK_KEYS",
    "BlockRef",
    "LineDict",
    "Play",
    "Task",
    "include_path",
    "load_included",
    "load_playbook",
    "load_role",
    "load_yaml",
    "module_defaults",
    "nearest_playbook",
    "parse_handlers",
    "parse_play",
    "parse_task",
    "parse_tasks",
    "roles_path",
    "text_line_of",
]
