"""``lineinfile``, ``blockinfile`` and ``replace`` against ansible-core itself, on this machine.

Each case starts from the same file (or none) twice: ansible-core's own module edits one copy (one
``ansible-playbook`` run, connection local, holds every case), provision's module edits the other through a
``LocalConnection``. The resulting files (content, and mode where the case sets one), ``changed``, ``failed`` and
the message must be the same.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from provision.catalog import lookup
from provision.modules.base import ModuleContext
from provision.transport import LocalConnection
from tests.support.ansible_ref import ansible_results

SECTIONS = "v=0\n[s]\nv=1\n[t]\nv=3\n"
# (module, args, initial content or None)
CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("lineinfile", {"line": "c"}, "a\nb\n"),
    ("lineinfile", {"line": "c"}, "a\nc\n"),
    ("lineinfile", {"line": "c"}, "a\nb"),
    ("lineinfile", {"regexp": "^x=", "line": "x=5"}, "x=1\ny=2\n"),
    ("lineinfile", {"regexp": "^x=", "line": "x=9"}, "x=1\nx=2\n"),
    ("lineinfile", {"regexp": "^x=", "line": "x=9", "firstmatch": True}, "x=1\nx=2\n"),
    ("lineinfile", {"regexp": "^x=", "line": "x=1"}, "x=1\n"),
    ("lineinfile", {"line": "new=1", "insertafter": "^\\[a\\]"}, "[a]\nk=v\n[b]\n"),
    ("lineinfile", {"line": "new=1", "insertbefore": "^\\[b\\]"}, "[a]\nk=v\n[b]\n"),
    ("lineinfile", {"line": "new=1", "insertafter": "^\\[z\\]"}, "[a]\nk=v\n"),
    ("lineinfile", {"line": "first", "insertbefore": "BOF"}, "a\nb\n"),
    ("lineinfile", {"line": "c", "insertafter": "^b"}, "a\nb\n"),
    ("lineinfile", {"line": "x", "insertafter": "^a", "firstmatch": True}, "a\nb\na\n"),
    ("lineinfile", {"regexp": "^a$", "state": "absent"}, "a\nb\na\n"),
    ("lineinfile", {"line": "b", "state": "absent"}, "a\nb\n"),
    ("lineinfile", {"line": "zz", "state": "absent"}, "a\nb\n"),
    ("lineinfile", {"line": "b", "state": "absent"}, None),
    ("lineinfile", {"regexp": "^name=(.*)$", "line": "name=\\1-new", "backrefs": True}, "name=old\n"),
    ("lineinfile", {"regexp": "^y(.*)$", "line": "z\\1", "backrefs": True}, "x\n"),
    ("lineinfile", {"line": "hello", "create": True}, None),
    ("lineinfile", {"line": "hello"}, None),
    ("lineinfile", {"search_string": "bar", "line": "qux"}, "foo bar\nbaz\n"),
    ("lineinfile", {"search_string": "nope", "line": "qux"}, "foo bar\n"),
    ("lineinfile", {"line": "a", "mode": "0600"}, "a\n"),
    ("lineinfile", {"line": "b", "mode": "0600"}, "a\n"),
    ("blockinfile", {"block": "x\ny"}, "a\n"),
    ("blockinfile", {"block": "x\ny"}, "a\n# BEGIN ANSIBLE MANAGED BLOCK\nx\ny\n# END ANSIBLE MANAGED BLOCK\nb\n"),
    ("blockinfile", {"block": "new"}, "a\n# BEGIN ANSIBLE MANAGED BLOCK\nold\n# END ANSIBLE MANAGED BLOCK\nb\n"),
    ("blockinfile", {"state": "absent"}, "a\n# BEGIN ANSIBLE MANAGED BLOCK\nold\n# END ANSIBLE MANAGED BLOCK\nb\n"),
    ("blockinfile", {"block": ""}, "a\n# BEGIN ANSIBLE MANAGED BLOCK\nold\n# END ANSIBLE MANAGED BLOCK\n"),
    ("blockinfile", {"block": "top", "insertbefore": "BOF"}, "a\nb\n"),
    ("blockinfile", {"block": "mid", "insertafter": "^a"}, "a\nb\n"),
    ("blockinfile", {"block": "mid", "insertbefore": "^b"}, "a\nb"),
    ("blockinfile", {"block": "m", "marker": "// {mark} mine", "marker_begin": "S", "marker_end": "E"}, "a\n"),
    ("blockinfile", {"block": "made", "create": True}, None),
    ("blockinfile", {"block": "x"}, None),
    ("blockinfile", {"state": "absent"}, None),
    ("blockinfile", {"state": "absent", "create": True}, None),
    ("lineinfile", {"line": "new", "create": True, "mode": "0600"}, None),
    ("blockinfile", {"block": "nl", "prepend_newline": True, "append_newline": True, "insertafter": "^a"}, "a\nb\n"),
    ("replace", {"regexp": "a(\\d)", "replace": "b\\1"}, "a1 a2\nc\n"),
    ("replace", {"regexp": "zzz", "replace": "y"}, "a1\n"),
    (
        "replace",
        {"regexp": "^v=.*$", "replace": "v=2", "after": "\\[s\\]", "before": "\\[t\\]"},
        "v=0\n[s]\nv=1\n[t]\nv=3\n",
    ),
    ("replace", {"regexp": "x", "replace": "y", "after": "NOPE"}, "x\n"),
    ("replace", {"regexp": "x", "replace": "y"}, None),
    # backup and validate (the old file kept beside it; the command sees the new file before it is put in place)
    ("lineinfile", {"line": "c", "backup": True}, "a\n"),
    ("lineinfile", {"line": "a", "backup": True}, "a\n"),
    ("lineinfile", {"line": "a", "state": "absent", "backup": True}, "a\nb\n"),
    ("lineinfile", {"line": "c", "create": True, "backup": True}, None),
    ("lineinfile", {"line": "c", "validate": "grep -q ^c$ %s"}, "a\n"),
    ("lineinfile", {"line": "c", "validate": "grep -q ^zz$ %s"}, "a\n"),
    ("lineinfile", {"line": "c", "validate": "sh -c 'test -s \"$0\" && echo refused >&2; exit 3' %s"}, "a\n"),
    ("lineinfile", {"line": "c", "backup": True, "validate": "false %s"}, "a\n"),
    ("lineinfile", {"line": "c", "validate": "false %s"}, "c\n"),
    ("blockinfile", {"block": "x", "backup": True}, "a\n"),
    ("blockinfile", {"block": "x", "backup": True}, None),
    ("blockinfile", {"block": "x", "validate": "grep -q 'BEGIN ANSIBLE' %s"}, "a\n"),
    ("blockinfile", {"block": "x", "validate": "grep -q zz %s", "create": True}, None),
    ("replace", {"regexp": "a", "replace": "b", "backup": True}, "a\n"),
    ("replace", {"regexp": "z", "replace": "b", "backup": True}, "a\n"),
    ("replace", {"regexp": "a", "replace": "b", "validate": "test -s %s"}, "a\n"),
    ("replace", {"regexp": "a", "replace": "", "validate": "test -s %s"}, "a"),
]


def _prepare(root: Path, tag: str) -> list[Path]:
    paths = []
    for i, (_, _, content) in enumerate(CASES):
        path = root / tag / f"case{i}" / "file.txt"
        path.parent.mkdir(parents=True)
        if content is not None:
            path.write_text(content)
            path.chmod(0o644)
        paths.append(path)
    return paths


def _ansible(root: Path, paths: list[Path]) -> list[dict[str, Any]]:
    return ansible_results(
        root, [{module: {**args, "path": str(path)}} for (module, args, _), path in zip(CASES, paths, strict=True)]
    )


def _provision(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for (module, args, _), path in zip(CASES, paths, strict=True):
        cls = lookup(module)
        assert cls is not None
        checked = cls.validate_static({**args, "path": str(path)}, lambda v: False)
        result = cls().run(ModuleContext(host="h", conn=LocalConnection("h"), variables={}), cls.coerce(checked))
        backup = result.data.get("backup", result.data.get("backup_file"))
        out.append({
            "changed": result.changed, "failed": result.failed, "msg": result.msg, "backup": backup,
            "keys": {k for k in ("backup", "backup_file") if k in result.data},
        })  # fmt: skip
    return out


def _file(path: Path) -> tuple[str, int] | None:
    return (path.read_text(), path.stat().st_mode & 0o777) if path.exists() else None


BACKUP_NAME = re.compile(r"file\.txt\.[0-9]+\.[0-9]{4}-[0-9]{2}-[0-9]{2}@[0-9]{2}:[0-9]{2}:[0-9]{2}~")


def _backups(path: Path) -> list[tuple[str, int]]:
    """The backups beside ``path``: each one's content and mode (their names checked against ansible-core's)."""
    found = sorted(p for p in path.parent.iterdir() if p.name != path.name)
    assert all(BACKUP_NAME.fullmatch(p.name) for p in found), found
    return [(p.read_text(), p.stat().st_mode & 0o777) for p in found]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path], list[Any], list[Any]]:
    root = tmp_path_factory.mktemp("lines")
    theirs, ours = _prepare(root, "ansible"), _prepare(root, "provision")
    return theirs, ours, _ansible(root, theirs), _provision(ours)


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(CASES)])
def test_the_same_as_ansible(runs: Any, i: int) -> None:
    theirs, ours, ansible_results, our_results = runs
    ref, got = ansible_results[i], our_results[i]
    case = CASES[i]
    assert _file(ours[i]) == _file(theirs[i]), case
    assert got["failed"] == bool(ref.get("failed")), (case, ref, got)
    assert got["changed"] == bool(ref.get("changed")), (case, ref, got)
    assert got["msg"].replace(str(ours[i]), "PATH") == ref.get("msg", "").replace(str(theirs[i]), "PATH"), (ref, got)
    # ansible-core's lineinfile answers `backup` ("" when none was made), the other two `backup_file` when one was
    assert {k for k in ("backup", "backup_file") if k in ref} == got["keys"], (ref, got)
    ref_backup = ref.get("backup", ref.get("backup_file"))
    assert bool(got["backup"]) == bool(ref_backup), (case, ref, got)
    assert _backups(ours[i]) == _backups(theirs[i]), case
    if got["backup"]:
        assert Path(got["backup"]).read_text() == case[2]


def test_a_validate_command_without_its_file_is_refused_before_the_run() -> None:
    for module in ("lineinfile", "blockinfile", "replace", "copy", "template"):
        cls = lookup(module)
        assert cls is not None
        extra = {"line": "x"} if module == "lineinfile" else {"regexp": "x"} if module == "replace" else {}
        if module in ("copy", "template"):
            extra = {"dest": "/x", "src": "y"}
        args = {"path": "/x", **extra} if module not in ("copy", "template") else extra
        with pytest.raises(ValueError, match=f"^{module}: validate must contain %s: visudo -cf$"):
            cls.validate_static({**args, "validate": "visudo -cf"}, lambda v: False)
        with pytest.raises(ValueError, match="No closing quotation"):
            cls.validate_static({**args, "validate": "sh -c 'x %s"}, lambda v: False)
        cls.validate_static({**args, "validate": "{{ v }}"}, lambda v: "{{" in str(v))  # checked when it renders
        cls.validate_static({**args, "validate": "visudo -cf %s", "backup": True}, lambda v: False)
    for module in ("copy", "template"):
        cls = lookup(module)
        assert cls is not None
        with pytest.raises(ValueError, match="follow: true is not supported"):
            cls.validate_static({"dest": "/x", "src": "y", "follow": True}, lambda v: False)
        cls.validate_static({"dest": "/x", "src": "y", "follow": False}, lambda v: False)


# Editing through a link: ansible-core edits what the link names (its realpath) and keeps the link; so does
# provision, for a link that belongs to root or to the user writing (all of these: the tests run as root).
# (module, args, layout): "link" file.txt -> real.txt; "chain" file.txt -> mid.txt -> real.txt; "dangling"
# file.txt -> real.txt, which is not there; "dir" file.txt -> sub/real.txt
LINK_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("lineinfile", {"line": "c"}, "link"),
    ("lineinfile", {"line": "c", "backup": True}, "link"),
    ("lineinfile", {"line": "a", "state": "absent"}, "chain"),
    ("lineinfile", {"line": "c", "create": True}, "dangling"),
    ("lineinfile", {"line": "c"}, "dangling"),
    ("lineinfile", {"line": "c"}, "dir"),
    ("blockinfile", {"block": "x", "backup": True}, "chain"),
    ("blockinfile", {"block": "x", "validate": "grep -q x %s"}, "link"),
    ("replace", {"regexp": "a", "replace": "b"}, "dir"),
]


def _link_layout(root: Path, layout: str) -> Path:
    root.mkdir(parents=True)
    real = root / ("sub/real.txt" if layout == "dir" else "real.txt")
    real.parent.mkdir(exist_ok=True)
    if layout != "dangling":
        real.write_text("a\nb\n")
        real.chmod(0o644)
    if layout == "chain":
        (root / "mid.txt").symlink_to("real.txt")
        (root / "file.txt").symlink_to("mid.txt")
    else:
        (root / "file.txt").symlink_to(real.relative_to(root))
    return root / "file.txt"


def _tree(root: Path) -> dict[str, Any]:
    """Every entry under ``root``: a link's target, a file's content and mode; backups by their place only."""
    out: dict[str, Any] = {}
    for p in sorted(root.rglob("*")):
        name = str(p.relative_to(root))
        if BACKUP_NAME.fullmatch(p.name):
            out["BACKUP"] = (str(p.parent.relative_to(root)), p.read_text())
        elif p.is_symlink():
            out[name] = ("link", str(p.readlink()))
        elif p.is_file():
            out[name] = (p.read_text(), p.stat().st_mode & 0o777)
    return out


def _run_ours(module: str, args: dict[str, Any], path: Path) -> Any:
    cls = lookup(module)
    assert cls is not None
    checked = cls.validate_static({**args, "path": str(path)}, lambda v: False)
    return cls().run(ModuleContext(host="h", conn=LocalConnection("h"), variables={}), cls.coerce(checked))


def test_a_link_is_edited_where_it_points_as_ansible_does(tmp_path: Path) -> None:
    theirs = [_link_layout(tmp_path / "ansible" / f"case{i}", c[2]) for i, c in enumerate(LINK_CASES)]
    ours = [_link_layout(tmp_path / "provision" / f"case{i}", c[2]) for i, c in enumerate(LINK_CASES)]
    tasks = [{m: {**a, "path": str(p)}} for (m, a, _), p in zip(LINK_CASES, theirs, strict=True)]
    refs = ansible_results(tmp_path, tasks)
    for case, ref, mine, their in zip(LINK_CASES, refs, ours, theirs, strict=True):
        got = _run_ours(case[0], case[1], mine)
        assert _tree(mine.parent) == _tree(their.parent), (case, ref)
        assert (got.failed, got.changed) == (bool(ref.get("failed")), bool(ref.get("changed"))), (case, ref, got)
        assert got.msg.replace(str(mine), "PATH") == ref.get("msg", "").replace(str(their), "PATH"), (ref, got)


def test_a_link_another_user_owns_is_not_followed(tmp_path: Path) -> None:
    """A link a host's user planted where root edits a file: ansible-core edits what it names (here a root
    file); provision fails the task and leaves both as they were."""
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    planted = shared / "app.conf"
    planted.symlink_to(secret)
    os.lchown(planted, 65534, 65534)
    result = _run_ours("lineinfile", {"line": "owned=1"}, planted)
    assert result.failed and "is a link owned by nobody, not by root or the user writing" in result.msg, result.msg
    assert secret.read_text() == "root only\n" and planted.is_symlink()
