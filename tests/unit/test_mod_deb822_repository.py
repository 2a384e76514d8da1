"""``deb822_repository``'s host side: field names and values against ansible-core's own formatting functions, and
the files it writes in folders of the test's own (the module's paths are ``/etc/apt``: the whole module is
compared with ansible-core's, as root, in case ``mod_deb822_repository``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from ansible.modules import deb822_repository as ansible_deb822

from provision import remote
from provision.modules.apt_sources import DEB822_BOOLS, DEB822_LISTS, Deb822Repository
from provision.modules.args import ArgError

sys.path.insert(0, str(remote.REMOTE_DIR))
import deb822_repository  # the shipped script, imported as a host would run it

KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBGJ\n  =abcd\n-----END PGP PUBLIC KEY BLOCK-----\n"


@pytest.mark.parametrize("arg", sorted(set(Deb822Repository.args) - {"mode", "state"}))
def test_a_field_is_named_as_ansible_names_it(arg: str) -> None:
    assert deb822_repository.field_name(arg) == ansible_deb822.format_field_name(arg)


def test_every_deb822_argument_of_ansible_is_known() -> None:
    import inspect

    source = inspect.getsource(ansible_deb822.main)
    for arg in (*DEB822_LISTS, *DEB822_BOOLS, "date_max_future", "inrelease_path", "name", "signed_by"):
        assert f"'{arg}'" in source


@pytest.mark.parametrize("value", [KEY, "one\n\n two \nthree", "  a\n"])
def test_a_value_of_several_lines_is_continued_as_ansible_does(value: str) -> None:
    assert deb822_repository.multiline(value) == ansible_deb822.format_multiline(value)


def test_slug_as_ansible_makes_it() -> None:
    assert deb822_repository.slug_of("CUDA  repo_Debian 12!") == "cuda-repo-debian-12"


@pytest.fixture
def apt_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "sources.list.d").mkdir()
    monkeypatch.setattr(deb822_repository, "SOURCES_DIR", str(tmp_path / "sources.list.d"))
    monkeypatch.setattr(deb822_repository, "KEYRINGS_DIR", str(tmp_path / "keyrings"))
    return tmp_path


def _req(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "name": "Example Repo",
        "types": ["deb"],
        "uris": ["https://example.org/debian"],
        "suites": ["stable"],
    }
    base |= fields
    return {"name": "Example Repo", "state": "present", "mode": 0o644, "fields": base}


def test_present_writes_the_paragraph_then_finds_it_there(apt_root: Path) -> None:
    req = _req(components=["main", "contrib"], enabled=False, date_max_future=10, signed_by=KEY)
    first = deb822_repository.apply(req)
    dest = apt_root / "sources.list.d" / "example-repo.sources"
    assert first["changed"] is True and first["dest"] == str(dest) and first["key_filename"] is None
    text = dest.read_text()
    assert text == first["repo"]
    head = ["Components: main contrib", "Date-Max-Future: 10", "Enabled: no", "X-Repolib-Name: Example Repo"]
    assert text.splitlines()[:5] == [*head, "Signed-By:"]  # sorted by argument name, as Ansible's
    assert "    .\n" in text and text.endswith("Suites: stable\nTypes: deb\nURIs: https://example.org/debian\n")
    assert dest.stat().st_mode & 0o7777 == 0o644
    assert deb822_repository.apply(req)["changed"] is False
    assert deb822_repository.apply(req | {"mode": 0o600})["changed"] is True
    assert dest.stat().st_mode & 0o7777 == 0o600


def test_check_mode_writes_nothing(apt_root: Path) -> None:
    answer = deb822_repository.apply(_req() | {"check": True})
    assert answer["changed"] is True
    assert not list((apt_root / "sources.list.d").iterdir())


def test_a_key_url_is_fetched_into_the_keyrings_folder_and_absent_removes_both(apt_root: Path) -> None:
    served = apt_root / "key.asc"
    served.write_text(KEY)
    answer = deb822_repository.apply(_req(signed_by=served.as_uri()))
    key_file = apt_root / "keyrings" / "example-repo.asc"
    assert answer["changed"] is True and answer["key_filename"] == str(key_file)
    assert key_file.read_text() == KEY and key_file.stat().st_mode & 0o7777 == 0o644
    assert (apt_root / "keyrings").stat().st_mode & 0o7777 == 0o755
    assert f"Signed-By: {key_file}\n" in answer["repo"]
    assert deb822_repository.apply(_req(signed_by=served.as_uri()))["changed"] is False
    gone = deb822_repository.apply({"name": "Example Repo", "state": "absent", "check": True})
    assert gone["changed"] is True and key_file.exists()
    gone = deb822_repository.apply({"name": "Example Repo", "state": "absent"})
    assert gone == {"changed": True, "repo": None, "dest": answer["dest"],
                    "key_filename": str(apt_root / "keyrings" / "example-repo.gpg")}  # fmt: skip
    assert not key_file.exists() and not os.path.exists(answer["dest"])
    assert deb822_repository.apply({"name": "Example Repo", "state": "absent"})["changed"] is False


def test_a_key_path_that_exists_is_kept_and_a_missing_url_fails(apt_root: Path) -> None:
    key = apt_root / "k.gpg"
    key.write_bytes(b"\x99binary")
    assert f"Signed-By: {key}\n" in deb822_repository.apply(_req(signed_by=str(key)))["repo"]
    with pytest.raises(deb822_repository.Failed, match=r"^Could not fetch signed_by key: "):
        deb822_repository.apply(_req(signed_by=(apt_root / "missing.asc").as_uri()))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"name": "x", "types": ["deb", "rpm"]}, "types='rpm' is not one of"),
        ({"name": "x", "mode": "u+x"}, "give mode in octal"),
        ({"types": ["deb"]}, "missing required argument 'name'"),
        ({"name": "x", "suite": ["a"]}, "unknown argument 'suite'"),
    ],
)
def test_bad_arguments_are_refused_before_any_host(args: dict[str, object], message: str) -> None:
    with pytest.raises(ArgError, match=message):
        Deb822Repository.validate_static(args, lambda v: isinstance(v, str) and "{{" in v)
