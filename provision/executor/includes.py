"""What ``include_tasks``/``include_role`` bring at run time: the file or role an include names once rendered,
and its tasks read then, placed where the include is. The hosts that got the same one with the same item
run its tasks together (``Executor._run_include``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ProvisionError
from ..playbook import Play, Task, include_path, load_included, load_role
from ..results import Status, TaskResult
from .task_executor import TaskRunner

Group = tuple[list[str], dict[str, Any], dict[str, Any]]  # the hosts, the loop item's vars, the rendered arguments


def group_by_include(task: Task, hosts: list[str], runner: TaskRunner) -> tuple[list[TaskResult], list[Group]]:
    """An include on ``hosts``: per host and loop item, what its ``when`` and templates give; the results to
    record (each "included" counts ok, as in Ansible; a failure to render or a missing file fails the host) and
    the groups of hosts that got the same file (role) with the same item, in the order first met."""
    groups: dict[tuple[str, str], Group] = {}
    results: list[TaskResult] = []
    for host in hosts:
        try:
            found = runner.include_items(task, host)
        except ProvisionError as exc:
            results.append(TaskResult(host, task.name, Status.FAILED, f"{exc} ({task.where})"))
            continue
        if not found:
            results.append(TaskResult(host, task.name, Status.SKIPPED))
        for extra, args in found:
            target = include_target(task, args)
            if target is None:
                msg = f"include_tasks: {args['file']} not found"
                results.append(TaskResult(host, task.name, Status.FAILED, msg))
                continue
            label = f" => (item={extra[task.loop_var]})" if extra else ""
            results.append(TaskResult(host, task.name, Status.OK, f"included: {target}{label}"))
            key = (
                json.dumps([target, args], sort_keys=True, default=str),
                json.dumps(extra, sort_keys=True, default=str),
            )
            groups.setdefault(key, ([], extra, args))[0].append(host)
    return results, list(groups.values())


def include_target(task: Task, args: dict[str, Any]) -> str | None:
    """What the include names, as shown (``role NAME`` or the file's path); None for a file that is not there."""
    if task.module == "include_role":
        return f"role {args['name']}"
    target = include_path(str(args["file"]), task.file)
    return None if target is None else str(target)


def included_tasks(
    play: Play, task: Task, args: dict[str, Any], extra: dict[str, Any], playbook_dir: str
) -> list[Task]:
    """What an include brings, read now, placed where the include is: under its vars (the role's own
    ``role_path``/``role_name`` kept), its loop item, in its blocks; an included file keeps the role of the
    include (its files, defaults). A role's handlers join the play's."""
    include_vars = dict(task.vars)
    if task.module == "include_role":
        playbook = str(Path(playbook_dir) / "playbook.yml")
        tasks, handlers, (defaults, role_vars) = load_role(task, args, playbook, set(play.tags), set(play.roles_run))
        if args.get("public"):  # the role's defaults and vars stay for the rest of the play, as in Ansible
            play.role_defaults.update(defaults)
            play.role_vars.update(role_vars)
        for handler in handlers:
            if not any(h.file == handler.file and h.line == handler.line for h in play.handlers):
                play.handlers.append(handler)
        include_vars.pop("role_path", None)
        include_vars.pop("role_name", None)
    else:
        target = include_path(str(args["file"]), task.file)
        assert target is not None
        tasks = load_included(task, target, set(play.tags))
    for included in tasks:
        included.vars = {**included.vars, **include_vars}  # the include's vars win, as Ansible's params
        included.inert_vars = {**task.inert_vars, **included.inert_vars, **extra}
        included.blocks = (*task.blocks, *included.blocks)
        if included.role_path is None:
            included.role_path, included.role_run = task.role_path, task.role_run
            included.role_defaults = {**task.role_defaults, **included.role_defaults}
    return tasks
