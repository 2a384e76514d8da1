"""Two servers of one machine may share a GPU when each states its share of the memory
(``--mem-fraction-static`` on both, summing to at most 0.9): the 1xH200 validation layout."""

from __future__ import annotations

from pathlib import Path

from provision.api import inventory_pd_vars
from provision.inventory import Inventory
from provision.pd.validate import validate_pd

INV = Path(__file__).resolve().parents[2] / "docs" / "gpu-validation" / "inventory-h200x1-pd.yml"
ONE_GPU = {"h200-prefill": 1, "h200-decode": 1}


def problems(extra: dict[str, str]) -> list[str]:
    hosts = inventory_pd_vars(Inventory.load([str(INV)], extra), extra)
    return validate_pd(hosts, ONE_GPU)


def test_a_memory_split_lets_prefill_and_decode_share_gpu0() -> None:
    assert problems({}) == []


def test_sharing_without_a_split_or_with_too_much_is_refused() -> None:
    args = "--dtype bfloat16 --disable-cuda-graph"
    (alone,) = problems({"common_args": args})
    assert "share GPU 0 on localhost" in alone and "--mem-fraction-static on both" in alone
    (greedy,) = problems({"common_args": args + " --mem-fraction-static 0.5"})
    assert "share GPU 0" in greedy
