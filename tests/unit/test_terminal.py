"""Every human printer escapes host text (issue 23, class 4): OSC 52 clipboard writes, CSI screen clears and
cursor moves, bidi overrides from a host never reach the operator's terminal raw; SGR colours in ``pd logs``
may. Run under a pty: click strips some sequences only when the output is not a terminal, so a pipe would hide
the bug."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision.terminal import clipped, printable

ROOT = Path(__file__).resolve().parents[2]
OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # write "pwned" to the operator's clipboard
CLEAR = "\x1b[2J\x1b[H"  # clear the screen, cursor home
BIDI = "\u202e"  # right-to-left override
RED = "\x1b[31m"
HOSTILE = f"{OSC52}{CLEAR}{BIDI}evil{RED}red"
RAW = (OSC52, "\x1b]", "\x1b[2J", "\x1b[H", BIDI)


def test_printable_escapes_everything_but_sgr_when_asked() -> None:
    shown = printable(HOSTILE)
    assert "\x1b" not in shown and BIDI not in shown and "\\x1b]52" in shown and "\\u202e" in shown
    coloured = printable(HOSTILE, colour=True)
    assert RED in coloured and coloured.endswith("\x1b[0m")
    assert not any(raw in coloured for raw in RAW)
    assert printable("tab\tand\nnewline") == "tab\tand\nnewline"
    assert clipped("x" * 5000, 100).endswith("(4900 more characters)")


def under_pty(argv: list[str], cwd: Path, env: dict[str, str], limit: float = 120) -> tuple[int, str]:
    """Run ``argv`` with stdout and stderr on a pty; everything it wrote, as the terminal got it."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    data = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the pty
                break
            if not chunk:
                break
            data += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    proc.kill()
    return proc.wait(), data.decode(errors="replace")


def fake_tools(tmp_path: Path) -> dict[str, str]:
    """A PATH whose ``nvidia-smi`` names a GPU with escape sequences (the host lies), and the env to run with."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    name = HOSTILE.replace("\x1b", "\\033").replace("\x07", "\\007").replace(BIDI, "\\342\\200\\256")
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f"  *query-gpu*) printf '0, {name}, GPU-1, 81559, 550.54, 00000000:01:00.0, 9.0\\n' ;;\n"
        "  *topo*) ;;\n"
        "  *) echo 'CUDA Version: 12.4' ;;\n"
        "esac\n"
    )
    smi.chmod(0o755)
    return {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}:{os.environ['PATH']}", "TERM": "xterm"}


LOCAL = "all:\n  vars:\n    ansible_connection: local\n    ansible_python_interpreter: {python}\n  hosts:\n    one:\n"


def test_facts_summary_under_a_pty_shows_host_text_escaped(tmp_path: Path) -> None:
    env = fake_tools(tmp_path)
    (tmp_path / "inv.yml").write_text(LOCAL.format(python=sys.executable))
    rc, shown = under_pty([sys.executable, "-m", "provision", "facts", "-i", "inv.yml"], tmp_path, env)
    assert rc == 0, shown
    assert "evil" in shown and "\\x1b]52" in shown, shown
    assert not any(raw in shown for raw in RAW), repr(shown)


def pd_inventory(tmp_path: Path) -> Path:
    path = tmp_path / "pd.yml"
    path.write_text(
        "all:\n"
        f"  vars: {{ansible_connection: local, ansible_python_interpreter: {sys.executable}, sglang_device: cpu,"
        f" pd_dir: {tmp_path / 'pd'}}}\n"
        "  children:\n"
        "    prefill: {hosts: {p1: }}\n"
        "    decode: {hosts: {d1: {server_port: 30010}}}\n"
        "    router: {hosts: {p1: {router_port: 8000}}}\n"
    )
    return path


@pytest.mark.parametrize("command", ["logs", "status"])
def test_pd_printers_under_a_pty_show_host_text_escaped(tmp_path: Path, command: str) -> None:
    env = fake_tools(tmp_path)
    inv = pd_inventory(tmp_path)
    logs = tmp_path / "pd" / "logs"
    logs.mkdir(parents=True)
    for name in ("p1-prefill", "d1-decode", "p1-router"):
        (logs / f"{name}.log").write_text(f"INFO {RED}coloured\x1b[0m line\n{HOSTILE}\n")
    argv = [sys.executable, "-m", "provision", "pd", command, "-i", str(inv)]
    _, shown = under_pty(argv, tmp_path, env)
    assert "Traceback" not in shown, shown
    assert not any(raw in shown for raw in RAW), repr(shown)
    if command == "logs":
        assert shown.count("evil") == 3 and "\\x1b]52" in shown, shown
        assert f"{RED}coloured" in shown  # SGLang's colours stay
    else:
        assert "HOST" in shown and "decode" in shown, shown


FAKE_PYTHON = """#!/bin/sh
# a host whose python answers every helper with values of the wrong types
cat > /dev/null &
echo '{"ok": true, "procs": [1, {"running": "yes", "pid": [], "uptime": "soon", "orphans": 3, "lines": [1],
 "supervisor": "provision", "restarts": 2, "last_reason": "x", "last_exit": [1], "now": "later"},
 {"running": true, "pid": 5, "uptime": -3, "health": "x", "lines": "x"}]}' | tr -d '\\n'
echo
"""


@pytest.mark.parametrize("command", ["logs", "status"])
def test_pd_rows_of_the_wrong_types_show_an_error_and_the_rest_prints(tmp_path: Path, command: str) -> None:
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    inv = pd_inventory(tmp_path)
    text = inv.read_text().replace(
        "prefill: {hosts: {p1: }}", f"prefill: {{hosts: {{p1: {{ansible_python_interpreter: {fake}}}}}}}"
    )
    text = text.replace(
        "router: {hosts: {p1: {router_port: 8000}}}",
        f"router: {{hosts: {{p1: {{router_port: 8000, ansible_python_interpreter: {fake}}}}}}}",
    )
    inv.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "provision", "pd", command, "-i", str(inv)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    shown = run.stdout + run.stderr
    assert "Traceback" not in shown and "internal error" not in shown, shown
    if command == "status":
        assert "HOST" in run.stdout and "d1" in run.stdout and "p1" in run.stdout, shown
        assert "error" in run.stdout, shown
    else:
        assert "d1 decode" in run.stdout and "malformed answer from the host" in run.stdout, shown
