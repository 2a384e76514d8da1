"""Planning: everything that can be known before any host is contacted.

``check_plan`` runs after the inventory and the playbook are loaded and before the first connection. It
resolves every play's hosts (an unknown pattern is an error), checks ``--start-at-task``, and finds
variables that are undefined for some host: a name used by a task's templates that is not a shipped
default (``defaults``), inventory var, play var, extra var, magic var, fact, registered result or set_fact of
the play, loop variable or task var. Names guarded by ``is defined`` / ``| default(...)`` are allowed.
Template files used by ``template`` tasks are parsed too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jinja2
import jinja2.nodes

from . import templating, vault
from .catalog import lookup
from .errors import InputError, InventoryError, PlaybookError, TemplateError, did_you_mean
from .facts import ANSIBLE_FACT_NAMES
from .inventory import Host, Inventory
from .magic import NAMES
from .modules.controller_files import find_controller_file
from .playbook import HOST_ORDERS, STRATEGIES, Play, Task

MAGIC_VARS = NAMES  # the names every host has (provision.magic)
FACT_VARS = frozenset(f"ansible_{name}" for name in ANSIBLE_FACT_NAMES)  # once a play gathered facts


def guarded_names(source: str) -> set[str]:
    """Names a template may not need: those it only uses behind ``is defined`` / ``is undefined`` / ``default``,
    and those it only uses where it may not render them (:func:`_maybe_rendered`), as ansible-core renders lazily:
    ``{% if flag %}{{ x }}{% endif %}`` with ``flag`` false needs no ``x``. A task that does reach such a name
    undefined fails when it runs, as in Ansible."""
    try:
        ast = templating.ENV.parse(source)
    except jinja2.TemplateSyntaxError:
        return set()
    out: set[str] = set()
    for node in ast.find_all((jinja2.nodes.Test, jinja2.nodes.Filter)):
        guard = (isinstance(node, jinja2.nodes.Test) and node.name in ("defined", "undefined")) or (
            isinstance(node, jinja2.nodes.Filter) and node.name in ("default", "d")
        )
        if not guard:
            continue
        target = node.node
        while isinstance(target, (jinja2.nodes.Getattr, jinja2.nodes.Getitem)):
            target = target.node
        if isinstance(target, jinja2.nodes.Name):
            out.add(target.name)
    always: set[str] = set()
    maybe: set[str] = set()
    _maybe_rendered(ast, False, always, maybe)
    return out | (maybe - always)


# the fields of a node that Jinja evaluates only on some paths: an `if`'s branches (its test always), a ternary's
# two values, the right side of `and` / `or`, a `for`'s body, `else` and filter (its iterable always)
_BRANCHES: tuple[tuple[type[jinja2.nodes.Node], tuple[str, ...]], ...] = (
    (jinja2.nodes.If, ("body", "elif_", "else_")),
    (jinja2.nodes.CondExpr, ("expr1", "expr2")),
    (jinja2.nodes.And, ("right",)),
    (jinja2.nodes.Or, ("right",)),
    (jinja2.nodes.For, ("body", "else_", "test")),
)


def _maybe_rendered(node: jinja2.nodes.Node, maybe: bool, always_out: set[str], maybe_out: set[str]) -> None:
    """Sort the names ``node`` loads into those evaluated on every path and those only on some."""
    if isinstance(node, jinja2.nodes.Name) and node.ctx == "load":
        (maybe_out if maybe else always_out).add(node.name)
    branches = next((fields for kind, fields in _BRANCHES if isinstance(node, kind)), ())
    for name in node.fields:
        value = getattr(node, name, None)
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, jinja2.nodes.Node):
                _maybe_rendered(child, maybe or name in branches, always_out, maybe_out)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def task_names(task: Task, *, before_when: bool = False) -> set[str]:
    """Free names a task needs, minus the guarded ones. ``before_when``: only those a task needs before (and
    to evaluate) its ``when`` — the condition, the loop and the keywords rendered first —, as a task that
    ``when`` skips never renders its arguments (ansible-core does not)."""
    needed: set[str] = set()
    texts = [task.loop] if before_when else [
        task.args, task.loop, task.environment, task.vars, task.delegate_to, task.notify, task.loop_label
    ]  # fmt: skip
    keywords = [task.run_once, task.check_mode, sorted(task.tags), task.retries, task.delay, task.become, task.no_log]
    for text in _strings([*texts, *keywords]):
        if templating.is_template(text):
            needed |= templating.names_used(text) - guarded_names(text)
    # debug's `var` shows an undefined name as such (as Ansible does): it is not needed
    names = [n for n in task.module_class.expression_args if not (task.module == "debug" and n == "var")]
    expressions = [] if before_when else [task.args.get(name) for name in names]
    conditions = [task.when] if before_when else [task.when, task.changed_when, task.failed_when, task.until]
    for expr in (*conditions, task.break_when, *expressions):
        for item in expr if isinstance(expr, list) else [expr]:
            if isinstance(item, str):
                wrapped = f"{{{{ {item} }}}}"
                needed |= templating.names_used(item, expression=True) - guarded_names(wrapped)
    return needed


def _vaulted_copy_source(task: Task, playbook_dir: str) -> None:
    """A ``copy`` of a literal, vault-encrypted ``src`` is decrypted now: a wrong password stops the run here."""
    src = task.args.get("src")
    if not isinstance(src, str) or templating.is_template(src) or task.args.get("decrypt") is False:
        return
    path = find_controller_file(task.role_path or playbook_dir, src, also=playbook_dir)
    if path is None or not path.is_file():
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(vault.HEADER))
            if vault.is_vaulted(head):
                vault.reveal(head + fh.read(), str(path))
    except OSError:
        return  # the task reports it when it runs


def _template_file_names(task: Task, playbook_dir: str, *, required: bool = True) -> set[str]:
    """The names a literal ``template`` source needs (it is read and checked now); ``required``: a missing one
    is refused now (a task that may be skipped reports it only if it runs)."""
    src = task.args.get("src")
    if task.module in ("copy", "ansible.builtin.copy"):
        _vaulted_copy_source(task, playbook_dir)
    if task.module != "template" or not isinstance(src, str) or templating.is_template(src):
        return set()
    if templating.DELIMITER_OPTIONS & task.args.keys():
        return set()  # other delimiters: the file is not read with the default ones (its `{{ }}` may be text)
    path = find_controller_file(task.role_path or playbook_dir, src, also=playbook_dir)
    if path is None and not required:
        return set()
    if path is None:
        raise PlaybookError(f"template source {src!r} not found", file=task.file, line=task.line)
    try:
        text = vault.reveal(path.read_bytes(), str(path)).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookError(f"template source {src!r} cannot be read: {exc}", file=task.file, line=task.line) from None
    try:
        templating.check_filters_tests(text)
        return templating.names_used(text) - guarded_names(text)
    except TemplateError as exc:
        raise TemplateError(exc.msg, file=str(path), line=exc.line) from None


def check_plan(
    plays: list[Play], inventory: Inventory, extra_vars: dict[str, Any], limit: str | None,
    start_at_task: str | None, playbook_dir: str, defaults: dict[str, Any] | None = None,
) -> None:  # fmt: skip
    """``defaults``: the shipped defaults the run applies under every host's vars (RunOptions.defaults)."""
    defaults = defaults or {}
    if limit:
        inventory.select(limit)
    if start_at_task and not any(t.name == start_at_task for p in plays for t in p.tasks):
        raise InputError(f"--start-at-task: no task named {start_at_task!r} in the playbook")
    produced: set[str] = set()  # register/set_fact/include_vars names: they persist across plays of a run
    # names that cannot be known before the run (a templated set_fact name, an include_vars of a templated
    # path): then undefined names are not refused up front
    open_names = False
    for play in plays:
        open_names = _names_produced(play.tasks + play.handlers, playbook_dir, produced) or open_names
    gathered = False  # facts gathered by this play or an earlier one: Ansible's fact names are defined
    changes_inventory = False  # after an add_host/group_by, a play may name a group that does not exist yet
    public_names = _public_role_names(plays)  # what include_role with public: true may expose
    for play in plays:
        try:
            hosts = inventory.select(play.hosts)
        except InventoryError:
            if not changes_inventory:
                raise
            hosts = []
        changes_inventory = changes_inventory or any(
            t.module in ("add_host", "group_by")
            or (t.module == "meta" and t.args.get("_raw_params") == "refresh_inventory")
            for t in play.tasks + play.handlers
        )
        check_play_keywords(play, extra_vars)
        gathered = gathered or play.gather_facts
        gathered = gathered or any(t.module in ("setup", "ansible.builtin.setup") for t in play.tasks)  # setup too
        play_known = set(play.vars) | set(extra_vars) | MAGIC_VARS | produced | set(defaults)
        play_known |= set(play.role_defaults) | set(play.role_vars) | public_names
        if gathered:
            play_known |= FACT_VARS
        for text in _strings(play.vars):
            if templating.is_template(text):
                templating.names_used(text)
        check_recursion(play, hosts, extra_vars, defaults)
        for task in play.tasks + play.handlers:
            # a task with a `when` may be skipped, and then nothing else of it is rendered: only what its `when`
            # needs is refused up front (the rest fails the task if it runs, as in Ansible)
            conditional = task.when is not None and task.when is not True
            needed = task_names(task, before_when=conditional)
            # read now (a vaulted src decrypts up front); a task that may be skipped needs it only if it runs
            template_names = _template_file_names(task, playbook_dir, required=not conditional)
            needed |= set() if conditional else template_names
            local = play_known | set(task.vars) | set(task.role_defaults) | {task.loop_var} | _loop_names(task)
            local |= _template_names(task)
            if any(ref.section != "block" for ref in task.blocks):  # what a rescue sees of the failure
                local |= {"ansible_failed_task", "ansible_failed_result"}
            missing_common = needed - local
            if not missing_common or open_names:
                continue
            for host in hosts:
                missing = sorted(missing_common - set(host.vars))
                facts = [m for m in missing if m.startswith("ansible_")]
                if facts:
                    raise TemplateError(
                        f"{facts[0]!r} in task {task.name!r}: not one of the Ansible facts provision gathers"
                        f"{did_you_mean(facts[0], FACT_VARS | set(host.vars)) if gathered else ''} "
                        f"({', '.join(sorted(FACT_VARS)[:6])}, ...: docs/facts.md), or the play does not gather "
                        "facts (gather_facts: false)",
                        file=task.file,
                        line=task.line,
                    )
                if missing:
                    raise TemplateError(
                        f"undefined variable {missing[0]!r}{did_you_mean(missing[0], local | set(host.vars))} "
                        f"in task {task.name!r} for host {host.name} "
                        "(define it in the inventory, group_vars/host_vars, the play's vars or with -e)",
                        file=task.file,
                        line=task.line,
                    )


