"""Rewrite tests/compat/costs.json (what each compat case cost, by which the harness deals its chunks and orders
its pools) from the reports of a compat run: ``python scripts/compat_costs.py report-0.txt [report-1.txt ...]``
(the chunk reports, ``PROVISION_COMPAT_REPORT``). Cases the reports do not name keep their old cost."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

COSTS = Path(__file__).resolve().parents[1] / "tests" / "compat" / "costs.json"
LINE = re.compile(r"^== (\S+) \(([\d.]+) s\)$")


def main(reports: list[str]) -> None:
    costs = json.loads(COSTS.read_text()) if COSTS.is_file() else {}
    for report in reports:
        for line in Path(report).read_text().splitlines():
            if m := LINE.match(line):
                costs[m[1]] = round(float(m[2]), 1)
    COSTS.write_text(json.dumps(dict(sorted(costs.items())), indent=1) + "\n")
    print(f"{COSTS}: {len(costs)} cases")


if __name__ == "__main__":
    main(sys.argv[1:])
