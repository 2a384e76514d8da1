"""The Slurm export's per-node commands, run the way the allocation runs them, bring up a CPU PD pair that
``provision pd verify`` accepts.

Two lab hosts stand in for two Slurm nodes: the export directory (shared by the nodes in a cluster) is copied
to each; ``node-K.sh`` is started on node K with ``PD_NODE_0``/``PD_NODE_1`` set to the hosts' addresses, as
``pd.sbatch`` starts it with ``srun`` (in a session of its own, the way a step is its own process tree); then
``verify.sh`` on the router's node, as ``pd.sbatch`` runs it; then ``provision pd verify`` through SSH. The
servers are stopped whatever happens (their process group, by the id the launcher recorded).

Reuses the session's SGLang venv (``sglang_stack``, lab host 0) and installs lab host 1's from the warm cache,
as test_pd_e2e.py. Run under ``flock /tmp/provision-sglang.lock``: one CPU PD pair at a time on the machine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision import api
from tests.support.cli import lab_ssh_config, run_cli_in
from tests.support.stack import VENV, SglangStack, install_sglang_stack

pytestmark = pytest.mark.lab
DIR = "pd-export"  # in each lab host's home: the cluster's shared export directory


def copy_to(lab: Any, i: int, files: dict[str, str], modes: dict[str, int]) -> None:
    for rel, text in files.items():
        path = f"{DIR}/{rel}"
        script = 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"'
        done = lab.run_as(i, ["sh", "-c", script, "sh", path, oct(modes.get(rel, 0o644))[2:]], input=text)
        assert done.returncode == 0, done.stderr


def group_alive(lab: Any, i: int, pgid: int) -> bool:
    out = lab.run_as(i, ["ps", "-o", "pid=", "-g", str(pgid)]).stdout
    return bool(out.split())


def stop_node(lab: Any, i: int, pgid: int) -> None:
    """TERM the node's process group (the launcher, its servers and their children), KILL it after 30 s."""
    lab.run_as(i, ["kill", "-TERM", "--", f"-{pgid}"])
    deadline = time.monotonic() + 30
    while group_alive(lab, i, pgid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if group_alive(lab, i, pgid):
        lab.run_as(i, ["kill", "-KILL", "--", f"-{pgid}"])


def read_pid(lab: Any, i: int, k: int, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = lab.run_as(i, ["cat", f"{DIR}/run/node-{k}.pid"])
        if out.returncode == 0 and out.stdout.strip().isdigit():
            return int(out.stdout.strip())
        time.sleep(0.2)
    raise AssertionError(f"node-{k}.sh recorded no pid: {lab.run_as(i, ['cat', f'{DIR}/node-{k}.out']).stdout}")


def logs(lab: Any, i: int) -> str:
    out = lab.run_as(i, ["sh", "-c", f"tail -n 30 {DIR}/node-*.out {DIR}/run/*.log 2>/dev/null"])
    return str(out.stdout)[-4000:]


@pytest.fixture
def pair(lab: Any, sglang_stack: SglangStack, tmp_path: Path) -> Iterator[tuple[Path, api.PdExport]]:
    install_sglang_stack(lab, [1], tmp_path / "install")  # the decode host's venv: seconds from the warm cache
    common = {"sglang_device": "cpu", "venv_path": VENV, "python": "/usr/bin/python3", "pd_server_timeout": 240,
              "pd_verify_timeout": 120}  # fmt: skip
    inventory = lab.write_inventory(
        tmp_path / "hosts.yml",
        extra_host_vars={"lab0": common, "lab1": common},
        groups={"prefill": ["lab0"], "decode": ["lab1"], "router": ["lab0"]},
    )
    exported = api.pd_export(str(inventory), to="slurm", output=tmp_path / "export")
    yield inventory, exported


def test_the_slurm_per_node_commands_bring_up_a_pair_pd_verify_accepts(
    lab: Any, pair: tuple[Path, api.PdExport], tmp_path: Path
) -> None:
    inventory, exported = pair
    assert sorted(n for n in exported.files if n.startswith("node-")) == ["node-0.sh", "node-1.sh"]
    env = " ".join(f"PD_NODE_{k}={lab.hosts[k].address}" for k in (0, 1))
    started = time.monotonic()
    groups: dict[int, int] = {}
    try:
        for k in (0, 1):
            copy_to(lab, k, exported.files, exported.modes)
            lab.run_as(k, ["rm", "-rf", f"{DIR}/run"])
        for k in (1, 0):  # srun starts every step at once; the decode's node first does not matter either way
            launch = f"cd {DIR} && {env} setsid -f bash node-{k}.sh > node-{k}.out 2>&1 < /dev/null"
            assert lab.run_as(k, ["sh", "-c", launch]).returncode == 0
            groups[k] = read_pid(lab, k, k)
        verified = lab.run_as(0, ["sh", "-c", f"{env} bash {DIR}/verify.sh"], timeout=420)
        up = time.monotonic() - started
        assert verified.returncode == 0, (
            f"verify.sh: {verified.stdout[-2000:]} {verified.stderr[-2000:]}\n{logs(lab, 0)}"
        )
        answer = json.loads(verified.stdout.strip().splitlines()[-1])
        assert answer["ok"] and answer["completion_tokens"] >= 1
        with lab_ssh_config(lab):
            result = run_cli_in(tmp_path, ["pd", "verify", "-i", str(inventory), "--json"])
        assert result.code == 0, result.err[-3000:] + logs(lab, 0) + logs(lab, 1)
        doc = json.loads(result.out)
        assert doc["lab0"]["ok"] and doc["lab0"]["completion_tokens"] >= 1, doc
        prefill = lab.run_as(0, ["cat", f"{DIR}/run/lab0-prefill.log"]).stdout
        decode = lab.run_as(1, ["cat", f"{DIR}/run/lab1-decode.log"]).stdout
        assert "NIXL KVManager initialized with backend: UCX" in prefill + decode
        assert "Prefill batch" in prefill and '"POST /generate HTTP/1.1" 200' in decode
        print(f"\nslurm export's node commands → verified: {up:.1f}s (pd verify after: ok)")
    finally:
        for k, pgid in groups.items():
            stop_node(lab, k, pgid)
    for k, pgid in groups.items():
        assert not group_alive(lab, k, pgid), f"node {k}'s processes outlived the stop"
    for k in (0, 1):  # the lab hosts are the session's: leave their homes as they were (the tiny model stays)
        lab.run_as(k, ["rm", "-rf", DIR])