def check_play_keywords(play: Play, extra_vars: dict[str, Any]) -> None:
    """A ``vars_prompt`` without a default needs ``-e`` (provision never prompts); a templated ``strategy`` is
    rendered with the play's vars and ``-e`` and must name one provision runs."""
    for name, (file, line) in play.prompts.items():
        if name not in extra_vars:
            raise PlaybookError(
                f"vars_prompt {name!r} has no default and provision never prompts: pass it with -e {name}=VALUE",
                file=file,
                line=line,
            )
    if templating.is_template(play.order):
        value = templating.render(play.order, templating.Vars(play.vars, extra_vars), f"order of {play.where}")
        if value not in HOST_ORDERS:
            raise PlaybookError(
                f"order must be one of {', '.join(HOST_ORDERS)}, got {value!r}", file=play.file, line=play.line
            )
    if templating.is_template(play.strategy):
        value = templating.render(play.strategy, templating.Vars(play.vars, extra_vars), f"strategy of {play.where}")
        if value not in STRATEGIES:
            raise PlaybookError(
                f"strategy {value!r} is not supported (only {', '.join(STRATEGIES)})", file=play.file, line=play.line
            )


def _public_role_names(plays: list[Play]) -> set[str]:
    """The names of the defaults and vars an ``include_role`` with ``public: true`` exposes (a role read now)."""
    from .playbook import load_role

    out: set[str] = set()
    for play in plays:
        for task in play.tasks:
            if task.module != "include_role" or not task.args.get("public"):
                continue
            name = task.args.get("name")
            if not isinstance(name, str) or templating.is_template(name):
                continue
            try:
                _tasks, _handlers, (role_defaults, role_vars) = load_role(task, task.args, None, set())
            except PlaybookError:
                continue
            out |= set(role_defaults) | set(role_vars)
    return out


