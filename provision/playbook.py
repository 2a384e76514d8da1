"""Playbooks: the Ansible subset, loaded into typed plays and tasks, validated before any host is touched.

Loading checks YAML syntax, play and task keys, that each task names exactly one known module, the module's
arguments (names, required, choices), Jinja2 syntax everywhere, and ``import_playbook``. Every error names
``file:line``. Undefined variables are checked later by :func:`provision.plan.check_variables`, once the
inventory is known.
"""

from __future__ import annotations

import contextvars
import itertools
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import lookups, templating
from .catalog import lookup
from .errors import PlaybookError, TemplateError
from .modules import ArgError
from .modules.base import Module

PLAY_KEYS = {
    "name", "hosts", "vars", "vars_files", "gather_facts", "serial", "max_fail_percentage", "any_errors_fatal",
    "become", "become_user", "environment", "tasks", "handlers", "tags", "pre_tasks", "post_tasks",
    "no_log", "strategy", "connection", "roles",
}  # fmt: skip
TASK_KEYS = {
    "name", "args", "when", "tags", "notify", "register", "changed_when", "failed_when", "ignore_errors",
    "environment", "loop", "loop_control", "with_items", "become", "become_user", "run_once", "delegate_to",
    "retries", "delay", "until", "vars", "no_log", "timeout", "listen", "check_mode", "diff",
}  # fmt: skip


class LineDict(dict[str, Any]):
    """A mapping loaded from YAML that remembers where it came from."""

    file: str = ""
    line: int = 0


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.file = loader.name
    result.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            raise PlaybookError(f"duplicate key {key!r}", file=loader.name, line=key_node.start_mark.line + 1)
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _unsafe(value: Any) -> Any:
    if isinstance(value, str):
        return templating.Unsafe(value)
    if isinstance(value, dict):
        out = LineDict({k: _unsafe(v) for k, v in value.items()})
        out.file, out.line = getattr(value, "file", ""), getattr(value, "line", 0)
        return out
    if isinstance(value, list):
        return [_unsafe(v) for v in value]
    return value


def _construct_unsafe(loader: _Loader, node: yaml.Node) -> Any:
    """``!unsafe``: the value (every string inside it) is data, never rendered as a template."""
    if isinstance(node, yaml.ScalarNode):
        return templating.Unsafe(loader.construct_scalar(node))
    if isinstance(node, yaml.SequenceNode):
        return _unsafe(loader.construct_sequence(node, deep=True))
    if isinstance(node, yaml.MappingNode):
        return _unsafe(_construct_mapping(loader, node))
    raise PlaybookError(
        "!unsafe: expected a scalar, a list or a mapping", file=loader.name, line=node.start_mark.line + 1
    )


def _construct_vault(loader: _Loader, node: yaml.Node) -> Any:
    """``!vault``: kept as a marker (never decrypted, never shown); the planner refuses a play holding one."""
    return templating.Vaulted(loader.name, node.start_mark.line + 1)


_Loader.add_constructor("!unsafe", _construct_unsafe)
_Loader.add_constructor("!vault", _construct_vault)


def load_yaml(path: str | Path) -> Any:
    """Load YAML keeping line numbers on mappings; syntax errors become PlaybookError with file:line."""
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PlaybookError(f"cannot read: {exc.strerror}", file=path) from None
    except UnicodeDecodeError as exc:
        bad_line = text_line_of(Path(path).read_bytes(), exc.start)
        raise PlaybookError(f"not UTF-8 text (byte {exc.object[exc.start]:#04x})", file=path, line=bad_line) from None
    loader = _Loader(text)
    loader.name = path
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        # an unclosed bracket is reported at the end of the stream: the context mark says where it opened
        mark = exc.context_mark or exc.problem_mark
        line = mark.line + 1 if mark else None
        what = f"{exc.context}, {exc.problem}" if exc.context else str(exc.problem)
        raise PlaybookError(f"YAML syntax error: {what}", file=path, line=line) from None
    except yaml.YAMLError as exc:
        raise PlaybookError(f"YAML error: {exc}", file=path) from None
    except RecursionError:
        raise PlaybookError("YAML nested too deeply", file=path) from None
    finally:
        loader.dispose()


