"""Task lists: one task (:func:`parse_task`: keys, exactly one known module, its arguments), blocks,
``import_tasks``/``include_tasks``, roles (:func:`load_role`, :func:`load_included`, :func:`include_path`) and
handlers (:func:`parse_handlers`).

One module because these read each other: a block holds task lists, a role's tasks are a task list, and a task
that includes a role or a file reads it (for validation) as a task list. Every error names ``file:line``.
"""

from __future__ import annotations

import contextvars
import itertools
import os
from pathlib import Path
from typing import Any

from .. import plugins, templating
from ..catalog import MODULES, lookup, nearest
from ..data import roles_dir
from ..errors import PlaybookError, TemplateError, did_you_mean
from ..modules import ArgError
from ..modules.args import parse_kv
from ..templating import lookups
from .fields import (
    _MODULE_DEFAULTS,
    _action_form,
    _bool,
    _condition,
    _environment,
    _err,
    _flag,
    _is_with,
    _kind,
    _loop,
    _mapping,
    _number,
    _optional_str,
    _strlist,
    _tags,
    module_defaults,
)
from .objects import ACTION_KEYS, TASK_KEYS, BlockRef, LineDict, Task, load_yaml


def parse_task(node: Any, path: str, *, handler: bool = False, inherited_tags: set[str] | None = None) -> Task:
    if not isinstance(node, dict):
        raise _err(f"a task must be a mapping, got {type(node).__name__}", node, path)
    if any(k in node for k in ACTION_KEYS):
        node = _action_form(node, path)
    candidates = [k for k in node if k not in TASK_KEYS and not _is_with(k)]
    if "block" in node:
        raise _err("a block is not allowed here (handlers cannot be blocks)", node, path)
    for key in ("rescue", "always"):
        if key in node:
            raise _err(f"{key} is a key of a block, and this task has no block", node, path)
    if not candidates:
        raise _err("task has no module (one of its keys must name a module)", node, path)
    if len(candidates) > 1:
        unknown = [k for k in candidates if lookup(str(k)) is None]
        if unknown:
            hint = did_you_mean(str(unknown[0]), [*TASK_KEYS, *MODULES])
            raise _err(f"unknown task key or module {unknown[0]!r}{hint}", node, path)
        raise _err(f"task names more than one module: {', '.join(map(str, candidates))}", node, path)
    module = str(candidates[0])
    cls = lookup(module)
    if cls is None:
        raise _err(f"unknown module {module!r}{nearest(module)}", node, path)
    try:
        args = cls.normalize(node[module])
        if "args" in node:
            args.update(_mapping(node["args"], "args", node, path))
        defaults = module_defaults(node.get("module_defaults"), node, path, _MODULE_DEFAULTS.get({}))
        if defaults.get(cls.name):
            args = {**defaults[cls.name], **args}
        args = cls.validate_static(args, templating.is_template)
    except ArgError as exc:
        raise _err(str(exc), node, path) from None
    given = str(node["name"]) if node.get("name") is not None else ""
    name = given or module
    loop_keys = [str(k) for k in node if k == "loop" or _is_with(k)]
    if len(loop_keys) > 1:
        raise _err(f"{loop_keys[0]} and {loop_keys[1]} are mutually exclusive", node, path)
    loop_key = loop_keys[0] if loop_keys else "loop"
    if loop_key.startswith("with_") and lookups.plugin_name(loop_key[5:]) not in lookups.PLUGINS:
        raise _err(
            f"{loop_key}: lookup plugin {loop_key[5:]!r} is not supported "
            f"(with_ loops: {', '.join('with_' + n for n in sorted(lookups.PLUGINS))})",
            node,
            path,
        )
    loop = _loop(node.get(loop_key), loop_key, node, path)
    loop_control = _mapping(node.get("loop_control"), "loop_control", node, path)
    unknown_lc = sorted(set(loop_control) - LOOP_CONTROL_KEYS)
    if unknown_lc:
        raise _err(
            f"loop_control: {unknown_lc[0]!r} is not supported (supported: {', '.join(sorted(LOOP_CONTROL_KEYS))})",
            node,
            path,
        )
    loop_var = loop_control.get("loop_var", "item")
    index_var = loop_control.get("index_var")
    for key, value in (("loop_var", loop_var), ("index_var", index_var)):
        if value is not None and (not isinstance(value, str) or not value.isidentifier()):
            raise _err(f"loop_control: {key} {value!r} is not a valid variable name", node, path)
    _condition(loop_control.get("break_when"), "loop_control: break_when", node, path)
    pause = _number(loop_control.get("pause"), "loop_control: pause", "seconds", node, path)
    # a template is rendered when the task runs (the runner checks the value then)
    retries = _number(_untemplated(node.get("retries")), "retries", "count", node, path)
    delay = _number(_untemplated(node.get("delay")), "delay", "seconds", node, path)
    default_retries = 3 if "until" in node else None
    retry_count = int(retries) if retries is not None else _template_or(node.get("retries"), default_retries)
    for key in ("when", "changed_when", "failed_when", "until"):
        _condition(node.get(key), key, node, path)
    if node.get("delegate_to") is not None and not isinstance(node["delegate_to"], str):
        raise _err(f"delegate_to must be a host name, got {_kind(node['delegate_to'])}", node, path)
    task = Task(
        name=name,
        module=cls.name,
        args=args,
        file=getattr(node, "file", path),
        line=getattr(node, "line", 0),
        when=node.get("when"),
        loop=loop,
        loop_kind=loop_key,
        loop_var=loop_var,
        loop_label=loop_control.get("label"),
        index_var=index_var,
        extended=_bool(loop_control.get("extended", False), "loop_control: extended", node, path),
        break_when=loop_control.get("break_when"),
        pause=pause or 0.0,
        register=node.get("register"),
        notify=_strlist(node.get("notify"), "notify", node, path),
        tags=_tags(node.get("tags"), node, path) | (inherited_tags or set()),
        changed_when=node.get("changed_when"),
        failed_when=node.get("failed_when"),
        ignore_errors=_bool(node.get("ignore_errors", False), "ignore_errors", node, path),
        environment=_environment(node.get("environment"), node, path),
        become=_flag(node["become"], "become", node, path) if "become" in node else None,
        become_user=_optional_str(node.get("become_user"), "become_user", node, path),
        run_once=_flag(node.get("run_once", False), "run_once", node, path),
        delegate_to=node.get("delegate_to"),
        retries=retry_count,
        delay=_template_or(node.get("delay"), 5.0) if delay is None else delay,
        until=node.get("until"),
        vars=_mapping(node.get("vars"), "vars", node, path),
        no_log=_flag(node.get("no_log", False), "no_log", node, path),
        timeout=_number(node.get("timeout"), "timeout", "timeout", node, path),
        listen=_strlist(node.get("listen"), "listen", node, path),
        check_mode=_flag(node["check_mode"], "check_mode", node, path) if "check_mode" in node else None,
        diff=_bool(node["diff"], "diff", node, path) if "diff" in node else None,
        given_name=given,
        ignore_unreachable=_bool(node.get("ignore_unreachable", False), "ignore_unreachable", node, path),
        delegate_facts=_bool(node.get("delegate_facts", False), "delegate_facts", node, path),
        any_errors_fatal=_bool(node.get("any_errors_fatal", False), "any_errors_fatal", node, path),
        module_defaults=defaults,
    )
    _async_keys(task, cls, node, path)
    if task.module == "add_host":
        task.run_once = True  # it bypasses the host loop, as in Ansible: once per batch (each loop item)
    if task.module == "include_vars":
        task.args["_origin"] = task.file  # its relative paths start from the task's file, as Ansible's
    if task.register is not None and not (isinstance(task.register, str) and task.register.isidentifier()):
        raise _err(f"register name {task.register!r} is not a valid variable name", node, path)
    _check_templates(task, node, path)
    if task.module in ("include_tasks", "include_role"):
        _check_apply(task, node, path)
    if task.module == "include_tasks":
        _check_include(task, node, path)
    if task.module == "include_role":
        _check_include_role(task, node, path)
    return task


