"""validate_pd: each rule, one precise sentence per problem; the shipped example inventories are valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provision.api import inventory_pd_vars
from provision.inventory import Inventory
from provision.pd import validate_pd

REPO = Path(__file__).resolve().parents[2]


def layout(**common: Any) -> dict[str, dict[str, Any]]:
    """gpu01: prefill + router, gpu02: decode."""
    return {
        "gpu01": {"group_names": ["prefill", "router"], "ansible_host": "10.0.0.1", "model_path": "/m", **common},
        "gpu02": {"group_names": ["decode"], "ansible_host": "10.0.0.2", "model_path": "/m", **common},
    }


def one(problems: list[str]) -> str:
    assert len(problems) == 1, problems
    return problems[0]


@pytest.mark.parametrize("name", ["local.yml", "two-host.yml", "single-host-4p4.yml", "nxm.yml"])
def test_examples_are_valid(name: str) -> None:
    hosts = inventory_pd_vars(Inventory.load([str(REPO / "inventory" / name)], {}), {})
    assert validate_pd(hosts, {h: 8 for h in hosts}) == []


def test_valid_layout() -> None:
    assert validate_pd(layout()) == []


def test_missing_groups() -> None:
    hosts = layout()
    hosts["gpu01"]["group_names"] = ["prefill"]
    assert one(validate_pd(hosts)).startswith("no host in group 'router'")


def test_router_port_equal_to_server_port() -> None:
    hosts = layout()
    hosts["gpu01"]["router_port"] = 30000
    msg = one(validate_pd(hosts))
    assert "port 30000 on 10.0.0.1 is used twice" in msg and "router and server both default to 30000" in msg


def test_ports_unique_per_machine() -> None:
    hosts: dict[str, dict[str, Any]] = {
        "a": {"group_names": ["prefill", "router"], "ansible_connection": "local", "sglang_device": "cpu"},
        "b": {"group_names": ["decode"], "ansible_connection": "local", "sglang_device": "cpu"},
    }
    msg = one(validate_pd(hosts))
    assert msg == "port 30000 on localhost is used twice: prefill server port of a and decode server port of b"
    hosts["b"]["server_port"] = 8998
    assert "prefill bootstrap port of a and decode server port of b" in one(validate_pd(hosts))
    hosts["b"]["server_port"] = 30010
    assert validate_pd(hosts) == []


def test_lab_hosts_on_distinct_loopback_addresses_may_share_ports() -> None:
    hosts = {
        "lab0": {"group_names": ["prefill", "router"], "ansible_host": "127.0.9.10", "sglang_device": "cpu"},
        "lab1": {"group_names": ["decode"], "ansible_host": "127.0.9.11", "sglang_device": "cpu"},
    }
    assert validate_pd(hosts) == []
    hosts["lab1"]["server_bind_host"] = "0.0.0.0"  # a wildcard bind clashes with every address of the machine
    assert "port 30000 on localhost is used twice" in one(validate_pd(hosts))


def test_second_router_needs_its_own_metrics_port() -> None:
    hosts = layout()
    hosts["gpu01b"] = {"group_names": ["router"], "ansible_host": "10.0.0.1", "router_port": 8001}
    assert "set router_prometheus_port" in one(validate_pd(hosts))


def test_prefill_on_loopback_across_machines() -> None:
    hosts = layout()
    hosts["gpu01"]["pd_address"] = "127.0.0.1"
    problems = validate_pd(hosts)
    assert any(
        p.startswith("prefill gpu01 is reached at 127.0.0.1, a loopback address, but decode gpu02") for p in problems
    )
    hosts = layout()
    hosts["gpu01"]["server_bind_host"] = "127.0.0.1"
    assert "prefill gpu01 listens on 127.0.0.1" in validate_pd(hosts)[0]


def test_bootstrap_port_the_router_passes() -> None:
    hosts = layout(router_extra_args=["--prefill", "http://10.0.0.1:30000", "9000"])
    msg = one(validate_pd(hosts))
    assert msg == (
        "router gpu01 passes bootstrap port 9000 for prefill gpu01, which listens on 8998: the decode would dial "
        "the wrong port"
    )
    # an extra arg that moves the prefill's bootstrap port is followed by the router's own flags
    hosts = layout(sglang_extra_args=["--disaggregation-bootstrap-port", "9100"])
    assert validate_pd(hosts) == []


def test_same_page_size_and_kv_dtype() -> None:
    hosts = layout()
    hosts["gpu01"]["page_size"] = 16
    assert one(validate_pd(hosts)).startswith("the page size differs between the servers (gpu01=16, gpu02=SGLang")
    hosts = layout()
    hosts["gpu02"]["kv_cache_dtype"] = "fp8_e4m3"
    assert "the KV cache dtype differs" in one(validate_pd(hosts))


def test_transfer_backend_is_nixl() -> None:
    hosts = layout()
    hosts["gpu02"]["sglang_extra_args"] = "--disaggregation-transfer-backend mooncake"
    assert one(validate_pd(hosts)) == "decode gpu02: transfer backend is 'mooncake', provision deploys nixl only"


def test_mixed_devices_and_missing_model() -> None:
    hosts = layout()
    hosts["gpu02"]["sglang_device"] = "cpu"
    assert "mix sglang_device cpu and cuda" in one(validate_pd(hosts))
    hosts = layout()
    hosts["gpu02"].pop("model_path")
    assert one(validate_pd(hosts)) == "gpu02: model_path is not set (a model directory on the host, or a hub id)"


def test_a_plan_error_is_a_problem() -> None:
    hosts = layout(tp="four")
    assert one(validate_pd(hosts)) == "gpu01: tp='four' is not an integer"


def test_gpus_from_facts() -> None:
    hosts = layout(tp=4)
    assert validate_pd(hosts, {"gpu01": 4, "gpu02": 8}) == []
    msg = one(validate_pd(hosts, {"gpu01": 2, "gpu02": 8}))
    assert msg == "prefill gpu01 needs GPUs 0-3 (tp 4 x dp 1 from base_gpu_id 0) but the host reports 2 GPUs"
    assert "the host reports no GPU" in one(validate_pd(hosts, {"gpu01": 0}))
    hosts["gpu01"]["ansible_facts"] = {"gpus": [{}, {}]}  # gathered facts count
    assert "reports 2 GPUs" in one(validate_pd(hosts))
    hosts["gpu01"]["pd"] = {"gpus": 8}  # pd_config's nvidia-smi count (registered as pd) wins
    assert validate_pd(hosts) == []


def test_single_host_split_needs_disjoint_gpus() -> None:
    hosts = inventory_pd_vars(Inventory.load([str(REPO / "inventory" / "single-host-4p4.yml")], {}), {})
    assert validate_pd(hosts, {"gpu01-prefill": 8, "gpu01-decode": 8}) == []
    problems = validate_pd(hosts, {"gpu01-prefill": 4, "gpu01-decode": 4})
    assert problems == [
        "decode gpu01-decode needs GPUs 4-7 (tp 4 x dp 1 from base_gpu_id 4) but the host reports 4 GPUs"
    ]
    hosts = inventory_pd_vars(
        Inventory.load([str(REPO / "inventory" / "single-host-4p4.yml")], {"base_gpu_id": 2}), {"base_gpu_id": 2}
    )
    msg = one(validate_pd(hosts, {"gpu01-prefill": 8, "gpu01-decode": 8}))
    assert msg.startswith("decode gpu01-decode and prefill gpu01-prefill share GPU 2, 3, 4, 5 on 10.0.0.11")


def test_cpu_mode_skips_the_gpu_check() -> None:
    hosts = layout(sglang_device="cpu")
    assert validate_pd(hosts, {"gpu01": 0, "gpu02": 0}) == []
