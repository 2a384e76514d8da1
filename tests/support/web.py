"""A folder served over HTTP on loopback, for the tests of what fetches (``get_url``, ``apt`` with a deb URL, the
compat cases with a ``serve`` folder)."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class QuietFiles(SimpleHTTPRequestHandler):
    """The stdlib's file handler, without its request log on stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def served_folder(folder: Path, handler: type[SimpleHTTPRequestHandler] = QuietFiles) -> Iterator[str]:
    """``folder`` over HTTP on a free port of 127.0.0.1 (``handler``: a :class:`QuietFiles` of the test's own)
    while the block runs: its base URL. The server is shut and its thread joined afterwards."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, name=f"http-{folder.name}", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
