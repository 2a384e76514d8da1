"""Symbolic modes (provision/modules/modes.py) against ansible-core's own implementation, the reference: every mode
below, applied to files and directories of several starting modes under several umasks, must give the same bits."""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from ansible.module_utils.basic import AnsibleModule

from provision.modules.base import ArgError
from provision.modules.modes import PreserveMode, SymbolicMode, apply_symbolic, parse_mode, resolve_mode

MODES = [
    "u+x", "go-w", "a+X", "u=rwX,g=rX,o=", "+x", "-w", "=r", "o-rwx", "u+s", "g+s,o+t", "a-s", "u=g", "go=u",
    "u+rw-x+X", "a=rwx", "g=", "ug+w,o-r", "u-x,g+x", "+X", "=rX", "u=rwx,g=u-w,o=g",
]  # fmt: skip
STARTS = [0o644, 0o600, 0o755, 0o700, 0o000, 0o4755, 0o1777, 0o2750]


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def ansible(mode: str, start: int, is_dir: bool) -> int:
    kind = stat.S_IFDIR if is_dir else stat.S_IFREG
    fake = os.stat_result((kind | start, 0, 0, 1, 0, 0, 0, 0, 0, 0))
    return int(AnsibleModule._symbolic_mode_to_octal(fake, mode))


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_every_mode_as_ansible_computes_it(mask: int) -> None:
    differ = []
    with umask(mask):
        for mode, start, is_dir in itertools.product(MODES, STARTS, (False, True)):
            assert isinstance(parse_mode(mode), (SymbolicMode, int)), mode
            ours, theirs = apply_symbolic(mode, start, is_dir, mask), ansible(mode, start, is_dir)
            if ours != theirs:
                differ.append(f"{mode} on {start:o} dir={is_dir}: provision {ours:o}, ansible {theirs:o}")
    assert differ == []


def test_absolute_forms_are_numbers_and_relative_ones_wait_for_the_file() -> None:
    assert parse_mode("u=rw,g=r,o=") == 0o640 and parse_mode("a=rx") == 0o555 and parse_mode("0755") == 0o755
    assert isinstance(parse_mode("u+x"), SymbolicMode) and isinstance(parse_mode("u=rw,g=r"), SymbolicMode)
    for bad in ("u+z", "x+u", "u=gw", "ua+x", "u+x,", "rw"):
        with pytest.raises(ArgError):
            parse_mode(bad)


def test_resolved_against_the_file_or_a_new_one() -> None:
    existing = {"exists": True, "mode": 0o600, "ftype": "file", "umask": 0o022}
    assert resolve_mode(SymbolicMode("go+r"), existing) == 0o644
    assert resolve_mode(SymbolicMode("a+X"), {**existing, "ftype": "directory"}) == 0o711
    missing = {"exists": False, "umask": 0o027}
    assert resolve_mode(SymbolicMode("u+x"), missing) == 0o740  # 0666 less the umask, then u+x
    assert resolve_mode(SymbolicMode("o+X"), missing, 0o777) == 0o751  # a new directory
    assert resolve_mode(0o644, missing) == 0o644 and resolve_mode(None, missing) is None


def test_preserve_is_for_copy_and_template_only() -> None:
    assert isinstance(parse_mode("preserve"), PreserveMode)  # copy/template put the source's mode in its place
    with pytest.raises(ArgError, match="only for copy"):
        resolve_mode(PreserveMode("preserve"), {"exists": True, "mode": 0o644})


@pytest.mark.parametrize("mode", ["u+x", "preserve"])
def test_get_url_and_unarchive_refuse_a_mode_they_cannot_resolve(mode: str) -> None:
    from provision.modules.transfer import GetUrl, Unarchive

    with pytest.raises(ArgError, match="depends on the file's current mode"):
        GetUrl.validate_static({"url": "https://x/y", "dest": "/tmp/y", "mode": mode}, lambda _: False)
    with pytest.raises(ArgError, match="depends on the file's current mode"):
        Unarchive.validate_static({"src": "a.tgz", "dest": "/tmp", "mode": mode}, lambda _: False)