def _async_keys(task: Task, cls: Any, node: Any, path: str) -> None:
    """``async``/``poll`` (whole numbers, no templates): only for modules whose work is one remote command."""
    limit = _number(node.get("async"), "async", "count", node, path)
    poll = _number(node.get("poll"), "poll", "count", node, path)
    task.async_val = int(limit or 0)
    task.poll = 15 if poll is None else int(poll)
    if task.async_val and not cls.supports_async:
        raise _err(f"async is not supported for the {cls.name} module (only for: command, shell)", node, path)


def _untemplated(value: Any) -> Any:
    return None if templating.is_template(value) else value


def _template_or(value: Any, default: Any) -> Any:
    return str(value) if templating.is_template(value) else default


def _check_include(task: Task, node: Any, path: str) -> None:
    """An ``include_tasks`` whose file is not a template is read now: a missing file or a bad task in it is
    refused before the run, like everything else; a templated one is read when it runs."""
    file = task.args.get("file")
    if not isinstance(file, str) or templating.is_template(file):
        return
    target = include_path(file, task.file)
    if target is None:
        raise _err(f"include_tasks: {file} does not exist (relative to {Path(task.file).parent})", node, path)
    data = load_yaml(target)
    if not isinstance(data, list):
        raise PlaybookError("a task file must be a list of tasks", file=str(target), line=getattr(data, "line", 1))
    parse_tasks(data, str(target), set())


