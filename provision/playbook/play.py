"""Playbooks: the Ansible subset, loaded into typed plays and tasks, validated before any host is touched.

Loading checks YAML syntax, play and task keys, that each task names exactly one known module, the module's
arguments (names, required, choices), Jinja2 syntax everywhere, and ``import_playbook``. Every error names
``file:line``. Undefined variables are checked later by :func:`provision.plan.check_variables`, once the
inventory is known.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import plugins, templating
from ..data import playbooks_dir
from ..errors import PlaybookError, TemplateError, did_you_mean
from .fields import (
    _MODULE_DEFAULTS,
    _bool,
    _environment,
    _err,
    _flag,
    _kind,
    _mapping,
    _number,
    _optional_str,
    _strlist,
    _tags,
    module_defaults,
)
from .objects import HOST_ORDERS, PLAY_CONNECTIONS, PLAY_KEYS, STRATEGIES, LineDict, Play, Task, load_yaml
from .roles import _PLAYBOOK, _ROLE_EXPOSED, _ROLE_HANDLERS, _ROLES_SEEN
from .taskfiles import short_import
from .tasks import WARNINGS, parse_handlers, parse_tasks, read_role


def _serial(value: Any, node: Any, path: str) -> list[int | str]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out: list[int | str] = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and item > 0:
            out.append(item)
        elif isinstance(item, str) and item.endswith("%") and item[:-1].strip().isdigit():
            out.append(item.strip())
        elif isinstance(item, str) and item.isdigit() and int(item) > 0:
            out.append(int(item))
        else:
            raise _err(f"serial: {item!r} must be a positive integer or a percentage like '25%'", node, path)
    return out


def _play_tasks(node: Any, path: str, tags: set[str]) -> tuple[list[Task], set[int], list[Task]]:
    """The play's roles, pre_tasks, tasks and post_tasks (and the points where handlers flush), and handlers."""
    tasks: list[Task] = []
    flush_points: set[int] = set()
    _ROLE_HANDLERS.set([])
    _ROLES_SEEN.set(set())
    _ROLE_EXPOSED.set([])
    for key in ("pre_tasks", "tasks", "post_tasks"):
        section = node.get(key)
        if key == "tasks" and node.get("roles") is not None:  # roles run before the play's own tasks
            roles = node["roles"]
            if not isinstance(roles, list):
                raise _err(f"roles must be a list, got {_kind(roles)}", node, path)
            for entry in roles:
                tasks += read_role(entry, path, tags, ())
            if section is None:
                flush_points.add(len(tasks))
        if section is None:
            continue
        if not isinstance(section, list):
            raise _err("tasks must be a list", node, path)
        tasks += parse_tasks(section, path, tags)
        flush_points.add(len(tasks))  # as Ansible, handlers flush at the end of pre_tasks, tasks and post_tasks
    raw_handlers = node.get("handlers") or []
    if not isinstance(raw_handlers, list):
        raise _err("handlers must be a list", node, path)
    handlers = [*_ROLE_HANDLERS.get(), *parse_handlers(raw_handlers, path)]
    return tasks, flush_points, handlers


