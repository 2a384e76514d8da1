"""The ssh_config a run connects with (provision.transport.session.config): the same lookups as paramiko's
(Host blocks, Match blocks, the first value wins), parsed once per process while the file stays the same, and a
lookup that costs no passwd read per block (a fleet's ssh_config with one Host block per host: hosts x blocks
of them were most of a 256-host run's controller CPU)."""

from __future__ import annotations

import fnmatch
import getpass
import os
from pathlib import Path

import paramiko
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.transport import session
from provision.transport.base import ConnectOptions


def _write(path: Path, hosts: int, extra: str = "") -> None:
    blocks = [f"Host h{i}\n  HostName 10.0.{i // 250}.{i % 250}\n  Port {2000 + i}\n" for i in range(hosts)]
    path.write_text("\n".join(blocks) + extra)


def _lookup(path: Path, host: str) -> dict[str, object]:
    return dict(session.config(ConnectOptions(ssh_config=str(path))).base_ssh_config.lookup(host))


def test_the_same_answers_as_paramiko_match_blocks_included(tmp_path: Path) -> None:
    path = tmp_path / "ssh_config"
    me = getpass.getuser()
    _write(
        path,
        20,
        f"\nMatch user {me}\n  IdentityFile ~/.ssh/fleet\nMatch user nobody-else\n  Port 9\nHost *\n  User ops\n",
    )
    plain = paramiko.SSHConfig.from_path(str(path))
    for host in ("h0", "h7", "h19", "other.example"):
        assert _lookup(path, host) == dict(plain.lookup(host)), host
    assert _lookup(path, "h7")["port"] == "2007" and _lookup(path, "other.example")["user"] == "ops"


def test_a_lookup_reads_no_passwd_entry_per_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ssh_config"
    _write(path, 300)
    calls: list[int] = []
    real = getpass.getuser
    monkeypatch.setattr(getpass, "getuser", lambda: calls.append(1) or real())
    assert _lookup(path, "h299")["hostname"] == "10.0.1.49"
    assert len(calls) <= 2, len(calls)  # its tokens, once a pass; paramiko alone: one per block tried too (602)


def test_host_patterns_match_as_paramiko_s_wildcards_negations_and_lists_included(tmp_path: Path) -> None:
    path = tmp_path / "ssh_config"
    blocks = ("Host *.example !bad.example\n  User wild", "Host web? [ab]x\n  Port 2222",
              "Host !h3,h*\n  IdentityFile ~/.ssh/other", "Host h1 alias1\n  User twice",
              "Host *\n  User ops")  # fmt: skip
    _write(path, 10, "\n" + "\n".join(blocks) + "\n")
    plain = paramiko.SSHConfig.from_path(str(path))
    hosts = ("h0", "h1", "h3", "h9", "alias1", "x.example", "bad.example", "web1", "web12", "ax", "cx", "h1*", "!h3")
    for host in hosts:
        assert _lookup(path, host) == dict(plain.lookup(host)), host
    assert _lookup(path, "bad.example")["user"] == "ops" and _lookup(path, "x.example")["user"] == "wild"


