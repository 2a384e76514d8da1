"""``pd bench`` as a verb: :func:`pd_bench` → :class:`BenchResult` (one ``pd_bench`` play per load point,
:mod:`provision.pd.bench`), :class:`BenchOptions`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import (
    EXIT_FAILED,
    EXIT_OK,
    InputError,
)
from ..pd import PlanError, build
from ..results import Status

if TYPE_CHECKING:
    from typing_extensions import Unpack


from .fleet import Fleet, Options, PathLike, _extra, _fleet, masked
from .layout import check_layout, inventory_pd_vars
from .pd import _query, _quiet_play


@dataclass
class BenchOptions:
    """What ``provision pd bench`` measures: the dataset (random token ids of ``input_len``, ``output_len``;
    ``num_prompts`` per point), the sweep (``concurrency`` and/or ``request_rate``: one point each), the
    ``warmup`` requests before each point, the SLO gates (:func:`provision.pd.bench.parse_slo`)."""

    input_len: int = 512
    output_len: int = 128
    num_prompts: int = 64
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 16])
    request_rate: list[float] = field(default_factory=list)
    warmup: int = 1
    timeout: float = 1800.0
    slo: str | None = None


@dataclass
class BenchResult:
    """``doc``: bench.json (:func:`provision.pd.bench_report.write`); ``misses``: the SLO misses; ``errors``:
    points that failed outright (a host's answer)."""

    doc: dict[str, Any]
    misses: list[dict[str, Any]]
    errors: list[str]

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if self.misses or self.errors else EXIT_OK


BenchProgress = Callable[[int, int, dict[str, Any], float], None]  # (done, total, point, elapsed seconds)


def pd_bench(
    hosts: Fleet | PathLike | Sequence[PathLike],
    *,
    bench: BenchOptions | None = None,
    progress: BenchProgress | None = None,
    **opts: Unpack[Options],
) -> BenchResult:
    """Sweep load points through each router (a colocated inventory: each ``serve`` server) with the installed
    SGLang's ``bench_serving``, run on that host; read-only for the deployment. Bad options or layout raise
    :class:`InputError` before any host is touched. Prints nothing; ``progress`` is called after each point."""
    from ..pd import bench as pdbench

    options = bench or BenchOptions()
    fleet = _fleet(hosts, opts.get("extra_vars"))
    extra = {**fleet.extra_vars, **_extra(opts.get("extra_vars"))}
    try:
        gates = pdbench.parse_slo(options.slo)
        for name, value, low, high in (("--input-len", options.input_len, 1, 1 << 20),
                                       ("--output-len", options.output_len, 1, 1 << 20),
                                       ("--num-prompts", options.num_prompts, 1, 1 << 20),
                                       ("--warmup", options.warmup, 0, 10000)):  # fmt: skip
            if not low <= int(value) <= high:
                raise PlanError(f"{name}={value} is out of range {low}..{high}")
        deployment = build(inventory_pd_vars(fleet.inventory, extra))
    except PlanError as exc:
        raise InputError(str(exc)) from None
    check_layout(fleet.inventory, extra)
    points: list[tuple[int | None, float | None]] = [(int(c), None) for c in options.concurrency]
    points += [(None, float(r)) for r in options.request_rate]
    if not points:
        raise InputError("pd bench: nothing to measure: give --concurrency and/or --request-rate")
    started, done_points, errors = time.monotonic(), [], []
    info: dict[str, Any] = {}
    versions: dict[str, Any] = {}
    for i, (conc, rate) in enumerate(points):
        args = {"input_len": options.input_len, "output_len": options.output_len,
                "num_prompts": options.num_prompts, "concurrency": conc, "request_rate": rate,
                "warmup": options.warmup, "timeout": options.timeout, "server_info": i == 0}  # fmt: skip
        results = [r for r in _query(_quiet_play("pd_bench", "router:serve", args), fleet, opts)
                   if r.status is not Status.SKIPPED]  # fmt: skip
        if not results:
            raise InputError("pd bench: no router (or colocated serve) host to measure through")
        for r in results:
            answer = r.data.get("bench") or {}
            point: dict[str, Any] = {"concurrency": conc, "request_rate": rate, "host": r.host,
                                     "target": answer.get("target"), "ok": not r.failed,
                                     "argv": answer.get("argv"), "seconds": answer.get("seconds")}  # fmt: skip
            if answer.get("result"):
                point.update(pdbench.point_record(answer["result"], options.num_prompts))
            if r.failed:
                point["error"] = r.msg
                errors.append(f"{r.host}: {pdbench.point_label(point)}: {r.msg}")
            info.update(answer.get("server_info") or {})
            versions = versions or answer.get("versions") or {}
            done_points.append(point)
            if progress is not None:
                progress(i + 1, len(points), point, time.monotonic() - started)
    device = next((p.device for p in deployment.hosts.values() if p.server), "cuda")
    paths = {url: pdbench.serving_path(doc, device) for url, doc in info.items()}
    misses = pdbench.check_slo(done_points, gates)
    doc = {
        "kind": "colocated" if deployment.colocated else "pd",
        "device": device,
        "dataset": {"name": "random-ids", "input_len": options.input_len, "output_len": options.output_len,
                    "num_prompts": options.num_prompts, "warmup": options.warmup, "range_ratio": 1},
        "versions": versions, "layout": pdbench.layout(deployment), "serving_path": paths,
        "points": done_points, "slo": [g.text for g in gates], "slo_misses": misses,
        "seconds": round(time.monotonic() - started, 3),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip
    return BenchResult(masked(doc), misses, errors)
