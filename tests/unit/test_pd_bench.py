"""``provision pd bench`` without hosts: the sweep and SLO parsing, the SLO gates, one point's numbers from
``bench_serving``'s own result keys, the serving-path warnings, the colocated plan (group ``serve``), the
metrics flag, the Prometheus file_sd targets, the /metrics parser and the HTML report's page. The real runs
are in tests/integration/test_pd_e2e.py (CPU mode) and docs/gpu-validation/bench-h200x1.md (one H200)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from provision.pd import build
from provision.pd.bench import (
    check_slo,
    miss_text,
    parse_slo,
    parse_sweep,
    path_line,
    point_record,
    serving_path,
    targets,
)
from provision.pd.bench_report import load, render_html, table, write
from provision.pd.flags import PlanError
from provision.pd.validate import validate_pd
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
# the keys SGLang 0.5.17-0.5.23's bench_serving writes (benchmark/serving.py), values of a real CPU run's shape
RAW = {"completed": 8, "duration": 2.5, "request_throughput": 3.2, "input_throughput": 51.2,
       "output_throughput": 12.8, "median_ttft_ms": 40.0, "p90_ttft_ms": 55.0, "p99_ttft_ms": 61.0,
       "mean_ttft_ms": 42.0, "median_itl_ms": 9.0, "p90_itl_ms": 11.0, "p99_itl_ms": 14.0, "mean_itl_ms": 9.5,
       "median_tpot_ms": 9.2, "p90_tpot_ms": 10.0, "p99_tpot_ms": 12.0, "mean_tpot_ms": 9.4,
       "median_e2e_latency_ms": 80.0, "p90_e2e_latency_ms": 90.0, "p99_e2e_latency_ms": 99.0,
       "mean_e2e_latency_ms": 82.0, "total_input_tokens": 128, "total_output_tokens": 32}  # fmt: skip


def point(concurrency: int = 1, **over: Any) -> dict[str, Any]:
    return {"concurrency": concurrency, "request_rate": None, "ok": True, **point_record({**RAW, **over}, 10)}


def test_one_point_from_bench_servings_keys() -> None:
    p = point_record(RAW, 10)
    assert p["ttft_ms"] == {"p50": 40.0, "p90": 55.0, "p99": 61.0, "mean": 42.0}
    assert p["itl_ms"]["p99"] == 14.0 and p["tpot_ms"]["p50"] == 9.2 and p["e2e_ms"]["p90"] == 90.0
    assert (p["requests_per_s"], p["input_tps"], p["output_tps"]) == (3.2, 51.2, 12.8)
    assert (p["completed"], p["failures"]) == (8, 2)  # 10 asked, 8 completed
    assert point_record({"completed": True, "p99_ttft_ms": float("nan")}, 1)["ttft_ms"]["p99"] is None


def test_slo_gates_name_each_miss() -> None:
    gates = parse_slo("ttft_p99=50ms, itl_p99=0.01s,failures=0,output_tps=20")
    assert [(g.metric, g.limit) for g in gates] == [("ttft_p99", 50.0), ("itl_p99", 10.0), ("failures", 0.0),
                                                    ("output_tps", 20.0)]  # fmt: skip
    misses = check_slo([point(1), point(4, p99_ttft_ms=49.0, completed=10, output_throughput=25.0)], gates)
    assert [(m["point"], m["metric"]) for m in misses] == [
        ("concurrency 1", "ttft_p99"), ("concurrency 1", "itl_p99"), ("concurrency 1", "failures"),
        ("concurrency 1", "output_tps"), ("concurrency 4", "itl_p99"),
    ]  # fmt: skip
    assert miss_text(misses[0]) == "SLO miss: concurrency 1: ttft_p99 = 61ms, over the limit 50ms"
    assert miss_text(misses[3]) == "SLO miss: concurrency 1: output_tps = 12.8, below the floor 20"
    failed = check_slo([{"concurrency": 2, "request_rate": None, "ok": False}], parse_slo("ttft_p50=1s"))
    assert failed[0]["value"] is None and "no value" in miss_text(failed[0])
    assert check_slo([point(1)], parse_slo("ttft_p99=2s,failures=2")) == []


@pytest.mark.parametrize("bad", ["ttft=2s", "ttft_p99", "ttft_p99=fast", "failures=2ms", "ttft_p99=-1s", "x=1"])
def test_a_bad_slo_is_one_line(bad: str) -> None:
    with pytest.raises(PlanError, match="--slo"):
        parse_slo(bad)


def test_sweeps() -> None:
    assert parse_sweep("1, 4,16", "--concurrency", integer=True) == [1, 4, 16]
    assert parse_sweep("0.5,inf", "--request-rate", integer=False) == [0.5, float("inf")]
    for bad in ("0", "1,x", "-2", "1.5"):
        with pytest.raises(PlanError, match="--concurrency"):
            parse_sweep(bad, "--concurrency", integer=True)


def test_bad_bench_options_exit_5_before_any_host(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"  # an address nobody answers: nothing may be contacted
    inv.write_text("all:\n  children:\n    prefill: {hosts: {p: {ansible_host: 192.0.2.1}}}\n"
                   "    decode: {hosts: {d: {ansible_host: 192.0.2.2}}}\n  vars: {model_path: /m}\n")  # fmt: skip
    for argv, says in ((["--slo", "ttft_p99=soon"], "--slo 'ttft_p99=soon'"),
                       (["--concurrency", "1,zero"], "--concurrency='1,zero'"),
                       (["--compare", str(tmp_path / "none.json")], "no such file")):  # fmt: skip
        result = run_cli(["pd", "bench", "-i", str(inv), "-o", str(tmp_path / "out"), *argv])
        assert result.code == 5, result.err
        assert says in result.err and "Traceback" not in result.err
    not_bench = tmp_path / "x.json"
    not_bench.write_text("[1]")
    with pytest.raises(PlanError, match=r"not a bench\.json"):
        load(not_bench)


def test_serving_path_warns_of_slow_fallbacks_on_a_gpu_only() -> None:
    stripped = {"attention_backend": "triton", "disable_cuda_graph": True, "sampling_backend": "pytorch",
                "disable_radix_cache": True, "skip_server_warmup": True}  # fmt: skip
    gpu = serving_path(stripped, "cuda")
    assert (gpu["attention"], gpu["cuda_graph"], gpu["radix_cache"], gpu["warmup"]) == ("triton", False, False, False)
    assert len(gpu["warnings"]) == 3 and "7-8x slower" in gpu["warnings"][0]
    assert serving_path(stripped, "cpu")["warnings"] == []
    fast = serving_path({"attention_backend": "flashinfer", "disable_cuda_graph": False}, "cuda")
    assert fast["warnings"] == [] and fast["cuda_graph"] is True
    assert serving_path({"error": "refused"}, "cuda")["error"] == "refused"
    assert path_line("h1", "prefill", fast) == (
        "h1 prefill: attention flashinfer, CUDA graphs on, sampling (default), radix cache ?, warm-up ?"
    )
    assert path_line("h1", "decode", serving_path({"error": "refused"}, "cuda")).endswith("unknown (refused)")


def colocated(**v: Any) -> dict[str, dict[str, Any]]:
    return {"s1": {"group_names": ["serve"], "ansible_host": "10.0.0.1", "model_path": "/m", **v}}


def test_a_colocated_server_has_no_disaggregation_and_needs_no_router() -> None:
    d = build(colocated())
    (serve,) = d.procs
    assert d.colocated and serve.role == "serve" and not d.routers
    assert not any(a.startswith("--disaggregation") for a in serve.args)
    assert ["--enable-metrics"] in serve.flags  # pd_metrics: true by default
    assert validate_pd(colocated(), {"s1": 1}) == []
    mixed = {**colocated(), "p1": {"group_names": ["prefill"], "ansible_host": "10.0.0.2", "model_path": "/m"}}
    (problem,) = validate_pd(mixed, {"s1": 1, "p1": 1})
    assert "either a PD deployment or a colocated one" in problem


def test_pd_metrics_false_drops_enable_metrics_and_a_bad_value_is_one_line() -> None:
    assert "--enable-metrics" not in build(colocated(pd_metrics=False)).procs[0].args
    assert "--enable-metrics" not in build(colocated(pd_metrics="false")).procs[0].args
    with pytest.raises(PlanError, match=r"s1: pd_metrics=\[1\] is not true or false"):
        build(colocated(pd_metrics=[1]))


def test_prometheus_targets_of_every_server_and_router() -> None:
    hosts = {
        "p1": {"group_names": ["prefill", "router"], "ansible_host": "10.0.0.1", "model_path": "/m"},
        "d1": {"group_names": ["decode"], "ansible_host": "fe80::2", "model_path": "/m", "server_port": 30010},
    }
    assert targets(build(hosts)) == [
        {"targets": ["10.0.0.1:30000"],
         "labels": {"job": "sglang", "role": "prefill", "host": "p1", "machine": "10.0.0.1", "name": "p1-prefill"}},
        {"targets": ["[fe80::2]:30010"],
         "labels": {"job": "sglang", "role": "decode", "host": "d1", "machine": "fe80::2", "name": "d1-decode"}},
        {"targets": ["10.0.0.1:29000"],
         "labels": {"job": "sglang-router", "role": "router", "host": "p1", "machine": "10.0.0.1",
                    "name": "p1-router"}},
    ]  # fmt: skip


def test_pd_targets_command_writes_file_sd_json(tmp_path: Path) -> None:
    inv = REPO / "docs" / "gpu-validation" / "inventory-h200x1-bench-pd.yml"
    out = tmp_path / "targets.json"
    result = run_cli(["pd", "targets", "-i", str(inv), "-o", str(out)])
    assert result.code == 0, result.err
    doc = json.loads(out.read_text())
    assert [(t["labels"]["role"], t["targets"]) for t in doc] == [
        ("prefill", ["127.0.0.1:30000"]), ("decode", ["127.0.0.1:30010"]), ("router", ["127.0.0.1:29000"])
    ]  # fmt: skip


def test_metrics_text_is_parsed_not_evaluated() -> None:
    spec = importlib.util.spec_from_file_location("pd_metrics", REPO / "provision" / "remote" / "pd_metrics.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = ('# HELP sglang:num_running_reqs x\nsglang:num_running_reqs{model_name="m",tp_rank="0"} 3\n'
            'sglang:num_running_reqs{model_name="m",tp_rank="1"} 2\nsglang:ttft_bucket{le="1"} 9\n'
            "sglang:prompt_tokens_total 1.5e3 1700000000\nsglang:bad __import__('os')\nprocess_cpu 4\n"
            "sglang:nan NaN\n{broken\n")  # fmt: skip
    assert module.parse(text) == {"sglang:num_running_reqs": 5.0, "sglang:prompt_tokens_total": 1500.0}


def test_the_report_page_is_self_contained_and_escaped(tmp_path: Path) -> None:
    doc = {"kind": "pd", "label": "pd <run>", "device": "cuda", "dataset": {"input_len": 512, "output_len": 128},
           "points": [point(1), point(4, output_throughput=40.0)], "slo": ["ttft_p99=50ms"],
           "slo_misses": check_slo([point(1)], parse_slo("ttft_p99=50ms")), "versions": {"sglang": "0.5.17"},
           "layout": [{"host": "h", "role": "prefill", "url": "http://h:1", "argv": ["python", "-m", "<x>"]}],
           "serving_path": {"http://h:1": serving_path({"attention_backend": "triton"}, "cuda")}}  # fmt: skip
    base = {**doc, "kind": "colocated", "label": "colocated", "slo_misses": []}
    bench, report = write(doc, tmp_path / "out", [base])
    page = Path(report).read_text()
    assert page.count("<img ") == 5 and page.count("src='data:image/png;base64,") == 5
    assert "<script" not in page and "http://" not in page.replace("http://h:1", "")  # nothing fetched
    assert "pd &lt;run&gt;" in page and "&lt;x&gt;" in page and "<run>" not in page
    assert "SLO miss: concurrency 1: ttft_p99 = 61ms" in page and "triton attention on a GPU" in page
    assert json.loads(Path(bench).read_text())["compared_with"] == ["colocated"]
    assert "colocated" in table([doc, base]) and render_html([doc]).count("<img ") == 5


FAKE_BENCH = """#!/bin/sh
# stands in for SGLang's interpreter: the versions probe, then `-m sglang.bench_serving ... --output-file F`
case "$2" in
  sglang.bench_serving) ;;
  *) echo '{"sglang": "0.5.17"}'; exit 0;;
