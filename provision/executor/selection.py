"""Which hosts run what, by the play's keywords: tags (``--tags``/``--skip-tags``), ``order`` and ``serial``."""

from __future__ import annotations

import random
from pathlib import Path

from ..playbook import Task


def task_selected(task: Task, tags: set[str], skip_tags: set[str], task_tags: set[str] | None = None) -> bool:
    """Ansible's tag rules (``Taggable.evaluate_tags``): ``always`` runs unless skipped, ``never`` only when asked
    for by name, ``tagged``/``untagged``/``all`` as in Ansible. ``task_tags``: the task's tags rendered, when
    they are templates."""
    own = set(task.tags if task_tags is None else task_tags) or {"untagged"}
    untagged = own == {"untagged"}
    only = tags or {"all"}
    if "always" in own or ("all" in only and "never" not in own) or own & only:
        run = True
    else:
        run = "tagged" in only and not untagged and "never" not in own
    if run and skip_tags:
        if "all" in skip_tags:
            run = "always" in own and "always" not in skip_tags
        elif own & skip_tags or ("tagged" in skip_tags and not untagged):
            run = False
    return run


def order_hosts(hosts: list[str], order: str) -> list[str]:
    """A play's ``order``: inventory (as given), reverse_inventory, sorted, reverse_sorted, shuffle."""
    if order == "reverse_inventory":
        return hosts[::-1]
    if order in ("sorted", "reverse_sorted"):
        return sorted(hosts, reverse=order == "reverse_sorted")
    if order == "shuffle":
        return random.sample(hosts, len(hosts))
    return hosts


def serial_batches(hosts: list[str], serial: list[int | str]) -> list[list[str]]:
    """A play's ``serial``: the hosts cut into batches of those sizes (a count or ``N%``; the last size repeats);
    one batch of all without it."""
    if not serial:
        return [hosts] if hosts else []
    out: list[list[str]] = []
    i, step = 0, 0
    while i < len(hosts):
        spec = serial[min(step, len(serial) - 1)]
        size = max(1, int(len(hosts) * int(spec[:-1]) / 100)) if isinstance(spec, str) else spec
        out.append(hosts[i : i + size])
        i += size
        step += 1
    return out


def playbook_dir_of(path: str) -> str:
    return str(Path(path).resolve().parent)