def test_a_lookup_compares_a_literal_host_pattern_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block per host: a literal pattern is compared as a string, only a wildcard goes to fnmatch (paramiko:
    one fnmatch per pattern, twice per block per host; 302 blocks here)."""
    path = tmp_path / "ssh_config"
    _write(path, 300, "\nHost *.example\n  User wild\nHost *\n  User ops\n")
    session.config(ConnectOptions(ssh_config=str(path)))  # parsed before counting
    calls: list[str] = []
    real = fnmatch.fnmatch
    monkeypatch.setattr(fnmatch, "fnmatch", lambda name, pattern: calls.append(pattern) or real(name, pattern))
    assert _lookup(path, "h299")["port"] == "2299"
    assert sorted(set(calls)) == ["*", "*.example"] and len(calls) <= 8, calls[:10]  # paramiko alone: 600+


def test_parsed_once_and_again_when_the_file_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ssh_config"
    _write(path, 3)
    parses: list[int] = []
    real = paramiko.SSHConfig.parse
    monkeypatch.setattr(paramiko.SSHConfig, "parse", lambda self, fh: parses.append(1) or real(self, fh))
    for _ in range(5):
        assert _lookup(path, "h1")["port"] == "2001"
    assert len(parses) == 1
    path.write_text("Host h1\n  Port 2222\n")
    os.utime(path, ns=(0, 1))  # a different mtime even within the clock's resolution
    assert _lookup(path, "h1")["port"] == "2222"
    assert len(parses) == 2


def test_a_lookup_tries_only_the_blocks_that_may_match(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One Host block per host (1,000 here): a lookup tries the host's own block and the blocks with wildcards,
    negations or Match criteria, not the other hosts' (paramiko tried all of them: 2,003 per pass)."""
    path = tmp_path / "ssh_config"
    _write(path, 1000, "\nHost *.example\n  User wild\nMatch originalhost h5*\n  User five\nHost *\n  User ops\n")
    session.config(ConnectOptions(ssh_config=str(path)))  # parsed (and indexed) before counting
    tried: list[object] = []
    real = session._SSHConfig._pattern_matches
    monkeypatch.setattr(session._SSHConfig, "_pattern_matches", lambda s, p, t: tried.append(p) or real(s, p, t))
    assert _lookup(path, "h555") == {"hostname": "10.0.2.55", "port": "2555", "user": "five"}
    blocks = [p for p in tried if isinstance(p, list)]  # a block's Host patterns (a Match criterion's are text)
    assert len(blocks) == 2 * 5, blocks  # two passes over: the global section, h555, *.example, Match, Host *


def test_canonicalization_turns_the_index_off(tmp_path: Path) -> None:
    """A name may change mid-lookup (CanonicalizeHostname): every block is tried, as paramiko does."""
    path = tmp_path / "ssh_config"
    _write(path, 5, "\nHost h2\n  CanonicalizeHostname no\n")
    config = session.config(ConnectOptions(ssh_config=str(path))).base_ssh_config
    assert isinstance(config, session._SSHConfig) and config._index is None
    plain = paramiko.SSHConfig.from_path(str(path))
    assert all(_lookup(path, h) == dict(plain.lookup(h)) for h in ("h1", "h2", "x"))


NAMES = ("h0", "h1", "h2", "web1", "db.example", "x")
PATTERNS = st.sampled_from([*NAMES, "h*", "*.example", "!h1", "web?", "[hx]0", "*", "h1,h2", "!*.example"])
OPTIONS = st.sampled_from(["User a", "User b", "Port 2201", "Port 2202", "IdentityFile ~/.ssh/k1",
                           "IdentityFile ~/.ssh/k2", "HostName 10.9.9.9", "ProxyJump j1"])  # fmt: skip
MATCHES = st.sampled_from(["all", "host h*", "host !h1,*", "originalhost db.example", "user nobody-else", "final"])
BLOCK = st.one_of(
    st.builds(lambda ps, os_: "Host " + " ".join(ps) + "".join(f"\n  {o}" for o in os_),
              st.lists(PATTERNS, min_size=1, max_size=3), st.lists(OPTIONS, max_size=3)),
    st.builds(lambda m, os_: f"Match {m}" + "".join(f"\n  {o}" for o in os_), MATCHES, st.lists(OPTIONS, max_size=2)),
)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(globals_=st.lists(OPTIONS, max_size=2), blocks=st.lists(BLOCK, max_size=8))
def test_indexed_lookups_are_paramiko_s(tmp_path: Path, globals_: list[str], blocks: list[str]) -> None:
    """Differential: any mix of global options, literal, wildcard, negated and listed Host patterns and Match
    blocks gives every name the same answer as paramiko's own lookup (the first value wins, IdentityFiles add
    up)."""
    path = tmp_path / f"ssh_config.{len(list(tmp_path.iterdir()))}"
    path.write_text("".join(o + "\n" for o in globals_) + "\n".join(blocks) + "\n")
    plain = paramiko.SSHConfig.from_path(str(path))
    for host in (*NAMES, "other"):
        assert _lookup(path, host) == dict(plain.lookup(host)), (host, path.read_text())
