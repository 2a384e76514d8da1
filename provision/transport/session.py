"""Opening a host's SSH session: the Fabric connection made from the host's vars and ssh_config, a jump host
opened first with the same host-key checks and channel timeout, every failure to connect said in words, and the
keepalive watchdog that closes a session whose host stopped answering.

paramiko/socket exceptions never leave this module: they become :class:`UnreachableError` and friends.
"""

from __future__ import annotations

import contextlib
import fnmatch
import heapq
import os
import re
import socket
import stat
import threading
from collections.abc import Callable, Mapping
from typing import Any

import fabric
import paramiko

from ..errors import HostKeyChanged, HostKeyUnknown, UnreachableError
from .base import ConnectOptions
from .known_hosts import RevokedKey, UnknownKey, fingerprint, secure


class _SSHConfig(paramiko.SSHConfig):
    """paramiko's ssh_config, with a ``Host`` block that has no ``Match`` criteria not a match as paramiko has it
    too, but without its cost: paramiko asks ``getpass.getuser()`` for every block it tries (a passwd lookup
    when $LOGNAME/$USER are unset, cron or systemd), so a fleet with one ``Host`` block per host paid
    hosts x blocks passwd reads: ~30 of a 256-host run's 37 controller CPU-seconds."""

    def _does_match(self, match_list: list[Any], *args: Any) -> Any:
        return match_list and super()._does_match(match_list, *args)  # type: ignore[misc]

    def _pattern_matches(self, patterns: Any, target: str) -> bool:
        """paramiko's rule, to the letter (a negated pattern that matches ends it; otherwise any match), with a
        pattern that has no wildcard compared as a string: ``fnmatch`` of such a pattern is equality on POSIX,
        and it cost ~4 us a pattern, twice per block per host (a 256-block file: ~7 ms of CPU per host)."""
        if hasattr(patterns, "split"):
            patterns = patterns.split(",")
        match = False
        for pattern in patterns:
            if pattern.startswith("!") and _host_matches(target, pattern[1:]):
                return False
            elif _host_matches(target, pattern):
                match = True
        return match

    _config: list[dict[str, Any]]  # paramiko's parsed blocks, in file order (its own attribute)
    _index: tuple[dict[str, list[int]], list[int]] | None = None

    def index(self) -> None:
        """Index the parsed blocks, so that a lookup tries only those that may match: a ``Host`` block whose
        patterns are all literal (no wildcard, no ``!``) can only match one of those names, every other block
        (wildcards, negations, ``Match``) is tried for every name. Blocks stay in file order: the first value
        obtained wins, as before. With one block per host, paramiko tried every block for every host (hosts x
        blocks: 0.93 ms of CPU per lookup at 1,024 blocks, 0.27 ms at 256; now 0.06 ms). A file that turns
        canonicalization on (a name may change mid-lookup) is not indexed: every block is tried, as paramiko does."""
        literal: dict[str, list[int]] = {}
        general: list[int] = []
        for i, block in enumerate(self._config):
            if "canonicalizehostname" in block["config"]:
                self._index = None
                return
            hosts = block.get("host")  # none: a Match block
            if not hosts or any(h.startswith("!") or _WILDCARD.search(h) for h in hosts):
                general.append(i)
            else:
                for host in dict.fromkeys(hosts):
                    literal.setdefault(host, []).append(i)
        self._index = (literal, general)

    def lookup(self, hostname: str) -> paramiko.SSHConfigDict:
        if self._index is None:
            return super().lookup(hostname)
        literal, general = self._index
        view = _SSHConfig()  # the blocks that may match, in file order; looked up by paramiko's own rules
        view._config = [self._config[i] for i in heapq.merge(literal.get(hostname, ()), general)]
        return view.lookup(hostname)


_WILDCARD = re.compile(r"[*?\[]")


def _host_matches(target: str, pattern: str) -> bool:
    return fnmatch.fnmatch(target, pattern) if _WILDCARD.search(pattern) else target == pattern


_PARSED: dict[tuple[Any, ...], paramiko.SSHConfig] = {}  # the ssh_config files as read, by their identity
_PARSED_LOCK = threading.Lock()


