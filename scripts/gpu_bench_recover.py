"""Rebuild the H200 run's bench.json and report from the answers its points recorded (issue 25).

On the H200 (docs/gpu-validation/bench-h200x1.md) bench_serving ran every point to the end, but its result
carried ``"request_rate": Infinity`` and provision's strict JSON parser refused the helper's answer, so each
point was recorded as failed WITH the whole answer in its error text ("pd_bench printed no answer (rc=0):
{...}"). This reads those answers back (Python's json accepts Infinity), applies the same code as
``provision pd bench`` (provision.pd.bench.point_record, check_slo, serving_path) and writes bench.json and
report.html again. The helper now writes strict JSON (test_the_bench_helper_answers_strict_json_...).

    python scripts/gpu_bench_recover.py RUN_DIR/pd/bench.json OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from provision.pd import bench_report
from provision.pd.bench import check_slo, parse_slo, point_record, serving_path

MARK = "pd_bench printed no answer (rc=0): "


def main(src: str, out: str) -> int:
    doc = json.loads(Path(src).read_text())
    n = doc["dataset"]["num_prompts"]
    info: dict[str, object] = {}
    for point in doc["points"]:
        error = point.get("error") or ""
        if MARK not in error:
            continue
        answer = json.loads(error.split(MARK, 1)[1].split("\n", 1)[0])
        point.pop("error")
        point.update(ok=True, argv=answer["argv"], seconds=answer["seconds"], recovered=True)
        point.update(point_record(answer["result"], n))
        info.update(answer.get("server_info") or {})
        doc["versions"] = doc.get("versions") or answer.get("versions") or {}
    doc["serving_path"] = {url: serving_path(i, doc["device"]) for url, i in info.items()}  # type: ignore[arg-type]
    doc["slo_misses"] = check_slo(doc["points"], parse_slo(",".join(doc.get("slo") or [])))
    doc["recovered_from"] = "each point's recorded answer (the helper's JSON held Infinity: see the module doc)"
    print("\n".join(bench_report.write(doc, Path(out))))
    print(bench_report.table([doc]))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
