"""``fetch``, ``unarchive``, ``script``, ``tempfile`` and ``pause`` on this machine (a ``LocalConnection``: the
real host helpers run), with ``fetch`` against ansible-core itself; the lab cases (``tests/compat/cases/mod_*``)
compare the same modules over SSH.

The threat model's part: the controller path of a fetched file comes from the playbook and the inventory only,
and an archive cannot write outside ``dest``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.catalog import lookup
from provision.modules.base import ArgError, ModuleContext, ModuleResult
from provision.modules.transfer import fetch_dest
from provision.transport import LocalConnection
from tests.support.ansible_ref import ansible_results
from tests.support.web import QuietFiles, served_folder


def _run(module: str, raw: Any, *, check: bool = False, controller_dir: str = ".", host: str = "h") -> ModuleResult:
    cls = lookup(module)
    assert cls is not None
    args = cls.coerce(cls.validate_static(cls.normalize(raw), lambda v: False))
    ctx = ModuleContext(host=host, conn=LocalConnection(host), variables={}, check=check, controller_dir=controller_dir)
    return cls().run(ctx, args)


# ------------------------------------------------------------------------------------------------ fetch
def test_fetch_dest_layouts(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert fetch_dest(d, "web1", "/etc/app.conf", "out", False) == f"{d}/out/web1/etc/app.conf"
    assert fetch_dest(d, "web1", "rel/x", "/abs", False) == "/abs/web1/rel/x"
    assert fetch_dest(d, "web1", "/etc/app.conf", "out/one.conf", True) == f"{d}/out/one.conf"
    assert fetch_dest(d, "web1", "/etc/app.conf", "out/", True) == f"{d}/out/app.conf"


def test_fetch_dest_refuses_traversal(tmp_path: Path) -> None:
    with pytest.raises(ArgError, match="would leave dest"):
        fetch_dest(str(tmp_path), "web1", "../../../etc/passwd", "out", False)
    (tmp_path / "out").mkdir()
    with pytest.raises(ArgError, match="trailing slash"):
        fetch_dest(str(tmp_path), "web1", "/x", "out", True)


def test_fetch_the_same_as_ansible(tmp_path: Path) -> None:
    """Registered values of fetch (a file, a symlink read through, a rerun, a missing file, a directory) under
    ansible-core (connection local) and provision, each into its own controller dir."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "f.txt").write_text("fetched\n")
    (host / "l.txt").symlink_to("f.txt")
    (host / "d").mkdir()
    cases: list[dict[str, Any]] = [
        {"src": str(host / "f.txt"), "dest": "out"},
        {"src": str(host / "f.txt"), "dest": "out"},  # the rerun: unchanged
        {"src": str(host / "l.txt"), "dest": "out/flat.txt", "flat": True},
        {"src": str(host / "missing"), "dest": "out", "fail_on_missing": False},
        {"src": str(host / "missing"), "dest": "out"},
        {"src": str(host / "d"), "dest": "out"},
    ]
    ref_dir, our_dir = tmp_path / "ansible", tmp_path / "provision"
    ref_dir.mkdir()
    our_dir.mkdir()
    theirs = ansible_results(ref_dir, [{"fetch": c} for c in cases])
    for case, ref in zip(cases, theirs, strict=True):
        ours = _run("fetch", case, controller_dir=str(our_dir), host="localhost")
        assert ours.failed == bool(ref.get("failed")), (case, ref, ours)
        assert ours.changed == bool(ref.get("changed")), (case, ref, ours)
        assert ours.msg == ref.get("msg", ""), (case, ref, ours)
        for key in ("checksum", "remote_checksum", "md5sum"):
            assert ours.data.get(key) == ref.get(key), (key, case, ref, ours)
        if "dest" in ref:
            assert os.path.relpath(ours.data["dest"], our_dir) == os.path.relpath(ref["dest"], ref_dir)
    assert (our_dir / "out/localhost" / str(host / "f.txt").lstrip("/")).read_text() == "fetched\n"
    assert (our_dir / "out/flat.txt").read_text() == "fetched\n"  # the link's target, not the link


def test_fetch_replaces_a_planted_link_on_the_controller(tmp_path: Path) -> None:
    (tmp_path / "src.txt").write_text("new\n")
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x.txt").symlink_to(victim)
    res = _run(
        "fetch", {"src": str(tmp_path / "src.txt"), "dest": "out/x.txt", "flat": True}, controller_dir=str(tmp_path)
    )
    assert res.changed and not res.failed
    assert victim.read_text() == "keep\n"
    assert not (tmp_path / "out" / "x.txt").is_symlink()
    assert (tmp_path / "out" / "x.txt").read_text() == "new\n"