def text_line_of(data: bytes, offset: int) -> int:
    """The 1-based line of byte ``offset`` in ``data``."""
    return data.count(b"\n", 0, offset) + 1


@dataclass(frozen=True)
class BlockRef:
    """Where a task sits in a ``block``: which block (an id unique in the playbook), which of its sections, and
    whether the block has a ``rescue`` (a failure in its ``block`` section is caught) and an ``always``."""

    id: int
    section: str  # "block" | "rescue" | "always"
    has_rescue: bool
    has_always: bool


@dataclass
class Task:
    name: str
    module: str
    args: dict[str, Any]
    file: str
    line: int
    when: Any = None
    loop: Any = None
    loop_kind: str = "loop"  # "loop", "with_items" (flattens one level, takes a bare string) or with_<lookup>
    loop_var: str = "item"
    loop_label: Any = None
    index_var: str | None = None
    extended: bool = False
    break_when: Any = None
    pause: float = 0.0
    register: str | None = None
    notify: list[str] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)
    changed_when: Any = None
    failed_when: Any = None
    ignore_errors: bool = False
    environment: dict[str, Any] | str = field(default_factory=dict)  # a str is one template giving a mapping
    become: bool | None = None
    become_user: str | None = None
    run_once: bool | str = False  # a str is a template, rendered for the first host of the batch
    delegate_to: str | None = None
    retries: int | None = None
    delay: float = 5.0
    until: Any = None
    vars: dict[str, Any] = field(default_factory=dict)
    no_log: bool = False
    timeout: float | None = None
    listen: list[str] = field(default_factory=list)
    check_mode: bool | str | None = None  # a str is a template, rendered per host
    diff: bool | None = None
    given_name: str = ""  # the name the playbook gave (Ansible's ansible_failed_task.name: "" when none)
    blocks: tuple[BlockRef, ...] = ()  # the blocks this task is in, outermost first (see BlockRef)
    ends_blocks: tuple[int, ...] = ()  # the blocks whose last task (of block, rescue and always) this is
    role_path: str | None = None  # the role this task comes from (its files and templates are looked up there)
    role_defaults: dict[str, Any] = field(default_factory=dict)  # the role's defaults/: under the inventory
    inert_vars: dict[str, Any] = field(default_factory=dict)  # an include's loop item: data, never rendered

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def module_class(self) -> type[Module]:
        cls = lookup(self.module)
        assert cls is not None
        return cls


@dataclass
class Play:
    name: str
    hosts: str
    file: str
    line: int
    vars: dict[str, Any] = field(default_factory=dict)
    vars_files: list[str] = field(default_factory=list)
    gather_facts: bool = True
    serial: list[int | str] = field(default_factory=list)
    max_fail_percentage: float | None = None
    any_errors_fatal: bool = False
    become: bool = False
    become_user: str | None = None
    environment: dict[str, Any] | str = field(default_factory=dict)
    tasks: list[Task] = field(default_factory=list)
    flush_points: set[int] = field(default_factory=set)  # handlers flush after this many tasks (section ends)
    handlers: list[Task] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)
    no_log: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _err(msg: str, node: Any, path: str) -> PlaybookError:
    return PlaybookError(msg, file=getattr(node, "file", "") or path, line=getattr(node, "line", None) or None)


def _tags(value: Any, node: Any, path: str) -> set[str]:
    if value is None:
        return set()
    if isinstance(value, str):
        return {t.strip() for t in value.split(",") if t.strip()}
    if isinstance(value, list) and all(isinstance(t, (str, int)) for t in value):
        return {str(t) for t in value}
    raise _err("tags must be a string or a list of strings", node, path)


