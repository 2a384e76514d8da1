"""``git``'s ssh command: host keys stay checked whatever the playbook asks."""

from __future__ import annotations

import shlex

from provision.catalog import lookup
from provision.modules.git_mod import _ssh_command


def _args(**given: object) -> dict[str, object]:
    cls = lookup("git")
    assert cls is not None
    raw = {"repo": "git@example.com:x.git", "dest": "/tmp/x", **given}
    return cls.coerce(cls.validate_static(raw, lambda v: False))


def test_accept_hostkey_learns_a_new_key_and_never_turns_checking_off() -> None:
    for flag in ("accept_hostkey", "accept_newhostkey"):
        words = shlex.split(_ssh_command(_args(**{flag: True})) or "")
        assert words == ["ssh", "-o", "StrictHostKeyChecking=accept-new"], words
    assert _ssh_command(_args()) is None  # nothing asked: git's own ssh, the host's known_hosts
    keyed = shlex.split(_ssh_command(_args(key_file="/k/id x", accept_hostkey=True)) or "")
    assert keyed == ["ssh", "-i", "/k/id x", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=accept-new"]
