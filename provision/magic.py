"""The magic variables (Ansible's names), built in one place.

Every task's variables end with one layer of them (:func:`magic_vars`): the host's own
(``inventory_hostname``, ``inventory_hostname_short``, ``group_names``, ``groups``, ``inventory_file``/``_dir``)
and, inside a running play, what the play knows (:class:`PlayMagic`: ``hostvars``, check/diff mode,
``playbook_dir``, the play's hosts and batch, ``ansible_facts``, and the run's :func:`run_magic`: the play's name,
``ansible_version``, ``ansible_playbook_python``, tags, forks, limit, inventory sources, verbosity). ``vars`` (all
of a host's variables) is the variables mapping itself (:class:`provision.templating.Vars`). The layer is INERT
(:func:`provision.templating.inert`): host names, group lists and facts are data, never rendered
(docs/security.md). :data:`NAMES` is what the planner accepts as always defined
(:mod:`provision.plan`); ``item`` is the default loop variable (the task runner sets it per item), ``omit`` and
``ansible_loop_var`` are accepted Ansible names that provision does not set.

Used by the task runner (every task), the planner (the names) and ``provision pd`` (the PD plan from the
inventory alone, before any play). Imports :mod:`.templating` and :mod:`.inventory` only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import templating
from .facts import ANSIBLE_FACT_NAMES
from .inventory import Inventory

HOST_NAMES = (
    "inventory_hostname", "inventory_hostname_short", "group_names", "groups", "omit", "inventory_file",
    "inventory_dir",
)  # fmt: skip
PLAY_NAMES = (
    "hostvars", "ansible_check_mode", "ansible_diff_mode", "playbook_dir", "ansible_play_hosts",
    "ansible_play_batch", "play_hosts", "ansible_play_hosts_all", "ansible_facts", "ansible_play_name",
    "ansible_version", "ansible_playbook_python", "ansible_run_tags", "ansible_skip_tags", "ansible_forks",
    "ansible_inventory_sources", "ansible_verbosity",
)  # fmt: skip
OTHER_NAMES = ("item", "ansible_loop_var", "vars", "ansible_limit")  # ansible_limit: only with --limit
NAMES = frozenset(HOST_NAMES + PLAY_NAMES + OTHER_NAMES)
# the ansible-core whose playbook semantics provision follows (and compares itself with: tests/compat), as
# ``ansible_version``: playbooks test it to pick a code path
ANSIBLE_VERSION = {"string": "2.19.0", "full": "2.19.0", "major": 2, "minor": 19, "revision": 0}


def run_magic(
    *,
    play_name: str,
    tags: set[str],
    skip_tags: set[str],
    forks: int,
    limit: str | None,
    verbosity: int,
    sources: list[str],
) -> dict[str, Any]:
    """The run's part of the magic layer, the same for every host and task of a play (made once per play)."""
    out: dict[str, Any] = {
        "ansible_play_name": play_name,
        "ansible_version": dict(ANSIBLE_VERSION),
        "ansible_playbook_python": sys.executable,
        "ansible_run_tags": sorted(tags) or ["all"],
        "ansible_skip_tags": sorted(skip_tags),
        "ansible_forks": forks,
        "ansible_inventory_sources": [s if "," in s and not os.path.exists(s) else os.path.abspath(s) for s in sources],
        "ansible_verbosity": verbosity,
    }
    if limit:
        out["ansible_limit"] = limit  # undefined without --limit, as in Ansible
    return out


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
    run: Mapping[str, Any]  # run_magic(): the play's name, tags, forks, ... the same for every host


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
        "omit": templating.OMIT,  # an argument rendered to it is left out (the task runner)
        "inventory_file": known.source if known else None,
        "inventory_dir": os.path.dirname(known.source) if known and known.source else None,
    }
    if play is not None:
        magic.update(play.run)
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