esac
out=""; prev=""
for a in "$@"; do [ "$prev" = "--output-file" ] && out=$a; prev=$a; done
echo "============ Serving Benchmark Result ============"
printf '%s\\n' '{"request_rate": Infinity, "completed": 4, "median_ttft_ms": 12.5, "p99_ttft_ms": NaN}' >>"$out"
"""


def test_the_bench_helper_answers_strict_json_whatever_bench_serving_writes(tmp_path: Path) -> None:
    """bench_serving writes ``"request_rate": Infinity`` for a closed loop: the controller's parser refuses
    non-finite numbers (on the H200 every point was lost to it), so the helper turns them into null."""
    import subprocess
    import sys

    fake = tmp_path / "python"
    fake.write_text(FAKE_BENCH)
    fake.chmod(0o755)
    request = {"python": str(fake), "url": "http://127.0.0.1:1", "tokenizer": "/m", "input_len": 8,
               "output_len": 2, "num_prompts": 4, "concurrency": 2, "dir": str(tmp_path)}  # fmt: skip
    done = subprocess.run([sys.executable, str(REPO / "provision" / "remote" / "pd_bench.py"), "bench"],
                          capture_output=True,
                          input=json.dumps(request).encode(), timeout=60, check=True)  # fmt: skip
    answer = json.loads(done.stdout, parse_constant=lambda c: pytest.fail(f"non-finite {c} in the answer"))
    assert answer["ok"] and answer["versions"] == {"sglang": "0.5.17"}
    assert answer["result"] == {"request_rate": None, "completed": 4, "median_ttft_ms": 12.5, "p99_ttft_ms": None}
    assert answer["argv"][answer["argv"].index("--max-concurrency") + 1] == "2"
    assert list(tmp_path.glob("pd-bench-*")) == []  # its scratch directory is gone
