"""``apt_key``'s host side against ansible-core's own functions: how an id is read (``parse_key_id``) and which
keys a listing holds (``parse_output_for_keys``); the arguments refused before any host. The whole module is
compared with ansible-core's, as root on keyring files of its own, in case ``mod_apt_key``."""

from __future__ import annotations

import sys

import pytest
from ansible.modules import apt_key as ansible_apt_key

from provision import remote
from provision.modules.apt_sources import AptKey
from provision.modules.args import ArgError

sys.path.insert(0, str(remote.REMOTE_DIR))
import apt_key  # the shipped script, imported as a host would run it

APT_KEY_LIST = """/tmp/k.gpg
-------------------------
pub   ed25519/51F00BFFEE89CDE3 2026-12-03 [SC]
      7A720A647CA464CCC975C1EC51F00BFFEE89CDE3
uid                 [ unknown] provision compat test key <compat@example.invalid>
sub   rsa4096/0123456789ABCDEF 2020-01-01 [E]
pub   rsa2048/AAAABBBBCCCCDDDD 2010-01-01 [SC] [expired: 2012-01-01]
pub   rsa2048 2010-01-01 [SC]
"""
GPG_COLONS = """pub:-:255:22:51F00BFFEE89CDE3:1796320488:::-:
uid:::::::::provision compat test key <compat@example.invalid>:
sub:-:4096:1:0123456789ABCDEF:1577836800::::
pub:e:2048:1:AAAABBBBCCCCDDDD:1262304000:1325376000:::expired
"""


@pytest.mark.parametrize(
    "key_id", ["EE89CDE3", "0xee89cde3", "51F00BFFEE89CDE3", "0x7A720A647CA464CCC975C1EC51F00BFFEE89CDE3"]
)
def test_an_id_is_read_as_ansible_reads_it(key_id: str) -> None:
    assert apt_key.parse_key_id(key_id) == ansible_apt_key.parse_key_id(key_id)


@pytest.mark.parametrize("key_id", ["not-hex", "123456789", "0x12", "None", ""])
def test_an_invalid_id_is_refused_as_ansible_refuses_it(key_id: str) -> None:
    with pytest.raises(ValueError):
        ansible_apt_key.parse_key_id(key_id)
    with pytest.raises(ValueError):
        apt_key.parse_key_id(key_id)


@pytest.mark.parametrize("output", [APT_KEY_LIST, GPG_COLONS, ""])
@pytest.mark.parametrize("short", [False, True])
def test_the_keys_of_a_listing_are_ansibles(output: str, short: bool) -> None:
    assert apt_key.parse_keys(output, short) == ansible_apt_key.parse_output_for_keys(output, short)
    assert bool(apt_key.parse_keys(output, short)) == bool(output)  # the listings are not trivially empty


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"data": "x", "url": "http://x/k"}, "mutually exclusive: data|file|keyserver|url"),
        ({"id": "EE89CDE3", "state": "gone"}, "state='gone' is not one of"),
        ({"ids": "EE89CDE3"}, "unknown argument 'ids'"),
    ],
)
def test_bad_arguments_are_refused_before_any_host(args: dict[str, object], message: str) -> None:
    with pytest.raises(ArgError, match=message):
        AptKey.validate_static(args, lambda v: isinstance(v, str) and "{{" in v)
