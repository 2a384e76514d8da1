"""Fact parsers against a host whose tools lie at scale (issue 23, class 11): a fake ``nvidia-smi topo -m``
with thousands of columns made a million links (1 GB); device counts are capped, the parsers stay linear."""

from __future__ import annotations

import time

from provision.facts import (
    MAX_DEVICES,
    MAX_GPUS,
    MAX_TOPO_DEVICES,
    parse_gpu_csv,
    parse_ipv4,
    parse_nics,
    parse_rdma,
    parse_topo,
)


def topo(columns: int, rows: int) -> str:
    labels = [f"GPU{i}" for i in range(columns)]
    lines = ["\t" + "\t".join(labels) + "\tCPU Affinity"]
    lines += [
        f"GPU{r}\t" + "\t".join("X" if c == r else "NV12" for c in range(columns)) + "\t0-63" for r in range(rows)
    ]
    return "\n".join(lines) + "\n"


def test_a_topology_of_thousands_of_devices_is_capped() -> None:
    links = parse_topo(topo(3000, 400))
    assert 0 < len(links) <= MAX_TOPO_DEVICES * (MAX_TOPO_DEVICES - 1) // 2


def test_a_real_sized_topology_is_whole() -> None:
    links = parse_topo(topo(8, 8))
    assert len(links) == 8 * 7 // 2


def test_topology_parsing_stays_linear_in_the_rows() -> None:
    def took(rows: int) -> float:
        text = topo(300, rows)
        best = float("inf")
        for _ in range(3):
            started = time.process_time()  # CPU seconds: a loaded machine's wall clock is not the parser's
            parse_topo(text)
            best = min(best, time.process_time() - started)
        return best

    assert took(2000) / took(1000) < 3.0  # rows past the cap are not even split into cells


def test_gpus_rdma_and_nics_are_capped() -> None:
    gpus = "\n".join(
        f"{i}, NVIDIA H200, GPU-{i}, 143771, 570.1, 00000000:{i % 256:02x}:00.0, 9.0" for i in range(10000)
    )
    assert len(parse_gpu_csv(gpus)) == MAX_GPUS
    rdma = "\n".join(f"mlx5_{i}|1|4: ACTIVE|400 Gb/sec|InfiniBand" for i in range(5000))
    assert len(parse_rdma(rdma)) == MAX_DEVICES
    ports = "\n".join(f"mlx5_0|{i}|4: ACTIVE|400|IB" for i in range(5000))
    assert len(parse_rdma(ports)[0].ports) == MAX_DEVICES
    addresses = parse_ipv4("\n".join(f"eth0|10.0.{i // 256 % 256}.{i % 256}" for i in range(5000)))
    assert len(addresses["eth0"]) == MAX_DEVICES
    nics = parse_nics("\n".join(f"eth{i}|up|1500|aa:bb|1000" for i in range(5000)), addresses)
    assert len(nics) == MAX_DEVICES
