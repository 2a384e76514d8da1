"""Blocks: a ``block`` with ``rescue``/``always`` checked and its keywords read once (:func:`block_keywords`), and
what each of its tasks inherits from it, as in Ansible (:meth:`BlockKeywords.give`). Its task lists are read by
:mod:`.tasks`; the executor runs ``rescue`` and ``always`` (``provision/executor/blocks.py``)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .fields import (
    _MODULE_DEFAULTS,
    _bool,
    _condition,
    _environment,
    _err,
    _flag,
    _kind,
    _mapping,
    _optional_str,
    _strlist,
    _tags,
    module_defaults,
)
from .objects import Task

BLOCK_KEYS = {
    "block", "rescue", "always", "name", "when", "tags", "vars", "become", "become_user", "environment",
    "ignore_errors", "no_log", "check_mode", "delegate_to", "delegate_facts", "module_defaults", "notify",
    "ignore_unreachable", "run_once", "debugger", "any_errors_fatal",
}  # fmt: skip
_block_ids = itertools.count(1)


def prepend_when(task: Task, when: Any) -> None:
    """A surrounding ``when`` (a block's, an import's, a role entry's) before the task's own conditions."""
    if when is None:
        return
    conditions = when if isinstance(when, list) else [when]
    own = [] if task.when is None else task.when if isinstance(task.when, list) else [task.when]
    task.when = [*conditions, *own]


@dataclass
class BlockKeywords:
    """What a block sets for its tasks (checked once), and its three task lists (not yet read)."""

    node: Any
    id: int
    sections: dict[str, list[Any]]
    tags: set[str]
    vars: dict[str, Any]
    environment: dict[str, Any] | str | None
    become: bool | str | None
    become_user: str | None
    check_mode: bool | str | None
    run_once: bool | str | None
    notify: list[str]
    module_defaults: dict[str, dict[str, Any]]
    flags: dict[str, bool | str] = field(default_factory=dict)  # ignore_errors, no_log (a template too), ...

    def give(self, task: Task) -> None:
        """What a task of the block inherits: its ``when`` (before the task's own), ``vars`` (under the task's),
        and ``become``, ``become_user``, ``environment``, ``check_mode``, ``delegate_to``, ``notify`` and
        ``run_once`` unless the task sets its own; ``ignore_errors``, ``no_log`` and the like when either does."""
        node, flags = self.node, self.flags
        prepend_when(task, node.get("when"))
        task.vars = {**self.vars, **task.vars}
        if task.become is None and self.become is not None:
            task.become = self.become
        if task.become_user is None and self.become_user is not None:
            task.become_user = self.become_user
        if not task.environment and self.environment:
            task.environment = self.environment
        if task.check_mode is None and self.check_mode is not None:
            task.check_mode = self.check_mode
        task.ignore_errors = task.ignore_errors or flags.get("ignore_errors", False)
        task.no_log = task.no_log or flags.get("no_log", False)
        task.ignore_unreachable = task.ignore_unreachable or bool(flags.get("ignore_unreachable", False))
        task.any_errors_fatal = task.any_errors_fatal or bool(flags.get("any_errors_fatal", False))
        if task.delegate_to is None and node.get("delegate_to") is not None:
            task.delegate_to = node["delegate_to"]
            task.delegate_facts = task.delegate_facts or bool(flags.get("delegate_facts", False))
        if not task.notify and self.notify:  # a block's notify is its tasks' unless they name their own
            task.notify = list(self.notify)
        if task.run_once is False and self.run_once is not None:
            task.run_once = self.run_once


def block_keywords(node: Any, path: str, tags: set[str]) -> BlockKeywords:
    """A ``block`` node's keys checked and read (``tags``: those it inherits)."""
    unknown = [k for k in node if k not in BLOCK_KEYS]
    if unknown:
        raise _err(f"block: {unknown[0]!r} is not supported on a block (supported: {', '.join(sorted(BLOCK_KEYS))})",
                   node, path)  # fmt: skip
    _condition(node.get("when"), "when", node, path)
    sections = {}
    for key in ("block", "rescue", "always"):
        value = node.get(key)
        if value is None:
            value = []
        if not isinstance(value, list):
            raise _err(f"block: {key} must be a list of tasks, got {_kind(value)}", node, path)
        sections[key] = value
    ref_id = next(_block_ids)
    block_tags = tags | _tags(node.get("tags"), node, path)
    block_vars = _mapping(node.get("vars"), "vars", node, path)
    env = _environment(node.get("environment"), node, path) if node.get("environment") is not None else None
    flags = {k: _flag(node[k], k, node, path) for k in ("ignore_errors", "no_log") if k in node}
    become = _flag(node["become"], "become", node, path) if "become" in node else None
    check_mode = _flag(node["check_mode"], "check_mode", node, path) if "check_mode" in node else None
    become_user = _optional_str(node.get("become_user"), "become_user", node, path)
    if node.get("delegate_to") is not None and not isinstance(node["delegate_to"], str):
        raise _err(f"delegate_to must be a host name, got {_kind(node['delegate_to'])}", node, path)
    notify = _strlist(node.get("notify"), "notify", node, path)
    flags |= {
        k: _bool(node[k], k, node, path)
        for k in ("ignore_unreachable", "delegate_facts", "any_errors_fatal")
        if k in node
    }
    run_once = _flag(node["run_once"], "run_once", node, path) if "run_once" in node else None
    defaults = module_defaults(node.get("module_defaults"), node, path, _MODULE_DEFAULTS.get({}))
    return BlockKeywords(
        node, ref_id, sections, block_tags, block_vars, env, become, become_user, check_mode, run_once, notify,
        defaults, flags,
    )  # fmt: skip