def test_fetch_skips_in_check_mode(tmp_path: Path) -> None:
    res = _run("fetch", {"src": "/etc/hostname", "dest": "out"}, check=True, controller_dir=str(tmp_path))
    assert res.skipped and not (tmp_path / "out").exists()


# -------------------------------------------------------------------------------------------- unarchive
def _tar(path: Path, members: list[tuple[str, str, str]]) -> None:
    """(name, kind, data or link target) members into a tar.gz."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data.encode()))


@pytest.mark.parametrize(
    "members",
    [
        [("../evil.txt", "file", "x")],
        [("/tmp/provision-abs-evil.txt", "file", "x")],
        [("top/l", "link", "/tmp"), ("top/l/evil.txt", "file", "x")],
        [("top/l", "link", "../.."), ("top/l/evil.txt", "file", "x")],
    ],
)
def test_unarchive_refuses_members_outside_dest(tmp_path: Path, members: list[tuple[str, str, str]]) -> None:
    (tmp_path / "files").mkdir()
    _tar(tmp_path / "files" / "a.tgz", members)
    dest = tmp_path / "a" / "b" / "dest"
    dest.mkdir(parents=True)
    res = _run("unarchive", {"src": "a.tgz", "dest": str(dest)}, controller_dir=str(tmp_path))
    assert res.failed and "refused" in res.msg
    assert not Path("/tmp/provision-abs-evil.txt").exists()
    assert not any(p.name == "evil.txt" for p in tmp_path.rglob("*"))


def test_unarchive_converges_and_applies_mode(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    _tar(tmp_path / "files" / "a.tgz", [("top", "dir", ""), ("top/a.txt", "file", "alpha\n")])
    dest = tmp_path / "dest"
    dest.mkdir()
    args = {"src": "a.tgz", "dest": str(dest), "mode": "0640", "list_files": True}
    assert _run("unarchive", args, controller_dir=str(tmp_path)).changed
    assert oct((dest / "top" / "a.txt").stat().st_mode & 0o777) == "0o640"
    again = _run("unarchive", args, controller_dir=str(tmp_path))
    assert not again.changed and again.data["files"] == ["top/", "top/a.txt"]
    (dest / "top" / "a.txt").write_text("changed by hand\n")
    assert _run("unarchive", args, controller_dir=str(tmp_path)).changed
    assert (dest / "top" / "a.txt").read_text() == "alpha\n"


def test_unarchive_names_a_missing_controller_file(tmp_path: Path) -> None:
    res = _run("unarchive", {"src": "nope.tgz", "dest": str(tmp_path)}, controller_dir=str(tmp_path))
    assert res.failed and "nope.tgz" in res.msg


# ------------------------------------------------------------------------- script, tempfile, pause, get_url
def test_script_check_mode_without_creates_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "s.sh").write_text("#!/bin/sh\ntouch ran\n")
    res = _run("script", {"_raw_params": "s.sh", "chdir": str(tmp_path)}, check=True, controller_dir=str(tmp_path))
    assert res.skipped and not (tmp_path / "ran").exists()
    res = _run("script", {"_raw_params": "s.sh", "chdir": str(tmp_path)}, controller_dir=str(tmp_path))
    assert res.changed and (tmp_path / "ran").exists()


def test_script_refuses_a_relative_chdir() -> None:
    cls = lookup("script")
    assert cls is not None
    with pytest.raises(ArgError, match="absolute path"):
        cls.validate_static({"_raw_params": "s.sh", "chdir": "rel"}, lambda v: False)


def test_tempfile_makes_a_private_file(tmp_path: Path) -> None:
    res = _run("tempfile", {"path": str(tmp_path), "prefix": "p.", "suffix": ".x"})
    made = Path(res.data["path"])
    assert res.changed and made.parent == tmp_path and made.name.startswith("p.") and made.name.endswith(".x")
    assert oct(made.stat().st_mode & 0o777) == "0o600"
    assert _run("tempfile", {"path": str(tmp_path), "prefix": "a/b"}).failed


def test_pause_prompt_without_a_terminal_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    res = _run("pause", {"prompt": "Continue?"})
    assert res.failed and "interactive terminal" in res.msg


def test_pause_refuses_minutes_with_seconds() -> None:
    cls = lookup("pause")
    assert cls is not None
    with pytest.raises(ArgError, match="mutually exclusive"):
        cls.validate_static({"seconds": 1, "minutes": 1}, lambda v: False)


@pytest.mark.parametrize("checksum", ["sha256", "sha256:", "nope:abc", "sha256:http://example.com/SHA256SUMS"])
def test_get_url_checksum_is_checked_before_the_run(checksum: str) -> None:
    cls = lookup("get_url")
    assert cls is not None
    with pytest.raises(ArgError, match="checksum"):
        cls.validate_static({"url": "http://127.0.0.1/x", "dest": "/tmp/x", "checksum": checksum}, lambda v: False)


# ------------------------------------------------------------------------------------ get_url vs ansible-core
@pytest.fixture
def web(tmp_path: Path) -> Iterator[str]:
    """A loopback http.server serving tmp_path/www (hello.txt)."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "hello.txt").write_text("hello from the web\n")
    with served_folder(root) as url:
        yield url


