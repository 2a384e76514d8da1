"""provision.nixl.ucx: env checks, env building, bandwidth floors, and UCX_PROTO_INFO parsing (real samples)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.nixl.ucx import (
    Problem,
    check_ucx_env,
    default_min_gbps,
    diagnostics,
    parse_proto_info,
    parse_proto_tables,
    transports_in,
    ucx_env,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ucx"


def errors(problems: list[Problem]) -> list[str]:
    return [p.message for p in problems if p.level == "error"]


# ------------------------------------------------------------------------------------------ check_ucx_env
@pytest.mark.parametrize("tls", [None, "", "all", ["all"], "tcp", "cuda_ipc,cuda_copy,tcp", "^cuda_ipc"])
def test_tls_with_tcp_or_unset_is_fine(tls: object) -> None:
    assert check_ucx_env(tls, None, same_host_gpu_pair=False) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("tls", ["sm,cuda_ipc,cuda_copy", ["sm", "cuda_ipc"], "^tcp", "rc,ud"])
def test_tls_without_tcp_is_an_error(tls: object) -> None:
    (message,) = errors(check_ucx_env(tls, None, same_host_gpu_pair=False))  # type: ignore[arg-type]
    assert "NIXL_ERR_BACKEND" in message
    assert "Destination is unreachable" in message
    assert "lacks tcp" in message


def test_same_host_gpu_pair_needs_cuda_ipc() -> None:
    (message,) = errors(check_ucx_env("cuda_copy,tcp", None, same_host_gpu_pair=True))
    assert "cuda_ipc" in message and "850" in message and "0.45 vs 384 GB/s" in message
    # not a same-host GPU pair: cuda_ipc is irrelevant
    assert check_ucx_env("cuda_copy,tcp", None, same_host_gpu_pair=False) == []
    # unset UCX_TLS: UCX picks cuda_ipc itself
    assert check_ucx_env(None, None, same_host_gpu_pair=True) == []
    assert check_ucx_env(["cuda_ipc", "cuda_copy", "tcp"], None, same_host_gpu_pair=True) == []
    assert check_ucx_env("cuda,tcp", None, same_host_gpu_pair=True) == []  # the "cuda" alias has cuda_ipc
    assert errors(check_ucx_env("^cuda_ipc", None, same_host_gpu_pair=True))


def test_both_errors_at_once() -> None:
    assert len(errors(check_ucx_env("sm,cuda_copy", None, same_host_gpu_pair=True))) == 2


@pytest.mark.parametrize("devices", ["mlx5_0:1", "mlx5_0:1,mlx5_1:1", ["mlx5_2:1"], "bnxt_re0:1"])
def test_rdma_only_net_devices_warn(devices: object) -> None:
    (problem,) = check_ucx_env(None, devices, same_host_gpu_pair=False)  # type: ignore[arg-type]
    assert problem.level == "warning"
    assert "RDMA" in problem.message and "tcp" in problem.message


@pytest.mark.parametrize("devices", [None, "all", "eth0", "mlx5_0:1,eth0", ["mlx5_0:1", "lo"], "ens1f0np0"])
def test_net_devices_with_a_tcp_device_are_fine(devices: object) -> None:
    assert check_ucx_env(None, devices, same_host_gpu_pair=False) == []  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ ucx_env
def test_ucx_env_from_inventory_vars() -> None:
    assert ucx_env({}) == {}
    assert ucx_env({"ucx_tls": None, "ucx_net_devices": None}) == {}
    assert ucx_env({"ucx_tls": [], "ucx_net_devices": ""}) == {}
    assert ucx_env({"ucx_tls": ["cuda_ipc", "cuda_copy", "tcp"]}) == {"UCX_TLS": "cuda_ipc,cuda_copy,tcp"}
    assert ucx_env({"ucx_tls": "tcp, cuda_copy", "ucx_net_devices": "mlx5_0:1,eth0"}) == {
        "UCX_TLS": "tcp,cuda_copy",
        "UCX_NET_DEVICES": "mlx5_0:1,eth0",
    }


# ------------------------------------------------------------------------------------------------- floors
@pytest.mark.parametrize(
    ("kind", "floor"),
    [
        ("NV18", 200.0),
        ("NV4", 200.0),
        ("nvlink", 200.0),
        ("PIX", 10.0),
        ("PXB", 10.0),
        ("PHB", 10.0),
        ("NODE", 10.0),
        ("SYS", 10.0),
        ("pcie", 10.0),
        ("cross-host", 1.0),
        ("loopback", 0.05),
        ("dram", 0.05),
        (None, 0.05),
    ],
)
def test_default_min_gbps(kind: str | None, floor: float) -> None:
    assert default_min_gbps(kind) == floor


def test_nvlink_floor_scales_below_1_gib() -> None:
    """Measured on H200 NV18: 64 MiB reach 83 GB/s, 1 GiB 346 — a 64 MiB check must not fail a good link,
    and must still fail the 0.40 GB/s of a pair without cuda_ipc."""
    assert default_min_gbps("NV18", 1 << 30) == 200.0
    assert default_min_gbps("nvlink", 4 << 30) == 200.0
    assert default_min_gbps("nvlink", 64 << 20) == 12.5
    assert 0.40 < default_min_gbps("nvlink", 64 << 20) < 83
    assert default_min_gbps("PIX", 64 << 20) == 10.0
    assert default_min_gbps("cross-host", 1 << 20) == 1.0


def test_default_min_gbps_rejects_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="unknown link kind"):
        default_min_gbps("carrier-pigeon")


# -------------------------------------------------------------------------------------- UCX_PROTO_INFO
def test_parse_real_output_forced_tcp() -> None:
    """nixl-cu13 1.5.1, two processes on this box, DRAM→DRAM, UCX_TLS=tcp: the put is split over two lanes."""
    text = (FIXTURES / "proto_info_tcp.txt").read_text()
    assert parse_proto_info(text) == ["tcp/lo", "tcp/eth0"]
    tables = parse_proto_tables(text)
    put = [t for t in tables if t.operation.startswith("remote memory write") and not t.is_self]
    assert put and put[-1].endpoint == "initiator intra-node cfg#1"
    assert put[-1].rows == [("0..inf", "zero-copy", "52% on tcp/lo and 48% on tcp/eth0")]


def test_parse_real_output_default_tls() -> None:
    """Default UCX_TLS on one host: the data goes over CMA; tcp/lo only carries the notifications."""
    text = (FIXTURES / "proto_info_cma.txt").read_text()
    assert parse_proto_info(text) == ["cma/memory"]
    assert parse_proto_info(text, data_path_only=False) == ["cma/memory", "tcp/lo"]
    am = [t for t in parse_proto_tables(text) if t.operation.startswith("active message by ucp_am_send* from")]
    assert ("1..16515", "zero-copy", "tcp/lo") in am[0].rows


def test_parse_real_output_vram_over_nvlink() -> None:
    """2x H200 (NV18), VRAM GPU0 → VRAM GPU1, two processes, default UCX_TLS: UCX also prints host-memory
    tables (cma, and ``software emulation`` over tcp/lo for host→GPU); the GPU data path is cuda_ipc."""
    text = (FIXTURES / "proto_info_cuda_ipc.txt").read_text()
    assert parse_proto_info(text, mem="vram") == ["cuda_ipc/cuda"]
    assert parse_proto_info(text, mem="dram") == ["cma/memory"]
    assert "cuda_ipc/cuda" in parse_proto_info(text)
    (gpu,) = [t for t in parse_proto_tables(text) if "from cuda/GPU0" in t.operation]
    assert gpu.endpoint == "initiator intra-node cfg#2"
    assert gpu.rows == [("0..inf", "zero-copy", "cuda_ipc/cuda")]


def test_parse_real_output_vram_without_cuda_ipc() -> None:
    """Same pair with UCX_TLS=cuda_copy,tcp: UCX emulates the GPU put over tcp/lo (0.40 GB/s measured)."""
    text = (FIXTURES / "proto_info_no_cuda_ipc.txt").read_text()
    assert parse_proto_info(text, mem="vram") == ["tcp/lo"]
    (gpu,) = [t for t in parse_proto_tables(text) if "(multi) from cuda/GPU0" in t.operation]
    assert gpu.rows == [("0..inf", "software emulation", "tcp/lo")]


def test_parse_mem_filter_falls_back() -> None:
    text = (FIXTURES / "proto_info_tcp.txt").read_text()
    assert parse_proto_info(text, mem="dram") == ["tcp/lo", "tcp/eth0"]
    assert parse_proto_info(text, mem="vram") == ["tcp/lo", "tcp/eth0"]  # no GPU table: all RMA tables


def test_parse_ignores_other_lines_and_self_endpoints() -> None:
    assert parse_proto_info("") == []
    assert parse_proto_info("2026-11-30 NIXL INFO _api.py:281 Initialized NIXL agent: x\n| not | a | ucx |") == []
    text = """\
