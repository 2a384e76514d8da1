"""Task lists, read recursively: a list (:func:`parse_tasks`) holds tasks (:func:`parse_task`), blocks,
``import_tasks`` and ``import_role``; a role (:func:`read_role`) holds task lists and handlers; an
``include_tasks``/``include_role`` whose target is known is read too, for validation (:func:`load_included`,
:func:`load_role` at run time); handlers (:func:`parse_handlers`). One module because these read each other.

Its parts live beside it: one task's keys in ``task_keys``, a block's keywords in ``blocks``, role lookup in
``roles``, the files of includes and imports in ``taskfiles``. Every error names ``file:line``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import plugins, templating
from ..errors import PlaybookError, UnsupportedTask
from ..modules.args import parse_kv
from .blocks import block_keywords, prepend_when
from .fields import _MODULE_DEFAULTS, _bool, _err, _mapping, _tags
from .objects import ACTION_KEYS, TASK_KEYS, BlockRef, LineDict, Task, load_yaml
from .roles import (
    _PLAYBOOK,
    _ROLE_EXPOSED,
    _ROLE_HANDLERS,
    _ROLES_CHECKING,
    _ROLES_SEEN,
    ROLE_FROM_KEYS,
    ROLE_KEYS,
    _role_runs,
    adopt,
    role_dir,
    role_file,
    role_mapping,
)
from .task_keys import APPLY_KEYS, build_task
from .taskfiles import apply_block, imported_file, include_path, short_import

IMPORT_KEYS = {"import_tasks", "name", "tags", "when", "vars"}

# True while what a dynamic include reads is parsed (before the run, and when it runs): ansible-core reads it only
# when a host gets there, so a task provision cannot run in it is a warning and a failing task (_parse_or_defer)
_DYNAMIC: contextvars.ContextVar[bool] = contextvars.ContextVar("dynamic", default=False)
# True while the tasks parsed sit under a `when` (a block's, an import's, a role entry's): they may never run
_CONDITIONAL: contextvars.ContextVar[bool] = contextvars.ContextVar("conditional", default=False)
# The warnings of the play being read: each task provision cannot run that was put off (Play.warnings).
WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("warnings", default=None)


def parse_task(node: Any, path: str, *, handler: bool = False, inherited_tags: set[str] | None = None) -> Task:
    """One task (its keys: :func:`~.task_keys.build_task`); an ``include_tasks`` file or ``include_role`` role
    that is not a template is read now, so that a missing one or a bad task in it is refused before the run."""
    task = build_task(node, path, inherited_tags=inherited_tags)
    if task.module == "include_tasks":
        _check_include(task, node, path)
    if task.module == "include_role":
        _check_include_role(task, node, path)
    return task


def _check_include(task: Task, node: Any, path: str) -> None:
    """An ``include_tasks`` whose file is not a template is read now: a missing file or a bad task in it is
    refused before the run, like everything else, but a task provision cannot run there (:class:`UnsupportedTask`)
    is put off (:func:`_parse_or_defer`); a templated one is read when it runs."""
    file = task.args.get("file")
    if not isinstance(file, str) or templating.is_template(file):
        return
    target = include_path(file, task.file)
    if target is None:
        raise _err(f"include_tasks: {file} does not exist (relative to {Path(task.file).parent})", node, path)
    data = load_yaml(target)
    if not isinstance(data, list):
        raise PlaybookError("a task file must be a list of tasks", file=str(target), line=getattr(data, "line", 1))
    with _setting(_DYNAMIC):
        task.preview = parse_tasks(data, str(target), set())


@contextlib.contextmanager
def _setting(var: contextvars.ContextVar[bool], on: bool = True) -> Iterator[None]:
    """``var`` set to True around the block (left as it is when not ``on``)."""
    token = var.set(True) if on else None
    try:
        yield
    finally:
        if token is not None:
            var.reset(token)


def _parse_or_defer(node: Any, path: str, **kw: Any) -> list[Task]:
    """:func:`parse_task`'s task, as a list. A task provision cannot run (:class:`UnsupportedTask`: a module it
    lacks, arguments its module refuses) that may never run is put off: one in what a dynamic include reads, or
    one under a ``when`` or looping (:func:`_may_not_run`) that names a module ansible-core knows (a role's
    RedHat branch on Debian hosts, whose ``rpm_key`` ansible-core parses). It becomes a warning of the play
    (:data:`WARNINGS`) and a ``fail`` task with its ``when`` and its message: a host that runs it fails there,
    as under ansible-core. Any other is refused before the run."""
    try:
        return [parse_task(node, path, **kw)]
    except UnsupportedTask as exc:
        may_not_run = kw.get("handler") or _may_not_run(node)  # a handler runs only when notified
        if not (_DYNAMIC.get() or (may_not_run and exc.ansible_has)):
            raise
        try:
            placeholder = parse_task(_failing(node, str(exc)), path, **kw)
        except PlaybookError:
            raise exc from None
        warnings = WARNINGS.get()
        text = f"{exc} (put off: it fails only a host that runs this task)"
        if warnings is not None and text not in warnings:
            warnings.append(text)
        return [placeholder]


def _may_not_run(node: Any) -> bool:
    """Whether a task may never run: under a ``when`` (its own, its block's, its import's, its role entry's), or
    looping (over a list that may be empty: nodejs's ``npm`` over ``nodejs_npm_global_packages: []``)."""
    if _CONDITIONAL.get():
        return True
    return isinstance(node, dict) and any(
        k in ("when", "loop") or (isinstance(k, str) and k.startswith("with_")) for k in node
    )


# what a put-off task does not keep: its module's arguments, and what could turn its failure into a success
_NOT_KEPT = frozenset({*ACTION_KEYS, "args", "failed_when", "changed_when", "until", "retries", "delay"})


def _failing(node: Any, msg: str) -> LineDict:
    """``node`` (a task) with its module replaced by ``fail: {msg: MSG}`` (MSG kept from rendering; the task's
    ``failed_when``, ``until`` and the like dropped: it fails wherever it runs); named after the module when it had
    no name."""
    module = next((str(k) for k in node if k not in TASK_KEYS), "task")
    out = LineDict({k: v for k, v in node.items() if k in TASK_KEYS and k not in _NOT_KEPT})
    out.file, out.line = getattr(node, "file", ""), getattr(node, "line", 0)
    out.setdefault("name", module)
    out["fail"] = {"msg": "{% raw %}" + msg + "{% endraw %}"}
    return out


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
        with _setting(_DYNAMIC):
            tasks, handlers, _ = load_role(task, args, _PLAYBOOK.get(), set())
        task.preview = tasks + handlers
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
        _DYNAMIC.set(True)  # what an include_role reads: a task provision cannot run in it fails when it runs
        _ROLE_HANDLERS.set([])
        _ROLES_SEEN.set(roles_run if roles_run is not None else set())
        _ROLE_EXPOSED.set([])
        _MODULE_DEFAULTS.set(task.module_defaults)
        apply = task.args.get("apply")  # not rendered: the included tasks render their keywords
        tasks = read_role(
            spec, task.file, tags, (), where, playbook or task.file, apply=apply, search=extra, once=False
        )
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
        _DYNAMIC.set(True)  # a task provision cannot run in the file fails when it runs
        _MODULE_DEFAULTS.set(task.module_defaults)
        return parse_tasks(apply_block(data, task.args.get("apply"), task.file, task.line), str(file), tags)

    return contextvars.copy_context().run(read)


def read_role(
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
    its ``meta/main.yml`` dependencies first, flattened into tasks; its handlers join the play's (in
    ``roles._ROLE_HANDLERS``)."""
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
    directory = role_dir(name, where, playbook or path, search or [])
    plugins.load_beside(directory)  # the role's filter_plugins/ and test_plugins/
    key = f"{directory}|{sorted(params.items(), key=str)}|{spec.get('tasks_from')}"
    if str(directory) in chain:
        raise _err(f"role {name!r} depends on itself ({' -> '.join([*chain, str(directory)])})", where, path)
    meta = role_mapping(directory, "meta", "main")
    if meta.get("allow_duplicates") is not None:
        allow_duplicates = allow_duplicates or _bool(meta["allow_duplicates"], "allow_duplicates", meta, path)
    seen = _ROLES_SEEN.get()
    if key in seen and once and not allow_duplicates:  # as Ansible: once per play unless its parameters differ
        return []
    seen.add(key)
    run = next(_role_runs)
    out: list[Task] = []
    for dep in meta.get("dependencies") or []:  # looked up from the playbook, as the role itself
        out += read_role(
            dep, str(directory / "meta" / "main.yml"), tags, (*chain, str(directory)), playbook=playbook or path
        )
    defaults = role_mapping(directory, "defaults", str(spec.get("defaults_from") or "main"))
    role_vars = role_mapping(directory, "vars", str(spec.get("vars_from") or "main"))
    _ROLE_EXPOSED.get([]).append((dict(defaults), dict(role_vars)))
    role_vars.update(_mapping(spec.get("vars"), "vars", where, path))
    own_tags = tags | _tags(spec.get("tags"), where, path)
    tasks_file = role_file(directory, "tasks", str(spec.get("tasks_from") or "main"))
    for key, folder in (("tasks_from", "tasks"), ("vars_from", "vars"), ("defaults_from", "defaults"),
                        ("handlers_from", "handlers")):  # fmt: skip
        if spec.get(key) and role_file(directory, folder, str(spec[key])) is None:
            raise _err(f"role {name!r}: {key}: no {folder}/{spec[key]}(.yml) in {directory}", where, path)
    tasks: list[Task] = []
    if tasks_file is not None:
        data = load_yaml(tasks_file) or []
        if not isinstance(data, list):
            raise PlaybookError("a task file must be a list of tasks", file=str(tasks_file), line=1)
        with _setting(_CONDITIONAL, spec.get("when") is not None or bool(apply and apply.get("when") is not None)):
            tasks = parse_tasks(apply_block(data, apply, getattr(where, "file", path), getattr(where, "line", 0)),
                                str(tasks_file), own_tags)  # fmt: skip
    handlers_file = role_file(directory, "handlers", str(spec.get("handlers_from") or "main"))
    if handlers_file is not None:
        data = load_yaml(handlers_file) or []
        if not isinstance(data, list):
            raise PlaybookError("a handlers file must be a list of tasks", file=str(handlers_file), line=1)
        for handler in parse_handlers(data, str(handlers_file)):
            adopt(handler, directory, name, defaults, role_vars, params, spec, where, path, run)
            _ROLE_HANDLERS.get().append(handler)
    for task in tasks:
        adopt(task, directory, name, defaults, role_vars, params, spec, where, path, run)
    return out + tasks


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
    return read_role(spec, path, tags, (), node, apply=around or None, once=False)  # each import runs, as Ansible


def _parse_block(node: Any, path: str, tags: set[str], seen: tuple[str, ...]) -> list[Task]:
    """A ``block`` (with ``rescue``/``always``) flattened into its tasks, in order: the block's, the rescue's,
    the always's. Each task carries where it sits (:class:`BlockRef`) and inherits what the block sets
    (:meth:`~.blocks.BlockKeywords.give`). The executor runs ``rescue`` on the hosts that failed in ``block`` and
    ``always`` on every host that entered it (docs/architecture.md, "Blocks")."""
    block = block_keywords(node, path, tags)
    has_rescue, has_always = bool(block.sections["rescue"]), bool(block.sections["always"])
    out: list[Task] = []
    for section, nodes in block.sections.items():
        ref = BlockRef(block.id, section, has_rescue, has_always)
        token = _MODULE_DEFAULTS.set(block.module_defaults)
        try:
            with _setting(_CONDITIONAL, node.get("when") is not None):
                parsed = parse_tasks(nodes, path, block.tags, seen)
        finally:
            _MODULE_DEFAULTS.reset(token)
        for task in parsed:
            block.give(task)
            task.blocks = (ref, *task.blocks)
            out.append(task)
    if out:
        out[-1].ends_blocks = (*out[-1].ends_blocks, block.id)
    return out


def parse_tasks(nodes: list[Any], path: str, tags: set[str], _seen: tuple[str, ...] = ()) -> list[Task]:
    """Parse a task list, expanding ``import_tasks: FILE`` in place (static, as Ansible's import: the file is
    read now, relative to the file that imports it; the import's ``tags``, ``when`` and ``vars`` apply to
    each imported task)."""
    out: list[Task] = []
    for node in nodes:
        node = short_import(node, "import_tasks")
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
            out += _parse_or_defer(node, path, inherited_tags=tags)
            continue
        unknown = [k for k in node if k not in IMPORT_KEYS | APPLY_KEYS]
        if unknown:
            raise _err(
                f"import_tasks: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(IMPORT_KEYS | APPLY_KEYS))})",
                node,
                path,
            )
        target, real, data = imported_file(node, path, _seen)
        around = {k: v for k, v in node.items() if k in APPLY_KEYS and k not in IMPORT_KEYS}  # as a block
        data = apply_block(data, around, getattr(node, "file", path), getattr(node, "line", 0))
        with _setting(_CONDITIONAL, node.get("when") is not None):
            imported = parse_tasks(data, str(target), tags | _tags(node.get("tags"), node, path), (*_seen, real))
        extra_vars = _mapping(node.get("vars"), "vars", node, path)
        for task in imported:
            prepend_when(task, node.get("when"))
            task.vars = {**extra_vars, **task.vars}
        out += imported
    return out


def parse_handlers(nodes: list[Any], path: str, _seen: tuple[str, ...] = ()) -> list[Task]:
    """A handlers list; an ``import_tasks`` in it is read now (relative to the file that imports it), each of
    its tasks a handler notified by its own name or ``listen``, with the import's ``when``, ``vars`` and
    ``tags``, as Ansible's static import."""
    out: list[Task] = []
    for node in nodes:
        node = short_import(node, "import_tasks")
        if not (isinstance(node, dict) and "import_tasks" in node):
            out += _parse_or_defer(node, path, handler=True)
            continue
        unknown = [k for k in node if k not in IMPORT_KEYS]
        if unknown:
            raise _err(f"import_tasks in handlers: unknown key {unknown[0]!r}", node, path)
        target, real, data = imported_file(node, path, _seen)
        extra_vars = _mapping(node.get("vars"), "vars", node, path)
        extra_tags = _tags(node.get("tags"), node, path)
        with _setting(_CONDITIONAL, node.get("when") is not None):
            handlers = parse_handlers(data, str(target), (*_seen, real))
        for handler in handlers:
            prepend_when(handler, node.get("when"))
            handler.vars = {**extra_vars, **handler.vars}
            handler.tags = set(handler.tags) | extra_tags
            out.append(handler)
    return out