HELLO_SHA256 = "6800e5a138da1ed186442cecbb944d165db00a45ce6eec03dcf39779d73c7a3f"


def test_get_url_the_same_as_ansible(tmp_path: Path, web: str) -> None:
    """The same downloads, in order, by ansible-core (connection local) and provision into their own dirs:
    first download, the rerun (304), a matching checksum (no request), a wrong one, a 404, a mode change."""

    def cases(d: Path) -> list[dict[str, Any]]:
        return [
            {"url": f"{web}/hello.txt", "dest": str(d / "a.txt")},
            {"url": f"{web}/hello.txt", "dest": str(d / "a.txt")},
            {"url": f"{web}/hello.txt", "dest": str(d / "b.txt"), "checksum": f"sha256:{HELLO_SHA256}"},
            {"url": f"{web}/hello.txt", "dest": str(d / "b.txt"), "checksum": f"sha256:{HELLO_SHA256}"},
            {"url": f"{web}/hello.txt", "dest": str(d / "c.txt"), "checksum": "sha256:" + "0" * 64},
            {"url": f"{web}/nope.txt", "dest": str(d / "n.txt")},
            {"url": f"{web}/hello.txt", "dest": str(d / "b.txt"), "checksum": f"sha256:{HELLO_SHA256}", "mode": "0600"},
            {"url": f"{web}/hello.txt", "dest": str(d), "force": True},
        ]

    ref_dir, our_dir = tmp_path / "ansible", tmp_path / "provision"
    ref_dir.mkdir()
    our_dir.mkdir()
    theirs = ansible_results(ref_dir, [{"get_url": c} for c in cases(ref_dir)])
    volatile = {"invocation", "elapsed", "src", "exception"}  # times, Ansible's temp file, its traceback
    for i, (case, ref) in enumerate(zip(cases(our_dir), theirs, strict=True)):
        res = _run("get_url", case)
        ours = {**res.data, "changed": res.changed, "failed": res.failed, "msg": res.msg}
        ref = {k: v for k, v in ref.items() if k not in volatile}
        ours = {k: v for k, v in ours.items() if k not in volatile}
        ref["dest"] = os.path.relpath(ref["dest"], ref_dir)
        ours["dest"] = os.path.relpath(ours["dest"], our_dir)
        if ref["failed"]:  # Ansible names its own temp file in the checksum message
            ref["msg"] = ref["msg"].split(" did not match")[-1]
            ours["msg"] = ours["msg"].split(" did not match")[-1]
        assert ours == ref, (i, case)
    for name in ("a.txt", "b.txt", "hello.txt"):
        assert (our_dir / name).read_bytes() == (ref_dir / name).read_bytes()
        assert (our_dir / name).stat().st_mode == (ref_dir / name).stat().st_mode, name
    assert not (our_dir / "c.txt").exists() and not (ref_dir / "c.txt").exists()


# ------------------------------------------------------------------ unarchive, tempfile, script vs ansible-core
ARCHIVES = Path(__file__).resolve().parents[1] / "compat" / "cases" / "mod_unarchive" / "files"


def _prepare(d: Path) -> None:
    (d / "files").mkdir(parents=True)
    for f in ARCHIVES.iterdir():
        (d / "files" / f.name).write_bytes(f.read_bytes())
    for sub in ("t", "z", "r", "m"):
        (d / sub).mkdir()
    (d / "r.tar").write_bytes((ARCHIVES / "pkg.tar").read_bytes())
    (d / "s.sh").write_text("#!/bin/sh\necho out $1\n")