APPLY_KEYS = {"when", "tags", "vars", "become", "become_user", "environment", "ignore_errors", "no_log",
              "check_mode", "delegate_to", "delegate_facts", "module_defaults", "notify", "ignore_unreachable",
              "run_once", "name", "debugger", "any_errors_fatal"}  # fmt: skip
ROLE_FROM_KEYS = ("tasks_from", "vars_from", "defaults_from", "handlers_from")
_ROLES_CHECKING: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("roles_checking", default=frozenset())
_PLAYBOOK: contextvars.ContextVar[str | None] = contextvars.ContextVar("playbook", default=None)


def _check_apply(task: Task, node: Any, path: str) -> None:
    """An include's ``apply``: block keywords (as a block around the included tasks)."""
    apply = task.args.get("apply")
    if apply is None or templating.is_template(apply):
        if apply is not None:
            raise _err(f"{task.module}: apply must be a mapping of keywords (a template is not supported here)",
                       node, path)  # fmt: skip
        return
    unknown = sorted(str(k) for k in apply if k not in APPLY_KEYS)
    if unknown:
        supported = ", ".join(sorted(APPLY_KEYS))
        raise _err(f"{task.module}: apply: {unknown[0]!r} is not supported (supported: {supported})", node, path)


def _apply_block(data: list[Any], apply: dict[str, Any] | None, file: str, line: int) -> list[Any]:
    """The included task list, inside a block carrying the include's ``apply`` keywords (as Ansible does)."""
    if not apply:
        return data
    block = LineDict({k: v for k, v in apply.items() if k != "name"})
    block.file, block.line = file, line
    block["block"] = data
    return [block]


def _check_include_role(task: Task, node: Any, path: str) -> None:
    """An ``include_role`` whose name (and ``*_from``) are not templates is read now: a missing role or a bad
    task in it is refused before the run; a templated one is read when it runs."""
    args = task.args
    if any(templating.is_template(args.get(k)) for k in ("name", *ROLE_FROM_KEYS)) or not isinstance(
        args.get("name"), str
    ):
        return
    key = f"{args['name']}|{args.get('tasks_from')}|{Path(task.file).resolve()}"
    checking = _ROLES_CHECKING.get()
    if key in checking:  # a role that includes itself (under a condition): checked once
        return
    token = _ROLES_CHECKING.set(checking | {key})
    try:
        load_role(task, args, _PLAYBOOK.get(), set())
    finally:
        _ROLES_CHECKING.reset(token)


