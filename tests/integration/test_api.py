"""provision.api and provision.fabric against real sshd hosts (the lab), and docs/api.md's three examples run as
written: a fresh host provisioned from a script, a rollout with a progress bar, the stages as Fabric tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision import api
from tests.support.cli import run_cli
from tests.support.stack import LAB_VARS, clean, shared_dir, stack_inventory

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DOCS = REPO / "docs" / "api.md"


def run_in(cwd: Path, *argv: str) -> Any:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        return run_cli(list(argv))
    finally:
        os.chdir(old)


def child_env(**more: str) -> dict[str, str]:
    """The environment of an example run as a user would: this checkout first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)
    env.update(more)
    return env


# ------------------------------------------------------------------------------------------------ the API
def test_run_module_returns_results_and_events_and_matches_the_cli(lab: Any, lab_env: None, tmp_path: Path) -> None:
    inv = lab.write_inventory(tmp_path / "inv.yml", names=["lab0", "lab1"])
    events: list[api.Event] = []
    result = api.run_module("command", "echo hi {{ inventory_hostname }}", str(inv), on_event=events.append)
    assert result.ok and result.exit_code == 0 and result.reason is None
    assert {r.host: r.data["stdout"] for r in result.results} == {"lab0": "hi lab0", "lab1": "hi lab1"}
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["PlayStarted", "TaskStarted", "TaskFinished", "TaskFinished", "RunFinished"]
    assert isinstance(events[0], api.PlayStarted) and events[0].hosts == ("lab0", "lab1")
    assert isinstance(events[-1], api.RunFinished) and events[-1].summary is result.summary
    cli = run_in(tmp_path, "task", "command", "-a", "echo hi {{ inventory_hostname }}", "-i", str(inv), "--json")
    assert cli.code == result.exit_code == 0
    assert json.loads(cli.out)["stats"] == {h: s.to_json() for h, s in result.summary.stats.items()}


def test_run_playbook_twice_then_check_mode_and_a_failing_host(lab: Any, lab_env: None, tmp_path: Path) -> None:
    inv = lab.write_inventory(tmp_path / "inv.yml", names=["lab0", "lab1"])
    for i in (0, 1):
        lab.run_as(i, ["rm", "-rf", "api-test"])
    pb = tmp_path / "files.yml"
    pb.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - file: {path: api-test, state: directory}\n"
        "    - copy: {dest: api-test/hello, content: '{{ greeting }}'}\n"
    )
    fleet = api.load(inv, extra_vars={"greeting": "hello"})
    first = api.run_playbook(pb, fleet)
    assert first.ok and first.changed == 4
    assert [r.status for r in first.host_results("lab0")] == [api.Status.CHANGED, api.Status.CHANGED]
    assert api.run_playbook(pb, fleet).changed == 0  # converged
    predicted = api.run_playbook(pb, fleet, check=True, diff=True, extra_vars={"greeting": "bye"}, limit="lab1")
    assert predicted.ok and predicted.changed == 1 and list(predicted.summary.stats) == ["lab1"]
    assert "+bye" in (predicted.host_results("lab1")[1].diff or "")
    assert lab.run_as(1, ["cat", "api-test/hello"]).stdout == "hello"  # check mode changed nothing
    failing = tmp_path / "fail.yml"
    failing.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - command: test {{ inventory_hostname }} = lab0\n"
    )
    failed = api.run_playbook(failing, fleet)
    assert failed.exit_code == 2 and failed.failed_hosts == ["lab1"] and failed.reason == "failed hosts: lab1"
    retry = failed.write_retry_file(str(tmp_path))
    assert retry is not None and Path(retry).read_text() == "lab1\n"


def test_input_errors_raise_before_any_host_and_unreachable_is_a_result(
    lab: Any, lab_env: None, tmp_path: Path
) -> None:
    inv = lab.write_inventory(tmp_path / "inv.yml", names=["lab0"])
    bad = tmp_path / "bad.yml"
    bad.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: {msg: '{{ nowhere }}'}\n")
    with pytest.raises(api.TemplateError, match="nowhere") as info:
        api.run_playbook(bad, inv)
    assert info.value.exit_code == 5
    with pytest.raises(api.InventoryError):
        api.load(inv, limit="nosuchhost")
    with pytest.raises(api.UsageError):
        api.run_module("command", "true", inv, forks=0)
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  UserKnownHostsFile {known}\n")
    refused = api.run_module("command", "true", inv, ssh_config=str(config))  # host keys: checked the same way
    assert refused.exit_code == 4 and refused.unreachable_hosts == ["lab0"]
    assert "not in known_hosts" in refused.results[0].msg and known.read_text() == ""


