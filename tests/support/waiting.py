"""Waiting in tests: poll until a check holds (bounded), a URL's HTTP status, a free loopback port."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any


def until(what: str, check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.25) -> Any:
    """``check()``'s first truthy value, polled every ``interval`` seconds; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {value!r})")


def http_status(url: str) -> int | None:
    """The HTTP status ``url`` answers with (an error status too), None when nothing answers within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None


def free_port() -> int:
    """A loopback TCP port free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
