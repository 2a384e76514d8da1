"""Which hosts run what: a play's hosts (its pattern and ``--limit``), their ``order`` and ``serial`` batches,
and the tags (``--tags``/``--skip-tags``)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import templating
from ..errors import InventoryError
from ..inventory import Inventory
from ..playbook import Play, Task
from ..state import RunOptions


def play_hosts(inventory: Inventory, play: Play, limit: str | None) -> list[str]:
    """The hosts of the play's pattern that ``--limit`` lets through, in inventory order."""
    try:
        selected = [h.name for h in inventory.select(play.hosts)]
    except InventoryError:  # a group add_host/group_by did not make after all: no hosts, as in Ansible
        return []
    if limit:
        allowed = {h.name for h in inventory.select(limit)}
        selected = [h for h in selected if h in allowed]
    return selected


def play_batches(play: Play, hosts: list[str], extra_vars: dict[str, Any]) -> list[list[str]]:
    """The play's hosts in its ``order``, cut into its ``serial`` batches. A templated ``order`` is rendered with
    the play's vars and ``-e`` (the planner checked it)."""
    order = play.order
    if templating.is_template(order):
        order = str(templating.render(order, templating.Vars(play.vars, extra_vars), play.where))
    return serial_batches(order_hosts(hosts, order), play.serial)


def hosts_by_tags(
    task: Task, batch: list[str], options: RunOptions, rendered_tags: Callable[[Task, str], set[str]]
) -> list[str]:
    """The hosts of the batch that run ``task`` by the tags (templated tags are rendered per host)."""
    if not any(templating.is_template(t) for t in task.tags):
        return batch if task_selected(task, options.tags, options.skip_tags) else []
    return [h for h in batch if task_selected(task, options.tags, options.skip_tags, rendered_tags(task, h))]


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
