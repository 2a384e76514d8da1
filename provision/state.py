"""The state a run keeps: its options (:class:`RunOptions`, built by the CLI) and, per host, what the tasks
produced (:class:`HostState`). The executor owns and writes the host state; the task runner only reads it.

Imports only the transport's option type.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .transport import ConnectOptions


@dataclass
class RunOptions:
    forks: int = 20
    check: bool = False
    diff: bool = False
    tags: set[str] = field(default_factory=set)
    skip_tags: set[str] = field(default_factory=set)
    start_at_task: str | None = None
    limit: str | None = None
    extra_vars: dict[str, Any] = field(default_factory=dict)
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    verbosity: int = 0
    command_timeout: float = 1800.0
    run_lock: bool = True  # hold each host's run lock (off for read-only queries: pd status/logs/verify)
    # the playbooks' defaults (provision.data.defaults(), set by the CLI): every host's lowest layer of vars,
    # under the inventory, play vars and -e, like an Ansible role's defaults
    defaults: dict[str, Any] = field(default_factory=dict)
    # read the state checks of consecutive tasks in one round trip per host (provision.executor.prefetch; also
    # PROVISION_BATCH_PROBES=0 turns it off)
    batch_probes: bool = True


@dataclass
class HostState:
    name: str
    facts: dict[str, Any] = field(default_factory=dict)  # gathered facts (ansible_facts)
    set_vars: dict[str, Any] = field(default_factory=dict)  # register + set_fact, kept across plays
    included_vars: dict[str, Any] = field(default_factory=dict)  # include_vars (under set_vars), kept too
    failed: bool = False
    unreachable: bool = False
    notified: list[str] = field(default_factory=list)
    pending_loaded: bool = False
    provision_dir_ready: bool = False
    # blocks (provision.playbook.BlockRef ids) this host failed in: "rescuing" (its rescue runs) or "failed"
    blocks: dict[int, str] = field(default_factory=dict)
    always_due: set[int] = field(default_factory=set)  # blocks whose always this failed host still runs
    ended: bool = False  # meta: end_host: no more tasks for this host in this play (not a failure)
    ended_roles: set[int] = field(default_factory=set)  # meta: end_role: the role runs (Task.role_run) it left

    # a number that changes whenever any host's failed/unreachable/ended does (any HostState of the process):
    # the task runner keeps its lists of active hosts while it stays the same (they were built per host per
    # task: O(hosts²) a task)
    activity: ClassVar[int] = 0

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _ACTIVITY:
            HostState.activity = next(_CHANGES)  # after the change: a list built under the old number is rebuilt

    @property
    def active(self) -> bool:
        return not (self.failed or self.unreachable or self.ended)


_ACTIVITY = frozenset({"failed", "unreachable", "ended"})
_CHANGES = itertools.count(1)