def _vars_prompt(value: Any, node: Any, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``vars_prompt`` in a run that never prompts (as ansible-playbook without a terminal): a prompt's
    ``default`` becomes the play variable; one without a default must come from ``-e`` (the planner refuses the
    run before any host is touched otherwise). Returns (the defaults, the names without one)."""
    if value is None:
        return {}, {}
    if not isinstance(value, list):
        raise _err(f"vars_prompt must be a list, got {_kind(value)}", node, path)
    defaults: dict[str, Any] = {}
    missing: dict[str, Any] = {}
    for entry in value:
        where = entry if isinstance(entry, LineDict) else node
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"].isidentifier():
            raise _err("vars_prompt: each entry needs name: VARIABLE", where, path)
        unknown = sorted(set(entry) - VARS_PROMPT_KEYS)
        if unknown:
            raise _err(f"vars_prompt: {unknown[0]!r} is not supported", where, path)
        if entry.get("encrypt"):
            raise _err(f"vars_prompt {entry['name']}: encrypt is not supported (pass the hashed value with -e)",
                       where, path)  # fmt: skip
        if "default" in entry and entry["default"] is not None:
            defaults[entry["name"]] = entry["default"]
        else:
            missing[entry["name"]] = (getattr(where, "file", "") or path, getattr(where, "line", 0) or None)
    return defaults, missing


VARS_PROMPT_KEYS = {"name", "prompt", "default", "private", "confirm", "encrypt", "salt_size", "salt", "unsafe"}


def parse_play(node: Any, path: str) -> Play:
    if not isinstance(node, dict):
        raise _err("a play must be a mapping", node, path)
    unknown = [k for k in node if k not in PLAY_KEYS]
    if unknown:
        hint = did_you_mean(str(unknown[0]), PLAY_KEYS)
        raise _err(f"unknown play key {unknown[0]!r}{hint} (known: {', '.join(sorted(PLAY_KEYS))})", node, path)
    if "hosts" not in node:
        raise _err("play has no 'hosts'", node, path)
    strategy = node.get("strategy", "linear")
    if not (strategy in STRATEGIES or templating.is_template(strategy)):  # a template: checked by the planner
        raise _err(f"strategy {strategy!r} is not supported (only {', '.join(STRATEGIES)})", node, path)
    order = node.get("order", "inventory")
    if order not in HOST_ORDERS and not templating.is_template(order):  # a template: checked by the planner
        raise _err(f"order must be one of {', '.join(HOST_ORDERS)}, got {_kind(order)}", node, path)
    _strlist(node.get("collections"), "collections", node, path)  # accepted: module names resolve as builtin
    if node.get("connection", "ssh") not in PLAY_CONNECTIONS:
        raise _err(f"play connection {node['connection']!r} is not supported (only {', '.join(PLAY_CONNECTIONS)})",
                   node, path)  # fmt: skip
    hosts = node["hosts"]
    if not (isinstance(hosts, str) and hosts.strip()) and not (
        isinstance(hosts, list) and hosts and all(isinstance(h, str) for h in hosts)
    ):
        raise _err(f"hosts must be a host pattern or a list of them, got {_kind(hosts)}", node, path)
    tags = _tags(node.get("tags"), node, path)
    token = _MODULE_DEFAULTS.set(module_defaults(node.get("module_defaults"), node, path))
    warnings: list[str] = []
    warn_token = WARNINGS.set(warnings)
    try:
        tasks, flush_points, handlers = _play_tasks(node, path, tags)
    finally:
        _MODULE_DEFAULTS.reset(token)
        WARNINGS.reset(warn_token)
    prompted, missing = _vars_prompt(node.get("vars_prompt"), node, path)
    exposed_defaults: dict[str, Any] = {}
    exposed_vars: dict[str, Any] = {}
    for role_defaults, role_vars in _ROLE_EXPOSED.get():
        exposed_defaults.update(role_defaults)
        exposed_vars.update(role_vars)
    mfp = node.get("max_fail_percentage")
    play = Play(
        name=str(node.get("name") or node["hosts"]),
        hosts=str(node["hosts"]) if not isinstance(node["hosts"], list) else ",".join(map(str, node["hosts"])),
        file=getattr(node, "file", path),
        line=getattr(node, "line", 0),
        vars=_mapping(node.get("vars"), "vars", node, path),
        vars_files=_strlist(node.get("vars_files"), "vars_files", node, path),
        gather_facts=_bool(node.get("gather_facts", True), "gather_facts", node, path),
        serial=_serial(node.get("serial"), node, path),
        max_fail_percentage=_number(mfp, "max_fail_percentage", "percent", node, path),
        any_errors_fatal=_bool(node.get("any_errors_fatal", False), "any_errors_fatal", node, path),
        become=_bool(node.get("become", False), "become", node, path),
        become_user=_optional_str(node.get("become_user"), "become_user", node, path),
        environment=_environment(node.get("environment"), node, path),
        tasks=tasks,
        flush_points=flush_points,
        handlers=handlers,
        tags=tags,
        no_log=_strlist(node.get("no_log"), "no_log", node, path) if not isinstance(node.get("no_log"), bool) else [],
        prompts=missing,
        force_handlers=_bool(node.get("force_handlers", False), "force_handlers", node, path),
        remote_user=_optional_str(node.get("remote_user"), "remote_user", node, path),
        connection=node.get("connection"),
        order=order,
        strategy=str(strategy),
        role_defaults=exposed_defaults,
        role_vars=exposed_vars,
        roles_run=set(_ROLES_SEEN.get()),
        warnings=warnings,
    )
    if node.get("no_log") is True:  # Ansible's play-level no_log: every task's output is hidden
        for task in tasks + handlers:
            task.no_log = True
    _play_keywords(node, path, tasks + handlers)
    for task in tasks + handlers:
        if task.module == "meta" and task.args.get("_raw_params") == "end_role" and task.role_run is None:
            raise PlaybookError("meta: end_role is only allowed in a role's tasks", file=task.file, line=task.line)
    if strategy in ("free", "host_pinned"):
        _free_strategy(play, node, path)
    names = {h.name for h in handlers} | {n for h in handlers for n in h.listen}
    for task in tasks + handlers:
        for target in task.notify:
            if target not in names and not templating.is_template(target):
                raise PlaybookError(
                    f"task {task.name!r} notifies unknown handler {target!r}{did_you_mean(target, names)}",
                    file=task.file,
                    line=task.line,
                )
    base = Path(path).parent
    for vf in play.vars_files:
        data = load_yaml(base / vf) if not templating.is_template(vf) else {}
        if data is not None and not isinstance(data, dict):
            raise PlaybookError("vars file must be a mapping", file=str(base / vf))
        play.vars.update(_mapping(data, "vars file", data, str(base / vf)))
    play.vars.update(prompted)  # as Ansible: the prompted value is a play variable, over vars and vars_files
    try:
        templating.names_used(play.vars)
    except TemplateError as exc:
        raise _err(
            f"vars: {exc.msg}", node.get("vars") if isinstance(node.get("vars"), LineDict) else node, path
        ) from None
    return play


def _free_strategy(play: Play, node: Any, path: str) -> None:
    """``strategy: free``/``host_pinned`` run as linear: each host gets the same results, only the interleaving
    differs. Where Ansible's free strategy gives other results, provision follows it: ``run_once`` is not
    honoured (the task runs on every host, as Ansible warns); ``max_fail_percentage`` and ``any_errors_fatal``
    are not supported there by Ansible, so they are refused."""
    for key in ("max_fail_percentage", "any_errors_fatal"):
        if node.get(key) not in (None, False):
            raise _err(f"{key} is not supported with strategy {node['strategy']} (Ansible ignores it there)",
                       node, path)  # fmt: skip
    for task in play.tasks + play.handlers:
        task.run_once = False


def _play_keywords(node: Any, path: str, tasks: list[Task]) -> None:
    """The play's check_mode, ignore_errors, ignore_unreachable and run_once: every task's unless it sets its own."""
    check_mode = _flag(node["check_mode"], "check_mode", node, path) if "check_mode" in node else None
    run_once = _flag(node["run_once"], "run_once", node, path) if "run_once" in node else None
    ignore_errors = _flag(node.get("ignore_errors", False), "ignore_errors", node, path)
    ignore_unreachable = _bool(node.get("ignore_unreachable", False), "ignore_unreachable", node, path)
    for task in tasks:
        if task.check_mode is None and check_mode is not None:
            task.check_mode = check_mode
        if task.run_once is False and run_once is not None:
            task.run_once = run_once
        task.ignore_errors = task.ignore_errors or ignore_errors
        task.ignore_unreachable = task.ignore_unreachable or ignore_unreachable


def nearest_playbook(path: str) -> str:
    """``" (did you mean 'site.yml'?)"`` for a playbook that does not exist: the nearest YAML file beside it, or
    of the shipped playbooks for a bare name (``provision run NAME`` finds those)."""
    where = Path(path).parent
    try:
        known = [str(where / p.name) for p in where.iterdir() if p.suffix in (".yml", ".yaml") and p.is_file()]
    except OSError:
        known = []
    if where == Path("."):
        known += [p.name for p in playbooks_dir().glob("*.yml")]
    return did_you_mean(path, known)


def load_playbook(path: str | Path, _seen: tuple[str, ...] = ()) -> list[Play]:
    """Load and validate a playbook (following ``import_playbook``) into a list of plays."""
    path = str(path)
    real = str(Path(path).resolve())
    if real in _seen:
        raise PlaybookError("import_playbook loop", file=path)
    if not Path(path).exists():
        raise PlaybookError(f"no such playbook{nearest_playbook(path)}", file=path)
    plugins.load_beside(Path(path).parent)  # the author's filter_plugins/ and test_plugins/, before any check
    data = load_yaml(path)
    if data is None or data == []:
        raise PlaybookError("the playbook is empty: it must be a list of plays", file=path, line=1)
    token = _PLAYBOOK.set(path)  # an include_role read now looks its role up from here
    try:
        return _load_plays(data, path, real, _seen)
    finally:
        _PLAYBOOK.reset(token)


def _load_plays(data: Any, path: str, real: str, _seen: tuple[str, ...]) -> list[Play]:
    if not isinstance(data, list):
        raise PlaybookError("a playbook must be a list of plays", file=path, line=getattr(data, "line", 1))
    plays: list[Play] = []
    for node in data:
        node = short_import(node, "import_playbook")
        if isinstance(node, dict) and "import_playbook" in node:
            target = Path(path).parent / str(node["import_playbook"])
            if not target.exists():
                raise _err(f"import_playbook: {target} does not exist{nearest_playbook(str(target))}", node, path)
            plays += load_playbook(target, (*_seen, real))
        else:
            plays.append(parse_play(node, path))
    return plays