def load_role(
    task: Task, args: dict[str, Any], playbook: str | None, tags: set[str], roles_run: set[str] | None = None
) -> tuple[list[Task], list[Task], tuple[dict[str, Any], dict[str, Any]]]:
    """An ``include_role`` with its arguments rendered: the role's tasks (its ``apply`` around them, its defaults,
    vars and files as for ``roles:``) and its handlers. Read afresh each time (an include runs the role again,
    as Ansible does); its dependencies that are in ``roles_run`` (the play's :attr:`Play.roles_run`) are not run
    again. The role is looked up from the playbook, then beside the role the
    include is in. Also returns the defaults and vars of the role (and its dependencies), which ``public: true``
    exposes."""
    spec: dict[str, Any] = {"role": args["name"], **{k: args[k] for k in ROLE_FROM_KEYS if args.get(k)}}
    where = LineDict()
    where.file, where.line = task.file, task.line
    extra = []
    if Path(task.file).parent.name == "tasks":  # an include in a role's tasks/: its sibling roles
        extra.append(Path(task.file).resolve().parent.parent.parent)

    def read() -> tuple[list[Task], list[Task], tuple[dict[str, Any], dict[str, Any]]]:
        _ROLE_HANDLERS.set([])
        _ROLES_SEEN.set(roles_run if roles_run is not None else set())
        _ROLE_EXPOSED.set([])
        _MODULE_DEFAULTS.set(task.module_defaults)
        apply = task.args.get("apply")  # not rendered: the included tasks render their keywords
        tasks = _role(spec, task.file, tags, (), where, playbook or task.file, apply=apply, search=extra, once=False)
        defaults: dict[str, Any] = {}
        role_vars: dict[str, Any] = {}
        for role_defaults, own_vars in _ROLE_EXPOSED.get():
            defaults.update(role_defaults)
            role_vars.update(own_vars)
        return tasks, _ROLE_HANDLERS.get(), (defaults, role_vars)

    return contextvars.copy_context().run(read)


def load_included(task: Task, file: Path, tags: set[str]) -> list[Task]:
    """An ``include_tasks`` file's tasks, with the include's ``apply`` around them and the module defaults in
    force where the include is."""
    data = load_yaml(file)
    data = data if isinstance(data, list) else []

    def read() -> list[Task]:
        _MODULE_DEFAULTS.set(task.module_defaults)
        return parse_tasks(_apply_block(data, task.args.get("apply"), task.file, task.line), str(file), tags)

    return contextvars.copy_context().run(read)


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


LOOP_CONTROL_KEYS = {"loop_var", "label", "index_var", "extended", "break_when", "pause"}
# ---------------------------------------------------------------------------------------------------- roles
# Ansible's role layout: tasks/ handlers/ defaults/ vars/ meta/ (dependencies) templates/ files/, each main.yml
ROLE_KEYS = {"role", "name", "tags", "when", "vars", "become", "become_user", "environment",
             "tasks_from", "vars_from", "defaults_from", "handlers_from"}  # fmt: skip
_ROLE_HANDLERS: contextvars.ContextVar[list[Task]] = contextvars.ContextVar("role_handlers")
# the defaults and vars of each role read (dependencies too), in order: a play's static roles expose them
_ROLE_EXPOSED: contextvars.ContextVar[list[tuple[dict[str, Any], dict[str, Any]]]] = contextvars.ContextVar(
    "role_exposed"
)
_ROLES_SEEN: contextvars.ContextVar[set[str]] = contextvars.ContextVar("roles_seen")


