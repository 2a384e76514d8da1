"""Long waits say what they wait for and for how long: ``waiting for <what> (Ns of Ts)`` every WAIT_EVERY
seconds in the human output (never in --json's document); the installer's lines carry a running total of its
downloads, and a silent download still says what it is at. Real waits on this machine (a file that appears
late, a slow command), with WAIT_EVERY made short; no SGLang server."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from provision.commands import Command
from provision.modules import ModuleContext
from provision.modules import progress as waiting
from provision.modules.progress import Waiting
from provision.stack import host as stack_host
from provision.stack.modules import step
from provision.transport import LocalConnection
from tests.support.cli import run_cli_in


@pytest.fixture
def often(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(waiting, "WAIT_EVERY", 0.3)
    monkeypatch.setattr(stack_host, "PROGRESS_EVERY", 0.0)
    return 0.3


def test_a_slow_wait_says_what_and_how_long_and_a_quick_one_says_nothing(often: float) -> None:
    lines: list[str] = []
    with Waiting(lines.append, "p0 to answer http://127.0.0.1:1/health", timeout=900):
        time.sleep(1.0)
    assert 2 <= len(lines) <= 4, lines
    assert all(
        re.fullmatch(r"waiting for p0 to answer http://127\.0\.0\.1:1/health \(\d+s of 900s\)", x) for x in lines
    )
    assert [int(re.search(r"\((\d+)s", x).group(1)) for x in lines] == sorted(  # type: ignore[union-attr]
        int(re.search(r"\((\d+)s", x).group(1))
        for x in lines  # type: ignore[union-attr]
    )
    quick: list[str] = []
    with Waiting(quick.append, "nothing much"):
        time.sleep(0.05)
    assert quick == []
    assert not [t for t in threading.enumerate() if t.name == "provision-waiting"]  # each wait's thread ended


def test_no_progress_channel_no_thread() -> None:
    with Waiting(None, "x") as wait:
        assert wait._thread is None


def _playbook(tmp_path: Path, flag: Path) -> None:
    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    one: {ansible_connection: local}\n")
    (tmp_path / "pb.yml").write_text(
        f"- hosts: all\n  gather_facts: false\n  tasks:\n    - wait_for: {{path: '{flag}', timeout: 30, sleep: 0.1}}\n"
    )


def _late(flag: Path, after: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(after), flag.write_text("up")), daemon=True)
    thread.start()
    return thread


def test_wait_for_says_what_it_waits_for_in_the_human_output(tmp_path: Path, often: float) -> None:
    flag = tmp_path / "flag"
    _playbook(tmp_path, flag)
    late = _late(flag, 1.2)
    result = run_cli_in(tmp_path, ["run", "pb.yml", "-i", "inv.yml"])
    late.join()
    assert result.code == 0, result.out + result.err
    said = [line for line in result.out.splitlines() if "waiting for" in line]
    assert said, result.out
    assert all(
        re.fullmatch(rf"  \.\. \[one\] waiting for file {re.escape(str(flag))} \(\d+s of 30s\)", x) for x in said
    )


def test_json_mode_keeps_them_out_of_the_document(tmp_path: Path, often: float) -> None:
    flag = tmp_path / "flag"
    _playbook(tmp_path, flag)
    late = _late(flag, 1.2)
    result = run_cli_in(tmp_path, ["run", "pb.yml", "-i", "inv.yml", "--json"])
    late.join()
    assert result.code == 0
    assert "waiting for" not in result.out
    json.loads(result.out)  # stdout is the document alone
    assert "waiting for file" in result.err  # the human output goes to stderr with --json


UV_OUTPUT = [
    "Resolved 3 packages in 12ms",
    "Downloading torch (766.4MiB)",
    "Downloading numpy (15.8MiB)",
    " Downloaded numpy",
    " Downloaded torch",
    "Prepared 3 packages in 41.2s",
]
PIP_OUTPUT = [
    "Collecting torch==2.5.1",
    "  Downloading torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl (906.4 MB)",
    "Collecting numpy",
    "  Downloading numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.whl (16.3 MB)",
    "Installing collected packages: numpy, torch",
]


def test_the_installers_downloads_have_a_running_total() -> None:
    uv = stack_host.Downloads()
    totals = []
    for line in UV_OUTPUT:
        uv.feed(line)
        totals.append(uv.total(10.0))
    assert totals[1] == " [0 files, 0 B downloaded, 1 in flight]"
    assert totals[3] == " [1 file, 16.6 MB downloaded (1.7 MB/s), 1 in flight]"
    assert totals[-1] == " [2 files, 820.2 MB downloaded (82.0 MB/s)]"
    pip = stack_host.Downloads()
    for line in PIP_OUTPUT:
        pip.feed(line)
    assert pip.total(100.0) == " [2 files, 922.7 MB downloaded (9.2 MB/s)]"
    assert stack_host.Downloads().total(5.0) == ""  # nothing to download: nothing said


def test_an_install_step_says_its_total_and_what_it_waits_for_while_silent(tmp_path: Path, often: float) -> None:
    lines: list[str] = []
    ctx = ModuleContext(host="local", conn=LocalConnection("local"), variables={}, progress=lines.append)
    script = (
        "print('Downloading torch (766.4MiB)', flush=True); import time; time.sleep(1.2); print(' Downloaded torch')"
    )
    step(ctx, Command.of(sys.executable, "-c", script), "installing", "the index")
    silent = [x for x in lines if x.startswith("waiting for installing (")]
    said = [x for x in lines if x not in silent]  # a loaded machine may say it waits before python says a word
    assert said[0] == "installing: Downloading torch (766.4MiB) [0 files, 0 B downloaded, 1 in flight]"
    while_silent = [x for x in lines[lines.index(said[0]) :] if x in silent]  # after python's first word
    assert while_silent, lines
    assert re.fullmatch(r"waiting for installing \(\d+s, last: Downloading torch \(766\.4MiB\)\) \[0 files, 0 B "
                        r"downloaded, 1 in flight\]", while_silent[0])  # fmt: skip
    assert re.fullmatch(r"installing: Downloaded torch \[1 file, 803\.6 MB downloaded \(.* MB/s\)\]", lines[-1])


def test_retries_say_how_many_are_left_as_ansible(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess

    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    one: {ansible_connection: local}\n")
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: count\n      command: 'true'\n      register: r\n"
        "      until: r.attempts | default(0) > 2\n      retries: 3\n      delay: 0\n"
    )
    result = run_cli_in(tmp_path, ["run", "pb.yml", "-i", "inv.yml"])
    assert result.code == 0, result.err
    ours = re.findall(r"^  \.\. \[one\] FAILED - RETRYING: (.*)$", result.out, re.MULTILINE)
    env = {**os.environ, "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_RETRY_FILES_ENABLED": "False"}  # fmt: skip
    command = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(tmp_path / "inv.yml"),
               str(tmp_path / "pb.yml")]  # fmt: skip
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    theirs = re.findall(r"^FAILED - RETRYING: \[one\]: (.*)\.$", proc.stdout, re.MULTILINE)
    assert ours == theirs == ["count (3 retries left)", "count (2 retries left)"]
