"""The playbook's typed objects and keyword sets: :class:`Play`, :class:`Task`, :class:`BlockRef`, the keys a play
and a task accept (``PLAY_KEYS``, ``TASK_KEYS``), the strategies and host orders; :func:`load_yaml` (THE YAML
reader, with line numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import yamlfile
from ..catalog import lookup
from ..errors import PlaybookError
from ..modules.base import Module

PLAY_KEYS = {
    "name", "hosts", "vars", "vars_files", "gather_facts", "serial", "max_fail_percentage", "any_errors_fatal",
    "become", "become_user", "environment", "tasks", "handlers", "tags", "pre_tasks", "post_tasks",
    "no_log", "strategy", "connection", "roles",
    # accepted play keywords that reach the tasks or the run (see parse_play)
    "vars_prompt", "force_handlers", "remote_user", "collections", "check_mode", "ignore_unreachable",
    "gather_subset", "gather_timeout", "run_once", "ignore_errors", "module_defaults", "order", "debugger",
}  # fmt: skip
STRATEGIES = ("linear", "free", "host_pinned")  # free/host_pinned run as linear: the same results per host
HOST_ORDERS = ("inventory", "reverse_inventory", "sorted", "reverse_sorted", "shuffle")
PLAY_CONNECTIONS = ("ssh", "smart", "paramiko", "local")  # under the inventory's ansible_connection
TASK_KEYS = {
    "name", "args", "when", "tags", "notify", "register", "changed_when", "failed_when", "ignore_errors",
    "environment", "loop", "loop_control", "with_items", "become", "become_user", "run_once", "delegate_to",
    "retries", "delay", "until", "vars", "no_log", "timeout", "listen", "check_mode", "diff",
    "module_defaults", "ignore_unreachable", "delegate_facts", "debugger", "any_errors_fatal", "async", "poll",
}  # fmt: skip
ACTION_KEYS = ("action", "local_action")  # `action: MODULE ARGS` / `local_action:` (delegate_to: localhost)


LineDict = yamlfile.LineDict  # a mapping loaded from YAML that remembers where it came from


def load_yaml(path: str | Path) -> Any:
    """A playbook, task, handler, role or vars file through THE YAML reader (:mod:`provision.yamlfile`: line
    numbers, ``!unsafe``, ``!vault``, duplicate keys refused); its errors become PlaybookError with file:line."""
    try:
        return yamlfile.read(path)
    except yamlfile.YAMLFileError as exc:
        problem = f"YAML syntax error: {exc.problem}" if exc.kind == "syntax" else exc.problem
        if exc.kind == "depth":
            problem = "YAML nested too deeply"
        raise PlaybookError(problem, file=exc.file, line=exc.line) from None


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
    ignore_errors: bool | str = False  # a template: rendered per host when the task fails
    environment: dict[str, Any] | str = field(default_factory=dict)  # a str is one template giving a mapping
    become: bool | str | None = None  # a str is a template, rendered per host and item
    become_user: str | None = None
    run_once: bool | str = False  # a str is a template, rendered for the first host of the batch
    delegate_to: str | None = None
    retries: int | str | None = None  # a str is a template, rendered per host (a whole number >= 0)
    delay: float | str = 5.0  # a str is a template, rendered per host (seconds >= 0)
    until: Any = None
    vars: dict[str, Any] = field(default_factory=dict)
    no_log: bool | str = False  # a str is a template: rendered per host, and until then taken as true
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
    ignore_unreachable: bool = False  # an unreachable host counts ok+ignored and stays in the play
    delegate_facts: bool = False  # with delegate_to: the facts a task sets go to the delegated host
    module_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)  # in force here (includes use it)
    role_run: int | None = None  # which reading of its role this task is (meta: end_role ends that one)
    any_errors_fatal: bool = False  # a host failing this task ends the play for all (as the play's keyword)
    async_val: int = 0  # `async`: run as a detached job with this time limit (s); 0: not async
    poll: int = 15  # `poll`: seconds between status reads of an async job; 0: fire and forget
    # an include_tasks/include_role of a literal file or role: its tasks as read before the run (the planner
    # counts the names they register or set); None for one named by a template (read only when it runs)
    preview: list[Task] | None = None

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
    prompts: dict[str, Any] = field(default_factory=dict)  # vars_prompt without a default: name -> (file, line)
    force_handlers: bool = False
    remote_user: str | None = None
    connection: str | None = None  # the play's connection keyword (the inventory's ansible_connection wins)
    order: str = "inventory"
    strategy: str = "linear"  # free/host_pinned are run as linear (README, "Ansible compatibility")
    # what the play's roles expose to all its tasks, as Ansible (static roles, include_role with public: true):
    # their defaults (under the inventory) and their vars (over the play's vars)
    role_defaults: dict[str, Any] = field(default_factory=dict)
    role_vars: dict[str, Any] = field(default_factory=dict)
    # the roles (with their parameters) of the play's `roles:` (every host runs them): a dependency among them is
    # not run again when an include_role brings it, as Ansible (a role runs once per play and host unless its
    # parameters differ). Ansible also skips one an earlier include ran on the host: provision runs it again
    roles_run: set[str] = field(default_factory=set)
    # what the checks before the run put off (tasks provision cannot run in a file a dynamic include reads): the
    # run prints each before it starts (``[WARNING]: ...``)
    warnings: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"