def roles_path(playbook: str) -> list[Path]:
    """Where roles are looked up, as Ansible: the playbook's ``roles/`` and its own directory, then
    ``$ANSIBLE_ROLES_PATH`` (or ``$PROVISION_ROLES_PATH``), ``~/.ansible/roles``, ``/usr/share/ansible/roles``,
    ``/etc/ansible/roles``; last, provision's own roles (``provision.*``, :func:`provision.data.roles_dir`)."""
    base = Path(playbook).parent
    env = os.environ.get("PROVISION_ROLES_PATH") or os.environ.get("ANSIBLE_ROLES_PATH") or ""
    extra = [Path(os.path.expanduser(p)) for p in env.split(os.pathsep) if p]
    defaults = [Path("~/.ansible/roles").expanduser(), Path("/usr/share/ansible/roles"), Path("/etc/ansible/roles")]
    return [base / "roles", base, *extra, *defaults, roles_dir()]


def _role_dir(name: str, node: Any, path: str, search: list[Path] | None = None) -> Path:
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


def _role_file(role: Path, folder: str, stem: str) -> Path | None:
    for suffix in ("", ".yml", ".yaml"):
        candidate = role / folder / f"{stem}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def _role_mapping(role: Path, folder: str, stem: str) -> dict[str, Any]:
    found = _role_file(role, folder, stem)
    if found is None:
        return {}
    data = load_yaml(found)
    if data is None:
        return {}
    return _mapping(data, f"{folder}/{found.name}", data, str(found))


def _role(
    entry: Any,
    path: str,
    tags: set[str],
    chain: tuple[str, ...],
    node: Any = None,
    playbook: str | None = None,
    *,
    apply: dict[str, Any] | None = None,
    search: list[Path] | None = None,
    once: bool = True,
) -> list[Task]:
    """One ``roles:`` entry (a name, or a mapping with ``role``/``name`` and its options and parameters),
    its ``meta/main.yml`` dependencies first, flattened into tasks; its handlers join the play's."""
    where = node if node is not None else entry
    spec = {"role": entry} if isinstance(entry, str) else entry
    if not isinstance(spec, dict) or not isinstance(spec.get("role", spec.get("name")), str):
        raise _err("a role must be a name or a mapping with role: NAME", where, path)
    name = str(spec.get("role", spec.get("name")))
    # the other keys of a roles: entry are role parameters (over the role's vars, as in Ansible)
    params: dict[str, Any] = {k: v for k, v in spec.items() if k not in ROLE_KEYS}
    bad = [k for k in params if not (isinstance(k, str) and k.isidentifier())]
    if bad:
        raise _err(f"role {name!r}: {bad[0]!r} is not a role keyword nor a valid parameter name", where, path)
    allow_duplicates = _bool(params.pop("allow_duplicates", False), "allow_duplicates", where, path)
    directory = _role_dir(name, where, playbook or path, search or [])
    plugins.load_beside(directory)  # the role's filter_plugins/ and test_plugins/
    key = f"{directory}|{sorted(params.items(), key=str)}|{spec.get('tasks_from')}"
    if str(directory) in chain:
        raise _err(f"role {name!r} depends on itself ({' -> '.join([*chain, str(directory)])})", where, path)
    meta = _role_mapping(directory, "meta", "main")
    if meta.get("allow_duplicates") is not None:
        allow_duplicates = allow_duplicates or _bool(meta["allow_duplicates"], "allow_duplicates", meta, path)
    seen = _ROLES_SEEN.get()
    if key in seen and once and not allow_duplicates:  # as Ansible: once per play unless its parameters differ
        return []
    seen.add(key)
    run = next(_role_runs)
    out: list[Task] = []
    for dep in meta.get("dependencies") or []:  # looked up from the playbook, as the role itself
        out += _role(
            dep, str(directory / "meta" / "main.yml"), tags, (*chain, str(directory)), playbook=playbook or path
        )
    defaults = _role_mapping(directory, "defaults", str(spec.get("defaults_from") or "main"))
    role_vars = _role_mapping(directory, "vars", str(spec.get("vars_from") or "main"))
    _ROLE_EXPOSED.get([]).append((dict(defaults), dict(role_vars)))
    role_vars.update(_mapping(spec.get("vars"), "vars", where, path))
    own_tags = tags | _tags(spec.get("tags"), where, path)
    tasks_file = _role_file(directory, "tasks", str(spec.get("tasks_from") or "main"))
    for key, folder in (("tasks_from", "tasks"), ("vars_from", "vars"), ("defaults_from", "defaults"),
                        ("handlers_from", "handlers")):  # fmt: skip
        if spec.get(key) and _role_file(directory, folder, str(spec[key])) is None:
            raise _err(f"role {name!r}: {key}: no {folder}/{spec[key]}(.yml) in {directory}", where, path)
    tasks: list[Task] = []
    if tasks_file is not None:
        data = load_yaml(tasks_file) or []
        if not isinstance(data, list):
            raise PlaybookError("a task file must be a list of tasks", file=str(tasks_file), line=1)
        tasks = parse_tasks(_apply_block(data, apply, getattr(where, "file", path), getattr(where, "line", 0)),
                            str(tasks_file), own_tags)  # fmt: skip
    handlers_file = _role_file(directory, "handlers", str(spec.get("handlers_from") or "main"))
    if handlers_file is not None:
        data = load_yaml(handlers_file) or []
        if not isinstance(data, list):
            raise PlaybookError("a handlers file must be a list of tasks", file=str(handlers_file), line=1)
        for handler in parse_handlers(data, str(handlers_file)):
            _adopt(handler, directory, name, defaults, role_vars, params, spec, where, path, run)
            _ROLE_HANDLERS.get().append(handler)
    for task in tasks:
        _adopt(task, directory, name, defaults, role_vars, params, spec, where, path, run)
    return out + tasks