def _names_produced(tasks: list[Task], playbook_dir: str, produced: set[str], seen: set[int] | None = None) -> bool:
    """Add to ``produced`` the names ``tasks`` define (register, set_fact, include_vars, the facts a module's
    result defines), also in what their includes read before the run (``Task.preview``); True when some are
    named only at run time (a templated set_fact name or include_vars path, an include of a templated file)."""
    seen = set() if seen is None else seen
    open_names = False
    for task in tasks:
        if id(task) in seen:  # a role that includes itself under a condition
            continue
        seen.add(id(task))
        if task.register:
            produced.add(task.register)
        if task.module == "set_fact":
            produced |= {k for k in task.args if not templating.is_template(k)}
            open_names = open_names or any(templating.is_template(k) for k in task.args)  # named at run time
        module = lookup(task.module)
        if module is not None:  # the facts its result defines become vars (hostname's ansible_hostname, ...)
            defined = module.facts_defined(task.args, templating.is_template)
            open_names = open_names or defined is None
            produced |= defined or set()
        if task.module == "include_vars":
            names = include_vars_names(task, playbook_dir)
            open_names = open_names or names is None
            produced |= names or set()
        if task.module in ("include_tasks", "include_role"):
            if task.preview is None:  # a file or role named by a template: what it defines is known at run time
                open_names = True
            else:
                open_names = _names_produced(task.preview, playbook_dir, produced, seen) or open_names
    return open_names


