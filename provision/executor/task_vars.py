"""A task's variables on a host (Ansible's precedence, the magic variables, ``hostvars``), and the templated keys
the executor reads through them before a task runs: ``when``, the name shown, ``run_once``, templated tags and
an include's items.

The base of :class:`~.task_executor.TaskRunner` (through :class:`~.module_call.ModuleCaller`): built per batch
from what the executor gives (inventory, options, a reader of host state, the connection factory, the progress
callback, the playbook dir), it reads host state and never writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .. import templating
from ..errors import TemplateError
from ..inventory import Inventory
from ..magic import PlayMagic, magic_vars, run_magic, top_level_facts
from ..masking import register_secrets
from ..playbook import Play, Task
from ..state import HostState, RunOptions
from ..transport import Connection


class HostVarsView(Mapping[str, Any]):
    """The ``hostvars`` magic variable: every inventory host's variables, built on demand."""

    def __init__(self, runner: TaskVariables) -> None:
        self._runner = runner

    def __getitem__(self, host: str) -> Any:
        if host not in self._runner.inventory.hosts:
            raise KeyError(host)
        return self._runner.host_vars(host)

    def __iter__(self) -> Iterator[str]:
        return iter(self._runner.inventory.hosts)

    def __len__(self) -> int:
        return len(self._runner.inventory.hosts)


