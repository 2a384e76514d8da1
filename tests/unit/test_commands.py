"""Quoting and masking: the one place that builds shell text."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from provision.commands import MASK, Command, Masker, Secret

HOSTILE = [
    "plain",
    "with space",
    "it's",
    'double "quoted"',
    "$(touch {marker})",
    "`touch {marker}`",
    "; touch {marker}",
    "a\nb; touch {marker}",
    "$HOME ${{PATH}} * ? [a]",
    "back\\slash",
    "",
]


def _sh(cmd: Command, timeout: float | None = None, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run a command as a connection does: the fixed exec text, the script and data on stdin, stdin kept
    open until the command ends (its EOF means "controller gone")."""
    inv = cmd.render(timeout, stdin)
    proc = subprocess.Popen(
        ["/bin/sh", "-c", inv.text], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(inv.stdin)
    proc.stdin.flush()
    with proc:
        out, err = proc.stdout.read(), proc.stderr.read()
    return subprocess.CompletedProcess(inv.text, proc.returncode, out, err)


@pytest.mark.parametrize("template", HOSTILE)
def test_argv_values_reach_the_program_verbatim(tmp_path: Path, template: str) -> None:
    marker = tmp_path / "pwned"
    value = template.format(marker=marker)
    cmd = Command.of("printf", "%s", value, env={"V": value}, chdir=str(tmp_path))
    out = _sh(cmd, timeout=10)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode() == value
    assert not marker.exists()


@pytest.mark.parametrize("template", HOSTILE)
def test_env_values_are_quoted(tmp_path: Path, template: str) -> None:
    marker = tmp_path / "pwned"
    value = template.format(marker=marker)
    out = _sh(Command.shell('printf %s "$V"', env={"V": value}))
    assert out.stdout.decode() == value
    assert not marker.exists()


def test_shell_script_runs_as_written_and_chdir_applies(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    out = _sh(Command.shell("ls; echo $((1+2))", chdir=str(tmp_path)))
    assert out.stdout.decode().split() == ["f", "3"]


def test_bad_env_name_is_refused() -> None:
    with pytest.raises(ValueError, match="environment variable name"):
        Command.of("true", env={"A B": "x"}).render()


def test_timeout_wrapper_kills_the_command() -> None:
    out = _sh(Command.shell("sleep 5"), timeout=0.3)
    assert out.returncode == 124


def test_display_masks_secrets() -> None:
    cmd = Command.of("curl", "-H", Secret("tok-123456"), env={"X": Secret("abc-secret")})
    assert "tok-123456" not in cmd.display()
    assert MASK in cmd.display()
    assert "tok-123456" in cmd.render().stdin.decode()


def test_masker_masks_registered_values_everywhere() -> None:
    masker = Masker()
    masker.add_vars({"hf_token": "hf_abcdefgh", "db_password": "p4ssw0rd!", "name": "visible", "custom": "zzzz-1"},
                    no_log=["custom"])  # fmt: skip
    text = "token hf_abcdefgh and p4ssw0rd! and visible and zzzz-1"
    assert masker.mask(text) == f"token {MASK} and {MASK} and visible and {MASK}"
    assert masker.mask_obj({"a": ["hf_abcdefgh"], "b": 1}) == {"a": [MASK], "b": 1}


# ---------------------------------------------------------------------------------- the runner on the host
def test_exec_text_is_fixed_whatever_the_values() -> None:
    a = Command.shell("echo secret-script", env={"TOKEN": "s3cret-value"}, chdir="/srv/x").render(30, b"data")
    b = Command.shell("other", env={"TOKEN": "zzz"}).render(30, b"data")
    assert "s3cret-value" not in a.text and "secret-script" not in a.text and "/srv/x" not in a.text
    # only the sizes, the timeout and the heartbeat interval differ
    assert a.text.rsplit(" ", 4)[0] == b.text.rsplit(" ", 4)[0]
    assert a.stdin.endswith(b"data") and b"s3cret-value" in a.stdin


def test_become_prefixes_sudo_before_the_runner() -> None:
    text = Command.of("id", become=True, become_user="svc").render().text
    assert text.startswith("sudo -n -H -u svc -- /bin/sh -c ")


def test_failed_chdir_runs_no_line_of_the_script(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    out = _sh(Command.shell(f"true\ntouch {marker}", chdir=str(tmp_path / "missing")))
    assert out.returncode != 0 and not marker.exists()


def test_big_script_and_big_stdin_both_arrive(tmp_path: Path) -> None:
    script = "".join(f"# filler line {i}\n" for i in range(20000)) + "wc -c"
    out = _sh(Command.shell(script), stdin=b"x" * 300000)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().strip() == "300000"


def test_stdin_eof_kills_the_command_and_its_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    inv = Command.shell(f"sleep 300 & echo $! > {pidfile}; wait").render(60)
    proc = subprocess.Popen(["/bin/sh", "-c", inv.text], stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(inv.stdin)
    proc.stdin.flush()
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = int(pidfile.read_text())
    proc.stdin.close()  # what the host sees when the controller dies
    assert proc.wait(10) == 129
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not Path(f"/proc/{pid}").exists()


def test_without_python3_a_plain_sh_path_runs_the_command(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("head", "timeout", "cat", "printf", "sleep"):
        found = shutil.which(tool)
        assert found
        (bin_dir / tool).symlink_to(found)
    cmd = Command.shell('printf "%s|" "$V"; cat', env={"V": "it's"})
    inv = cmd.render(5, b"in")
    out = subprocess.run(
        ["/bin/sh", "-c", inv.text], input=inv.stdin, capture_output=True, env={"PATH": str(bin_dir)}, check=False
    )
    assert (out.returncode, out.stdout) == (0, b"it's|in"), out.stderr
    slow = Command.shell("sleep 5").render(0.3)
    out = subprocess.run(
        ["/bin/sh", "-c", slow.text], input=slow.stdin, capture_output=True, env={"PATH": str(bin_dir)}, check=False
    )
    assert out.returncode == 124  # GNU timeout still bounds it
