"""Inventories, Ansible's inventory stage: YAML and INI files, directories, ``group_vars``/``host_vars``, ranges,
precedence, ``--limit`` patterns; with ``trace=True``, where each host var came from.

- ``data`` — :class:`Host`, :class:`Group`, host ranges (:func:`expand_hosts`), ``MAX_DEPTH``.
- ``sources`` — the builder over the YAML and INI sources and the ``group_vars``/``host_vars`` files.
- ``manager`` — :class:`Inventory` (Ansible's InventoryManager): loading, patterns.
- ``host_checks`` — the checks of a host's connection vars (``CONNECTIONS``, the port, ``ansible_host``).

Imports only ``yamlfile``, ``yamlsafe`` and ``errors``.
"""

from .data import MAX_DEPTH, MAX_HOSTS_PER_PATTERN, Group, Host, expand_hosts, nesting_too_deep
from .host_checks import CONNECTIONS
from .manager import Inventory

__all__ = [
    "CONNECTIONS",
    "MAX_DEPTH",
    "MAX_HOSTS_PER_PATTERN",
    "Group",
    "Host",
    "Inventory",
    "expand_hosts",
    "nesting_too_deep",
]
