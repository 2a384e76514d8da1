"""One task on one host: variables, ``when``, ``loop``, ``until``, the module call, ``changed_when`` /
``failed_when``, ``register``, ``notify``, ``ignore_errors`` and ``no_log``.

Every exception a module can raise is turned into a :class:`TaskResult` here: a host's failure never
escapes into the thread pool.

The runner changes no run state: it returns a :class:`TaskOutcome` (the result, the value to register and on
which hosts, the facts the task set, the handlers it notified, gathered facts) and the executor applies it.
What it needs comes in through the constructor (inventory, options, a reader of host state, the connection
factory, the progress callback, the playbook dir); it never imports the executor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import templating
from ..commands import MASKER, CommandError
from ..errors import CommandTimeout, HostError, TemplateError, UnreachableError
from ..inventory import Inventory
from ..magic import PlayMagic, magic_vars, run_magic, top_level_facts
from ..masking import register_secrets
from ..modules import ArgError, ModuleContext, ModuleResult
from ..modules.async_mod import run_async
from ..playbook import Play, Task
from ..results import Status, TaskResult
from ..state import HostState, RunOptions
from ..transport import Connection

NO_LOG_MSG = "the output has been hidden due to no_log: true"
NO_LOG_ITEM = "None"  # the loop item label of a no_log task, as Ansible shows it
CHECK_SKIPPED = "_check_mode_skipped"  # marks a registered result that check mode did not really produce


@dataclass
class TaskOutcome:
    """What one task (or the fact gathering) on one host returns; the executor applies it to the hosts' state:
    ``facts`` into the host's variables, then ``registered`` as ``register`` on each host of ``register_on``,
    then the ``notify`` names; ``gathered`` becomes the host's ``ansible_facts``."""

    result: TaskResult
    facts: dict[str, Any] = field(default_factory=dict)
    register: str | None = None
    registered: Any = None
    register_on: list[str] = field(default_factory=list)
    notify: list[str] = field(default_factory=list)
    gathered: dict[str, Any] | None = None
    included_vars: dict[str, Any] = field(default_factory=dict)  # what include_vars read
    inventory_changes: list[TaskResult] = field(default_factory=list)  # add_host/group_by results (items)
    facts_to: str | None = None  # delegate_facts: the host the facts go to (else the task's host)


class HostVarsView(Mapping[str, Any]):
    """The ``hostvars`` magic variable: every inventory host's variables, built on demand."""

    def __init__(self, runner: TaskRunner) -> None:
        self._runner = runner

    def __getitem__(self, host: str) -> Any:
        if host not in self._runner.inventory.hosts:
            raise KeyError(host)
        return self._runner.host_vars(host)

    def __iter__(self) -> Iterator[str]:
        return iter(self._runner.inventory.hosts)

    def __len__(self) -> int:
        return len(self._runner.inventory.hosts)


def _skipped_by_when(host: str, task: Task, false: Any) -> TaskResult:
    """Ansible's result of a task its ``when`` skipped: ``skip_reason`` and the ``false_condition``, no ``msg``."""
    data = {"skip_reason": "Conditional result was False", "false_condition": str(false)}
    return TaskResult(host, task.name, Status.SKIPPED, "conditional result was False", data)


