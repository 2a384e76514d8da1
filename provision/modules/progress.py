"""Progress of a long wait, for the human output: ``waiting for <what> (20s of 900s)`` every WAIT_EVERY seconds
while a module blocks on the host (a server's ``/health``, SGLang's command-line check, a port), so a minute of
waiting is never a silent minute.

:class:`Waiting` is a context manager around the blocking call; its lines go to ``ctx.progress``, the channel
every long module reports on (the reporter shows them as ``  .. [host] ...``; ``--json``'s document has none,
an API listener gets them as :class:`provision.events.Progress`). A wait shorter than WAIT_EVERY says nothing.
The lines come from a thread of their own, which ends with the wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

WAIT_EVERY = 10.0  # seconds between two "waiting for" lines of one wait


class Waiting:
    """``with Waiting(ctx.progress, "p0 to answer http://.../health", timeout=900):`` the blocking call."""

    def __init__(
        self, progress: Callable[[str], None] | None, what: str, *, timeout: float | None = None,
        every: float | None = None, line: Callable[[float], str | None] | None = None,
    ) -> None:  # fmt: skip
        self.progress, self.what, self.timeout = progress, what, timeout
        self.every = WAIT_EVERY if every is None else every
        self._line = line  # the line for this many seconds (None: nothing this time), instead of "waiting for"
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = 0.0

    def line(self, elapsed: float) -> str:
        limit = f" of {self.timeout:g}s" if self.timeout else ""
        return f"waiting for {self.what} ({elapsed:.0f}s{limit})"

    def _tick(self) -> None:
        while not self._done.wait(self.every):
            text = (self._line or self.line)(time.monotonic() - self.started)
            if self.progress is not None and text:
                self.progress(text)

    def __enter__(self) -> Waiting:
        self.started = time.monotonic()
        if self.progress is not None:  # no_log, or a caller that shows no progress: no thread at all
            self._thread = threading.Thread(target=self._tick, daemon=True, name="provision-waiting")
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