def _parsed(paths: tuple[str, ...]) -> paramiko.SSHConfig:
    """The files (those that exist, in order) parsed once per process while they stay the same file with the
    same size and mtime: every host's connection would parse them again (hosts x blocks at a fleet's size)."""
    key: list[Any] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            key.append((path, None))
            continue
        key.append((path, st.st_ino, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else (path, None))
    ident = tuple(key)
    with _PARSED_LOCK:
        found = _PARSED.get(ident)
    if found is None:
        found = _SSHConfig()
        for path, *known in ident:
            if known != [None]:
                with open(path) as fh:
                    found.parse(fh)
        found.index()
        with _PARSED_LOCK:
            _PARSED.clear()  # only the latest files are worth keeping
            _PARSED[ident] = found
    return found


def config(opts: ConnectOptions) -> fabric.Config:
    """Fabric's config: ssh_config from ``opts.ssh_config``, ``$PROVISION_SSH_CONFIG`` or the default files
    (``~/.ssh/config``, then ``/etc/ssh/ssh_config``, as Fabric reads them), parsed once (:func:`_parsed`)."""
    path = opts.ssh_config or os.environ.get("PROVISION_SSH_CONFIG")
    if path:
        path = os.path.expanduser(path)
        if not os.path.exists(path):
            return fabric.Config(runtime_ssh_path=path)  # Fabric's own error for a missing file
        return fabric.Config(ssh_config=_parsed((path,)))
    return fabric.Config(ssh_config=_parsed((os.path.expanduser("~/.ssh/config"), "/etc/ssh/ssh_config")))


def make(name: str, variables: Mapping[str, Any], opts: ConnectOptions, password: str | None) -> fabric.Connection:
    """The Fabric connection for a host's vars (``ansible_host``/``_user``/``_port``/``_ssh_private_key_file``),
    its ssh_config (:func:`config`) and timeouts, with host-key verification (:func:`~.known_hosts.secure`)."""
    v = variables
    host, user = str(v.get("ansible_host") or name), v.get("ansible_user")
    port = int(v["ansible_port"]) if v.get("ansible_port") else None
    key = v.get("ansible_ssh_private_key_file")
    connect_kwargs: dict[str, Any] = {
        "banner_timeout": opts.banner_timeout,
        "auth_timeout": opts.auth_timeout,
        "channel_timeout": opts.channel_timeout,
    }
    if key:
        connect_kwargs["key_filename"] = [os.path.expanduser(key)]
    if password:
        connect_kwargs["password"] = password
    conn = fabric.Connection(
        host,
        user=user,
        port=port,
        config=config(opts),
        connect_timeout=opts.connect_timeout,
        connect_kwargs=connect_kwargs,
    )
    secure(conn, opts)
    return conn


def _open(conn: fabric.Connection, opts: ConnectOptions) -> None:
    gateway = conn.gateway
    if isinstance(gateway, fabric.Connection):
        # ProxyJump: open the jump host ourselves so that it gets host-key checks and a channel timeout
        secure(gateway, opts)
        _open(gateway, opts)
        transport = gateway.client.get_transport()
        assert transport is not None
        channel = transport.open_channel(
            "direct-tcpip", (conn.host, int(conn.port)), ("", 0), timeout=opts.channel_timeout
        )
        conn.gateway = None
        conn.connect_kwargs["sock"] = channel
    conn.open()


def open_checked(conn: fabric.Connection, opts: ConnectOptions, name: str) -> None:
    """Open ``conn`` (and its jump host first); every failure as the error the user reads: a revoked, unknown or
    changed host key, failed authentication, or why it could not connect (:func:`connect_reason`)."""
    target = f"{conn.user}@{conn.host}:{conn.port}"
    try:
        _open(conn, opts)
    except RevokedKey as exc:
        raise HostKeyChanged(
            name,
            f"host key of {exc.hostname} ({exc.key.get_name()} {fingerprint(exc.key)}) is REVOKED in "
            "known_hosts: refusing to connect",
        ) from None
    except UnknownKey as exc:
        raise HostKeyUnknown(
            name,
            f"host key of {exc.hostname} ({exc.key.get_name()} {fingerprint(exc.key)}) is not in known_hosts; "
            "verify it, add it with ssh-keyscan, or rerun with --accept-new-host-keys",
        ) from None
    except paramiko.BadHostKeyException as exc:
        raise HostKeyChanged(
            name,
            f"HOST KEY FOR {exc.hostname} HAS CHANGED (got {exc.key.get_name()} "
            f"{fingerprint(exc.key)}); refusing to connect — someone may be intercepting, "
            "or the host was reinstalled: remove the old key from known_hosts after checking",
        ) from None
    except paramiko.AuthenticationException as exc:
        raise UnreachableError(name, f"authentication failed for {target}: {exc}") from None
    except UnicodeError:  # a host name the resolver cannot encode (an add_host name, say)
        raise UnreachableError(name, f"cannot connect to {target}: not a valid host name") from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise UnreachableError(name, f"cannot connect to {target}: {connect_reason(exc)}") from None


def connect_reason(exc: BaseException) -> str:
    """Why a connection failed, in words: paramiko's NoValidConnectionsError reads "[Errno None] Unable to connect
    to port 1 on 127.0.0.1" (it holds one socket error per address); the cause of those as OpenSSH says it
    ("Connection refused"), never "[Errno None]"."""
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) and exc.errors:
        return "; ".join(dict.fromkeys(connect_reason(e) for e in exc.errors.values()))
    if isinstance(exc, OSError) and exc.strerror:  # "[Errno 111] Connection refused": the words only
        return str(exc.strerror)
    text = str(exc) or type(exc).__name__
    if text.startswith(_NO_BANNER) and len(text) > len(_NO_BANNER):  # paramiko glues the socket error on
        return f"{_NO_BANNER} ({_ERRNO.sub('', text[len(_NO_BANNER) :]).strip()})"
    return text


_NO_BANNER = "Error reading SSH protocol banner"
_ERRNO = re.compile(r"^\[Errno -?\d+\] ")


def keepalive_watch(
    transport: paramiko.Transport, interval: float, stop: threading.Event, name: str, stalled: Callable[[str], None]
) -> None:
    """Keepalives WITH replies (paramiko's own never waits for one): every ``interval`` seconds a
    ``keepalive@openssh.com`` global request; no reply within ``interval`` seconds and the connection is
    closed, so whatever waits on it fails at once as unreachable (a frozen host is reported within about
    2-3 intervals, not after the command timeout); ``stalled`` is told why first. Runs beside the commands: no
    latency added to them."""

    def ask(answered: threading.Event) -> None:
        with contextlib.suppress(Exception):  # any reply counts, even "request failed"
            transport.global_request("keepalive@openssh.com", wait=True)
        answered.set()

    while not stop.wait(interval) and transport.is_active():
        answered = threading.Event()
        threading.Thread(target=ask, args=(answered,), daemon=True, name=f"provision-keepalive-{name}").start()
        if not answered.wait(interval) and not stop.is_set():
            stalled(f"the host stopped answering: no keepalive reply within {interval:g}s")
            with contextlib.suppress(Exception):
                transport.sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in send()
            with contextlib.suppress(Exception):
                transport.close()
            return
