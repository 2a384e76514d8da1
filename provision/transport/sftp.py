"""SFTP file operations for the SSH connection: its one SFTP session, a file created private (0600, O_EXCL) from
its first byte, the :class:`~.base.FileOps` that :func:`~.base.atomic_put` writes through, a bounded whole-file
read, and a host's refusal in words."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import OutputTooLarge
from .lazy import lazy

if TYPE_CHECKING:
    import paramiko
else:
    paramiko = lazy("paramiko")

GET_MAX = 256 << 20  # bytes of one file read from a host into the controller's memory


def create_private(sftp: paramiko.SFTPClient, path: str) -> paramiko.SFTPFile:
    """Create a new file, mode 0600 from creation: SFTP open with a permissions attribute (paramiko's
    ``sftp.open`` sends none, and the server then creates it 0666 minus umask) and O_EXCL."""
    attrs = paramiko.SFTPAttributes()
    attrs.st_mode = 0o600
    flags = paramiko.sftp.SFTP_FLAG_WRITE | paramiko.sftp.SFTP_FLAG_CREATE | paramiko.sftp.SFTP_FLAG_EXCL
    kind, msg = sftp._request(paramiko.sftp.CMD_OPEN, path, flags, attrs)  # type: ignore[attr-defined]
    if kind != paramiko.sftp.CMD_HANDLE or msg is None:
        raise paramiko.SFTPError("Expected handle")
    return paramiko.SFTPFile(sftp, msg.get_binary(), "wb")


class SftpFiles:
    """:class:`~provision.transport.base.FileOps` over one SFTP session."""

    def __init__(self, sftp: paramiko.SFTPClient, stalled: Callable[[], bool]) -> None:
        self.sftp = sftp
        self.stalled = stalled

    def mode_of(self, path: str) -> int | None:
        try:
            return (self.sftp.stat(path).st_mode or 0o644) & 0o7777  # keep the mode of the file it replaces
        except FileNotFoundError:
            return None

    def create_private(self, path: str, data: bytes) -> None:
        with create_private(self.sftp, path) as fh:
            fh.set_pipelined(True)
            fh.write(data)

    def chmod(self, path: str, mode: int) -> None:
        self.sftp.chmod(path, mode)

    def rename(self, src: str, dst: str) -> None:
        self.sftp.posix_rename(src, dst)

    def remove(self, path: str) -> None:
        if not self.stalled():  # a stalled link would block here; close() cleans up what is left
            self.sftp.remove(path)


def read_all(host: str, sftp: paramiko.SFTPClient, path: str) -> bytes:
    """A file's bytes, at most :data:`GET_MAX` (a link to /dev/zero never ends): OutputTooLarge past it."""
    with sftp.open(path, "rb") as fh:
        chunks, size = [], 0
        while chunk := fh.read(1 << 20):
            size += len(chunk)
            if size > GET_MAX:
                raise OutputTooLarge(host, size, GET_MAX, f"the file {path}")
            chunks.append(chunk)
        return b"".join(chunks)


class SftpSession:
    """A connection's one SFTP session, opened on first use (and again once a failure closed it), held by one
    thread for one whole operation: a delegated task's thread and the host's own share the connection, and
    paramiko's SFTPClient is not safe for two threads at once (one thread's read of the replies can take and
    drop the other's, which then waits out its timeout)."""

    def __init__(self, channel_timeout: float) -> None:
        self.client: paramiko.SFTPClient | None = None
        self._timeout = max(channel_timeout, 60.0)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def held(self, open_client: Callable[[], paramiko.SFTPClient]) -> Iterator[paramiko.SFTPClient]:
        with self._lock:
            channel = self.client.get_channel() if self.client is not None else None
            if self.client is None or channel is None or channel.closed:  # none yet, or closed by a failure
                self.client = open_client()
                channel = self.client.get_channel()
                if channel is not None:
                    channel.settimeout(self._timeout)
            yield self.client

    def close(self) -> None:
        """Close the session (a write in progress on it fails); the next operation opens a new one."""
        client, self.client = self.client, None
        with contextlib.suppress(Exception):
            if client is not None:
                client.close()


def refusal(exc: BaseException) -> str:
    """What the host's filesystem said, in words."""
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    if reason == "Failure":  # SFTP v3 has no code for ENOSPC/EDQUOT/EROFS: OpenSSH answers "Failure"
        reason = "the host refused the write without a reason (disk full, quota or read-only filesystem?)"
    return reason
