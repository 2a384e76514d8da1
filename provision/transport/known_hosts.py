"""known_hosts files read as OpenSSH reads them (``sshd(8)``, SSH_KNOWN_HOSTS FILE FORMAT).

paramiko's own reader raises on a line it cannot decode (a ``@revoked`` or ``@cert-authority`` marker, a
corrupted key), which made every connection an internal error. Here each line is
``[marker] patterns keytype base64-key [comment]``:

* patterns: comma-separated host names or ``[host]:port``, wildcards ``*`` and ``?``, ``!negated`` patterns (a
  negated match excludes the host whatever else matches), and hashed names ``|1|salt|hmac-sha1``;
* ``@revoked``: that key is refused for the hosts it matches, even when another line lists it, and even with
  ``--accept-new-host-keys``; the host may still connect with a known key of another type;
* ``@cert-authority``: a host CA. paramiko's client does not take host certificates, so such lines are
  ignored: they never break the plain entries of the same file;
* a malformed line (too few fields, an unknown marker, a key that does not decode) is skipped with one
  warning naming ``file:line``, as OpenSSH does; a key type paramiko does not know is skipped silently.

Parsed files are cached per process while unchanged (size and mtime), so a fleet of N hosts parses each file
once, not N times.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import functools
import hashlib
import hmac
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import fabric
import paramiko
from paramiko.pkey import UnknownKeyType

from .base import ConnectOptions

MARKERS = ("@revoked", "@cert-authority")


def _stderr_warning(text: str) -> None:
    sys.stderr.write(f"[WARNING]: {text}\n")


WARN: Callable[[str], None] = _stderr_warning  # where "skipped a malformed line" goes


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's fingerprint of a key: ``SHA256:`` and the unpadded base64 of the SHA-256 of its blob."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class Entry:
    marker: str  # "", "@revoked" or "@cert-authority"
    patterns: tuple[str, ...]
    keytype: str
    key: paramiko.PKey
    where: str  # file:line


def _hashed_match(pattern: str, name: str) -> bool:
    parts = pattern.split("|")  # "", "1", salt, hash
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt, want = base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), want)


def _glob(pattern: str, name: str) -> bool:
    """OpenSSH's match_pattern: only ``*`` and ``?`` are special (``[`` is a plain character: ``[host]:port``)."""
    if "*" not in pattern and "?" not in pattern:
        return pattern == name  # most lines name one host: every host of a fleet is checked against every line
    return _compiled(pattern).fullmatch(name) is not None


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.DOTALL)


def matches(patterns: tuple[str, ...], name: str) -> bool:
    """Whether a line's host patterns match ``name`` (``host`` or ``[host]:port``), as OpenSSH's
    match_hostname: a negated pattern that matches excludes; else any positive match includes."""
    name = name.lower()
    found = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        hit = _hashed_match(body, name) if body.startswith("|") else _glob(body.lower(), name)
        if hit and negated:
            return False
        found = found or hit
    return found


def parse_line(line: str, where: str) -> Entry | None:
    """One line: an Entry, None for a blank line, a comment or an unknown key type; ValueError when
    malformed."""
    fields = line.split()
    if not fields or fields[0].startswith("#"):
        return None
    marker = ""
    if fields[0].startswith("@"):
        marker = fields.pop(0)
        if marker not in MARKERS:
            raise ValueError(f"unknown marker {marker[:40]!r}")
    if len(fields) < 3:
        raise ValueError("expected host patterns, a key type and a key")
    patterns, keytype, blob = fields[0], fields[1], fields[2]
    try:
        data = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the key is not base64") from None
    try:
        key = paramiko.PKey.from_type_string(keytype, data)
    except UnknownKeyType:
        return None  # e.g. a security-key type paramiko does not take: not an error, and not usable here
    except (paramiko.SSHException, ValueError, TypeError, IndexError, binascii.Error) as exc:
        raise ValueError(f"the {keytype[:40]} key does not decode ({type(exc).__name__})") from None
    return Entry(marker, tuple(p for p in patterns.split(",") if p), keytype, key, where)


