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
