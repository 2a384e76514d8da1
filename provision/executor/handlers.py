"""Notified handlers, pending per host: a notification names a handler or a ``listen`` topic, and stays
persisted on the host (``~/.provision/pending_handlers.json``) until its handler has run, so a handler notified
by a run that then failed still runs on the next run. (The executor flushes them: ``Executor._flush_handlers``.)
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable

from ..commands import Command
from ..errors import HostError
from ..playbook import Play, Task
from ..state import HostState
from ..transport import Connection

PENDING_HANDLERS = "~/.provision/pending_handlers.json"


class PendingHandlers:
    def __init__(
        self, host_state: Callable[[str], HostState], connection: Callable[[str], Connection], *, check: bool
    ) -> None:
        self._host_state = host_state
        self._connection = connection
        self._check = check  # check mode: nothing is written on the hosts
        self.handlers: list[Task] = []  # the current play's (a role included later adds its own)

    def notify(self, host: str, names: list[str]) -> None:
        """Each handler that ``names`` reach (by name or ``listen``) becomes pending on the host."""
        state = self._host_state(host)
        targets = [h.name for h in self.handlers for n in names if n == h.name or n in h.listen]
        new = [n for n in dict.fromkeys(targets) if n not in state.notified]
        if not new:
            return
        state.notified.extend(new)
        if not self._check:
            self._save(host)

    def _save(self, host: str) -> None:
        state = self._host_state(host)
        conn = self._connection(host)
        with contextlib.suppress(HostError):
            if not state.provision_dir_ready:
                conn.run(Command.of("mkdir", "-p", "-m", "700", conn.expand_path("~/.provision")), timeout=30)
                state.provision_dir_ready = True
            conn.put(json.dumps(state.notified).encode(), PENDING_HANDLERS, 0o600)

    def load(
        self,
        play: Play,
        hosts: list[str],
        each: Callable[[Callable[[str], None], list[str]], Iterable[None]],
        then: Callable[[str], None] | None = None,
    ) -> None:
        """The handlers an earlier run left pending on ``hosts`` (read once per host per run), in ``play``'s
        terms; ``each`` maps over the hosts in parallel; ``then`` runs right after on each host still active
        (the executor's read-ahead, :meth:`~.prefetch.Prefetch.behind_contact`)."""

        def load(host: str) -> None:
            read(host)
            if then is not None and self._host_state(host).active:
                then(host)

        def read(host: str) -> None:
            state = self._host_state(host)
            if state.pending_loaded or not state.active:
                return
            state.pending_loaded = True
            with contextlib.suppress(HostError, ValueError):
                raw = self._connection(host).get(PENDING_HANDLERS)
                if raw:
                    names = [n for n in json.loads(raw) if isinstance(n, str)]
                    for handler in play.handlers:
                        if (handler.name in names or set(handler.listen) & set(names)) and (
                            handler.name not in state.notified
                        ):
                            state.notified.append(handler.name)

        self.handlers = play.handlers
        list(each(load, hosts))

    def ran(self, host: str) -> None:
        """A handler ran on the host: what is still pending there is written back (the file removed when none)."""
        if self._check:
            return
        state = self._host_state(host)
        with contextlib.suppress(HostError):
            if state.notified:
                self._save(host)
            else:
                conn = self._connection(host)
                conn.run(Command.of("rm", "-f", conn.expand_path(PENDING_HANDLERS)), timeout=30)