def _adopt(
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
    if spec.get("when") is not None:
        conditions = spec["when"] if isinstance(spec["when"], list) else [spec["when"]]
        own = [] if task.when is None else task.when if isinstance(task.when, list) else [task.when]
        task.when = [*conditions, *own]
    if task.become is None and "become" in spec:
        task.become = _flag(spec["become"], "become", where, path)
    if task.become_user is None and spec.get("become_user") is not None:
        task.become_user = str(spec["become_user"])
    if not task.environment and spec.get("environment") is not None:
        task.environment = _environment(spec["environment"], where, path)


def _import_role(node: Any, key: str, path: str, tags: set[str], seen: tuple[str, ...]) -> list[Task]:
    """``import_role: {name: R, tasks_from: ...}`` (static, read now), with the task's when/tags/vars."""
    allowed = {key, "name", "tags", "when", "vars"} | APPLY_KEYS  # the others as a block around the role
    unknown = [k for k in node if k not in allowed]
    if unknown:
        raise _err(f"import_role: {unknown[0]!r} is not supported here (allowed: {', '.join(sorted(allowed))})",
                   node, path)  # fmt: skip
    options = node[key]
    if isinstance(options, str) and "=" in options:  # `import_role: name=ROLE tasks_from=...`
        options = parse_kv(options)
    if not isinstance(options, dict) or not isinstance(options.get("name", options.get("role")), str):
        raise _err("import_role needs name: ROLE", node, path)
    spec = {**options, "tags": node.get("tags"), "when": node.get("when")}
    spec = {k: v for k, v in spec.items() if v is not None and k not in ("public", "rolespec_validate")}
    around = {k: v for k, v in node.items() if k in APPLY_KEYS and k not in ("name", "tags", "when", "vars")}
    if node.get("vars") is not None:
        spec["vars"] = {
            **_mapping(options.get("vars"), "vars", node, path),
            **_mapping(node["vars"], "vars", node, path),
        }
    return _role(spec, path, tags, (), node, apply=around or None, once=False)  # each import runs, as Ansible


BLOCK_KEYS = {
    "block", "rescue", "always", "name", "when", "tags", "vars", "become", "become_user", "environment",
    "ignore_errors", "no_log", "check_mode", "delegate_to", "delegate_facts", "module_defaults", "notify",
    "ignore_unreachable", "run_once", "debugger", "any_errors_fatal",
}  # fmt: skip
_block_ids = itertools.count(1)
_role_runs = itertools.count(1)


def _parse_block(node: Any, path: str, tags: set[str], seen: tuple[str, ...]) -> list[Task]:
    """A ``block`` (with ``rescue``/``always``) flattened into its tasks, in order: the block's, the rescue's,
    the always's. Each task carries where it sits (:class:`BlockRef`) and inherits what the block sets, as in
    Ansible: its ``when`` (before the task's own), ``tags``, ``vars`` (under the task's), and ``become``,
    ``become_user``, ``environment``, ``check_mode``, ``ignore_errors`` and ``no_log`` unless the task sets its
    own. The executor runs ``rescue`` on the hosts that failed in ``block`` and ``always`` on every host that
    entered it (docs/architecture.md, "Blocks")."""
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
    has_rescue, has_always = bool(sections["rescue"]), bool(sections["always"])
    block_tags = tags | _tags(node.get("tags"), node, path)
    block_vars = _mapping(node.get("vars"), "vars", node, path)
    env = _environment(node.get("environment"), node, path) if node.get("environment") is not None else None
    flags = {k: _bool(node[k], k, node, path) for k in ("ignore_errors", "no_log") if k in node}
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
    out: list[Task] = []
    for section, nodes in sections.items():
        ref = BlockRef(ref_id, section, has_rescue, has_always)
        token = _MODULE_DEFAULTS.set(defaults)
        try:
            parsed = parse_tasks(nodes, path, block_tags, seen)
        finally:
            _MODULE_DEFAULTS.reset(token)
        for task in parsed:
            if node.get("when") is not None:
                conditions = node["when"] if isinstance(node["when"], list) else [node["when"]]
                own = [] if task.when is None else task.when if isinstance(task.when, list) else [task.when]
                task.when = [*conditions, *own]
            task.vars = {**block_vars, **task.vars}
            if task.become is None and become is not None:
                task.become = become
            if task.become_user is None and become_user is not None:
                task.become_user = become_user
            if not task.environment and env:
                task.environment = env
            if task.check_mode is None and check_mode is not None:
                task.check_mode = check_mode
            task.ignore_errors = task.ignore_errors or flags.get("ignore_errors", False)
            task.no_log = task.no_log or flags.get("no_log", False)
            task.ignore_unreachable = task.ignore_unreachable or flags.get("ignore_unreachable", False)
            task.any_errors_fatal = task.any_errors_fatal or flags.get("any_errors_fatal", False)
            if task.delegate_to is None and node.get("delegate_to") is not None:
                task.delegate_to = node["delegate_to"]
                task.delegate_facts = task.delegate_facts or flags.get("delegate_facts", False)
            if not task.notify and notify:  # a block's notify is its tasks' unless they name their own
                task.notify = list(notify)
            if task.run_once is False and run_once is not None:
                task.run_once = run_once
            task.blocks = (ref, *task.blocks)
            out.append(task)
    if out:
        out[-1].ends_blocks = (*out[-1].ends_blocks, ref_id)
    return out


IMPORT_KEYS = {"import_tasks", "name", "tags", "when", "vars"}


def _short_import(node: Any, key: str) -> Any:
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


def parse_tasks(nodes: list[Any], path: str, tags: set[str], _seen: tuple[str, ...] = ()) -> list[Task]:
    """Parse a task list, expanding ``import_tasks: FILE`` in place (static, as Ansible's import: the file is
    read now, relative to the file that imports it; the import's ``tags``, ``when`` and ``vars`` apply to
    each imported task)."""
    out: list[Task] = []
    for node in nodes:
        node = _short_import(node, "import_tasks")
        if isinstance(node, dict) and "block" in node:
            out += _parse_block(node, path, tags, _seen)
            continue
        role_key = next(
            (k for k in ("import_role", "ansible.builtin.import_role", "ansible.legacy.import_role")
             if isinstance(node, dict) and k in node),
            None,
        )  # fmt: skip
        if role_key is not None:
            out += _import_role(node, role_key, path, tags, _seen)
            continue
        if not (isinstance(node, dict) and "import_tasks" in node):
            out.append(parse_task(node, path, inherited_tags=tags))
            continue
        unknown = [k for k in node if k not in IMPORT_KEYS | APPLY_KEYS]
        if unknown:
            raise _err(
                f"import_tasks: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(IMPORT_KEYS | APPLY_KEYS))})",
                node,
                path,
            )
        target, real, data = _imported_file(node, path, _seen)
        around = {k: v for k, v in node.items() if k in APPLY_KEYS and k not in IMPORT_KEYS}  # as a block
        data = _apply_block(data, around, getattr(node, "file", path), getattr(node, "line", 0))
        imported = parse_tasks(data, str(target), tags | _tags(node.get("tags"), node, path), (*_seen, real))
        extra_vars = _mapping(node.get("vars"), "vars", node, path)
        for task in imported:
            if node.get("when") is not None:
                conditions = node["when"] if isinstance(node["when"], list) else [node["when"]]
                own = [] if task.when is None else task.when if isinstance(task.when, list) else [task.when]
                task.when = [*conditions, *own]
            task.vars = {**extra_vars, **task.vars}
        out += imported
    return out


def _check_templates(task: Task, node: Any, path: str) -> None:
    """Jinja2 syntax, and that every filter and test exists (names_used checks both)."""
    expressions = [task.args.get(name) for name in task.module_class.expression_args]
    try:
        templating.names_used(
            [task.args, task.loop, task.environment, task.vars, task.delegate_to, task.notify, task.loop_label]
        )
        keywords = [
            task.run_once,
            task.check_mode,
            sorted(task.tags),
            task.retries,
            task.delay,
            task.become,
            task.no_log,
        ]
        templating.names_used(keywords)
        for expr in (task.when, task.changed_when, task.failed_when, task.until, task.break_when, *expressions):
            for item in expr if isinstance(expr, list) else [expr]:
                if isinstance(item, str):
                    templating.names_used(item, expression=True)
    except TemplateError as exc:
        raise _err(exc.msg, node, path) from None


def _imported_file(node: dict[str, Any], path: str, _seen: tuple[str, ...]) -> tuple[Path, str, list[Any]]:
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


def parse_handlers(nodes: list[Any], path: str, _seen: tuple[str, ...] = ()) -> list[Task]:
    """A handlers list; an ``import_tasks`` in it is read now (relative to the file that imports it), each of
    its tasks a handler notified by its own name or ``listen``, with the import's ``when``, ``vars`` and
    ``tags``, as Ansible's static import."""
    out: list[Task] = []
    for node in nodes:
        node = _short_import(node, "import_tasks")
        if not (isinstance(node, dict) and "import_tasks" in node):
            out.append(parse_task(node, path, handler=True))
            continue
        unknown = [k for k in node if k not in IMPORT_KEYS]
        if unknown:
            raise _err(f"import_tasks in handlers: unknown key {unknown[0]!r}", node, path)
        target, real, data = _imported_file(node, path, _seen)
        extra_vars = _mapping(node.get("vars"), "vars", node, path)
        extra_tags = _tags(node.get("tags"), node, path)
        for handler in parse_handlers(data, str(target), (*_seen, real)):
            if node.get("when") is not None:
                conditions = node["when"] if isinstance(node["when"], list) else [node["when"]]
                own = [] if handler.when is None else handler.when if isinstance(handler.when, list) else [handler.when]
                handler.when = [*conditions, *own]
            handler.vars = {**extra_vars, **handler.vars}
            handler.tags = set(handler.tags) | extra_tags
            out.append(handler)
    return out
