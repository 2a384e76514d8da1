"""What each task returned, written into the run's state: a :class:`~.task_executor.TaskOutcome` applied to the
hosts' states and the inventory (facts, the registered value, handlers notified, ``add_host``/``group_by``), and
each result counted in the recap and shown. The task runner never writes that state; this is the one place that
does."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..commands import MASKER
from ..inventory import Inventory
from ..report import Sink
from ..results import RunSummary, Status, TaskResult
from ..state import HostState
from .task_executor import TaskOutcome


class Recorder:
    def __init__(
        self,
        inventory: Inventory,
        summary: RunSummary,
        reporter: Sink,
        host_state: Callable[[str], HostState],
        notify: Callable[[str, list[str]], None],
    ) -> None:
        self._inventory = inventory
        self._summary = summary
        self._reporter = reporter
        self._host_state = host_state
        self._notify = notify
        self.inventory_lock = threading.Lock()  # add_host/group_by change the inventory from worker threads

    def apply_outcome(self, outcome: TaskOutcome) -> None:
        """What a task returned, into the hosts' state: facts first, then the registered value (it wins over a
        fact of the same name), then the notified handlers."""
        host = outcome.result.host
        state = self._host_state(host)
        if outcome.gathered is not None:
            state.facts = outcome.gathered
        if outcome.included_vars:
            state.included_vars.update(outcome.included_vars)
        if outcome.inventory_changes:
            self._change_inventory(outcome)
        if outcome.facts:
            target = self._host_state(outcome.facts_to) if outcome.facts_to else state
            target.set_vars.update(outcome.facts)
        if outcome.register is not None:
            # run_once: the one result is registered on every host of the batch, as Ansible does
            for name in outcome.register_on:
                self._host_state(name).set_vars[outcome.register] = outcome.registered
        if outcome.notify:
            self._notify(host, outcome.notify)

    def _change_inventory(self, outcome: TaskOutcome) -> None:
        """add_host/group_by: their results applied to the inventory (later tasks and plays see it); a result
        is changed when the inventory changed, as in Ansible, unless the task's ``changed_when`` said otherwise
        (Ansible resolves it after the inventory change)."""
        changed = False
        with self.inventory_lock:
            for res in outcome.inventory_changes:
                if "add_host" in res.data:
                    new = res.data["add_host"]
                    MASKER.add_vars(new["host_vars"])
                    done = self._inventory.add_dynamic_host(new["host_name"], new["groups"], new["host_vars"])
                else:
                    done = self._inventory.add_dynamic_group(
                        outcome.result.host, res.data["add_group"], res.data["parent_groups"]
                    )
                if done and res.status is Status.OK and not outcome.changed_decided:
                    res.status = Status.CHANGED
                changed = changed or done
        result = outcome.result
        if changed and result.status is Status.OK and not outcome.changed_decided:
            result.status = Status.CHANGED

    def record_result(self, result: TaskResult, *, rescued: bool = False) -> None:
        """A result counted in the recap and shown; a failure (or an unreachable host) marks the host, unless
        ignored or caught by a ``rescue``."""
        state = self._host_state(result.host)
        if rescued:  # a block's rescue caught it: counted as rescued, the host goes on
            self._summary.stat(result.host).rescued += 1
            self._reporter.task_result(result)
            return
        self._summary.stat(result.host).count(result)
        if result.status is Status.UNREACHABLE and not result.ignored:  # ignore_unreachable: stays in the play
            state.unreachable = True
        elif result.status is Status.FAILED and not result.ignored:
            state.failed = True
        self._reporter.task_result(result)