def test_facts_and_pd_status_as_values(lab: Any, lab_env: None, tmp_path: Path) -> None:
    cpu = {"sglang_device": "cpu"}
    inv = lab.write_inventory(
        tmp_path / "pd.yml",
        extra_host_vars={"lab0": cpu, "lab1": cpu},
        groups={"prefill": ["lab0"], "decode": ["lab1"]},
    )
    fleet = api.load(inv)
    facts = api.gather_facts(fleet, limit="lab1")
    assert list(facts.hosts) == ["lab1"] and facts.exit_code == 0
    assert facts.facts["lab1"]["pythons"] and not facts.errors
    status = api.pd_status(fleet)
    assert sorted((r["host"], r["role"], r["running"]) for r in status.rows) == [
        ("lab0", "prefill", False),
        ("lab0", "router", False),
        ("lab1", "decode", False),
    ]
    assert status.exit_code == 2 and not status.up  # reachable, nothing running
    cli = run_in(tmp_path, "pd", "status", "-i", str(inv), "--json")
    assert cli.code == status.exit_code and json.loads(cli.out)["procs"] == json.loads(json.dumps(status.rows))


# ------------------------------------------------------------------------------------------------ docs/api.md
def test_docs_show_every_example_as_it_is_run() -> None:
    docs = DOCS.read_text()
    for name in ("provision_host.py", "rollout_progress.py", "fabfile.py"):
        assert (EXAMPLES / name).read_text() in docs, f"docs/api.md does not show examples/{name} as it is"


