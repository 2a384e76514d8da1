"""Task files an include or an import names: where an included file is (:func:`include_path`, as Ansible
looks), an ``import_tasks`` file read and checked (:func:`imported_file`), the ``apply`` block put around
included tasks, and the ``ansible.builtin.`` form of a static import."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import PlaybookError
from .fields import _condition, _err
from .objects import LineDict, load_yaml


def include_path(file: str, task_file: str) -> Path | None:
    """Where an included task file is: relative to the file of the task that includes it, then (in a role's
    ``tasks/`` or ``handlers/``) the role's ``tasks/`` and the role itself, then the current directory, as
    Ansible looks."""
    here = Path(task_file).parent
    role = [here.parent / "tasks", here.parent] if here.name in ("tasks", "handlers") else []
    for base in (here, *role, Path.cwd()):
        candidate = base / os.path.expanduser(file)
        if candidate.is_file():
            return candidate
    return None


def imported_file(node: dict[str, Any], path: str, _seen: tuple[str, ...]) -> tuple[Path, str, list[Any]]:
    """An ``import_tasks`` node's file (relative to ``path``; ``{file: FILE}`` as Ansible takes it), its resolved
    path and its task list: a loop through ``_seen``, a missing file or a non-list is a PlaybookError. Its
    ``when`` is checked first."""
    _condition(node.get("when"), "when", node, path)
    source = node["import_tasks"]
    if isinstance(source, dict) and set(source) == {"file"}:
        source = source["file"]
    target = Path(path).parent / str(source)
    real = str(target.resolve())
    if real in _seen:
        raise _err(f"import_tasks loop through {target}", node, path)
    if not target.is_file():
        raise _err(f"import_tasks: {target} does not exist", node, path)
    data = load_yaml(target)
    if not isinstance(data, list):
        raise PlaybookError("a task file must be a list of tasks", file=str(target), line=getattr(data, "line", 1))
    return target, real, data


def apply_block(data: list[Any], apply: dict[str, Any] | None, file: str, line: int) -> list[Any]:
    """The included task list, inside a block carrying the include's ``apply`` keywords (as Ansible does)."""
    if not apply:
        return data
    block = LineDict({k: v for k, v in apply.items() if k != "name"})
    block.file, block.line = file, line
    block["block"] = data
    return [block]


def short_import(node: Any, key: str) -> Any:
    """``ansible.builtin.KEY:`` / ``ansible.legacy.KEY:`` (a static import under its FQCN) as ``KEY:``, in place
    of the key (the mapping keeps its file and line)."""
    if not isinstance(node, dict):
        return node
    long = next((k for k in (f"ansible.builtin.{key}", f"ansible.legacy.{key}") if k in node), None)
    if long is None or key in node:
        return node
    short = LineDict({(key if k == long else k): v for k, v in node.items()})
    short.file, short.line = getattr(node, "file", ""), getattr(node, "line", 0)
    return short