class TaskVariables:
    """A task's variables on the hosts of one batch (the base layer of :class:`~.task_executor.TaskRunner`)."""

    def __init__(
        self,
        play: Play,
        batch: list[str],
        play_hosts: list[str],
        *,
        inventory: Inventory,
        options: RunOptions,
        host_state: Callable[[str], HostState],
        connection: Callable[[str], Connection],
        progress: Callable[[str, str], None],
        playbook_dir: str,
    ) -> None:
        self.play = play
        self.batch = batch
        self.play_hosts = play_hosts
        self.inventory = inventory
        self.options = options
        self.host_state = host_state  # read only: the executor applies what run() returns
        self.connection = connection
        self.progress = progress
        self.playbook_dir = playbook_dir
        self._hostvars = HostVarsView(self)
        self._run_magic = run_magic(
            play_name=play.name or play.hosts, tags=options.tags, skip_tags=options.skip_tags, forks=options.forks,
            limit=options.limit, verbosity=options.verbosity, sources=inventory.sources,
        )  # fmt: skip
        self._gathered: dict[str, dict[str, Any]] = {}  # what a setup task gathered: the host's new ansible_facts
        # per host, while its task runs: what the task set so far (set_fact in a loop, retries), seen by the
        # variables built after it as if it were applied, and returned in the outcome
        self._pending: dict[str, dict[str, Any]] = {}
        # per host: its facts (the object) and their top-level ``ansible_*`` names, made once per gathering
        self._fact_vars: dict[str, tuple[Any, dict[str, Any]]] = {}
        self._host_states: dict[int, tuple[list[str], list[tuple[str, HostState]]]] = {}  # see _states
        self._active_hosts: dict[int, tuple[list[tuple[str, HostState]], int, list[str]]] = {}  # see _active

    def host_vars(self, host: str, task: Task | None = None, extra: Mapping[str, Any] | None = None) -> templating.Vars:
        inv = self.inventory
        state = self.host_state(host)
        play = PlayMagic(
            hostvars=self._hostvars,
            check=self.options.check,
            diff=self.options.diff,
            playbook_dir=self.playbook_dir,
            play_hosts=self.play_hosts,
            active_hosts=self._active(self.play_hosts),
            batch=self._active(self.batch),
            facts=state.facts,
            run=self._run_magic,
        )
        base = inv.hosts[host].vars if host in inv.hosts else {}
        # the inventory's, the play's, the task's and -e text are templates; what hosts returned (register,
        # set_fact, facts), loop items and the magic vars are data, never rendered again
        # Ansible's order: task vars lose to registered results and set_fact, loop items win over both
        variables = templating.Vars(
            self.options.defaults,  # the shipped defaults, under everything (trusted text: templates)
            self.play.role_defaults,  # the defaults the play's roles expose, under the inventory
            task.role_defaults if task else {},  # a role's defaults/: under the inventory, as in Ansible
            base,
            templating.inert(inv.runtime_vars.get(host, {})),  # what add_host gave the host: data
            self.play.vars,
            self.play.role_vars,  # the vars the play's roles expose: over play vars, as Ansible's role vars
            task.vars if task else {},
            state.included_vars,  # include_vars: the controller's files (templates), over task vars
            templating.inert(task.inert_vars if task else {}),  # an include's loop item
            templating.inert(state.set_vars),
            templating.inert(self._pending.get(host, {})),
            templating.inert(extra or {}),
            self.options.extra_vars,
            magic_vars(inv, host, play=play, fact_vars=self._top_level_facts(host, state.facts)),
        )
        register_secrets(variables, self.play.no_log)
        return variables

    def _states(self, hosts: list[str]) -> list[tuple[str, HostState]]:
        """The hosts with their states, looked up once per runner (a host's HostState is one object for the
        whole run: the executor changes it, never replaces it), not once per host on every host_vars call."""
        found = self._host_states.get(id(hosts))
        if found is None or found[0] is not hosts or len(found[1]) != len(hosts):  # (a list grown in place too)
            found = self._host_states[id(hosts)] = (hosts, [(h, self.host_state(h)) for h in hosts])
        return found[1]

    def _active(self, hosts: list[str]) -> list[str]:
        """The hosts of ``hosts`` that are still active, kept while no host's activity changed
        (:attr:`~provision.state.HostState.activity`, read before the list is made)."""
        seen = HostState.activity
        states = self._states(hosts)  # the same list object while ``hosts`` is the same (see _states)
        found = self._active_hosts.get(id(hosts))
        if found is None or found[0] is not states or found[1] != seen:
            found = self._active_hosts[id(hosts)] = (states, seen, [h for h, st in states if st.active])
        return found[2]

    def _top_level_facts(self, host: str, facts: Mapping[str, Any]) -> dict[str, Any]:
        """The facts' ``ansible_*`` names, kept while the host's facts are the same object (facts are replaced,
        never changed in place: gathered, or cleared by ``meta: clear_facts``)."""
        kept = self._fact_vars.get(host)
        if kept is None or kept[0] is not facts:
            kept = self._fact_vars[host] = (facts, top_level_facts(facts))
        return kept[1]

    def include_items(self, task: Task, host: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """An ``include_tasks``/``include_role`` on ``host``: (the loop item's vars, the arguments as rendered,
        ``apply`` left to the included tasks) for each item its ``when`` lets through ([{}] without a loop)."""
        variables = self.host_vars(host, task)
        items = loop_items(task, variables, task.where) if task.loop is not None else [None]
        out = []
        for item in items:
            extra = {} if task.loop is None else {task.loop_var: item}
            scope = variables.child(**extra) if extra else variables
            if task.when is not None and not templating.condition(task.when, scope, task.where):
                continue
            args = {k: v for k, v in task.args.items() if k != "apply"}
            out.append((extra, templating.render(args, scope, task.where)))
        return out

    def condition(self, task: Task, host: str) -> bool:
        """The task's ``when`` for ``host`` (true without one): for the tasks the executor acts on itself."""
        if task.when is None:
            return True
        return templating.condition(task.when, self.host_vars(host, task), task.where)

    def title(self, task: Task, hosts: list[str]) -> str:
        """The task's name as shown: rendered with the first host's vars (Ansible shows it rendered); a role's
        task as ``ROLE : NAME``, as Ansible shows it."""
        name = task.name
        if hosts and templating.is_template(task.name):
            name = templating.render_name(task.name, self.host_vars(hosts[0], task))
        role = task.vars.get("role_name") if task.role_path else None
        return f"{role} : {name}" if isinstance(role, str) else name

    def run_once(self, task: Task, hosts: list[str]) -> bool:
        """``run_once``, rendered with the first host's variables when it is a template."""
        if not isinstance(task.run_once, str):
            return task.run_once
        if not hosts:
            return False
        value = templating.render(task.run_once, self.host_vars(hosts[0], task), f"run_once of {task.where}")
        return templating.truthy(value)

    def tags(self, task: Task, host: str) -> set[str]:
        """The task's tags with templates rendered for ``host`` (a template may give a list or a string)."""
        out: set[str] = set()
        variables = self.host_vars(host, task)
        for tag in task.tags:
            value = templating.render(tag, variables, f"tags of {task.where}") if templating.is_template(tag) else tag
            items = value if isinstance(value, list) else str(value).split(",")
            out |= {str(t).strip() for t in items if str(t).strip()}
        return out


def loop_items(task: Task, variables: templating.Vars, where: str) -> list[Any]:
    """The items of ``task``'s loop (``loop``, ``with_items``, ``with_<lookup>``), rendered for the host."""
    items = templating.render(task.loop, variables, where)
    if task.loop_kind.startswith("with_") and task.loop_kind != "with_items":  # with_<lookup>: its results
        terms = items if isinstance(items, list) else [items]
        return list(templating.run_lookup(task.loop_kind[5:], terms, variables, task.module))
    if task.loop_kind == "with_items":  # Ansible's with_items: a bare value is one item; flattens one level
        if not isinstance(items, list):
            items = [items]
        flat: list[Any] = []
        for item in items:
            flat += item if isinstance(item, list) else [item]
        return flat
    if isinstance(items, str) or not isinstance(items, list):
        raise TemplateError(f"loop must give a list, got {type(items).__name__} {str(items)[:60]!r}")
    return items