def test_example_provision_a_fresh_host_from_a_script(lab: Any, lab_env: None, tmp_path: Path) -> None:
    clean(lab, 3)
    inv = stack_inventory(lab, tmp_path / "inv", [3], uv_cache_dir=str(shared_dir("uv")), **LAB_VARS)
    env = child_env(**lab.ssh_env())
    argv = [sys.executable, str(EXAMPLES / "provision_host.py"), str(inv), "lab3"]
    first = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "bootstrap.yml: exit 0" in first.stdout and "smoke.yml: exit 0, 0 changed" in first.stdout
    assert "install.yml: exit 0, 1 changed" in first.stdout
    assert lab.run_as(3, [".provision/venv/bin/python", "-c", "import nixl"]).returncode == 0
    again = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert again.returncode == 0 and "install.yml: exit 0, 0 changed" in again.stdout, again.stderr[-3000:]
    unknown = subprocess.run([*argv[:-1], "nosuchhost"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert unknown.returncode == 5 and "nosuchhost" in unknown.stderr


def test_example_rollout_with_a_progress_bar(lab: Any, lab_env: None, tmp_path: Path) -> None:
    inv = stack_inventory(lab, tmp_path / "inv", [2, 3], uv_cache_dir=str(shared_dir("uv")), **LAB_VARS)
    env = child_env(**lab.ssh_env())
    argv = [sys.executable, str(EXAMPLES / "rollout_progress.py"), str(inv)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # the bar redraws in place (\r; text mode reads each redraw as a line): every frame, then the recap
    frames = [line.strip() for line in done.stdout.splitlines() if line.startswith("[")]
    count = frames[-1].split("] ")[1].split()[0]
    finished, total = (int(n) for n in count.split("/"))
    assert finished == total > 2 and frames[-1].startswith("[" + "#" * 30 + "]"), frames[-1]
    assert frames[0].startswith("[" + "." * 30 + "] 0/")
    assert any(" .. " in frame for frame in frames)  # the install's progress lines, beside the bar
    assert "lab2: ok=" in done.stdout and "lab3: ok=" in done.stdout and "failed=1" not in done.stdout


def fab(*argv: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "fabric", "--search-root", str(EXAMPLES), *argv]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_example_fabfile_runs_the_stages_once_over_all_hosts(lab: Any, tmp_path: Path) -> None:
    env = child_env()
    env.pop("PROVISION_SSH_CONFIG", None)  # Fabric's -S says which ssh_config
    ssh = str(lab.ssh_config_path)
    done = fab("-S", ssh, "-H", "lab0,lab1", "bootstrap", "pd-status", "--extra-vars", "sglang_device=cpu",
               cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr  # pd status: reachable, nothing up (as the CLI says)
    assert done.stdout.count("PLAY RECAP") == 1  # bootstrap: one run over both hosts, not one per host
    recap = done.stdout.split("PLAY RECAP")[1]
    assert "lab0" in recap and "lab1" in recap and "failed=0" in recap
    table = done.stdout.split("finished in")[1]  # pd-status's table follows bootstrap's recap
    rows = [line.split()[:3] for line in table.splitlines() if line.startswith(("lab0 ", "lab1 "))]
    assert sorted(rows) == [["lab0", "prefill", "down"], ["lab0", "router", "down"], ["lab1", "decode", "down"]]
    invalid = fab("-S", ssh, "-H", "lab0,lab1", "pd-up", cwd=tmp_path, env=env)  # GPU mode without model_path
    assert invalid.returncode == 5 and "model_path is not set for lab0, lab1" in invalid.stderr, invalid.stderr
    assert "PLAY" not in invalid.stdout  # refused before any host was touched


def test_example_fabfile_the_whole_chain_stops_with_the_failing_stage_code(lab: Any, tmp_path: Path) -> None:
    """The documented chain on two lab hosts, vars from a Fabric config file (-f). The lab's venvs hold NIXL but
    no SGLang, so the last stage, pd-up, fails on the hosts: exit 2, and what it started is stopped again."""
    env = child_env()
    env.pop("PROVISION_SSH_CONFIG", None)
    config = tmp_path / "fabric.yml"
    shared = {**LAB_VARS, "uv_cache_dir": str(shared_dir("uv")), "sglang_device": "cpu"}
    config.write_text(json.dumps({"provision": {"extra_vars": shared}}))
    stages = ["bootstrap", "install", "smoke", "preflight", "pd-up"]
    done = fab("-f", str(config), "-S", str(lab.ssh_config_path), "-H", "lab2,lab3", *stages, cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    recaps = done.stdout.split("PLAY RECAP")[1:]
    assert len(recaps) == 5  # one run per stage over both hosts
    for recap in recaps[:4]:
        assert "lab2" in recap and "lab3" in recap and "failed=0" in recap and "unreachable=0" in recap
    assert "NIXL WRITE prefill -> decode, verified and timed" in done.stdout
    fatal = [line for line in done.stdout.splitlines() if line.startswith("fatal: [lab")]
    assert "failed=1" in recaps[4] and "ERROR: any_errors_fatal: lab2, lab3 failed" in done.stderr
    assert len(fatal) == 2 and all("No module named" in line for line in fatal), fatal
    assert "pd up failed; stopped what this run started: nothing was left running" in done.stderr


def test_fabric_tasks_verify_host_keys_and_take_the_identity_flag(lab: Any, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    h = lab.hosts[0]
    config = tmp_path / "ssh_config"
    config.write_text(f"Host lab0\n  HostName {h.address}\n  Port {h.port}\n  User {h.user}\n"
                      f"Host *\n  UserKnownHostsFile {known}\n")  # fmt: skip
    env = child_env()
    env.pop("PROVISION_SSH_CONFIG", None)
    key = str(lab.client_key)
    refused = fab("-S", str(config), "-i", key, "-H", "lab0", "bootstrap", cwd=tmp_path, env=env)
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert "not in known_hosts" in refused.stdout and "ERROR: unreachable hosts: lab0" in refused.stderr
    assert known.read_text() == ""
    accepted = fab("-S", str(config), "-i", key, "-H", "lab0", "bootstrap", "--accept-new-host-keys",
                   cwd=tmp_path, env=env)  # fmt: skip
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert f"[{h.address}]:{h.port} ssh-ed25519 " in known.read_text()
    no_key = fab("-S", str(config), "-H", "lab0", "bootstrap", cwd=tmp_path, env={**env, "HOME": str(tmp_path)})
    assert no_key.returncode == 4 and "No authentication methods available" in no_key.stdout, no_key.stdout
