"""The executor, Ansible's execution stage: plays over hosts in parallel, Ansible's linear order, one task on one
host, and batched state checks.

- ``linear`` — :class:`Executor`: plays, batches, tasks over the batch, handler flushes, includes, ``meta``; beside it
  ``selection`` (hosts, order, serial, tags), ``connections``, ``handlers`` (pending, on the host), ``outcomes``
  (a task's outcome applied), ``blocks``, ``includes``, ``meta``.
- ``task_executor`` — :class:`TaskRunner`: one task on one host; it returns a :class:`TaskOutcome`; its layers
  ``task_vars`` (variables) and ``module_call`` (the module call).
- ``prefetch`` — :class:`Prefetch`: the state reads of consecutive tasks in one round trip per host.

Imports run one way inside: ``linear`` → ``prefetch`` → ``task_executor``; outside, the playbook, inventory,
templating, modules and transport stages, never the API or the CLI.
"""

from ..masking import register_inventory_secrets, register_secrets
from ..state import HostState, RunOptions
from .linear import Executor, InternalError
from .prefetch import Prefetch
from .selection import order_hosts, playbook_dir_of, serial_batches, task_selected
from .task_executor import TaskOutcome, TaskRunner

__all__ = [  # RunOptions, HostState and the secret registration live in .state and .masking; named here too
    "Executor",
    "HostState",
    "InternalError",
    "Prefetch",
    "RunOptions",
    "TaskOutcome",
    "TaskRunner",
    "order_hosts",
    "playbook_dir_of",
    "register_inventory_secrets",
    "register_secrets",
    "serial_batches",
    "task_selected",
]