@dataclass
class KnownHosts:
    entries: list[Entry] = field(default_factory=list)

    def for_host(self, name: str) -> tuple[dict[str, paramiko.PKey], set[bytes]]:
        """The plain keys for ``name`` (key type -> key; a later line wins, as paramiko's loader) and the
        blobs of its revoked keys."""
        known: dict[str, paramiko.PKey] = {}
        revoked: set[bytes] = set()
        for entry in self.entries:
            if entry.marker == "@cert-authority" or not matches(entry.patterns, name):
                continue
            if entry.marker == "@revoked":
                revoked.add(entry.key.asbytes())
            else:
                known[entry.key.get_name()] = entry.key
        return known, revoked


def read(path: str) -> KnownHosts:
    """A known_hosts file (none, or an unreadable one: no entries); malformed lines skipped with a warning."""
    out = KnownHosts()
    try:
        with open(path, "rb") as fh:
            lines = fh.read().split(b"\n")
    except OSError:
        return out
    for number, raw in enumerate(lines, 1):
        where = f"{path}:{number}"
        try:
            entry = parse_line(raw.decode("utf-8"), where)
        except (ValueError, UnicodeDecodeError) as exc:
            WARN(f"{where}: malformed known_hosts line skipped: {exc}")
            continue
        if entry is not None:
            out.entries.append(entry)
    return out


_parsed: dict[str, tuple[tuple[int, int], KnownHosts]] = {}
_parsed_lock = threading.Lock()


def cached(path: str) -> KnownHosts:
    """:func:`read`, once per process while the file is unchanged (size and mtime)."""
    try:
        st = os.stat(path)
    except OSError:
        return KnownHosts()
    stamp = (st.st_mtime_ns, st.st_size)
    with _parsed_lock:
        hit = _parsed.get(path)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        parsed = read(path)
        _parsed[path] = (stamp, parsed)
        return parsed


# -------------------------------------------------------------------------- verifying a connection
_known_hosts_lock = threading.Lock()


class AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Trust-on-first-use, as OpenSSH's ``StrictHostKeyChecking=accept-new``: save the key, under a lock; a
    revoked key is refused all the same."""

    def __init__(self, path: str, revoked: set[bytes]) -> None:
        self.path = path
        self.revoked = revoked

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if key.asbytes() in self.revoked:
            raise RevokedKey(hostname, key)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        Path(self.path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with _known_hosts_lock, open(self.path, "a", encoding="ascii") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # other provision processes append to the same file
            fh.write(line)
            fcntl.flock(fh, fcntl.LOCK_UN)
        client.get_host_keys().add(hostname, key.get_name(), key)


class RefusePolicy(paramiko.MissingHostKeyPolicy):
    def __init__(self, revoked: set[bytes]) -> None:
        self.revoked = revoked

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise (RevokedKey if key.asbytes() in self.revoked else UnknownKey)(hostname, key)


class UnknownKey(Exception):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        self.hostname = hostname
        self.key = key


class RevokedKey(UnknownKey):
    """The host presented a key a ``@revoked`` line names."""


def known_hosts_files(conn: fabric.Connection, opts: ConnectOptions) -> list[str]:
    files = list(opts.known_hosts)
    configured = conn.ssh_config.get("userknownhostsfile")
    if configured:
        files += [os.path.expanduser(p) for p in str(configured).split()]
    files.append(os.path.expanduser("~/.ssh/known_hosts"))
    return files


def secure(conn: fabric.Connection, opts: ConnectOptions) -> None:
    """Replace Fabric's trust-everything default with known_hosts verification."""
    files = known_hosts_files(conn, opts)
    client = conn.client
    known = client.get_host_keys()
    known.clear()
    port = int(conn.port or 22)
    name = conn.host if port == 22 else f"[{conn.host}]:{port}"  # how paramiko looks the server up
    revoked: set[bytes] = set()
    found: dict[str, paramiko.PKey] = {}
    for path in files:
        keys, bad = cached(path).for_host(name)
        revoked |= bad
        found.update(keys)  # a later file wins, as when the files are loaded in order
    for keytype, key in found.items():
        if key.asbytes() not in revoked:  # listed and revoked: revoked wins, as in OpenSSH
            known.add(name, keytype, key)
    if opts.accept_new_host_keys:
        client.set_missing_host_key_policy(AcceptNewPolicy(files[len(opts.known_hosts) :][0], revoked))
    else:
        client.set_missing_host_key_policy(RefusePolicy(revoked))
