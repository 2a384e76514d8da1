"""One call of a task's module on a host: its context (connection, become, environment, check mode, the
renderers), its arguments rendered and coerced, ``retries``/``until``/``delay``, ``async``, and
``changed_when``/``failed_when`` applied to what it returned."""

from __future__ import annotations

import time
from typing import Any

from .. import templating
from ..commands import MASKER
from ..errors import CommandTimeout, HostError, TemplateError, UnreachableError
from ..modules import ModuleContext, ModuleResult, may_omit
from ..modules.async_mod import run_async
from ..playbook import Task
from ..results import Status, TaskResult
from .task_vars import TaskVariables

CHECK_SKIPPED = "_check_mode_skipped"  # marks a registered result that check mode did not really produce


class ModuleCaller(TaskVariables):
    """A task's module called on a host (the middle layer of :class:`~.task_executor.TaskRunner`)."""

    def _module_context(self, task: Task, host: str, variables: templating.Vars, where: str) -> ModuleContext:
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
            render_file=lambda text, extra, options: templating.render_file(
                text, variables.child(**extra), where, options
            ),
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
        if any(may_omit(v, templating.is_template) for v in task.args.values()):  # checked now that it rendered
            cls.check_combination({**rendered, **expressions}, lambda _: False)
        for name, spec in cls.args.items():  # secret args are registered before coerce can quote them in an error
            if spec.secret and rendered.get(name):
                MASKER.add(rendered[name])
        return cls, cls.coerce({**rendered, **expressions}), self._module_context(task, host, variables, where)

    def _call_with_retries(self, task: Task, host: str, variables: templating.Vars, where: str) -> TaskResult:
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
            result = self._call_once(task, host, cls, args, ctx, variables, where, attempt if attempts > 1 else None)
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

    def _call_once(
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
            self._changed_and_failed_when(task, result, variables, where)
        return result

    def _changed_and_failed_when(self, task: Task, result: TaskResult, variables: templating.Vars, where: str) -> None:
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
