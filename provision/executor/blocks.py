"""Blocks at run time: which hosts reach a task by the blocks it sits in, and what a failure inside a block does
(a ``rescue`` catches it, or the host fails and still owes the ``always``); both read and write only the
host's :class:`~provision.state.HostState`."""

from __future__ import annotations

from ..playbook import Task
from ..results import Status, TaskResult
from ..state import HostState


def reaches(state: HostState, task: Task) -> bool:
    """Whether the host of ``state`` reaches ``task`` by the blocks it is in: a host that failed in a block skips
    the rest of the block's tasks; its ``rescue`` runs only on the hosts that failed in it (and were caught);
    ``always`` runs on every host that entered the block, a failed one too."""
    refs = task.blocks
    for i, ref in enumerate(refs):
        mark = state.blocks.get(ref.id)
        # the always of an inner block the host failed inside still runs (before this block's rescue)
        owed = any(r.section == "always" and r.id in state.blocks for r in refs[i + 1 :])
        if ref.section == "block" and mark is not None and not owed:
            return False
        if ref.section == "rescue" and mark != "rescuing" and not owed:
            return False
    if state.active:
        return True
    return not state.unreachable and any(r.section == "always" and r.id in state.always_due for r in task.blocks)


def rescued(state: HostState, result: TaskResult, task: Task | None) -> bool:
    """A failure in a block: mark the host's blocks and say whether a ``rescue`` catches it. Caught: the host
    stays active, its rescue runs with ``ansible_failed_task``/``ansible_failed_result``; not caught: the
    host fails, and still runs the ``always`` of every block it is in."""
    if task is None or not task.blocks or result.status is not Status.FAILED or result.ignored:
        return False
    catch = next(
        (r for r in reversed(task.blocks) if r.section == "block" and r.has_rescue and r.id not in state.blocks),
        None,
    )
    for ref in reversed(task.blocks):
        if ref is catch:
            state.blocks[ref.id] = "rescuing"
            break
        if ref.section in ("block", "rescue"):
            state.blocks[ref.id] = "failed"
    if catch is None:
        state.always_due |= {r.id for r in task.blocks if r.has_always and r.section != "always"}
        return False
    failed_task = {"name": task.given_name, "action": task.module, "args": task.args, "path": task.where}
    state.set_vars.update(ansible_failed_task=failed_task, ansible_failed_result=result.registered())
    return True
