"""``wheelhouse`` against hosts that lie and a destination others can write to (issue 23, classes 5 and 7): a
host's reported versions (or a declared ``wheelhouse_target``) are input, checked: a non-numeric or huge glibc
minor, a python of the wrong type, a missing machine fail that host in one line, never the command (nor a
million platform tags); the manifest is never written through a planted link, and a wheel the manifest does
not record is refused instead of vouched for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.stack.wheelhouse import MANIFEST, Target, WheelhouseError, build, target_of

ROOT = Path(__file__).resolve().parents[2]
GOOD = {"python": {"version": "3.12.3"}, "machine": "x86_64", "base": {"glibc": "2.35"}}


@pytest.mark.parametrize("state", [
    {**GOOD, "base": {"glibc": "2.99999999"}},  # a million tags
    {**GOOD, "base": {"glibc": "2.x"}},
    {**GOOD, "python": {"version": 3}},
    {**GOOD, "python": "3.12"},
    {k: v for k, v in GOOD.items() if k != "machine"},
    {**GOOD, "machine": "x86_64 --index-url http://evil"},
    [GOOD],
    None,
])  # fmt: skip
def test_a_hosts_bad_report_is_one_line(state: object) -> None:
    with pytest.raises(WheelhouseError) as caught:
        target_of(state, None, None)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


@pytest.mark.parametrize("torch, cuda", [("2.5.1; rm -rf /", None), (None, "12.4\n"), (5, None)])
def test_a_hosts_torch_and_cuda_are_checked_too(torch: object, cuda: object) -> None:
    with pytest.raises(WheelhouseError):
        target_of(GOOD, torch, cuda)


def test_a_good_report_plans() -> None:
    target = target_of(GOOD, "2.11.0+cu128", "12.8")
    assert target == Target("3.12", "x86_64", "2.35", "2.11.0+cu128", "12.8") and len(target.platforms()) < 40


@pytest.mark.parametrize("declared", ["3.12", ["3.12"], {"python": "3.12", "glibc": "2.100000"}, {"python": None}])
def test_a_bad_declared_target_is_one_line(declared: object) -> None:
    with pytest.raises(WheelhouseError, match="wheelhouse_target"):
        Target.of(declared)


def test_one_bad_host_is_refused_alone_by_the_command(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(
        "all:\n  vars: {ansible_connection: local}\n  hosts:\n"
        "    good: {wheelhouse_target: {python: '3.12', machine: x86_64, glibc: '2.35'}}\n"
        "    bad: {wheelhouse_target: {python: '3.12', machine: x86_64, glibc: '2.9999999'}}\n"
        "    worse: {wheelhouse_target: 7}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "provision", "wheelhouse", "-i", "inv.yml", "-d", "wh"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    lines = run.stderr.splitlines()
    assert any(line.startswith("bad: ") and "glibc" in line for line in lines), run.stderr
    assert any(line.startswith("worse: ") and "mapping" in line for line in lines), run.stderr
    assert not any(line.startswith("good: ") for line in lines), run.stderr
    assert run.returncode == 2


def test_the_manifest_is_never_written_through_a_planted_link(tmp_path: Path) -> None:
    dest = tmp_path / "wh"
    dest.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("root's own file\n")
    (dest / (MANIFEST + ".tmp")).symlink_to(victim)  # the fixed temp name another user could pre-create
    build([], dest)
    assert victim.read_text() == "root's own file\n"
    assert (dest / MANIFEST).is_file() and not (dest / MANIFEST).is_symlink()


def test_a_wheel_the_manifest_does_not_record_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "wh"
    dest.mkdir()
    build([], dest)
    (dest / "torch-2.5.1-cp312-cp312-manylinux_2_17_x86_64.whl").write_bytes(b"planted")
    with pytest.raises(WheelhouseError, match="does not record"):
        build([], dest)
