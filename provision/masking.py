"""Registering the secret values of variables with :data:`provision.commands.MASKER`, as rendered for a host.

Used by the executor (the inventory's and -e secrets, before any host is contacted), the task runner (each
task's variables) and the CLI (``provision inventory``). Imports templating, the inventory and the masker.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from . import templating
from .commands import MASKER
from .errors import TemplateError
from .inventory import Inventory

_registering = threading.local()
# magic variables (provision.magic) that hold only host names, group names and paths: never a secret, and
# walking them (lists of every host) for each task on each host made a task cost O(hosts²)
NAMES_ONLY = frozenset({
    "inventory_hostname", "inventory_hostname_short", "group_names", "groups", "ansible_play_hosts",
    "ansible_play_batch", "play_hosts", "ansible_play_hosts_all", "playbook_dir", "omit", "hostvars",
})  # fmt: skip


def register_secrets(variables: templating.Vars, no_log: Iterable[str] = ()) -> None:
    """Register with MASKER the secret-named values of one host's ``variables`` (names matching
    token/password/passwd/secret, or listed in ``no_log``; at any depth) AS RENDERED for that host:
    ``db_password: "{{ vault_db }}"`` registers vault_db's value. A template that cannot be rendered for the
    host (an undefined var) registers nothing. Re-entrant calls (rendering a secret that reads ``hostvars``
    builds another host's vars) are skipped: that host registers its own secrets when its vars are used."""
    if getattr(_registering, "active", False):
        return
    _registering.active = True

    def render(text: object) -> object:
        try:
            return templating.render(text, variables, where="a secret variable")
        except TemplateError:
            return None

    text: dict[str, Any] = {}
    data: dict[str, Any] = {}
    for k, v in variables.raw().items():  # one pass (every task on every host walks every variable)
        if k not in NAMES_ONLY:
            (data if variables.is_inert(k) else text)[k] = v
    try:
        # only the inventory's/playbook's own text is rendered; a secret that came from a host (a registered
        # result, a set_fact of it) is data: registered as it is, never rendered (docs/security.md)
        MASKER.add_vars(text, no_log, render)
        MASKER.add_vars(data, no_log, lambda text: text)
    finally:
        _registering.active = False


def register_inventory_secrets(inventory: Inventory, extra_vars: dict[str, Any]) -> None:
    """Register the secrets of every inventory host and of the extra vars, before any host is contacted."""
    MASKER.add_vars(extra_vars)
    for group in inventory.groups.values():
        MASKER.add_vars(group.vars)
    for host in inventory.hosts.values():
        register_secrets(templating.Vars(host.vars))
