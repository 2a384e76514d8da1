"""``apt_repository``'s host side against ansible-core's own functions: how a line is read (enabled, comment,
whitespace) and which file a new source goes to (``SourcesList._parse`` and ``_suggest_filename``, called on
the module's class). The whole module is compared on an APT root of its own in case ``mod_apt_repository``."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from ansible.modules.apt_repository import SourcesList

from provision import remote

sys.path.insert(0, str(remote.REMOTE_DIR))
import apt_repository  # the shipped script, imported as a host would run it

LINES = [
    "deb http://deb.debian.org/debian bookworm main",
    "deb   http://deb.debian.org/debian   bookworm  main  ",
    "# deb http://deb.debian.org/debian bookworm-backports main",
    "#deb-src http://x/y z main # a comment",
    "deb [arch=amd64 signed-by=/k.gpg] https://user:pw@repo.example.com/debian stable main # c # d",
    "# just a comment",
    "",
    "deb-src file:///srv/repo ./",
    "rpm http://x y z",
]


@pytest.mark.parametrize("line", LINES)
def test_a_line_is_read_as_ansible_reads_it(line: str) -> None:
    assert apt_repository.parse(line) == SourcesList._parse(None, line)


@pytest.mark.parametrize("filename", [None, "nvidia", "cuda-debian12"])
@pytest.mark.parametrize("line", [line for line in LINES if line.startswith("deb")])
def test_a_new_source_goes_to_the_file_ansible_picks(line: str, filename: str | None) -> None:
    source = SourcesList._parse(None, line)[2]
    fake = SimpleNamespace(module=SimpleNamespace(params={"filename": filename}))
    assert apt_repository.suggest_filename(source, filename) == SourcesList._suggest_filename(fake, source)