[1.5] [gpu0:42 :0]   +------------------+--------------------+
[1.5] [gpu0:42 :0]   | prefill self cfg#0                     |
[1.5] [gpu0:42 :0]   | remote memory write by ucp_put* from cuda/GPU0 to cuda/GPU0 |
[1.5] [gpu0:42 :0]   +------------------+--------------------+
[1.5] [gpu0:42 :0]   | 0..inf | zero-copy | cuda_copy/cuda    |
[1.5] [gpu0:42 :0]   +------------------+--------------------+
[1.6] [gpu0:42 :0]   +------------------+--------------------+
[1.6] [gpu0:42 :0]   | prefill intra-node cfg#1               |
[1.6] [gpu0:42 :0]   | remote memory write by ucp_put* from cuda/GPU0 to cuda/GPU1 |
[1.6] [gpu0:42 :0]   +------------------+--------------------+
[1.6] [gpu0:42 :0]   | Range  | Description | Config          |
[1.6] [gpu0:42 :0]   +------------------+--------------------+
[1.6] [gpu0:42 :0]   | 0..inf | zero-copy | cuda_ipc/cuda     |
[1.6] [gpu0:42 :0]   +------------------+--------------------+
"""
    assert parse_proto_info(text) == ["cuda_ipc/cuda"]


def test_parse_older_one_line_header_and_multi_lane() -> None:
    """UCX before 1.19 printed the endpoint and the operation as two cells of one header line."""
    text = """\
