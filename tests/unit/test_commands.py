"""Quoting and masking: the one place that builds shell text."""

from __future__ import annotations

import subprocess
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


def _sh(text: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["/bin/sh", "-c", text], capture_output=True, check=False)


@pytest.mark.parametrize("template", HOSTILE)
def test_argv_values_reach_the_program_verbatim(tmp_path: Path, template: str) -> None:
    marker = tmp_path / "pwned"
    value = template.format(marker=marker)
    cmd = Command.of("printf", "%s", value, env={"V": value}, chdir=str(tmp_path))
    out = _sh(cmd.render(timeout=10))
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode() == value
    assert not marker.exists()


@pytest.mark.parametrize("template", HOSTILE)
def test_env_values_are_quoted(tmp_path: Path, template: str) -> None:
    marker = tmp_path / "pwned"
    value = template.format(marker=marker)
    out = _sh(Command.shell('printf %s "$V"', env={"V": value}).render())
    assert out.stdout.decode() == value
    assert not marker.exists()


def test_shell_script_runs_as_written_and_chdir_applies(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    out = _sh(Command.shell("ls; echo $((1+2))", chdir=str(tmp_path)).render())
    assert out.stdout.decode().split() == ["f", "3"]


def test_bad_env_name_is_refused() -> None:
    with pytest.raises(ValueError, match="environment variable name"):
        Command.of("true", env={"A B": "x"}).render()


def test_timeout_wrapper_kills_the_command() -> None:
    out = _sh(Command.shell("sleep 5").render(timeout=0.3))
    assert out.returncode == 124


def test_display_masks_secrets() -> None:
    cmd = Command.of("curl", "-H", Secret("tok-123456"), env={"X": Secret("abc-secret")})
    assert "tok-123456" not in cmd.display()
    assert MASK in cmd.display()
    assert "tok-123456" in cmd.render()


def test_masker_masks_registered_values_everywhere() -> None:
    masker = Masker()
    masker.add_vars({"hf_token": "hf_abcdefgh", "db_password": "p4ssw0rd!", "name": "visible", "custom": "zzzz-1"},
                    no_log=["custom"])  # fmt: skip
    text = "token hf_abcdefgh and p4ssw0rd! and visible and zzzz-1"
    assert masker.mask(text) == f"token {MASK} and {MASK} and visible and {MASK}"
    assert masker.mask_obj({"a": ["hf_abcdefgh"], "b": 1}) == {"a": [MASK], "b": 1}
