"""The PD plan (provision/pd/spec.py): inventory vars → commands, flags, env and paths of each process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provision.api import inventory_pd_vars
from provision.inventory import Inventory
from provision.pd import build, pd_host_names
from provision.pd.addr import is_loopback, machine_of
from provision.pd.flags import PlanError, effective, flag_lines, words

REPO = Path(__file__).resolve().parents[2]


def two_hosts(**common: Any) -> dict[str, dict[str, Any]]:
    return {
        "p1": {"group_names": ["prefill", "router"], "ansible_host": "10.0.0.1", "model_path": "/m", **common},
        "d1": {"group_names": ["decode"], "ansible_host": "10.0.0.2", "model_path": "/m", **common},
    }


def example(name: str) -> dict[str, Any]:
    inventory = Inventory.load([str(REPO / "inventory" / name)], {})
    return inventory_pd_vars(inventory, {})


def test_two_hosts_commands() -> None:
    d = build(two_hosts(venv_path="/opt/venv"))
    assert [p.name for p in d.procs] == ["p1-prefill", "d1-decode", "p1-router"]
    pre, dec, router = d.procs
    assert pre.argv[:3] == ["/opt/venv/bin/python", "-m", "sglang.launch_server"]
    assert pre.flags[:4] == [
        ["--model-path", "/m"],
        ["--disaggregation-mode", "prefill"],
        ["--disaggregation-transfer-backend", "nixl"],
        ["--disaggregation-bootstrap-port", "8998"],
    ]
    assert ["--host", "10.0.0.1", "--port", "30000"] in pre.flags
    assert ["--base-gpu-id", "0"] in pre.flags and ["--tp-size", "1"] in pre.flags
    assert "--disaggregation-bootstrap-port" not in dec.args
    assert router.command == ["/opt/venv/bin/python", "-m", "sglang_router.launch_router"]
    assert ["--prefill", "http://10.0.0.1:30000", "8998"] in router.flags
    assert ["--decode", "http://10.0.0.2:30000"] in router.flags
    assert ["--host", "10.0.0.1", "--port", "8000"] in router.flags
    assert ["--prometheus-host", "10.0.0.1", "--prometheus-port", "29000"] in router.flags


def test_cpu_mode_flags_env_and_model() -> None:
    d = build(two_hosts(sglang_device="cpu", venv_path="~/venv"), homes={"p1": "/home/a", "d1": "/home/b"})
    pre, dec = d.prefill[0], d.decode[0]
    for proc in (pre, dec):
        for flag in ("--device", "--attention-backend", "--disable-cuda-graph", "--skip-server-warmup",
                     "--disable-radix-cache", "--max-total-tokens", "--sleep-on-idle"):  # fmt: skip
            assert flag in proc.args
        assert "--base-gpu-id" not in proc.args
    assert effective(dec.args, "--disaggregation-decode-retraction-backup") == "cpu_tensor"
    assert "--disaggregation-decode-retraction-backup" not in pre.args
    plan = d.hosts["p1"]
    assert plan.tiny_model and plan.model_path == "/home/a/.provision/models/tiny-llama"
    assert effective(pre.args, "--model-path") == "/home/a/.provision/models/tiny-llama"
    assert pre.command[0] == "/home/a/venv/bin/python"  # a quoted ~ would not expand: made absolute
    assert plan.env["SGLANG_USE_CPU_ENGINE"] == "1" and plan.env["PROVISION_CPU_COMPAT"] == "1"
    assert plan.env["OMP_NUM_THREADS"] == "1"  # one intra-op thread a server: the tiny model shares nothing well
    assert plan.env["PYTHONPATH"] == "/home/a/.provision/pd/cpu_compat"
    assert plan.env["SGLANG_HOST_IP"] == "10.0.0.1"
    assert d.hosts["d1"].model_path == "/home/b/.provision/models/tiny-llama"


def test_env_from_ucx_vars_and_pd_env() -> None:
    d = build(two_hosts(ucx_tls=["rc", "tcp"], ucx_net_devices="mlx5_0:1,eth0", pd_env={"NCCL_DEBUG": "INFO"}))
    env = d.hosts["p1"].env
    assert env["UCX_TLS"] == "rc,tcp" and env["UCX_NET_DEVICES"] == "mlx5_0:1,eth0"
    assert env["SGLANG_DISAGGREGATION_NIXL_BACKEND"] == "UCX" and env["NCCL_DEBUG"] == "INFO"
    with pytest.raises(PlanError, match="invalid environment variable name"):
        build(two_hosts(pd_env={"BAD NAME": "x"}))
    assert "OMP_NUM_THREADS" not in env  # GPU servers keep torch's own default
    cpu = build(two_hosts(sglang_device="cpu", pd_env={"OMP_NUM_THREADS": 4}))
    assert cpu.hosts["p1"].env["OMP_NUM_THREADS"] == "4"  # pd_env wins over CPU mode's one thread


def test_transfer_timeout_bounds_sglangs_kv_waits() -> None:
    """``pd_transfer_timeout`` sets both of SGLang's KV-transfer waits; unset, GPU servers keep SGLang's own
    (300 s) and CPU mode waits 15 s; ``pd_env`` wins; a bad value is one line naming the host and the var."""
    names = ("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT")
    gpu = build(two_hosts()).hosts["p1"].env
    assert not any(n in gpu for n in names)
    cpu = build(two_hosts(sglang_device="cpu")).hosts["d1"].env
    assert [cpu[n] for n in names] == ["15", "15"]
    set_ = build(two_hosts(pd_transfer_timeout="45")).hosts["p1"].env
    assert [set_[n] for n in names] == ["45", "45"]
    mixed = build(two_hosts(sglang_device="cpu", pd_transfer_timeout=60,
                            pd_env={"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "90"})).hosts["p1"].env  # fmt: skip
    assert [mixed[n] for n in names] == ["60", "90"]
    with pytest.raises(PlanError, match=r"p1: pd_transfer_timeout=0 is out of range"):
        build(two_hosts(pd_transfer_timeout=0))
    with pytest.raises(PlanError, match=r"pd_transfer_timeout"):
        build(two_hosts(pd_transfer_timeout="soon"))


def test_extra_args_and_custom_commands() -> None:
    hosts = two_hosts(sglang_extra_args="--page-size 16 --enable-metrics", router_extra_args=["--policy", "random"],
                      sglang_server_cmd="/usr/bin/env FOO=1 /opt/py -m sglang.launch_server")  # fmt: skip
    d = build(hosts)
    pre = d.prefill[0]
    assert pre.command == ["/usr/bin/env", "FOO=1", "/opt/py", "-m", "sglang.launch_server"]
    assert pre.flags[-2:] == [["--page-size", "16"], ["--enable-metrics"]]
    assert d.routers[0].flags[-1] == ["--policy", "random"]


def test_a_host_in_both_server_groups_is_refused() -> None:
    hosts = {"h": {"group_names": ["prefill", "decode"], "model_path": "/m"}}
    with pytest.raises(PlanError, match="more than one of the groups prefill, decode and serve"):
        build(hosts)


def test_bad_port_and_device() -> None:
    with pytest.raises(PlanError, match="server_port='x' is not an integer"):
        build(two_hosts(server_port="x"))
    with pytest.raises(PlanError, match="out of range"):
        build(two_hosts(router_port=70000))
    with pytest.raises(PlanError, match="sglang_device='tpu'"):
        build(two_hosts(sglang_device="tpu"))


def test_wildcard_bind_is_probed_on_loopback() -> None:
    d = build(two_hosts(server_bind_host="0.0.0.0"))
    fact = d.hosts["p1"].fact()
    assert fact["server"]["health_url"] == "http://127.0.0.1:30000/health"
    assert fact["server"]["url"] == "http://10.0.0.1:30000"  # what the router and the decode dial
    assert fact["router"]["health_url"] == "http://10.0.0.1:8000/readiness"


def test_local_inventory() -> None:
    hosts = example("local.yml")
    assert pd_host_names({"prefill": ["local-prefill"], "decode": ["local-decode"], "router": ["local-prefill"]}) == [
        "local-prefill",
        "local-decode",
    ]
    d = build(hosts)
    assert [(p.host, p.role, p.port) for p in d.procs] == [
        ("local-prefill", "prefill", 30000),
        ("local-decode", "decode", 30010),
        ("local-prefill", "router", 8000),
    ]
    assert {p.machine for p in d.procs} == {"localhost"}
    assert all(plan.device == "cpu" for plan in d.hosts.values())


def test_single_host_split_4_4() -> None:
    d = build(example("single-host-4p4.yml"))
    pre, dec = d.prefill[0], d.decode[0]
    assert (effective(pre.args, "--tp-size"), effective(pre.args, "--base-gpu-id")) == ("4", "0")
    assert (effective(dec.args, "--tp-size"), effective(dec.args, "--base-gpu-id")) == ("4", "4")
    assert pre.machine == dec.machine == "10.0.0.11"


def test_nxm_router_lists_every_worker() -> None:
    d = build(example("nxm.yml"))
    router = d.routers[0]
    assert [w for line in router.flags if line[0] == "--prefill" for w in line[1:]] == [
        "http://10.0.1.11:30000", "8998", "http://10.0.1.12:30000", "8998",
    ]  # fmt: skip
    assert sum(1 for line in router.flags if line[0] == "--decode") == 3


def test_helpers() -> None:
    assert words("a 'b c'", "x") == ["a", "b c"] and words(["a", 1], "x") == ["a", "1"] and words(None, "x") == []
    assert flag_lines(["--a", "1", "2", "--b", "--c=3"]) == [["--a", "1", "2"], ["--b"], ["--c=3"]]
    assert effective(["--port", "1", "--port=2"], "--port") == "2"
    assert effective(["--tp", "4"], "--tp-size", "--tp") == "4"
    assert is_loopback("127.0.77.10") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("10.0.0.1") and not is_loopback("gpu01")
    assert machine_of("lab0", {"ansible_host": "127.0.5.10"}) == "localhost"
    assert machine_of("x", {"ansible_connection": "local"}) == "localhost"
    assert machine_of("gpu01", {}) == "gpu01"


def test_router_health_check_flags() -> None:
    def router_args(**common: Any) -> list[str]:
        return build(two_hosts(**common)).routers[0].args

    gpu = router_args()
    assert effective(gpu, "--health-check-interval-secs") == "5"
    assert effective(gpu, "--health-check-timeout-secs") is None  # the router's own default
    assert effective(gpu, "--health-failure-threshold") is None
    cpu = router_args(sglang_device="cpu")  # slow /health answers on shared cores must not empty the router
    assert effective(cpu, "--health-check-timeout-secs") == "30"
    set_ = router_args(router_health_check_timeout=12, router_health_failure_threshold=5, sglang_device="cpu")
    assert effective(set_, "--health-check-timeout-secs") == "12"
    assert effective(set_, "--health-failure-threshold") == "5"
    with pytest.raises(PlanError, match="router_health_failure_threshold"):
        router_args(router_health_failure_threshold="many")