[10.1] [node1:7:0]   +---------------------+------------------------------------------+
[10.1] [node1:7:0]   | app inter-node cfg#3 | remote memory write by ucp_put* from host memory to host |
[10.1] [node1:7:0]   +---------------------+------------------------------------------+
[10.1] [node1:7:0]   |        0..4096 | short     | rc_mlx5/mlx5_0:1 |
[10.1] [node1:7:0]   |     4097..inf | zero-copy  | 60% on rc_mlx5/mlx5_0:1 and 40% on rc_mlx5/mlx5_1:1 |
[10.1] [node1:7:0]   +---------------------+------------------------------------------+
"""
    (table,) = parse_proto_tables(text)
    assert table.endpoint == "app inter-node cfg#3"
    assert table.operation.startswith("remote memory write")
    assert parse_proto_info(text) == ["rc_mlx5/mlx5_0:1", "rc_mlx5/mlx5_1:1"]


def test_transports_in_config_cells() -> None:
    assert transports_in("52% on tcp/lo and 48% on tcp/eth0") == ["tcp/lo", "tcp/eth0"]
    assert transports_in("cuda_ipc/cuda") == ["cuda_ipc/cuda"]
    assert transports_in("(?) rendezvous no data fetch") == []


def test_diagnostics_pick_ucx_and_nixl_lines() -> None:
    """Real output of a NIXL agent created with UCX_NET_DEVICES=nosuchdev0 (nixl-cu13 1.5.1)."""
    text = """\
[1796011441.133478] [vm:6037 :0]     ucp_context.c:1508 UCX  WARN  network device 'nosuchdev0' is not \
available, please use one or more of: 'eth0'(tcp), 'lo'(tcp)
[1796011441.143119] [vm:6037 :0]          select.c:722  UCX  ERROR   no active messages transport to \
<no debug data>: self/memory - no peer failure handler, cma/memory - no am bcopy
W1130 04:04:01.143138    6037 ucx_enums.cpp:58] Unexpected UCX error: Destination is unreachable
E1130 04:04:01.143222    6037 nixl_agent.cpp:371] createBackend: backend 'UCX' encountered error during \
intra-agent transfer setup with status NIXL_ERR_BACKEND
Traceback (most recent call last):
  File "nixl_transfer.py", line 1, in <module>
nixl_cu13._bindings.nixlBackendError: NIXL_ERR_BACKEND
"""
    assert diagnostics(text) == [
        "UCX WARN: network device 'nosuchdev0' is not available, please use one or more of: 'eth0'(tcp), 'lo'(tcp)",
        "UCX ERROR: no active messages transport to <no debug data>: self/memory - no peer failure handler, "
        "cma/memory - no am bcopy",
        "NIXL WARN: Unexpected UCX error: Destination is unreachable",
        "NIXL ERROR: createBackend: backend 'UCX' encountered error during intra-agent transfer setup with "
        "status NIXL_ERR_BACKEND",
    ]
    assert diagnostics("all fine\n") == []
