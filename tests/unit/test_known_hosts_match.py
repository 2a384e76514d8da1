"""known_hosts host patterns as OpenSSH's match_hostname reads them (provision.transport.known_hosts.matches):
only ``*`` and ``?`` are special, ``[host]:port`` is plain text, case does not matter, a negated match excludes.
A pattern without a wildcard is compared as text (every host of a fleet is checked against every line)."""

from __future__ import annotations

import pytest

from provision.transport.known_hosts import matches


@pytest.mark.parametrize(("patterns", "name", "want"), [
    (("host",), "host", True),
    (("HOST",), "Host", True),
    (("a.b",), "axb", False),  # a dot is a dot
    (("*.lab",), "a.lab", True),
    (("*.lab",), "a.lab.x", False),
    (("h?st",), "host", True),
    (("h?st",), "hoost", False),
    (("[127.0.0.1]:2222",), "[127.0.0.1]:2222", True),  # [ is a plain character
    (("[127.0.0.1]:2222",), "[127.0.0.1]:2223", False),
    (("[127.0.0.1]:*",), "[127.0.0.1]:2223", True),
    (("*", "!bad"), "bad", False),
    (("*", "!bad"), "good", True),
    (("other", "host"), "host", True),
    (("(a|b)",), "a", False),  # no regular expression gets through
])  # fmt: skip
def test_patterns_match_as_openssh_reads_them(patterns: tuple[str, ...], name: str, want: bool) -> None:
    assert matches(patterns, name) is want
