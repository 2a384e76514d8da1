"""``meta: ACTION`` tasks that act on hosts and the run, not on the play's flow: ``end_host``, ``end_role``,
``refresh_inventory``, ``reset_connection``, ``clear_facts``, ``clear_host_errors``. (``flush_handlers``,
``end_play`` and ``end_batch`` steer the executor's loop: ``Executor._run_meta``.)"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..inventory import Inventory
from ..masking import register_inventory_secrets
from ..playbook import Task
from ..state import HostState, RunOptions
from .connections import Connections

FLOW_ACTIONS = ("flush_handlers", "end_play", "end_batch")  # the ones the executor's loop acts on


def act_on_hosts(
    task: Task,
    hosts: list[str],
    batch: list[str],
    host_state: Callable[[str], HostState],
    *,
    inventory: Inventory,
    inventory_lock: threading.Lock,
    options: RunOptions,
    connections: Connections,
) -> None:
    """The meta action of ``task`` on ``hosts`` (those that reach it and whose ``when`` holds; ``batch``: the
    whole batch, for ``clear_host_errors``)."""
    action = task.args["_raw_params"]
    if action == "end_host":
        for h in hosts:
            host_state(h).ended = True
    elif action == "end_role":
        for h in hosts:
            host_state(h).ended_roles.add(task.role_run or 0)
    elif action == "refresh_inventory" and hosts:  # the sources read again, the run's changes made again
        with inventory_lock:
            inventory.refresh(options.extra_vars)
        register_inventory_secrets(inventory, options.extra_vars)
    elif action == "reset_connection":  # the next task opens a new connection (new login, new env)
        for h in hosts:
            connections.drop(h)
    elif action == "clear_facts":
        for h in hosts:
            host_state(h).facts = {}
    elif action == "clear_host_errors":
        for h in batch:
            state = host_state(h)
            if state.failed and not state.unreachable:
                state.failed = False
