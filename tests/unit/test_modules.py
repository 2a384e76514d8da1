"""command, shell, file, copy and template, run for real through LocalConnection in tmp_path."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.errors import ModuleError
from provision.modules import commands_mod, files  # noqa: F401  (registers the modules)
from provision.modules.base import ModuleContext, ModuleResult
from provision.testing import module_context, prepare_args

HOSTILE = "a'b\"c $(touch {m}) ; rm -rf x `touch {m}` \n"


def make_ctx(tmp_path: Path, variables: dict[str, Any] | None = None, **kw: Any) -> ModuleContext:
    """The context the task runner builds (provision.testing: provision's own renderer, layered Vars)."""
    # the real interpreter: a pyenv shim costs 0.4 s a start
    values = {"ansible_python_interpreter": sys.executable, **(variables or {})}
    kw.setdefault("controller_dir", str(tmp_path))
    return module_context("local", values, **kw)


def run(ctx: ModuleContext, name: str, raw: Any) -> ModuleResult:
    """What the executor does: normalize, static validation, rendering, coercion, run."""
    cls, args = prepare_args(name, raw, ctx.variables)
    result: ModuleResult = cls().run(ctx, args)
    return result


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if ".provision-" in p.name]


# ------------------------------------------------------------------------------------------------ command
def test_command_runs_argv_verbatim_without_a_shell(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hostile = HOSTILE.format(m=marker)
    ctx = make_ctx(tmp_path)
    result = run(ctx, "command", {"argv": ["printf", "%s", hostile]})
    assert result.changed and not result.failed
    assert result.data["stdout"] == hostile.rstrip("\n")
    assert result.data["rc"] == 0 and "delta" in result.data
    assert not marker.exists()


def test_command_free_form_is_split_with_shlex(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    ctx = make_ctx(tmp_path)
    result = run(ctx, "command", f"echo 'one two' $(touch {marker}) ; ls")
    assert result.data["stdout"] == f"one two $(touch {marker}) ; ls"
    assert result.data["stdout_lines"] == [f"one two $(touch {marker}) ; ls"]
    assert not marker.exists()


def test_command_failure_reports_rc_and_stderr(tmp_path: Path) -> None:
    result = run(make_ctx(tmp_path), "command", {"argv": ["ls", str(tmp_path / "nope")]})
    assert result.failed
    assert "rc=2" in result.msg and "No such file" in result.msg
    assert result.data["rc"] == 2


def test_command_creates_and_removes_guard_with_one_command(tmp_path: Path) -> None:
    (tmp_path / "done").write_text("x")
    ctx = make_ctx(tmp_path)
    result = run(ctx, "command", f"touch {tmp_path}/ran creates={tmp_path}/done")
    assert not result.changed and not result.failed and "exists" in result.msg
    assert ctx.conn.commands_run == 1 and not (tmp_path / "ran").exists()
    result = run(ctx, "command", {"cmd": "touch ran", "chdir": str(tmp_path), "removes": "missing*"})
    assert not result.changed and "does not exist" in result.msg
    result = run(ctx, "command", {"cmd": "touch ran", "chdir": str(tmp_path), "creates": "ran"})
    assert result.changed and (tmp_path / "ran").exists()
    result = run(ctx, "command", {"cmd": "touch ran", "chdir": str(tmp_path), "creates": "ra?"})
    assert not result.changed  # creates is a glob


def test_command_check_mode_never_runs(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, check=True)
    result = run(ctx, "command", f"touch {tmp_path}/ran")
    assert result.skipped and not result.changed and ctx.conn.commands_run == 0
    result = run(ctx, "command", {"cmd": f"touch {tmp_path}/ran", "creates": str(tmp_path / "ran")})
    assert result.changed and not result.skipped and "would have run" in result.msg
    (tmp_path / "done").touch()
    result = run(ctx, "command", {"cmd": f"touch {tmp_path}/ran", "creates": str(tmp_path / "done")})
    assert not result.changed and not result.skipped
    assert not (tmp_path / "ran").exists()


def test_command_stdin(tmp_path: Path) -> None:
    result = run(make_ctx(tmp_path), "command", {"cmd": "cat", "stdin": "hello $(x)"})
    assert result.data["stdout"] == "hello $(x)"


# -------------------------------------------------------------------------------------------------- shell
def test_shell_runs_shell_text_with_chdir_and_creates(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    result = run(ctx, "shell", {"cmd": "echo one | tr a-z A-Z > out.txt && cat out.txt", "chdir": str(tmp_path)})
    assert result.changed and result.data["stdout"] == "ONE"
    result = run(ctx, "shell", f"echo again > out.txt chdir={tmp_path} creates=out.txt")
    assert not result.changed and (tmp_path / "out.txt").read_text() == "ONE\n"


def test_shell_executable_and_failure(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    result = run(ctx, "shell", {"cmd": "echo ${BASH_VERSION:+bash}", "executable": "/bin/bash"})
    assert result.data["stdout"] == "bash"
    result = run(ctx, "shell", "echo oops >&2; exit 3")
    assert result.failed and "rc=3" in result.msg and "oops" in result.msg


def test_shell_check_mode_is_skipped(tmp_path: Path) -> None:
    result = run(make_ctx(tmp_path, check=True), "shell", f"touch {tmp_path}/ran")
    assert result.skipped and not (tmp_path / "ran").exists()


# --------------------------------------------------------------------------------------------------- file
def test_file_directory_idempotent_with_exact_mode(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    ctx = make_ctx(tmp_path)
    result = run(ctx, "file", {"path": str(target), "state": "directory", "mode": "0755"})
    assert result.changed and target.is_dir() and mode_of(target) == 0o755
    before = ctx.conn.commands_run
    result = run(ctx, "file", {"path": str(target), "state": "directory", "mode": "0755"})
    assert not result.changed and ctx.conn.commands_run - before == 1
    result = run(ctx, "file", {"dest": str(target), "state": "directory", "mode": 0o700})
    assert result.changed and mode_of(target) == 0o700


def test_file_check_mode_and_diff(tmp_path: Path) -> None:
    target = tmp_path / "d"
    ctx = make_ctx(tmp_path, check=True, diff=True)
    result = run(ctx, "file", {"path": str(target), "state": "directory"})
    assert result.changed and not target.exists()
    assert result.diff and "-state: absent" in result.diff and "+state: directory" in result.diff


def test_file_touch_and_preserve(tmp_path: Path) -> None:
    target = tmp_path / "t"
    ctx = make_ctx(tmp_path)
    assert run(ctx, "file", {"path": str(target), "state": "touch", "mode": "0600"}).changed
    assert mode_of(target) == 0o600
    assert run(ctx, "file", {"path": str(target), "state": "touch"}).changed  # times updated
    keep = {"path": str(target), "state": "touch", "modification_time": "preserve", "access_time": "preserve"}
    assert not run(ctx, "file", keep).changed
    stamp = {"path": str(target), "state": "file", "modification_time": "202001020304.05"}
    assert run(ctx, "file", stamp).changed
    assert not run(ctx, "file", stamp).changed


def test_file_state_file_on_missing_path_fails(tmp_path: Path) -> None:
    with pytest.raises(ModuleError, match="is absent, cannot continue"):
        run(make_ctx(tmp_path), "file", {"path": str(tmp_path / "missing"), "state": "file"})


def test_file_absent_and_link(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    (tmp_path / "real").write_text("x")
    link = tmp_path / "ln"
    assert run(ctx, "file", {"path": str(link), "src": "real", "state": "link"}).changed
    assert os.readlink(link) == "real"
    assert not run(ctx, "file", {"path": str(link), "src": "real", "state": "link"}).changed
    with pytest.raises(ModuleError, match="refusing to convert from file"):
        run(ctx, "file", {"path": str(tmp_path / "real"), "src": str(link), "state": "link"})
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "f").write_text("x")
    assert run(ctx, "file", {"path": str(tmp_path / "dir"), "state": "absent"}).changed
    assert not (tmp_path / "dir").exists()
    assert not run(ctx, "file", {"path": str(tmp_path / "dir"), "state": "absent"}).changed


def test_file_hostile_name_is_created_verbatim(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    name = HOSTILE.format(m=marker).replace("/", "_")
    target = tmp_path / name
    assert run(make_ctx(tmp_path), "file", {"path": str(target), "state": "touch"}).changed
    assert target.exists() and not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


# --------------------------------------------------------------------------------------------------- copy
def test_copy_content_changed_then_ok_in_one_command(tmp_path: Path) -> None:
    dest = tmp_path / "conf"
    ctx = make_ctx(tmp_path)
    result = run(ctx, "copy", {"content": "hello\n", "dest": str(dest), "mode": "0600"})
    assert result.changed and dest.read_text() == "hello\n" and mode_of(dest) == 0o600
    assert result.data["mode"] == "0600" and result.data["dest"] == str(dest)
    before = ctx.conn.commands_run
    result = run(ctx, "copy", {"content": "hello\n", "dest": str(dest), "mode": "0600"})
    assert not result.changed and ctx.conn.commands_run - before == 1
    assert leftovers(tmp_path) == []


def test_copy_mode_only_difference_is_a_chmod(tmp_path: Path) -> None:
    dest = tmp_path / "conf"
    dest.write_text("same")
    dest.chmod(0o644)
    inode = dest.stat().st_ino
    result = run(make_ctx(tmp_path), "copy", {"content": "same", "dest": str(dest), "mode": "0755"})
    assert result.changed and mode_of(dest) == 0o755 and dest.stat().st_ino == inode


def test_copy_check_mode_and_diff(tmp_path: Path) -> None:
    dest = tmp_path / "conf"
    dest.write_text("one\ntwo\n")
    ctx = make_ctx(tmp_path, check=True, diff=True)
    result = run(ctx, "copy", {"content": "one\nthree\n", "dest": str(dest)})
    assert result.changed and dest.read_text() == "one\ntwo\n"
    assert result.diff is not None
    assert "--- before: " in result.diff and "-two" in result.diff and "+three" in result.diff
    binary = run(ctx, "copy", {"content": "a\0b", "dest": str(dest)})
    assert binary.changed and binary.diff is None


def test_copy_hostile_content_and_name_verbatim(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hostile = HOSTILE.format(m=marker)
    dest = tmp_path / hostile.replace("/", "_")
    ctx = make_ctx(tmp_path)
    assert run(ctx, "copy", {"content": hostile, "dest": str(dest)}).changed
    assert dest.read_text() == hostile and not marker.exists()
    assert not run(ctx, "copy", {"content": hostile, "dest": str(dest)}).changed


def test_copy_src_into_directory_and_force(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "app.cfg").write_bytes(b"\x00\x01binary")
    out = tmp_path / "out"
    out.mkdir()
    ctx = make_ctx(tmp_path)
    result = run(ctx, "copy", {"src": "files/app.cfg", "dest": str(out)})
    assert result.changed and (out / "app.cfg").read_bytes() == b"\x00\x01binary"
    assert not run(ctx, "copy", {"src": "files/app.cfg", "dest": f"{out}/"}).changed
    (out / "app.cfg").write_text("local edit")
    assert not run(ctx, "copy", {"src": "files/app.cfg", "dest": str(out), "force": "no"}).changed
    assert (out / "app.cfg").read_text() == "local edit"


def test_helper_write_is_atomic_with_mode(tmp_path: Path) -> None:
    """The path copy takes under become (sudo): content on stdin, temp file beside the target, rename."""
    dest = tmp_path / "secret.env"
    files.helper(make_ctx(tmp_path), "write", {"path": str(dest), "mode": 0o600}, stdin=b"TOKEN=a'b $(x)\n")
    assert dest.read_bytes() == b"TOKEN=a'b $(x)\n" and mode_of(dest) == 0o600
    assert leftovers(tmp_path) == []


def test_copy_missing_parent_or_src_fails_clearly(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    result = run(ctx, "copy", {"content": "x", "dest": str(tmp_path / "no" / "f")})
    assert result.failed and "does not exist" in result.msg
    with pytest.raises(ModuleError, match="could not read src"):
        run(ctx, "copy", {"src": "nope.txt", "dest": str(tmp_path / "f")})


# ----------------------------------------------------------------------------------------------- template
def test_template_renders_and_is_idempotent(tmp_path: Path) -> None:
    (tmp_path / "t.j2").write_text("port={{ port }}\nname={{ name }}\n")
    dest = tmp_path / "rendered"
    ctx = make_ctx(tmp_path, {"port": 8000, "name": "x'y $(z)"})
    result = run(ctx, "template", {"src": "t.j2", "dest": str(dest), "mode": "0640"})
    assert result.changed and dest.read_text() == "port=8000\nname=x'y $(z)\n" and mode_of(dest) == 0o640
    assert not run(ctx, "template", {"src": "t.j2", "dest": str(dest), "mode": "0640"}).changed
    ctx = make_ctx(tmp_path, {"port": 9000, "name": "n"}, diff=True)
    result = run(ctx, "template", {"src": "t.j2", "dest": str(dest), "mode": "0640"})
    assert result.changed and result.diff and "+port=9000" in result.diff
    assert leftovers(tmp_path) == []


def test_template_undefined_variable_fails(tmp_path: Path) -> None:
    (tmp_path / "t.j2").write_text("{{ missing }}")
    result = run(make_ctx(tmp_path), "template", {"src": "t.j2", "dest": str(tmp_path / "out")})
    assert result.failed and "missing" in result.msg and not (tmp_path / "out").exists()