def _more_cases(d: Path) -> list[tuple[str, Any]]:
    return [
        ("unarchive", {"src": "pkg.tgz", "dest": str(d / "t"), "list_files": True}),
        ("unarchive", {"src": "pkg.tgz", "dest": str(d / "t"), "list_files": True}),  # converged
        ("unarchive", {"src": "pkg.zip", "dest": str(d / "z"), "list_files": True}),
        ("unarchive", {"src": "pkg.zip", "dest": str(d / "z")}),
        ("unarchive", {"src": str(d / "r.tar"), "dest": str(d / "r"), "remote_src": True}),
        ("unarchive", {"src": str(d / "r.tar"), "dest": str(d / "r"), "remote_src": True}),
        ("unarchive", {"src": "pkg.tgz", "dest": str(d / "t"), "creates": str(d / "t/top")}),
        ("unarchive", {"src": "pkg.tgz", "dest": str(d / "missing")}),
        ("unarchive", {"src": "pkg.tgz", "dest": str(d / "m"), "mode": "0750"}),
        ("unarchive", {"src": "pkg.tgz", "dest": str(d / "m"), "mode": "0750"}),
        ("tempfile", {"path": str(d), "prefix": "x."}),
        ("script", {"_raw_params": f"{d / 's.sh'} a", "chdir": str(d)}),
        ("script", {"_raw_params": f"{d / 's.sh'} a", "creates": str(d / "t")}),
    ]


def _comparable(result: dict[str, Any], root: Path) -> dict[str, Any]:
    # volatile: Ansible's temp copy of the archive (src), its tar/unzip command lines and rsync-style diff, the
    # random temp name, a traceback; absent and empty/false are the same
    volatile = {"invocation", "extract_results", "diff", "src", "exception", "path"}
    out = {k: v for k, v in result.items() if k not in volatile and v not in ("", False)}
    return json.loads(json.dumps(out).replace(str(root), "ROOT"))


def test_unarchive_tempfile_script_the_same_as_ansible(tmp_path: Path) -> None:
    ref_dir, our_dir = tmp_path / "ansible", tmp_path / "provision"
    _prepare(ref_dir)
    _prepare(our_dir)
    theirs = ansible_results(ref_dir, [{m: a} for m, a in _more_cases(ref_dir)])
    for i, ((module, args), ref) in enumerate(zip(_more_cases(our_dir), theirs, strict=True)):
        res = _run(module, args, controller_dir=str(our_dir))
        ours = {**res.data, "changed": res.changed, "failed": res.failed, "msg": res.msg, "skipped": res.skipped}
        assert _comparable(ours, our_dir) == _comparable(ref, ref_dir), (i, module, args)
    for sub in ("t", "z", "r", "m"):
        mine = {str(p.relative_to(our_dir)): (p.lstat().st_mode, p.is_symlink()) for p in (our_dir / sub).rglob("*")}
        ref_tree = {
            str(p.relative_to(ref_dir)): (p.lstat().st_mode, p.is_symlink()) for p in (ref_dir / sub).rglob("*")
        }
        assert mine == ref_tree, sub


class _NeedsAuth(QuietFiles):
    def do_GET(self) -> None:
        if self.headers.get("Authorization") != "Basic " + base64.b64encode(b"joe:s3cret").decode():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()


def test_get_url_answers_a_401_with_the_urls_user_and_masks_it(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    (root / "f.txt").write_text("private\n")
    with served_folder(root, _NeedsAuth) as base:
        port = int(base.rsplit(":", 1)[1])
        res = _run("get_url", {"url": f"http://joe:s3cret@127.0.0.1:{port}/f.txt", "dest": str(tmp_path / "f.txt")})
        assert res.changed and not res.failed, res
        assert (tmp_path / "f.txt").read_text() == "private\n"
        assert res.data["url"] == f"http://****:****@127.0.0.1:{port}/f.txt"
        assert "s3cret" not in json.dumps(res.data) + res.msg
        wrong = _run("get_url", {"url": f"http://joe:nope@127.0.0.1:{port}/f.txt", "dest": str(tmp_path / "g.txt")})
        assert wrong.failed and wrong.data["status_code"] == 401 and not (tmp_path / "g.txt").exists()
