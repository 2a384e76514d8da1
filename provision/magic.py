"""The magic variables (Ansible's names), built in one place.

Every task's variables end with one layer of them (:func:`magic_vars`): the host's own
(``inventory_hostname``, ``inventory_hostname_short``, ``group_names``, ``groups``) and, inside a running play,
what the play knows (:class:`PlayMagic`: ``hostvars``, check/diff mode, ``playbook_dir``, the play's hosts and
batch, ``ansible_facts``). The layer is INERT (:func:`provision.templating.inert`): host names, group lists and
facts are data, never rendered (docs/security.md). :data:`NAMES` is what the planner accepts as always defined
(:mod:`provision.plan`); ``item`` is the default loop variable (the task runner sets it per item), ``omit`` and
``ansible_loop_var`` are accepted Ansible names that provision does not set.

Used by the task runner (every task), the planner (the names) and ``provision pd`` (the PD plan from the
inventory alone, before any play). Imports :mod:`.templating` and :mod:`.inventory` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import templating
from .facts import ANSIBLE_FACT_NAMES
from .inventory import Inventory

HOST_NAMES = ("inventory_hostname", "inventory_hostname_short", "group_names", "groups", "omit")
PLAY_NAMES = (
    "hostvars", "ansible_check_mode", "ansible_diff_mode", "playbook_dir", "ansible_play_hosts",
    "ansible_play_batch", "play_hosts", "ansible_play_hosts_all", "ansible_facts",
)  # fmt: skip
OTHER_NAMES = ("item", "ansible_loop_var")
NAMES = frozenset(HOST_NAMES + PLAY_NAMES + OTHER_NAMES)


@dataclass(frozen=True)
class PlayMagic:
    """What only a running play knows, for one host."""

    hostvars: Mapping[str, Any]
    check: bool
    diff: bool
    playbook_dir: str
    play_hosts: list[str]
    active_hosts: list[str]  # the play's hosts that have not failed
    batch: list[str]  # the batch's hosts that have not failed
    facts: Mapping[str, Any]


def magic_vars(
    inventory: Inventory,
    host: str,
    *,
    groups: Mapping[str, list[str]] | None = None,
    play: PlayMagic | None = None,
    fact_vars: Mapping[str, Any] | None = None,
) -> Any:
    """The magic layer of ``host``'s variables, inert (a :class:`provision.templating.Vars` layer).

    ``groups``: ``inventory.groups_map()`` when the caller already has it (one map for many hosts); ``play``:
    the play's part, absent outside a play; ``fact_vars``: :func:`top_level_facts` of the play's facts when the caller
    keeps them (they change only when facts are gathered or cleared)."""
    known = inventory.hosts.get(host)
    magic: dict[str, Any] = {
        "inventory_hostname": host,
        "inventory_hostname_short": host.split(".")[0],
        "group_names": sorted(g for g in known.groups if g != "all") if known else [],  # "ungrouped" too, as Ansible
        "groups": inventory.groups_map() if groups is None else groups,
        "omit": templating.OMIT,  # an argument rendered to it is left out (taskrun)
    }
    if play is not None:
        magic.update({
            "hostvars": play.hostvars,
            "ansible_check_mode": play.check,
            "ansible_diff_mode": play.diff,
            "playbook_dir": play.playbook_dir,
            "ansible_play_hosts": list(play.active_hosts),
            "ansible_play_batch": list(play.batch),  # the batch's hosts that have not failed, as in Ansible
            "play_hosts": list(play.batch),  # Ansible's older name of ansible_play_batch
            "ansible_play_hosts_all": list(play.play_hosts),
            "ansible_facts": play.facts,
        })  # fmt: skip
        # Ansible's fact names also as top-level variables (ansible_os_family), as Ansible injects them
        magic.update(fact_vars if fact_vars is not None else top_level_facts(play.facts))
    return templating.inert(magic)


def top_level_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """Ansible's fact names as top-level variables (``ansible_os_family``)."""
    return {f"ansible_{k}": v for k, v in facts.items() if k in ANSIBLE_FACT_NAMES}