def _optional_str(value: Any, key: str, node: Any, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _err(f"{key} must be a user name, got {_kind(value)}", node, path)
    return value


def _strlist(value: Any, key: str, node: Any, path: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise _err(f"{key} must be a string or a list of strings", node, path)


def _bool(value: Any, key: str, node: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("yes", "true", "no", "false"):
        return value.lower() in ("yes", "true")
    raise _err(f"{key} must be true or false, got {value!r}", node, path)


def _flag(value: Any, key: str, node: Any, path: str) -> bool | str:
    """A boolean key that may also be one template (rendered at run time, per host)."""
    if templating.is_template(value):
        return str(value)
    return _bool(value, key, node, path)


def _mapping(value: Any, key: str, node: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _err(f"{key} must be a mapping, got {_kind(value)}", node, path)
    for name in value:
        if not isinstance(name, str):
            raise _err(f"{key}: key {name!r} is not a string", value if isinstance(value, LineDict) else node, path)
    return dict(value)


def _kind(value: Any) -> str:
    return "a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else repr(value)


_NUMBER_KINDS = {
    "count": "a whole number >= 0", "seconds": "a number of seconds >= 0",
    "timeout": "a number of seconds > 0", "percent": "a percentage from 0 to 100",
}  # fmt: skip


def _number(value: Any, key: str, kind: str, node: Any, path: str) -> float | None:
    """A finite number of the given kind (see _NUMBER_KINDS); numeric strings are accepted, templates not."""
    if value is None:
        return None
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and not templating.is_template(value):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    ok = number is not None and math.isfinite(number) and number >= 0
    if number is not None and ok:
        ok = (
            (kind != "count" or number.is_integer())
            and (kind != "timeout" or number > 0)
            and (kind != "percent" or number <= 100)
        )
    if not ok or number is None:
        hint = " (a template is not supported here)" if templating.is_template(value) else ""
        raise _err(f"{key} must be {_NUMBER_KINDS[kind]}{hint}, got {_kind(value)}", node, path)
    return number


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _environment(value: Any, node: Any, path: str) -> dict[str, Any] | str:
    if templating.is_template(value):
        return str(value)  # one template giving the mapping, rendered at run time
    env = _mapping(value, "environment", node, path)
    for name, item in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise _err(f"environment: {name!r} is not a valid variable name (letters, digits, _)", node, path)
        if isinstance(item, (dict, list)):
            raise _err(f"environment: {name} must be a string or number, got {_kind(item)}", node, path)
    return env


def _condition(value: Any, key: str, node: Any, path: str) -> Any:
    """``when``-style keys: a string, a bool, or a list of them (all must hold)."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if item is not None and not isinstance(item, (str, bool)):
            raise _err(f"{key} must be an expression, true/false, or a list of them, got {_kind(item)}", node, path)
    return value


def _loop(value: Any, key: str, node: Any, path: str) -> Any:
    """A literal list, or a template string checked at run time (``with_items`` also takes a bare string)."""
    if value is None or isinstance(value, list) or templating.is_template(value):
        return value
    if key == "with_items" and isinstance(value, (str, int, float)):
        return [value]
    if key.startswith("with_") and key != "with_items" and isinstance(value, (str, int, float, dict)):
        return value  # a lookup's terms: a bare value is its one term
    raise _err(f"{key} must be a list or a template giving one, got {_kind(value)}", node, path)


def _is_with(key: Any) -> bool:
    """``with_items``, ``with_dict``, ...: a loop over a lookup's results (:mod:`provision.lookups`)."""
    return isinstance(key, str) and key.startswith("with_") and len(key) > 5


def parse_task(node: Any, path: str, *, handler: bool = False, inherited_tags: set[str] | None = None) -> Task:
    if not isinstance(node, dict):
        raise _err(f"a task must be a mapping, got {type(node).__name__}", node, path)
    candidates = [k for k in node if k not in TASK_KEYS and not _is_with(k)]
    if "block" in node:
        raise _err("a block is not allowed here (handlers cannot be blocks)", node, path)
    for key in ("rescue", "always"):
        if key in node:
            raise _err(f"{key} is a key of a block, and this task has no block", node, path)
    if "include_role" in node or "ansible.builtin.include_role" in node:
        raise _err("include_role is not supported (use import_role or roles:, read before the run)", node, path)
    if not candidates:
        raise _err("task has no module (one of its keys must name a module)", node, path)
    if len(candidates) > 1:
        unknown = [k for k in candidates if lookup(str(k)) is None]
        if unknown:
            raise _err(f"unknown task key or module {unknown[0]!r}", node, path)
        raise _err(f"task names more than one module: {', '.join(map(str, candidates))}", node, path)
    module = str(candidates[0])
    cls = lookup(module)
    if cls is None:
        raise _err(f"unknown module {module!r}", node, path)
    try:
        args = cls.normalize(node[module])
        if "args" in node:
            args.update(_mapping(node["args"], "args", node, path))
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
    retries = _number(node.get("retries"), "retries", "count", node, path)
    delay = _number(node.get("delay"), "delay", "seconds", node, path)
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
        become=_bool(node["become"], "become", node, path) if "become" in node else None,
        become_user=_optional_str(node.get("become_user"), "become_user", node, path),
        run_once=_flag(node.get("run_once", False), "run_once", node, path),
        delegate_to=node.get("delegate_to"),
        retries=int(retries) if retries is not None else (3 if "until" in node else None),
        delay=5.0 if delay is None else delay,
        until=node.get("until"),
        vars=_mapping(node.get("vars"), "vars", node, path),
        no_log=_bool(node.get("no_log", False), "no_log", node, path),
        timeout=_number(node.get("timeout"), "timeout", "timeout", node, path),
        listen=_strlist(node.get("listen"), "listen", node, path),
        check_mode=_flag(node["check_mode"], "check_mode", node, path) if "check_mode" in node else None,
        diff=_bool(node["diff"], "diff", node, path) if "diff" in node else None,
        given_name=given,
    )
    if task.register is not None and not (isinstance(task.register, str) and task.register.isidentifier()):
        raise _err(f"register name {task.register!r} is not a valid variable name", node, path)
    _check_templates(task, node, path)
    if task.module == "include_tasks":
        _check_include(task, node, path)
    return task


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


def include_path(file: str, task_file: str) -> Path | None:
    """Where an included task file is: relative to the file of the task that includes it (a role's tasks/),
    then to the current directory, as Ansible looks."""
    for base in (Path(task_file).parent, Path.cwd()):
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
_ROLES_SEEN: contextvars.ContextVar[set[str]] = contextvars.ContextVar("roles_seen")


def roles_path(playbook: str) -> list[Path]:
    """Where roles are looked up, as Ansible: the playbook's ``roles/`` and its own directory, then
    ``$ANSIBLE_ROLES_PATH`` (or ``$PROVISION_ROLES_PATH``), ``~/.ansible/roles``, ``/usr/share/ansible/roles``,
    ``/etc/ansible/roles``."""
    base = Path(playbook).parent
    env = os.environ.get("PROVISION_ROLES_PATH") or os.environ.get("ANSIBLE_ROLES_PATH") or ""
    extra = [Path(os.path.expanduser(p)) for p in env.split(os.pathsep) if p]
    defaults = [Path("~/.ansible/roles").expanduser(), Path("/usr/share/ansible/roles"), Path("/etc/ansible/roles")]
    return [base / "roles", base, *extra, *defaults]


def _role_dir(name: str, node: Any, path: str) -> Path:
    """``path``: the playbook (roles are found from its directory and the roles path)."""
    if "/" in name:
        found = Path(path).parent / os.path.expanduser(name)
        if found.is_dir():
            return found.resolve()
    else:
        for where in roles_path(path):
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
    entry: Any, path: str, tags: set[str], chain: tuple[str, ...], node: Any = None, playbook: str | None = None
) -> list[Task]:
    """One ``roles:`` entry (a name, or a mapping with ``role``/``name`` and its options and parameters),
    its ``meta/main.yml`` dependencies first, flattened into tasks; its handlers join the play's."""
    where = node if node is not None else entry
    spec = {"role": entry} if isinstance(entry, str) else entry
    if not isinstance(spec, dict) or not isinstance(spec.get("role", spec.get("name")), str):
        raise _err("a role must be a name or a mapping with role: NAME", where, path)
    name = str(spec.get("role", spec.get("name")))
    loose = [k for k in spec if k not in ROLE_KEYS]
    if loose:  # ansible-core 2.19 does not pass them on either: the role would fail on an undefined variable
        raise _err(f"role {name!r}: {loose[0]!r} is not a role keyword (pass role parameters under vars:)",
                   where, path)  # fmt: skip
    params: dict[str, Any] = {}
    directory = _role_dir(name, where, playbook or path)
    key = f"{directory}|{sorted(params.items(), key=str)}|{spec.get('tasks_from')}"
    if str(directory) in chain:
        raise _err(f"role {name!r} depends on itself ({' -> '.join([*chain, str(directory)])})", where, path)
    seen = _ROLES_SEEN.get()
    if key in seen:  # as Ansible: a role runs once per play unless its parameters differ
        return []
    seen.add(key)
    meta = _role_mapping(directory, "meta", "main")
    out: list[Task] = []
    for dep in meta.get("dependencies") or []:  # looked up from the playbook, as the role itself
        out += _role(
            dep, str(directory / "meta" / "main.yml"), tags, (*chain, str(directory)), playbook=playbook or path
        )
    defaults = _role_mapping(directory, "defaults", str(spec.get("defaults_from") or "main"))
    role_vars = _role_mapping(directory, "vars", str(spec.get("vars_from") or "main"))
    role_vars.update(_mapping(spec.get("vars"), "vars", where, path))
    own_tags = tags | _tags(spec.get("tags"), where, path)
    tasks_file = _role_file(directory, "tasks", str(spec.get("tasks_from") or "main"))
    tasks: list[Task] = []
    if tasks_file is not None:
        data = load_yaml(tasks_file) or []
        if not isinstance(data, list):
            raise PlaybookError("a task file must be a list of tasks", file=str(tasks_file), line=1)
        tasks = parse_tasks(data, str(tasks_file), own_tags)
    handlers_file = _role_file(directory, "handlers", str(spec.get("handlers_from") or "main"))
    if handlers_file is not None:
        data = load_yaml(handlers_file) or []
        if not isinstance(data, list):
            raise PlaybookError("a handlers file must be a list of tasks", file=str(handlers_file), line=1)
        for handler in (parse_task(h, str(handlers_file), handler=True) for h in data):
            _adopt(handler, directory, name, defaults, role_vars, params, spec, where, path)
            _ROLE_HANDLERS.get().append(handler)
    for task in tasks:
        _adopt(task, directory, name, defaults, role_vars, params, spec, where, path)
    return out + tasks


def _adopt(
    task: Task, directory: Path, name: str, defaults: dict[str, Any], role_vars: dict[str, Any],
    params: dict[str, Any], spec: dict[str, Any], where: Any, path: str,
) -> None:  # fmt: skip
    """A role's task: its files and templates come from the role; its defaults are under the inventory; the
    role's vars under the task's, its parameters over them (Ansible's order); the entry's when/become apply."""
    task.role_path = str(directory)
    task.role_defaults = {**defaults, **task.role_defaults}
    task.vars = {**role_vars, **task.vars, **params, "role_path": str(directory), "role_name": name}
    if spec.get("when") is not None:
        conditions = spec["when"] if isinstance(spec["when"], list) else [spec["when"]]
        own = [] if task.when is None else task.when if isinstance(task.when, list) else [task.when]
        task.when = [*conditions, *own]
    if task.become is None and "become" in spec:
        task.become = _bool(spec["become"], "become", where, path)
    if task.become_user is None and spec.get("become_user") is not None:
        task.become_user = str(spec["become_user"])
    if not task.environment and spec.get("environment") is not None:
        task.environment = _environment(spec["environment"], where, path)


def _import_role(node: Any, key: str, path: str, tags: set[str], seen: tuple[str, ...]) -> list[Task]:
    """``import_role: {name: R, tasks_from: ...}`` (static, read now), with the task's when/tags/vars."""
    allowed = {key, "name", "tags", "when", "vars"}
    unknown = [k for k in node if k not in allowed]
    if unknown:
        raise _err(f"import_role: {unknown[0]!r} is not supported here (allowed: {', '.join(sorted(allowed))})",
                   node, path)  # fmt: skip
    options = node[key]
    if not isinstance(options, dict) or not isinstance(options.get("name", options.get("role")), str):
        raise _err("import_role needs name: ROLE", node, path)
    spec = {**options, "tags": node.get("tags"), "when": node.get("when")}
    spec = {k: v for k, v in spec.items() if v is not None}
    if node.get("vars") is not None:
        spec["vars"] = {
            **_mapping(options.get("vars"), "vars", node, path),
            **_mapping(node["vars"], "vars", node, path),
        }
    return _role(spec, path, tags, (), node)


BLOCK_KEYS = {
    "block", "rescue", "always", "name", "when", "tags", "vars", "become", "become_user", "environment",
    "ignore_errors", "no_log", "check_mode",
}  # fmt: skip
_block_ids = itertools.count(1)


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
    flags = {key: _bool(node[key], key, node, path) for key in ("become", "ignore_errors", "no_log") if key in node}
    check_mode = _flag(node["check_mode"], "check_mode", node, path) if "check_mode" in node else None
    become_user = _optional_str(node.get("become_user"), "become_user", node, path)
    out: list[Task] = []
    for section, nodes in sections.items():
        ref = BlockRef(ref_id, section, has_rescue, has_always)
        for task in parse_tasks(nodes, path, block_tags, seen):
            if node.get("when") is not None:
                conditions = node["when"] if isinstance(node["when"], list) else [node["when"]]
                own = [] if task.when is None else task.when if isinstance(task.when, list) else [task.when]
                task.when = [*conditions, *own]
            task.vars = {**block_vars, **task.vars}
            if task.become is None and "become" in flags:
                task.become = flags["become"]
            if task.become_user is None and become_user is not None:
                task.become_user = become_user
            if not task.environment and env:
                task.environment = env
            if task.check_mode is None and check_mode is not None:
                task.check_mode = check_mode
            task.ignore_errors = task.ignore_errors or flags.get("ignore_errors", False)
            task.no_log = task.no_log or flags.get("no_log", False)
            task.blocks = (ref, *task.blocks)
            out.append(task)
    if out:
        out[-1].ends_blocks = (*out[-1].ends_blocks, ref_id)
    return out


IMPORT_KEYS = {"import_tasks", "name", "tags", "when", "vars"}


def parse_tasks(nodes: list[Any], path: str, tags: set[str], _seen: tuple[str, ...] = ()) -> list[Task]:
    """Parse a task list, expanding ``import_tasks: FILE`` in place (static, as Ansible's import: the file is
    read now, relative to the file that imports it; the import's ``tags``, ``when`` and ``vars`` apply to
    each imported task)."""
    out: list[Task] = []
    for node in nodes:
        if isinstance(node, dict) and "block" in node:
            out += _parse_block(node, path, tags, _seen)
            continue
        role_key = next(
            (k for k in ("import_role", "ansible.builtin.import_role") if isinstance(node, dict) and k in node), None
        )
        if role_key is not None:
            out += _import_role(node, role_key, path, tags, _seen)
            continue
        if not (isinstance(node, dict) and "import_tasks" in node):
            out.append(parse_task(node, path, inherited_tags=tags))
            continue
        unknown = [k for k in node if k not in IMPORT_KEYS]
        if unknown:
            raise _err(
                f"import_tasks: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(IMPORT_KEYS))})", node, path
            )
        _condition(node.get("when"), "when", node, path)
        target = Path(path).parent / str(node["import_tasks"])
        real = str(target.resolve())
        if real in _seen:
            raise _err(f"import_tasks loop through {target}", node, path)
        if not target.is_file():
            raise _err(f"import_tasks: {target} does not exist", node, path)
        data = load_yaml(target)
        if not isinstance(data, list):
            raise PlaybookError("a task file must be a list of tasks", file=str(target), line=getattr(data, "line", 1))
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
        templating.names_used([task.run_once, task.check_mode, sorted(task.tags)])
        for expr in (task.when, task.changed_when, task.failed_when, task.until, task.break_when, *expressions):
            for item in expr if isinstance(expr, list) else [expr]:
                if isinstance(item, str):
                    templating.names_used(item, expression=True)
    except TemplateError as exc:
        raise _err(exc.msg, node, path) from None


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


def parse_play(node: Any, path: str) -> Play:
    if not isinstance(node, dict):
        raise _err("a play must be a mapping", node, path)
    unknown = [k for k in node if k not in PLAY_KEYS]
    if unknown:
        raise _err(f"unknown play key {unknown[0]!r} (known: {', '.join(sorted(PLAY_KEYS))})", node, path)
    if "hosts" not in node:
        raise _err("play has no 'hosts'", node, path)
    if node.get("strategy", "linear") != "linear":
        raise _err(f"strategy {node['strategy']!r} is not supported (only linear)", node, path)
    if node.get("connection", "ssh") not in ("ssh", "smart"):
        raise _err(
            f"play connection {node['connection']!r} is not supported (set ansible_connection per host)", node, path
        )
    hosts = node["hosts"]
    if not (isinstance(hosts, str) and hosts.strip()) and not (
        isinstance(hosts, list) and hosts and all(isinstance(h, str) for h in hosts)
    ):
        raise _err(f"hosts must be a host pattern or a list of them, got {_kind(hosts)}", node, path)
    tags = _tags(node.get("tags"), node, path)
    tasks: list[Task] = []
    flush_points: set[int] = set()
    _ROLE_HANDLERS.set([])
    _ROLES_SEEN.set(set())
    for key in ("pre_tasks", "tasks", "post_tasks"):
        section = node.get(key)
        if key == "tasks" and node.get("roles") is not None:  # roles run before the play's own tasks
            roles = node["roles"]
            if not isinstance(roles, list):
                raise _err(f"roles must be a list, got {_kind(roles)}", node, path)
            for entry in roles:
                tasks += _role(entry, path, tags, ())
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
    handlers = [*_ROLE_HANDLERS.get(), *(parse_task(t, path, handler=True) for t in raw_handlers)]
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
    )
    if node.get("no_log") is True:  # Ansible's play-level no_log: every task's output is hidden
        for task in tasks + handlers:
            task.no_log = True
    names = {h.name for h in handlers} | {n for h in handlers for n in h.listen}
    for task in tasks + handlers:
        for target in task.notify:
            if target not in names and not templating.is_template(target):
                raise PlaybookError(
                    f"task {task.name!r} notifies unknown handler {target!r}", file=task.file, line=task.line
                )
    base = Path(path).parent
    for vf in play.vars_files:
        data = load_yaml(base / vf) if not templating.is_template(vf) else {}
        if data is not None and not isinstance(data, dict):
            raise PlaybookError("vars file must be a mapping", file=str(base / vf))
        play.vars.update(_mapping(data, "vars file", data, str(base / vf)))
    try:
        templating.names_used(play.vars)
    except TemplateError as exc:
        raise _err(
            f"vars: {exc.msg}", node.get("vars") if isinstance(node.get("vars"), LineDict) else node, path
        ) from None
    return play


def load_playbook(path: str | Path, _seen: tuple[str, ...] = ()) -> list[Play]:
    """Load and validate a playbook (following ``import_playbook``) into a list of plays."""
    path = str(path)
    real = str(Path(path).resolve())
    if real in _seen:
        raise PlaybookError("import_playbook loop", file=path)
    data = load_yaml(path)
    if data is None or data == []:
        raise PlaybookError("the playbook is empty: it must be a list of plays", file=path, line=1)
    if not isinstance(data, list):
        raise PlaybookError("a playbook must be a list of plays", file=path, line=getattr(data, "line", 1))
    plays: list[Play] = []
    for node in data:
        if isinstance(node, dict) and "import_playbook" in node:
            target = Path(path).parent / str(node["import_playbook"])
            if not target.exists():
                raise _err(f"import_playbook: {target} does not exist", node, path)
            plays += load_playbook(target, (*_seen, real))
        else:
            plays.append(parse_play(node, path))
    return plays
