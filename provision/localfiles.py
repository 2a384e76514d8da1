"""Files the controller writes for the user (the retry file, the debug log), never through a planted symlink.

The current directory and ``~/.cache/provision`` may hold links someone else left there
(``site.retry -> /etc/passwd``). So:

* :func:`replace_file` writes a new file under a fresh name in the same directory (``O_CREAT | O_EXCL |
  O_NOFOLLOW``, created with its final mode) and renames it over the target: a link at the target is
  replaced, never followed.
* :func:`append_private` appends to a log created ``0600`` (``O_CREAT`` with that mode, no chmod race) and
  refuses a symlink (``O_NOFOLLOW``).

Both raise ``OSError``; callers decide whether that is worth one line to the user.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def replace_file(path: str | Path, text: str | bytes, mode: int = 0o644) -> None:
    """Atomically make ``path`` a regular file holding ``text`` (UTF-8; bytes as they are), without following
    links."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8") if isinstance(text, str) else text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def append_private(path: str | Path, text: str) -> None:
    """Append ``text`` to ``path``, a file only its owner may read (created 0600; its directory 0700)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError(f"{target}: not a regular file of this user; not written")
        if st.st_mode & 0o077:
            os.fchmod(fh.fileno(), 0o600)  # a log left readable by an older version
        fh.write(text)
