"""Differential tests: every case under ``tests/compat/cases`` runs under ansible-core and under provision on
real lab hosts (see ``harness.py``); any difference a case does not list as accepted fails it."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.compat.harness import Case, Harness, Outcome, all_cases, chunk_of, lanes
from tests.support.lab import Lab

pytestmark = pytest.mark.lab

CASES = all_cases()
WORKERS = int(os.environ.get("PROVISION_COMPAT_WORKERS", "4"))
ONLY = os.environ.get("PROVISION_COMPAT_ONLY")  # comma-separated case names, to run a few by hand
SHOW = bool(os.environ.get("PROVISION_COMPAT_SHOW"))  # 1: the report lists every debug message of every run


def selected() -> list[str]:
    names = [c.name for c in CASES]
    if ONLY:
        names = [n for n in names if n in ONLY.split(",")]
    return names


def run_chunk(chunk: int, base: Path) -> dict[str, Outcome]:
    """Every selected case of ``chunk``, WORKERS at a time, each worker on its own two lab hosts."""
    chosen = [c for c in CASES if c.name in selected() and chunk_of(c.name) == chunk]
    jobs = lanes(chosen)
    workers = max(1, min(WORKERS, len(jobs)))
    with Lab(2 * workers, base / "lab", prefix=f"cmp{chunk}") as lab:
        harness = Harness(lab, base / "work")
        slots: queue.Queue[list[object]] = queue.Queue()
        for i in range(workers):
            slots.put([lab.host(2 * i), lab.host(2 * i + 1)])

        def one(job: list[Case]) -> list[Outcome]:
            slot = slots.get()
            try:
                return [harness.run_case(case, slot) for case in job]
            finally:
                slots.put(slot)

        started = time.monotonic()
        try:
            with ThreadPoolExecutor(workers) as pool:
                results = {o.case: o for done in pool.map(one, jobs) for o in done}
        finally:
            harness.close()
    elapsed = time.monotonic() - started
    default = base.parent / f"report-{chunk}.txt"
    report = Path(os.environ.get("PROVISION_COMPAT_REPORT", default))
    if "PROVISION_COMPAT_REPORT" in os.environ:
        report = report.with_name(f"{report.stem}-{chunk}{report.suffix}")
    lines = [f"chunk {chunk}: {len(chosen)} cases, {workers} workers, {elapsed:.1f} s"]
    for o in results.values():
        lines.append(f"== {o.case} ({o.seconds:.1f} s)")
        lines += [f"  DIFF {d}" for d in o.differences]
        lines += [f"  ACCEPTED {d}" for d in o.accepted]
        lines += [f"  UNUSED ACCEPT {m}" for m in o.unused_accepts]
        if SHOW:  # every debug message of every run, to read a case's results by hand
            for tool, runs in o.records.items():
                for n, record in enumerate(runs, 1):
                    lines += [f"  {tool} run {n}: {task} on {host}: {msg!r}" for task, host, msg in record.messages]
    report.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:1]))
    return results


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Outcome]]:
    """A case's outcome: its chunk is run (all its cases) the first time one of them is asked for, so that a
    pytest-xdist worker runs only the chunks whose tests it was given."""
    base = tmp_path_factory.mktemp("compat")
    done: dict[int, dict[str, Outcome]] = {}

    def outcome(name: str) -> Outcome:
        chunk = chunk_of(name)
        if chunk not in done:
            done[chunk] = run_chunk(chunk, base / f"chunk{chunk}")
        return done[chunk][name]

    yield outcome


@pytest.mark.parametrize("name", selected())
def test_case(name: str, outcomes: Callable[[str], Outcome]) -> None:
    outcome = outcomes(name)
    detail = "\n".join(outcome.differences)
    if outcome.differences:
        for tool, runs in outcome.records.items():
            detail += f"\n--- {tool}\n" + "\n".join(r.output[-3000:] for r in runs)
    assert not outcome.differences, f"{name}: unexplained differences:\n{detail}"
    assert not outcome.unused_accepts, f"{name}: accepted differences that no longer occur: {outcome.unused_accepts}"
