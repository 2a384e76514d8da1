"""One task's keys, checked and built into a :class:`~.objects.Task`: exactly one known module and its arguments
(module defaults applied), ``loop``/``with_*`` and ``loop_control``, ``retries``/``delay``/``until``,
``async``/``poll``, the conditions, an include's ``apply``, and the Jinja2 syntax of every template in it.
Every error names ``file:line``."""

from __future__ import annotations

from typing import Any

from .. import templating
from ..catalog import MODULES, known_to_ansible, lookup, nearest
from ..errors import TemplateError, UnsupportedTask, did_you_mean
from ..modules import ArgError
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
from .objects import ACTION_KEYS, TASK_KEYS, Task

LOOP_CONTROL_KEYS = {"loop_var", "label", "index_var", "extended", "break_when", "pause"}
APPLY_KEYS = {"when", "tags", "vars", "become", "become_user", "environment", "ignore_errors", "no_log",
              "check_mode", "delegate_to", "delegate_facts", "module_defaults", "notify", "ignore_unreachable",
              "run_once", "name", "debugger", "any_errors_fatal"}  # fmt: skip


def build_task(node: Any, path: str, *, inherited_tags: set[str] | None = None) -> Task:
    """One task's keys checked and built into a :class:`Task` (an include's file or role is read by
    :func:`~.tasks.parse_task`)."""
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
        raise _unsupported(f"unknown module {module!r}{nearest(module)}", node, path, known_to_ansible(module))
    try:
        args = cls.normalize(node[module])
        if "args" in node:
            args.update(_mapping(node["args"], "args", node, path))
        defaults = module_defaults(node.get("module_defaults"), node, path, _MODULE_DEFAULTS.get({}))
        if defaults.get(cls.name):
            args = {**defaults[cls.name], **args}
        args = cls.validate_static(args, templating.is_template)
    except ArgError as exc:
        raise _unsupported(str(exc), node, path) from None
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
        ignore_errors=_flag(node.get("ignore_errors", False), "ignore_errors", node, path),
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


def _unsupported(msg: str, node: Any, path: str, ansible_has: bool = True) -> UnsupportedTask:
    file, line = getattr(node, "file", "") or path, getattr(node, "line", None) or None
    return UnsupportedTask(msg, file=file, line=line, ansible_has=ansible_has)
