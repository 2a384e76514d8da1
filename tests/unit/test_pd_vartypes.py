"""Every PD var has a type, checked before any host is touched (issue 23, class 14): ``pd_dir: 5`` created
``~/5/logs`` on the hosts, ``ucx_tls: 5`` crashed; now one line, exit 5. The only hosts are 127.0.0.1 port 1:
had provision contacted one, the run would end unreachable (exit 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.pd import PlanError, build
from provision.pd.vartypes import TYPES

ROOT = Path(__file__).resolve().parents[2]
GHOST = "ansible_host: 127.0.0.1, ansible_port: 1, sglang_device: cpu"


def inventory(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(
        "all:\n  children:\n"
        f"    prefill:\n      hosts:\n        p1: {{{GHOST}, {extra}}}\n"
        f"    decode:\n      hosts:\n        d1: {{{GHOST}, server_port: 30010}}\n"
        "    router:\n      hosts:\n        p1: {router_port: 8000}\n"
    )
    return path


@pytest.mark.parametrize("extra, shown", [
    ("pd_dir: 5", "pd_dir=5 is not a path"),
    ("ucx_tls: 5", "ucx_tls=5 is not a list of names"),
    ("venv_path: [a]", "venv_path=['a'] is not a path"),
    ("pd_env: [A]", "pd_env=['A'] is not a mapping"),
    ("sglang_extra_args: {a: 1}", "sglang_extra_args={'a': 1} is not a command line"),
    ("router_health_check_timeout: .nan", "router_health_check_timeout=nan is not a number of seconds"),
    ("hf_token: 12345678", "hf_token=a int is not text"),
    ("tp: true", "tp=True is not an integer"),
])  # fmt: skip
@pytest.mark.parametrize("command", [["pd", "up"], ["run", "pd-up.yml"]])
def test_a_pd_var_of_the_wrong_type_is_exit_5_before_any_host(
    tmp_path: Path, extra: str, shown: str, command: list[str]
) -> None:
    inv = inventory(tmp_path, extra)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "provision", *command, "-i", str(inv)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 5, run.stdout + run.stderr
    assert shown in run.stderr and "unreachable" not in run.stderr.lower(), run.stderr
    assert "12345678" not in run.stderr  # a secret's value is never quoted


def test_every_default_has_its_type() -> None:
    from provision.pd.spec import DEFAULTS

    for name, value in DEFAULTS.items():
        assert name in TYPES, f"{name} has no checked type"
        if value is not None:
            assert TYPES[name][0](value), name


def test_text_numbers_from_ini_inventories_are_numbers() -> None:
    hosts = {
        "p1": {"group_names": ["prefill", "router"], "sglang_device": "cpu", "server_port": "30000", "tp": "1"},
        "d1": {"group_names": ["decode"], "sglang_device": "cpu", "server_port": "30010"},
    }
    assert build(hosts).prefill[0].port == 30000
    with pytest.raises(PlanError, match="pd_dir"):
        build({**hosts, "d1": {**hosts["d1"], "pd_dir": 5}})
