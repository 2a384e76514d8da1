"""The run's connections: each host's ONE connection, opened on first use, kept for every later task and
reopened when a play logs in as another user or through another connection type; each handed out watched by
the batched state checks (:mod:`.prefetch`)."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from ..errors import UnreachableError
from ..inventory import Inventory
from ..state import RunOptions
from ..transport import Connection, LocalConnection, open_connection
from .prefetch import Prefetch


class Connections:
    def __init__(self, inventory: Inventory, options: RunOptions, prefetch: Prefetch, local_cwd: str) -> None:
        self._inventory = inventory
        self._options = options
        self._local_cwd = local_cwd  # a local connection's relative paths start there (the playbook's directory)
        self._prefetch = prefetch
        self._conns: dict[str, Connection] = {}
        self._lock = threading.Lock()
        self._opened_as: dict[str, Any] = {}  # the (user, connection) each kept connection was opened with
        self.remote_user: str | None = None  # the play's remote_user (under the inventory's ansible_user)
        self.play_connection: str | None = None  # the play's connection (under the inventory's)

    def get(self, host: str) -> Connection:
        """The host's connection, opened now if it has none (or one opened as another user/connection type)."""
        with self._lock:
            conn = self._conns.get(host)
            variables = self._inventory.connection_vars(host) if host in self._inventory.hosts else {}
            user = variables.get("ansible_user") or self.remote_user
            kind = variables.get("ansible_connection") or self.play_connection
            if conn is not None and self._opened_as.get(host) != (user, kind):  # another play's user/connection
                conn.close()
                conn = None
            if conn is None:
                # a run holds each host's run lock while connected: no two runs ever overlap on a host
                if host in self._inventory.hosts:
                    opts = dataclasses.replace(
                        self._options.connect, run_lock=self._options.run_lock, local_cwd=self._local_cwd
                    )
                    if user and not variables.get("ansible_user"):
                        variables = {**variables, "ansible_user": user}
                    if kind and not variables.get("ansible_connection"):
                        variables = {**variables, "ansible_connection": kind}
                    conn = open_connection(host, variables, opts)
                elif host in ("localhost", "127.0.0.1"):
                    conn = LocalConnection(host, cwd=self._local_cwd)  # the controller (delegate_to), not a host
                else:
                    raise UnreachableError(host, "not in the inventory")
                self._conns[host] = conn
                self._opened_as[host] = (user, kind)
            return self._prefetch.watch(conn)

    def opened(self, host: str) -> Connection | None:
        """The host's connection when one is open already (never opens one)."""
        return self._conns.get(host)

    def drop(self, host: str) -> None:
        """``meta: reset_connection``: the host's connection closed; the next task opens a new one."""
        with self._lock:
            conn = self._conns.pop(host, None)
        if conn is not None:
            conn.close()

    def close_all(self) -> None:
        with self._lock:
            conns = list(self._conns.values())
        for conn in conns:
            conn.close()

    def commands_run(self) -> dict[str, int]:
        """Remote round trips per host (commands and calls to the persistent python helper)."""
        return {h: c.commands_run for h, c in self._conns.items()}
