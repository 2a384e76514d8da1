"""One task on one host: variables, ``when``, ``loop``, ``until``, the module call, ``changed_when`` /
``failed_when``, ``register``, ``notify``, ``ignore_errors`` and ``no_log``.

Every exception a module can raise is turned into a :class:`TaskResult` here: a host's failure never
escapes into the thread pool.

The runner changes no run state: it returns a :class:`TaskOutcome` (the result, the value to register and on
which hosts, the facts the task set, the handlers it notified, gathered facts) and the executor applies it.
What it needs comes in through the constructor (inventory, options, a reader of host state, the connection
factory, the progress callback, the playbook dir); it never imports the executor.

:class:`TaskRunner` is built in three layers, one file each: :class:`~.task_vars.TaskVariables` (a task's
variables on a host, the keys the executor reads through them), :class:`~.module_call.ModuleCaller` (one call of
the module: context, arguments, retries, ``changed_when``/``failed_when``) and, here, the task: check-mode skips,
``when`` and the loop, the outcome, ``no_log``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .. import templating
from ..commands import MASKER, CommandError
from ..errors import HostError, TemplateError, UnreachableError
from ..modules import ArgError
from ..playbook import Task
from ..results import Status, TaskResult
from .module_call import CHECK_SKIPPED, ModuleCaller
from .task_vars import loop_items

NO_LOG_MSG = "the output has been hidden due to no_log: true"
NO_LOG_ITEM = "None"  # the loop item label of a no_log task, as Ansible shows it


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
    changed_decided: bool = False  # the task's changed_when decided ``changed``: an inventory change does not
    facts_to: str | None = None  # delegate_facts: the host the facts go to (else the task's host)


def _skipped_by_when(host: str, task: Task, false: Any) -> TaskResult:
    """Ansible's result of a task its ``when`` skipped: ``skip_reason`` and the ``false_condition``, no ``msg``."""
    data = {"skip_reason": "Conditional result was False", "false_condition": str(false)}
    return TaskResult(host, task.name, Status.SKIPPED, "conditional result was False", data)


class TaskRunner(ModuleCaller):
    """One task (or the fact gathering) on one host of a batch, returned as a :class:`TaskOutcome`."""

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

    def run(self, task: Task, host: str) -> TaskOutcome:
        pending = self._pending[host] = {}
        try:
            outcome = self._outcome(task, host, pending)
            outcome.gathered = self._gathered.pop(host, None)  # a setup task: the host's new ansible_facts
            return outcome
        finally:
            del self._pending[host]
            self._gathered.pop(host, None)

    def _outcome(self, task: Task, host: str, pending: dict[str, Any]) -> TaskOutcome:
        started = time.monotonic()
        try:
            result = self._run_when_and_loop(task, host)
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
        ignored = result.failed and self._ignores_errors(task, host)
        if ignored or (result.status is Status.UNREACHABLE and task.ignore_unreachable):
            result.ignored = True
        outcome = TaskOutcome(result, facts=dict(pending))
        if task.module in ("add_host", "group_by") and not result.failed:
            outcome.inventory_changes = [r for r in result.item_results or [result] if r.status is not Status.SKIPPED]
            outcome.changed_decided = task.changed_when is not None
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
        if task.no_log and self._no_log_hides(task, host):
            _censor(result)
        return outcome

    def _ignores_errors(self, task: Task, host: str) -> bool:
        """``ignore_errors``; a template (``"{{ ansible_check_mode }}"``, common in roles) is rendered for the host
        (one that cannot be rendered ignores nothing: the task's failure stands)."""
        return self._flag(task.ignore_errors, task, host, unrenderable=False)

    def _no_log_hides(self, task: Task, host: str) -> bool:
        """``no_log``; a template is rendered for the host (one that cannot be rendered hides the output)."""
        return self._flag(task.no_log, task, host, unrenderable=True)

    def _flag(self, value: bool | str, task: Task, host: str, *, unrenderable: bool) -> bool:
        """A boolean keyword of ``task`` for ``host``: a template rendered with the host's vars (``unrenderable``
        where it cannot be)."""
        if not isinstance(value, str):
            return bool(value)
        try:
            return templating.truthy(templating.render(value, self.host_vars(host, task), task.where))
        except TemplateError:
            return unrenderable

    def _run_when_and_loop(self, task: Task, host: str) -> TaskResult:
        variables = self.host_vars(host, task)
        where = f"task {task.name!r} ({task.where})"
        if self.options.check:
            unknown = self._unproduced_input(task, host)
            if unknown:
                msg = f"skipped in check mode: needs {unknown!r}, which check mode did not really run"
                return TaskResult(host, task.name, Status.SKIPPED, msg, {CHECK_SKIPPED: True})
        if task.loop is None:
            false = None if task.when is None else templating.false_condition(task.when, variables, where)
            if false is not None:
                return _skipped_by_when(host, task, false)
            return self._call_with_retries(task, host, variables, where)
        # a looped task's `when` is evaluated per item (it may test the item), as Ansible does
        items = loop_items(task, variables, where)
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
            res = (
                self._call_with_retries(task, host, item_vars, where)
                if false is None
                else _skipped_by_when(host, task, false)
            )
            res.data.update(loop_vars)
            label = item if task.loop_label is None else templating.render(task.loop_label, item_vars, where)
            # masked BEFORE it is cut: a secret cut in half would no longer match the masker
            res.data["item_label"] = MASKER.mask(str(label))[:60]
            results.append(res)
            if res.failed and not self._ignores_errors(task, host):
                break
            if task.break_when is not None and res.status is not Status.SKIPPED:
                scope = item_vars.child(**({task.register: res.registered()} if task.register else {}))
                if templating.condition(task.break_when, scope, where):
                    break
            if task.pause and index < len(items) - 1:
                time.sleep(task.pause)
        return _combine(host, task.name, results)

    def _unproduced_input(self, task: Task, host: str) -> str | None:
        """In check mode, a task that reads the result of a task check mode skipped is skipped too (instead of
        failing on a result that does not exist): the first such variable name, or None."""
        from ..plan import task_names

        set_vars = self.host_state(host).set_vars
        for name in sorted(task_names(task)):
            value = set_vars.get(name)
            if isinstance(value, dict) and value.get(CHECK_SKIPPED):
                return name
        return None


def _censor(result: TaskResult) -> None:
    """no_log: nothing of the task's arguments or results is kept for any output (items included)."""
    result.msg = NO_LOG_MSG if result.msg else ""
    result.data = {}
    result.diff = None
    for item in result.item_results:
        _censor(item)
        item.data["item_label"] = NO_LOG_ITEM


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
