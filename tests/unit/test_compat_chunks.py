"""How the compat harness deals its cases into chunks and pool jobs (tests/compat/harness.py): by measured cost;
which AnsiballZ cache ansible-core's runs share."""

from __future__ import annotations

from pathlib import Path

from tests.compat.harness import Case, Harness, all_cases, costs, deal, lanes


def _case(name: str, sudo: bool = False) -> Case:
    return Case(name=name, path=Path(name), sudo=sudo)


def test_the_sudo_cases_share_chunk_0_and_the_others_even_out_the_chunks_by_cost() -> None:
    cases = [_case("s1", sudo=True), _case("s2", sudo=True), *(_case(f"c{i}") for i in range(8))]
    cost = {"s1": 30.0, "s2": 30.0, "c0": 50.0, "c1": 40.0, **{f"c{i}": 10.0 for i in range(2, 8)}}
    chunks = deal(cases, cost, 3)
    assert chunks["s1"] == chunks["s2"] == 0
    totals = [sum(cost[n] for n, c in chunks.items() if c == i) for i in range(3)]
    assert totals == [70.0, 70.0, 70.0]  # dealt round by count: 130, 60 and 20
    assert deal(cases, cost, 1) == dict.fromkeys(chunks, 0)


def test_a_pool_runs_the_sudo_cases_as_one_job_and_the_longest_jobs_first() -> None:
    cost = costs()
    cases = all_cases()
    jobs = lanes(cases)
    sudo = [c.name for c in cases if c.sudo]
    together = [job for job in jobs if any(c.sudo for c in job)]
    assert [[c.name for c in job] for job in together] == [sudo]  # one after another: they hold the machine's lock
    assert all(len(job) == 1 for job in jobs if job not in together)
    sums = [sum(cost[c.name] for c in job) for job in jobs]
    assert sums == sorted(sums, reverse=True)
    assert sorted(c.name for job in jobs for c in job) == sorted(c.name for c in cases)


def test_every_case_has_a_cost_a_new_one_the_median() -> None:
    cost = costs()
    assert set(cost) == {c.name for c in all_cases()}
    assert all(v > 0 for v in cost.values())


def test_a_case_with_modules_of_its_own_gets_an_ansiballz_cache_of_its_own(tmp_path: Path) -> None:
    """The cache's key is a module's name, not its source: a case's own ``library``/``module_utils`` (or one named
    in its env) must not be served another case's payload of the same name."""
    work = tmp_path / "work"
    harness = Harness(None, work)
    try:
        plain, own, named = (work / "cases" / name / "ansible" for name in ("plain", "own", "named"))
        (plain / "templates").mkdir(parents=True)
        (own / "roles" / "r" / "library").mkdir(parents=True)
        named.mkdir(parents=True)
        (named / "case.yml").write_text("env:\n  ANSIBLE_LIBRARY: '{dir}/lib'\n")
        assert harness.ansiballz_dir(plain) == work / "ansiballz"
        assert harness.ansiballz_dir(own) == work / "cases" / "own" / "ansiballz"
        assert harness.ansiballz_dir(named) == work / "cases" / "named" / "ansiballz"
    finally:
        harness.close()
