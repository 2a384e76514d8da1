"""Transport: one connection per host, reused by every task of a run.

``base`` holds the contract (``Connection``, ``AgentHost``, ``CommandResult``, ``ConnectOptions``) and what the two
implementations share; ``local`` runs commands on the controller (``ansible_connection: local``); ``ssh``
(imported only when a host needs SSH) is built on Fabric over paramiko with the safety Fabric lacks by default:

* host keys are verified against ``~/.ssh/known_hosts`` and every ``UserKnownHostsFile`` of ssh_config;
  an unknown key is refused unless ``accept_new_host_keys`` (then appended under a file lock); a changed key
  is always refused (:class:`HostKeyChanged`). Jump hosts get the same policy.
* timeouts on connect, banner, auth, channel open (also through a jump host) and on every command; a timed
  out command is killed on the host with its whole process group (see :mod:`provision.commands`).
* files are written atomically: SFTP to a temp file beside the target, chmod, then ``posix_rename``.

``agent`` is the persistent Python helper a connection starts per interpreter (one :class:`AgentPool` per
connection, SSH or local). paramiko/socket exceptions never
leave this package: they become :class:`UnreachableError` and friends.

May import: :mod:`provision.commands`, :mod:`provision.errors`, :mod:`provision.remote`. Imported by the
executor, the modules and the facts gatherer; never imports them. Inside: ``base`` ← ``agent`` ←
``local``/``ssh`` ← this ``__init__`` (``open_connection``), no circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import UnreachableError
from .base import COUNTERS, TIMEOUT_RC, AgentHost, CommandResult, Connection, ConnectOptions, has_agent
from .local import LocalConnection

__all__ = [
    "COUNTERS",
    "TIMEOUT_RC",
    "AgentHost",
    "CommandResult",
    "ConnectOptions",
    "Connection",
    "LocalConnection",
    "has_agent",
    "open_connection",
]


def open_connection(name: str, variables: Mapping[str, Any], opts: ConnectOptions) -> Connection:
    """Make the connection object for a host (lazy: nothing is contacted until the first command)."""
    kind = str(variables.get("ansible_connection", "ssh"))
    if kind == "local":
        return LocalConnection(name, run_lock=opts.run_lock, cwd=opts.local_cwd)
    if kind not in ("ssh", "paramiko", "smart"):
        raise UnreachableError(name, f"unsupported ansible_connection {kind!r} (use ssh or local)")
    from .ssh import SSHConnection  # Fabric/paramiko load only when a host needs SSH

    password = variables.get("ansible_password") or variables.get("ansible_ssh_pass")
    return SSHConnection(name, variables, opts, password=str(password) if password else None)
