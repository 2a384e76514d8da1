"""The launch scripts and the env file: valid sh, every value quoted, the exact argv reaches the program,
and the HF token never appears in a script."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from provision import remote
from provision.pd import build
from tests.support.pd import render_launch_template as render

NASTY = '/models/it\'s a $(touch /tmp/pwned) `x` "model"'


def hosts_with(tmp_path: Path, **common: Any) -> dict[str, dict[str, Any]]:
    return {
        "p1": {"group_names": ["prefill", "router"], "ansible_host": "10.0.0.1", **common},
        "d1": {"group_names": ["decode"], "ansible_host": "10.0.0.2", **common},
    }


def run_script(tmp_path: Path, text: str, env_text: str) -> list[str]:
    """Write the env file and the script where the plan put them, run the script, return the argv it exec'd."""
    (tmp_path / ".provision" / "pd").mkdir(parents=True, exist_ok=True)
    for path, content in ((tmp_path / ".provision/pd/p1.env", env_text), (tmp_path / "run.sh", text)):
        path.write_text(content)
    os.chmod(tmp_path / "run.sh", 0o700)
    out = subprocess.run([str(tmp_path / "run.sh")], capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.split("\0")[:-1]


def printer(tmp_path: Path) -> str:
    """A fake server: prints its argv NUL-separated, then HF_TOKEN and one env var."""
    path = tmp_path / "argv.py"
    path.write_text(
        "import os, sys\nsys.stdout.write(''.join(a + '\\0' for a in sys.argv[1:]))\n"
        "sys.stdout.write('HF=' + os.environ.get('HF_TOKEN', '-') + '\\0')\n"
        "sys.stdout.write('HOSTIP=' + os.environ.get('SGLANG_HOST_IP', '-') + '\\0')\n"
    )
    return str(path)


def test_prefill_script_execs_the_exact_argv(tmp_path: Path) -> None:
    cmd = f"/usr/bin/python3 {printer(tmp_path)}"
    hosts = hosts_with(tmp_path, model_path=NASTY, sglang_server_cmd=cmd, pd_env={"X": "a b;c"})
    plan = build(hosts, {"p1": str(tmp_path)}).hosts["p1"]
    script = render("prefill.sh.j2", "p1", hosts, str(tmp_path))
    env_text = render("pd.env.j2", "p1", hosts, str(tmp_path))
    assert script.startswith("#!/bin/sh\n") and "\nset -e\n" in script and "\nexec " in script
    assert subprocess.run(["sh", "-n"], input=script, text=True, check=False).returncode == 0
    argv = run_script(tmp_path, script, env_text)
    assert plan.server is not None and argv[:-2] == plan.server.args
    assert argv[-2:] == ["HF=-", "HOSTIP=10.0.0.1"]
    assert not Path("/tmp/pwned").exists()


def test_hf_token_is_read_from_its_file_only(tmp_path: Path) -> None:
    hosts = hosts_with(tmp_path, model_path="/m", sglang_server_cmd=f"/usr/bin/python3 {printer(tmp_path)}")
    script = render("prefill.sh.j2", "p1", hosts, str(tmp_path))
    env_text = render("pd.env.j2", "p1", hosts, str(tmp_path))
    (tmp_path / ".provision/pd").mkdir(parents=True)
    (tmp_path / ".provision/pd/p1.hf_token").write_text("hf_secret_value\n")
    argv = run_script(tmp_path, script, env_text)
    assert "HF=hf_secret_value" in argv
    assert "hf_secret" not in script and "hf_secret" not in env_text
    assert 'HF_TOKEN="$(cat ' in script


def test_env_file_quotes_values(tmp_path: Path) -> None:
    hosts = hosts_with(tmp_path, sglang_device="cpu", ucx_tls="rc,tcp", pd_env={"WEIRD": "it's $HOME"})
    text = render("pd.env.j2", "p1", hosts, "/home/u")
    lines = [line for line in text.splitlines() if line.startswith("export ")]
    assert "export UCX_TLS=rc,tcp" in lines and "export SGLANG_USE_CPU_ENGINE=1" in lines
    assert "export WEIRD='it'\"'\"'s $HOME'" in lines
    assert "export PYTHONPATH=/home/u/.provision/pd/cpu_compat" in lines
    out = subprocess.run(["sh", "-c", f'{text}\nprintf %s "$WEIRD"'], capture_output=True, text=True, check=True)
    assert out.stdout == "it's $HOME"


def test_router_and_decode_scripts(tmp_path: Path) -> None:
    hosts = hosts_with(tmp_path, model_path="/m", venv_path="/opt/v")
    router = render("router.sh.j2", "p1", hosts, "/h")
    decode = render("decode.sh.j2", "d1", hosts, "/h")
    for text in (router, decode):
        assert subprocess.run(["sh", "-n"], input=text, text=True, check=False).returncode == 0
    assert "\nvenv=/opt/v\n" in router
    assert 'exec "$venv/bin/python" -m sglang_router.launch_router \\\n  --pd-disaggregation \\\n' in router
    assert "  --prefill http://10.0.0.1:30000 8998 \\\n  --decode http://10.0.0.2:30000 \\\n" in router
    assert "# Decode server d1-decode" in decode and "--disaggregation-mode decode" in decode
    assert "HF_TOKEN" not in router  # the router needs no token


@pytest.mark.parametrize("shipped", [False, True])
def test_the_default_command_runs_the_env_resolved_at_start(tmp_path: Path, shipped: bool) -> None:
    """VENV/bin/python through the link, unless provision resolved the env at start (PROVISION_PD_VENV): a
    supervised restart after install.yml switched the link stays on the env the server was started with. The
    command unset, or as the shipped defaults give it (``{{ venv_path }}/bin/python -m sglang.launch_server``,
    rendered: what every playbook run sees)."""
    for name in ("A", "B"):
        python = tmp_path / "venv.envs" / name / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(f"#!/bin/sh\nprintf '%s\\0' {name} \"$@\"\n")
        python.chmod(0o700)
    (tmp_path / "venv").symlink_to(tmp_path / "venv.envs" / "B")
    command = {"sglang_server_cmd": f"{tmp_path / 'venv'}/bin/python -m sglang.launch_server"} if shipped else {}
    hosts = hosts_with(tmp_path, model_path="/m", venv_path=str(tmp_path / "venv"), **command)
    script = render("prefill.sh.j2", "p1", hosts, str(tmp_path))
    assert 'exec "$venv/bin/python" -m sglang.launch_server' in script
    env_text = render("pd.env.j2", "p1", hosts, str(tmp_path))
    argv = run_script(tmp_path, script, env_text)
    assert argv[:3] == ["B", "-m", "sglang.launch_server"]  # no pin: the link's env
    os.environ["PROVISION_PD_VENV"] = str(tmp_path / "venv.envs" / "A")
    try:
        argv = run_script(tmp_path, script, env_text)
    finally:
        del os.environ["PROVISION_PD_VENV"]
    assert argv[:3] == ["A", "-m", "sglang.launch_server"]


def test_a_changed_env_changes_the_server_scripts_not_the_routers() -> None:
    """The env file is sourced at start: a server script carries its variables' digest, so ``pd up`` restarts a
    server whose env changed (its script changed) and leaves one whose env did not; the router's script (and
    so the router, whose restart every client would see) is left as it was. A colocated server too (its
    template once lacked the digest: the three server templates now share one body)."""

    def scripts(**common: Any) -> dict[str, str]:
        hosts = hosts_with(Path("/h"), model_path="/m", **common)
        hosts["s1"] = {"group_names": ["serve"], "ansible_host": "10.0.0.3", **common}
        names = (("prefill.sh.j2", "p1"), ("decode.sh.j2", "d1"), ("serve.sh.j2", "s1"), ("router.sh.j2", "p1"))
        return {name: render(name, host, hosts, "/h") for name, host in names}

    before, after = scripts(pd_env={"A": "1"}), scripts(pd_env={"A": "2"})
    assert all(before[name] != after[name] for name in ("prefill.sh.j2", "decode.sh.j2", "serve.sh.j2"))
    assert before["router.sh.j2"] == after["router.sh.j2"]
    assert scripts(pd_env={"A": "1"}) == before  # the same env, the same scripts: a rerun restarts nothing
    assert "sha256 " in before["prefill.sh.j2"] and "A=1" not in before["prefill.sh.j2"]


def test_a_serial_start_server_passes_the_start_gate_before_its_exec(tmp_path: Path) -> None:
    """``pd_serial_start``: the script runs the shipped gate (``start_gate.py``) with its own pid (``$$``, which the
    exec makes the server), its health URL and ``pd_server_timeout``, then execs the exact argv; a server
    without the var has no gate line (its script is as before: no restart on upgrade)."""
    hosts = hosts_with(tmp_path, model_path="/m", sglang_server_cmd=f"/usr/bin/python3 {printer(tmp_path)}",
                       venv_path=str(tmp_path / "venv"), pd_server_timeout=120)  # fmt: skip
    assert "start_gate" not in render("prefill.sh.j2", "p1", hosts, str(tmp_path))
    for variables in hosts.values():
        variables["pd_serial_start"] = True
    plan = build(hosts, {"p1": str(tmp_path)}).hosts["p1"]
    gate = plan.fact()["start_gate"]
    assert gate["script"] == f"{tmp_path}/.provision/pd/start_gate.py" and gate["timeout"] == 120
    (tmp_path / ".provision/pd").mkdir(parents=True)
    Path(gate["script"]).write_bytes(remote.path("start_gate.py").read_bytes())  # what pd_start_gate ships
    (tmp_path / "venv/bin").mkdir(parents=True)
    (tmp_path / "venv/bin/python").symlink_to(sys.executable)
    script = render("prefill.sh.j2", "p1", hosts, str(tmp_path))
    assert f'{gate["script"]} provision-pd-start p1-prefill "$$" http://10.0.0.1:30000/health 120.0 || :\n' in script
    # run with a lock of this test's own: the machine's real one may be held by a lab test's servers meanwhile
    script = script.replace(" provision-pd-start ", f" provision-test-{uuid.uuid4().hex} ")
    argv = run_script(tmp_path, script, render("pd.env.j2", "p1", hosts, str(tmp_path)))
    assert argv[:2] == ["--model-path", "/m"]  # the gate took the free lock and the script went on to its exec