def include_vars_names(task: Task, playbook_dir: str) -> set[str] | None:
    """The names an ``include_vars`` task defines, read from its files now (None when they cannot be known
    before the run: a templated path, a missing or bad file, which the task then reports when it runs)."""
    from .modules.varsfiles import IncludeVars, read_vars_file, vars_dir, vars_file_candidates

    args = task.args
    if isinstance(args.get("name"), str) and not templating.is_template(args["name"]):
        return {args["name"]}
    source = args.get("file") or args.get("dir")
    if (
        not isinstance(source, str)
        or templating.is_template(source)
        or any(templating.is_template(v) for v in _strings(args))
    ):
        return None
    task_file = str(args.get("_origin") or task.file)
    try:
        if args.get("dir"):
            coerced = IncludeVars.coerce(args)
            files = IncludeVars._walk(
                vars_dir(source, task.role_path, task_file, playbook_dir), coerced, task.role_path
            )
        else:
            candidates = vars_file_candidates(source, task.role_path, task_file, playbook_dir)
            files = [c for c in candidates if c.is_file()][:1]
        names: set[str] = set()
        for path in files:
            names |= set(read_vars_file(path))
        return names if files else None
    except (ValueError, OSError):
        return None


def _loop_names(task: Task) -> set[str]:
    if task.loop is None:
        return set()
    return {"ansible_loop_var", *([task.index_var] if task.index_var else []), *(["ansible_loop"] * task.extended)}


def _template_names(task: Task) -> set[str]:
    """What the template module defines for its file."""
    if task.module != "template":
        return set()
    return {"ansible_managed", "template_path", "template_fullpath", "template_destpath"}


def _templated(variables: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in variables.items()
        if (templating.is_template(v) if isinstance(v, str) else isinstance(v, (dict, list)) and any(
            templating.is_template(t) for t in _strings(v)
        ))
    }  # fmt: skip


def check_recursion(
    play: Play, hosts: list[Host], extra_vars: dict[str, Any], defaults: dict[str, Any] | None = None
) -> None:
    """Variables that refer to each other in a ring (``a: "{{ b }}"``, ``b: "{{ a }}"``), as far as the names
    are visible in the templates, with the precedence a task sees (-e over play vars over the inventory over
    the shipped defaults). A ring hidden behind ``hostvars[...]`` is still caught when the task renders it."""
    play_templated = _templated(play.vars)
    extra_templated = _templated(extra_vars)
    default_templated = _templated(defaults or {})
    names_of: dict[str, set[str]] = {}
    checked: set[frozenset[tuple[str, str]]] = set()
    for host in hosts:
        below = {k: v for k, v in default_templated.items() if k not in host.vars}  # any inventory value wins
        merged = {**below, **_templated(host.vars), **play_templated, **extra_templated}
        for name in play.vars.keys() - play_templated.keys():
            merged.pop(name, None)  # a plain play var hides a templated inventory var of that name
        for name in extra_vars.keys() - extra_templated.keys():
            merged.pop(name, None)
        key = frozenset((k, repr(v)) for k, v in merged.items())
        if key in checked:
            continue
        checked.add(key)
        ring = _find_ring(merged, names_of)
        if ring:
            _ring_error(ring, play, host, extra_templated)


def _find_ring(templated: dict[str, Any], names_of: dict[str, set[str]]) -> list[str] | None:
    def refs(name: str) -> set[str]:
        source = repr(templated[name])
        if source not in names_of:
            try:
                names_of[source] = templating.names_used(templated[name])
            except TemplateError:
                names_of[source] = set()  # syntax errors are reported where the var is used
        return names_of[source] & templated.keys()

    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        for ref in sorted(refs(name)):
            if state.get(ref) == 1:
                return [*path[path.index(ref) :], ref]
            if ref not in state:
                found = visit(ref, [*path, ref])
                if found:
                    return found
        state[name] = 2
        return None

    for start in sorted(templated):
        if start not in state:
            ring = visit(start, [start])
            if ring:
                return ring
    return None


def _ring_error(ring: list[str], play: Play, host: Host, extra: dict[str, Any]) -> None:
    chain = " -> ".join(ring)
    if ring[0] not in host.vars and ring[0] not in play.vars and ring[0] not in extra:
        raise TemplateError(f"host {host.name}: default variable {ring[0]!r} refers to itself: {chain}")
    if ring[0] in extra:
        raise TemplateError(f"variable {ring[0]!r} (-e) refers to itself: {chain}")
    if ring[0] in play.vars:
        raise TemplateError(
            f"play vars: variable {ring[0]!r} refers to itself: {chain}", file=play.file, line=play.line
        )
    raise TemplateError(f"host {host.name}: inventory variable {ring[0]!r} refers to itself: {chain}")
