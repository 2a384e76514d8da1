"""The checks of the vars a host is reached with, before any host is contacted: ``ansible_port`` a port number,
``ansible_connection`` one provision can open, the others text, ``ansible_host`` a name a resolver can take.

Each problem raises ``InventoryError`` naming the host, and says when the value came from ``-e``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provision.errors import InventoryError

from .data import _DIGITS, Host


def check_port(host: Host, extra_vars: Mapping[str, Any]) -> None:
    """``ansible_port``: an int or a string of digits, 1-65535 (not a template: it is read as is)."""
    port = host.vars.get("ansible_port")
    if port is None:
        return
    text = str(port).strip() if isinstance(port, (int, str)) and not isinstance(port, bool) else ""
    if _DIGITS.fullmatch(text) and 1 <= int(text) <= 65535:
        return
    origin = " (from -e)" if "ansible_port" in extra_vars else ""
    raise InventoryError(f"host {host.name}: ansible_port {port!r}{origin} is not a port number (1-65535)")


CONNECTIONS = ("ssh", "paramiko", "smart", "local")  # what provision.transport.open_connection accepts
_SCALAR_CONNECTION_VARS = ("ansible_host", "ansible_user", "ansible_ssh_private_key_file", "ansible_python_interpreter")


def check_connection_vars(host: Host, extra_vars: Mapping[str, Any]) -> None:
    """The connection vars a host is reached with: a known ``ansible_connection``, text for the others."""
    kind = host.vars.get("ansible_connection")
    if kind is not None and kind not in CONNECTIONS:
        origin = " (from -e)" if "ansible_connection" in extra_vars else ""
        raise InventoryError(
            f"host {host.name}: ansible_connection {kind!r}{origin} is not one of {', '.join(CONNECTIONS)}"
        )
    for name in _SCALAR_CONNECTION_VARS:
        value = host.vars.get(name)
        origin = " (from -e)" if name in extra_vars else ""
        key_file_number = name == "ansible_ssh_private_key_file" and isinstance(value, (int, float))
        if isinstance(value, (dict, list, bool)) or key_file_number:
            raise InventoryError(f"host {host.name}: {name} must be a string, got {value!r}{origin}")
        if name == "ansible_host" and isinstance(value, str) and "{" not in value:
            problem = _host_name_problem(value)
            if problem:
                raise InventoryError(f"host {host.name}: ansible_host {value[:80]!r}{origin} {problem}")


def _host_name_problem(name: str) -> str:
    """Why ``name`` cannot be connected to as a host name ("" when it can be tried): the IDNA encoding a
    resolver needs fails for empty or over-long labels (``a..b``, 64+ characters between dots)."""
    if name.count(":") == 1:
        return "holds a port: give it as ansible_port"
    if not name.strip() or name.startswith("[") or ":" in name:  # empty: the inventory name; IPv6 literals
        return ""
    if any(ord(c) < 33 or ord(c) == 127 for c in name):
        return "has a space or a control character"
    try:
        name.encode("idna")
    except UnicodeError:
        return "is not a valid host name (an empty or over-long label)"
    return ""