class TaskRunner:
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

    # ------------------------------------------------------------------ variables
    def host_vars(self, host: str, task: Task | None = None, extra: Mapping[str, Any] | None = None) -> templating.Vars:
        inv = self.inventory
        state = self.host_state(host)
        play = PlayMagic(
            hostvars=self._hostvars,
            check=self.options.check,
            diff=self.options.diff,
            playbook_dir=self.playbook_dir,
            play_hosts=self.play_hosts,
            active_hosts=[h for h, st in self._states(self.play_hosts) if st.active],
            batch=[h for h, st in self._states(self.batch) if st.active],
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

    def _top_level_facts(self, host: str, facts: Mapping[str, Any]) -> dict[str, Any]:
        """The facts' ``ansible_*`` names, kept while the host's facts are the same object (facts are replaced,
        never changed in place: gathered, or cleared by ``meta: clear_facts``)."""
        kept = self._fact_vars.get(host)
        if kept is None or kept[0] is not facts:
            kept = self._fact_vars[host] = (facts, top_level_facts(facts))
        return kept[1]

    # ------------------------------------------------------------------ facts
    def gather_facts(self, host: str) -> TaskOutcome:
        from ..facts import gather  # imported when a play gathers facts

        if self.host_state(host).facts:
            return TaskOutcome(TaskResult(host, "Gathering Facts", Status.OK))
        try:
            conn = self.connection(host)
            variables = self.host_vars(host)
            venv = str(variables.get("venv_path") or "~")
            facts = gather(conn, venv, timeout=60)
        except UnreachableError as exc:
            return TaskOutcome(TaskResult(host, "Gathering Facts", Status.UNREACHABLE, exc.msg))
        except HostError as exc:
            return TaskOutcome(TaskResult(host, "Gathering Facts", Status.FAILED, exc.msg))
        return TaskOutcome(TaskResult(host, "Gathering Facts", Status.OK), gathered=facts)

    # ------------------------------------------------------------------ tasks
    def run(self, task: Task, host: str) -> TaskOutcome:
        pending = self._pending[host] = {}
        try:
            outcome = self._run_task(task, host, pending)
            outcome.gathered = self._gathered.pop(host, None)  # a setup task: the host's new ansible_facts
            return outcome
        finally:
            del self._pending[host]
            self._gathered.pop(host, None)

    def _run_task(self, task: Task, host: str, pending: dict[str, Any]) -> TaskOutcome:
        started = time.monotonic()
        try:
            result = self._run(task, host)
        except UnreachableError as exc:
            result = TaskResult(host, task.name, Status.UNREACHABLE, exc.msg)
        except (HostError, TemplateError, ArgError, CommandError) as exc:
            msg = exc.msg if isinstance(exc, (HostError, TemplateError)) else str(exc)
            place = "" if msg.endswith(f"({task.where})") else f" ({task.where})"  # a template error says it already
            result = TaskResult(host, task.name, Status.FAILED, f"{msg}{place}")
        except Exception:
            if not task.no_log:
                raise
            # a bug, but its text may quote the task's arguments: no_log hides it like any other output
            result = TaskResult(host, task.name, Status.FAILED, f"internal error ({task.where})")
        result.duration = time.monotonic() - started
        if (result.failed and task.ignore_errors) or (result.status is Status.UNREACHABLE and task.ignore_unreachable):
            result.ignored = True
        outcome = TaskOutcome(result, facts=dict(pending))
        if task.module in ("add_host", "group_by") and not result.failed:
            outcome.inventory_changes = [r for r in result.item_results or [result] if r.status is not Status.SKIPPED]
        if task.module == "include_vars":
            for res in result.item_results or [result]:
                if res.status is not Status.FAILED and isinstance(res.data.get("ansible_facts"), dict):
                    outcome.included_vars.update(res.data["ansible_facts"])
            MASKER.add_vars(outcome.included_vars, self.play.no_log)
        if task.delegate_facts and task.delegate_to and pending:  # the facts belong to the delegated host
            outcome.facts_to = str(templating.render(task.delegate_to, self.host_vars(host, task), task.where))
        if task.register and result.status is not Status.UNREACHABLE:
            # registered before no_log censors the output: as in Ansible, later tasks can read the result
            outcome.register, outcome.registered = task.register, result.registered()
            # run_once: the one result is registered on every host of the batch, as Ansible does
            outcome.register_on = list(self.batch) if task.run_once else [host]
            pending[task.register] = outcome.registered  # the notify names below see it, as they see facts
        if result.changed and task.notify:
            outcome.notify = [str(templating.render(n, self.host_vars(host, task))) for n in task.notify]
        if task.no_log and self._hidden(task, host):
            _censor(result)
        return outcome

    def _hidden(self, task: Task, host: str) -> bool:
        """``no_log``; a template is rendered for the host (one that cannot be rendered hides the output)."""
        if not isinstance(task.no_log, str):
            return bool(task.no_log)
        try:
            return templating.truthy(templating.render(task.no_log, self.host_vars(host, task), task.where))
        except TemplateError:
            return True

    # ------------------------------------------------------------------ templated task keys
    def include_items(self, task: Task, host: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """An ``include_tasks``/``include_role`` on ``host``: (the loop item's vars, the arguments as rendered,
        ``apply`` left to the included tasks) for each item its ``when`` lets through ([{}] without a loop)."""
        variables = self.host_vars(host, task)
        items = self._items(task, variables, task.where) if task.loop is not None else [None]
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

    def _run(self, task: Task, host: str) -> TaskResult:
        variables = self.host_vars(host, task)
        where = f"task {task.name!r} ({task.where})"
        if self.options.check:
            unknown = self._unproduced_inputs(task, host)
            if unknown:
                msg = f"skipped in check mode: needs {unknown!r}, which check mode did not really run"
                return TaskResult(host, task.name, Status.SKIPPED, msg, {CHECK_SKIPPED: True})
        if task.loop is None:
            false = None if task.when is None else templating.false_condition(task.when, variables, where)
            if false is not None:
                return _skipped_by_when(host, task, false)
            return self._call(task, host, variables, where)
        # a looped task's `when` is evaluated per item (it may test the item), as Ansible does
        items = self._items(task, variables, where)
        results: list[TaskResult] = []
        for index, item in enumerate(items):
            loop_vars: dict[str, Any] = {task.loop_var: item, "ansible_loop_var": task.loop_var}
            if task.index_var:
                loop_vars[task.index_var] = index
                loop_vars["ansible_index_var"] = task.index_var
            if task.extended:
                loop_vars["ansible_loop"] = _loop_info(items, index)
            item_vars = self.host_vars(host, task, loop_vars)
            false = None if task.when is None else templating.false_condition(task.when, item_vars, where)
            res = self._call(task, host, item_vars, where) if false is None else _skipped_by_when(host, task, false)
            res.data.update(loop_vars)
            label = item if task.loop_label is None else templating.render(task.loop_label, item_vars, where)
            # masked BEFORE it is cut: a secret cut in half would no longer match the masker
            res.data["item_label"] = MASKER.mask(str(label))[:60]
            results.append(res)
            if res.failed and not task.ignore_errors:
                break
            if task.break_when is not None and res.status is not Status.SKIPPED:
                scope = item_vars.child(**({task.register: res.registered()} if task.register else {}))
                if templating.condition(task.break_when, scope, where):
                    break
            if task.pause and index < len(items) - 1:
                time.sleep(task.pause)
        return _combine(host, task.name, results)

    @staticmethod
    def _items(task: Task, variables: templating.Vars, where: str) -> list[Any]:
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

    def _unproduced_inputs(self, task: Task, host: str) -> str | None:
        """In check mode, a task that reads the result of a task check mode skipped is skipped too (instead of
        failing on a result that does not exist): the first such variable name, or None."""
        from ..plan import task_names

        set_vars = self.host_state(host).set_vars
        for name in sorted(task_names(task)):
            value = set_vars.get(name)
            if isinstance(value, dict) and value.get(CHECK_SKIPPED):
                return name
        return None

    def _context(self, task: Task, host: str, variables: templating.Vars, where: str) -> ModuleContext:
        target = host
        if task.delegate_to:
            target = str(templating.render(task.delegate_to, variables, where))
        conn = self.connection(target)
        env: dict[str, Any] = {}
        for layer in (self.play.environment, task.environment):
            rendered = templating.render(layer, variables, where)
            if not isinstance(rendered, dict):
                raise TemplateError(f"environment must give a mapping, got {type(rendered).__name__}")
            env.update(rendered)
        become = task.become if task.become is not None else self.play.become
        if isinstance(become, str):  # a template: rendered for this host and item
            become = templating.truthy(templating.render(become, variables, where))
        # a template too (`become_user: "{{ app_user }}"`), rendered for this host and item like Ansible does
        become_user = str(templating.render(task.become_user or self.play.become_user or "root", variables, where))
        check = self.options.check
        if task.check_mode is not None:
            check = templating.truthy(templating.render(task.check_mode, variables, where))
        return ModuleContext(
            host=host,
            conn=conn,
            variables=variables,
            check=check,
            diff=self.options.diff if task.diff is None else task.diff,
            become=bool(become),
            become_user=become_user or "root",
            verbosity=self.options.verbosity,
            environment={k: str(v) for k, v in env.items()},
            timeout=task.timeout or float(variables.get("command_timeout", self.options.command_timeout)),
            controller_dir=task.role_path or self.playbook_dir,
            render=lambda text: templating.render_text(text, variables, where),
            render_file=lambda text, extra: templating.render_file(text, variables.child(**extra), where),
            evaluate=lambda expr: templating.evaluate_expression(expr, variables, where),
            condition=lambda expr: templating.evaluate_expression(expr, variables, where, conditional=True),
            peer=self.connection,
            progress=None if task.no_log else (lambda msg: self.progress(host, msg)),
        )

    def prepare(
        self, task: Task, host: str, variables: templating.Vars, where: str
    ) -> tuple[Any, dict[str, Any], ModuleContext]:
        """What a call of ``task``'s module on ``host`` gets: its class, its arguments (rendered, coerced) and its
        context (:mod:`provision.prefetch` reads it too, to know a task's state check ahead of it)."""
        cls = task.module_class
        # expression arguments (assert's `that`, debug's `var`) are evaluated once by the module, never
        # rendered first: rendering would turn a registered value into an expression to evaluate
        expressions = {k: v for k, v in task.args.items() if k in cls.expression_args}
        rendered = templating.render({k: v for k, v in task.args.items() if k not in expressions}, variables, where)
        rendered = templating.drop_omitted(rendered)
        for name, spec in cls.args.items():  # secret args are registered before coerce can quote them in an error
            if spec.secret and rendered.get(name):
                MASKER.add(rendered[name])
        return cls, cls.coerce({**rendered, **expressions}), self._context(task, host, variables, where)

    def _call(self, task: Task, host: str, variables: templating.Vars, where: str) -> TaskResult:
        cls, args, ctx = self.prepare(task, host, variables, where)
        # Ansible: `retries` more runs after the first (3 by default with `until`); without `until`, a task with
        # `retries` is retried while it fails; `attempts` is in the result
        retries: float = 0.0 if task.retries is None else 0.0 if isinstance(task.retries, str) else task.retries
        if isinstance(task.retries, str):
            retries = _whole(templating.render(task.retries, variables, where), "retries", integer=True)
        delay = task.delay
        if isinstance(delay, str):
            delay = _whole(templating.render(delay, variables, where), "delay", integer=False)
        attempts = int(retries) + 1
        result = TaskResult(host, task.name, Status.OK)
        for attempt in range(1, attempts + 1):
            result = self._once(task, host, cls, args, ctx, variables, where, attempt if attempts > 1 else None)
            if attempts == 1 or result.status in (Status.UNREACHABLE, Status.SKIPPED):
                break
            until_vars = variables.child(**({task.register: result.registered()} if task.register else {}))
            done = templating.condition(task.until, until_vars, where) if task.until is not None else not result.failed
            if done:
                break
            if attempt < attempts:
                if ctx.progress is not None:  # a wait of retries x delay is never silent (Ansible's line)
                    ctx.progress(f"FAILED - RETRYING: {task.name} ({attempts - attempt} retries left)")
                time.sleep(float(delay))
        else:
            result.data["attempts"] = attempts - 1  # what Ansible reports when the attempts run out
            if not result.failed:
                result.changed_on_failure = result.changed
            result.status = Status.FAILED
            result.msg = f"until condition still false after {attempts} attempts: {result.msg}".strip()
        if task.delegate_to:
            result.delegated_to = ctx.conn.name
        return result

    def _once(
        self, task: Task, host: str, cls: Any, args: dict[str, Any], ctx: ModuleContext,
        variables: templating.Vars, where: str, attempt: int | None = None,
    ) -> TaskResult:  # fmt: skip
        try:
            mres: ModuleResult = (
                run_async(cls, ctx, args, task.async_val, task.poll) if task.async_val else cls().run(ctx, args)
            )
        except CommandTimeout as exc:
            mres = ModuleResult(failed=True, msg=exc.msg, data={"timeout": exc.timeout})
        except UnreachableError:
            raise
        except HostError as exc:
            data = getattr(exc, "data", {})
            mres = ModuleResult(failed=True, msg=exc.msg, data=dict(data))
        status = Status.SKIPPED if mres.skipped else Status.FAILED if mres.failed else (
            Status.CHANGED if mres.changed else Status.OK
        )  # fmt: skip
        result = TaskResult(host, task.name, status, mres.msg, dict(mres.data), mres.diff)
        result.changed_on_failure = mres.failed and mres.changed  # Ansible counts it: a failed command ran
        if attempt is not None:
            result.data["attempts"] = attempt
        if cls.show_msg:
            result.data["_show_msg"] = True
        if ctx.check and mres.skipped:
            result.data[CHECK_SKIPPED] = True
        if mres.facts:
            MASKER.add_vars(mres.facts)
            self._pending[host].update(mres.facts)  # returned in the outcome; later items and retries see them
        if mres.gathered is not None:
            self._gathered[host] = mres.gathered
        if task.changed_when is not None or task.failed_when is not None:
            self._override(task, result, variables, where)
        return result

    def _override(self, task: Task, result: TaskResult, variables: templating.Vars, where: str) -> None:
        """changed_when, then failed_when (which sees the new ``changed``), as Ansible evaluates them."""
        if result.status in (Status.SKIPPED, Status.UNREACHABLE):
            return
        registered = result.registered()
        scope = variables.child(**({task.register: registered} if task.register else {}), **registered)
        changed, failed = result.changed or result.changed_on_failure, result.failed
        try:
            if task.changed_when is not None:
                changed = templating.condition(task.changed_when, scope, where)
                registered["changed"] = changed
                scope = variables.child(**({task.register: registered} if task.register else {}), **registered)
            if task.failed_when is not None:
                failed = templating.condition(task.failed_when, scope, where)
                if failed and not result.failed:
                    result.msg = result.msg or f"failed_when condition was true: {task.failed_when}"
        except TemplateError as exc:  # as Ansible: the task fails, the module's result (and its change) kept
            result.status, result.changed_on_failure = Status.FAILED, changed
            result.msg = exc.msg if exc.msg.endswith(f"({task.where})") else f"{exc.msg} ({task.where})"
            return
        result.status = Status.FAILED if failed else Status.CHANGED if changed else Status.OK
        result.changed_on_failure = failed and changed


def _censor(result: TaskResult) -> None:
    """no_log: nothing of the task's arguments or results is kept for any output (items included)."""
    result.msg = NO_LOG_MSG if result.msg else ""
    result.data = {}
    result.diff = None
    for item in result.item_results:
        _censor(item)
        item.data["item_label"] = NO_LOG_ITEM


def _whole(value: Any, key: str, *, integer: bool) -> float:
    """A templated ``retries`` (a whole number) or ``delay`` (seconds), checked once rendered."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if number < 0 or (integer and not number.is_integer()) or number != number:
        kind = "a whole number >= 0" if integer else "a number of seconds >= 0"
        raise TemplateError(f"{key} must be {kind}, got {value!r}")
    return number


def _loop_info(items: list[Any], index: int) -> dict[str, Any]:
    """``ansible_loop`` of ``loop_control: extended``."""
    length = len(items)
    info: dict[str, Any] = {
        "allitems": items, "index": index + 1, "index0": index, "revindex": length - index,
        "revindex0": length - index - 1, "first": index == 0, "last": index == length - 1, "length": length,
    }  # fmt: skip
    if index > 0:
        info["previtem"] = items[index - 1]
    if index < length - 1:
        info["nextitem"] = items[index + 1]
    return info


def _combine(host: str, name: str, results: list[TaskResult]) -> TaskResult:
    if not results:
        return TaskResult(host, name, Status.SKIPPED, "no items in loop")
    changed_items = any(r.changed or r.changed_on_failure for r in results)
    if any(r.status is Status.FAILED for r in results):
        status = Status.FAILED
        msg = next(r.msg for r in results if r.status is Status.FAILED)
    elif any(r.status is Status.CHANGED for r in results):
        status, msg = Status.CHANGED, ""
    elif all(r.status is Status.SKIPPED for r in results):
        status, msg = Status.SKIPPED, ""
    else:
        status, msg = Status.OK, ""
    combined = TaskResult(host, name, status, msg, item_results=results)
    combined.changed_on_failure = status is Status.FAILED and changed_items
    combined.diff = "\n".join(r.diff for r in results if r.diff) or None
    return combined
