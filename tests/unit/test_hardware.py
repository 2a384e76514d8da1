"""provision.hardware, the GPU/topology/RDMA/NIC records and parsers split out of provision.facts (issue 24: no
engine file over ~400 lines): a leaf (stdlib only), and every name callers imported from provision.facts is still
there, the same object."""

from __future__ import annotations

import ast
from pathlib import Path

from provision import facts, hardware

MOVED = ("GPU", "GpuLink", "RdmaPort", "RdmaDevice", "NIC", "MAX_GPUS", "MAX_TOPO_DEVICES", "MAX_DEVICES",
         "parse_gpu_csv", "parse_cuda_version", "parse_driver_version", "parse_topo", "parse_rdma", "parse_ipv4",
         "parse_nics")  # fmt: skip


def test_the_hardware_module_imports_nothing_of_provision() -> None:
    imported: set[str] = set()
    for node in ast.walk(ast.parse(Path(hardware.__file__).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert imported == {"__future__", "csv", "re", "dataclasses"}, imported


def test_facts_still_offers_every_moved_name_as_the_same_object() -> None:
    for name in MOVED:
        assert getattr(facts, name) is getattr(hardware, name), name
        assert name in facts.__all__, name
    assert all(hasattr(facts, name) for name in facts.__all__)
    assert facts.HostFacts().to_dict()["gpus"] == []  # the records still assemble


def test_the_parsers_work_from_their_new_home() -> None:
    gpus = hardware.parse_gpu_csv("0, NVIDIA H200, GPU-1, 143771, 580.82, 00000000:18:00.0, 9.0\n")
    assert gpus == [hardware.GPU(0, "NVIDIA H200", 143771, "580.82", "00000000:18:00.0", "GPU-1", "9.0")]
    topo = (
        "\tGPU0\tGPU1\tNIC0\tCPU Affinity\nGPU0\t X \tNV18\tPIX\t0-63\nGPU1\tNV18\t X \tSYS\t0-63\n"
        "\nNIC Legend:\n\n  NIC0: mlx5_0\n"
    )
    assert hardware.parse_topo(topo) == [hardware.GpuLink("GPU0", "GPU1", "NV18"),
                                        hardware.GpuLink("GPU0", "mlx5_0", "PIX"),
                                        hardware.GpuLink("GPU1", "mlx5_0", "SYS")]  # fmt: skip
    nics = hardware.parse_nics("eth0|up|1500|aa:bb:cc:dd:ee:ff|25000\nlo|unknown|65536||-1\n",
                               hardware.parse_ipv4("eth0|10.0.0.5\n|10.9.9.9\n"))  # fmt: skip
    assert [(n.name, n.speed_mbps, n.ipv4) for n in nics] == [("eth0", 25000, ["10.0.0.5"]), ("lo", None, [])]
    port = hardware.RdmaPort(1, "ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand")
    rdma = hardware.parse_rdma("mlx5_0|1|4: ACTIVE|200 Gb/sec (4X HDR)|InfiniBand\n")
    assert rdma == [hardware.RdmaDevice("mlx5_0", [port])]
