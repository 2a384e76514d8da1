"""Every prefill x decode pair proven and warmed (``pd verify --all-pairs``, the end of ``pd up``, each rollout
batch): the plan of the pairs, the requests for the host side, and the verdict.

The data flows one way: the deployment (:func:`~provision.pd.spec.build`) → :func:`plan` (every prefill with
every decode, prefill order first) → :func:`requests` (one pinned generation each, with the bootstrap fields
that pair them, for ``remote/pd_rollout.py pairs``, which sends them from one host that reaches the servers,
the first router's, in the rounds of :func:`schedule`: no server in two pairs of a round, at most ``parallel``
at once; a failed pair once more) → its answers → :func:`verdict` (:class:`PairsReport`).

The verdict: a pair whose decode did not answer with tokens has ``failed``. Greedy decoding (temperature 0) of
the same weights gives the same tokens, so with ``same_tokens`` every pair must return the token ids the most
pairs returned (on a tie, those of the earliest pair in plan order); the others ``disagree``. A server every
answered pair of which disagrees (or failed) is named a suspect: in a 2 x 2 with one decode on other weights,
its two pairs disagree and that decode is the one named (the reference is the first pair's on the tie).
Prints nothing; :func:`table` and :func:`summary` are for people.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .spec import Deployment, Proc

PARALLEL = 8  # pairs in flight at once from the host that sends them
RETRIES = 1  # a failed pair is sent once more (a fresh bootstrap room) before it counts as failed


@dataclass(frozen=True)
class Pair:
    prefill: Proc
    decode: Proc

    @property
    def name(self) -> str:
        return f"{self.prefill.name} → {self.decode.name}"


def plan(deployment: Deployment) -> list[Pair]:
    """Every prefill with every decode, in inventory order (prefill first)."""
    return [Pair(p, d) for p in deployment.prefill for d in deployment.decode]


def requests(pairs: Sequence[Pair]) -> list[dict[str, Any]]:
    """One pinned request per pair for the host side: what the router would send to that pair."""
    return [{"prefill": p.prefill.url, "decode": p.decode.url, "bootstrap_host": p.prefill.address,
             "bootstrap_port": p.prefill.bootstrap_port} for p in pairs]  # fmt: skip


def schedule(pairs: Sequence[Pair], parallel: int = PARALLEL) -> list[list[int]]:
    """The rounds the pairs are sent in (indices into ``pairs``): no two pairs of a round share a server, and a
    round holds at most ``parallel``. Pair (i, j) of the i-th prefill and the j-th decode goes to round
    (i + j) mod max(P, D), a colouring of the prefill x decode grid in the fewest rounds (max(P, D)).

    Why not all at once: each pair is a prefill and a decode meeting for the first time (SGLang's bootstrap, a
    NIXL peer added on each side), and a server meeting two new peers at once is what a lab run caught hanging:
    in a 2 x 2, CPU mode, one of the four pairs sent together got no answer in 180 s while the others answered
    in under a second. Rounds cost (max(P, D) - 1) pair latencies more; a failed pair is also retried once
    (:data:`RETRIES`), and the report says so."""
    prefills = list(dict.fromkeys(p.prefill.name for p in pairs))
    decodes = list(dict.fromkeys(p.decode.name for p in pairs))
    width = max(len(prefills), len(decodes), 1)
    rounds: list[list[int]] = [[] for _ in range(width)]
    for n, p in enumerate(pairs):
        rounds[(prefills.index(p.prefill.name) + decodes.index(p.decode.name)) % width].append(n)
    step = max(1, parallel)
    return [r[k : k + step] for r in rounds if r for k in range(0, len(r), step)]


def budget(rounds: Sequence[Sequence[int]], timeout: float, retries: int = RETRIES) -> float:
    """Seconds the host side may take for ``rounds`` of pinned requests of ``timeout`` each, every one retried
    ``retries`` times in the worst case."""
    return len(rounds) * (timeout + 10) * (1 + max(0, retries)) + 60


def host_request(planned: Sequence[Pair], parallel: int, timeout: float, prompt: str = "Hello world",
                 max_new_tokens: int = 8) -> tuple[dict[str, Any], float]:  # fmt: skip
    """The ``pairs`` request for the host side (every pair, its rounds, one retry, streamed decodes) and the
    seconds that call may take (:func:`budget`)."""
    rounds = schedule(planned, parallel)
    request = {"pairs": requests(planned), "rounds": rounds, "parallel": parallel, "retries": RETRIES,
               "prompt": prompt, "max_new_tokens": max_new_tokens, "timeout": timeout, "stream": True}  # fmt: skip
    return request, budget(rounds, timeout)


def runner(deployment: Deployment, hosts: Sequence[str] | None = None) -> str | None:
    """The host that sends the pairs' requests: the first router's among ``hosts`` (a play's hosts), if any."""
    for router in deployment.routers:
        if hosts is None or router.host in hosts:
            return router.host
    return None


@dataclass
class PairResult:
    prefill: str  # process names
    decode: str
    ok: bool  # it answered with tokens and (with same_tokens) the reference's
    state: str  # ok | failed | disagrees
    ttft: float | None = None
    latency: float | None = None
    tokens: int | None = None
    output_ids: list[int] | None = None
    text: str | None = None
    error: str | None = None
    attempts: int = 1  # 2 when the first attempt failed and the pair was sent again
    first_error: str | None = None  # what the first attempt got, when there was a second

    @property
    def name(self) -> str:
        return f"{self.prefill} → {self.decode}"


@dataclass
class PairsReport:
    pairs: list[PairResult]
    same_tokens: bool  # was agreement asked for
    reference: list[int] | None = None  # the token ids every pair must return
    suspects: list[str] = field(default_factory=list)  # servers every answered pair of which is wrong
    seconds: float | None = None  # the whole check, on the host
    parallel: int | None = None  # the most pairs in flight at once
    rounds: int | None = None  # the rounds they were sent in (:func:`schedule`)

    @property
    def ok(self) -> bool:
        return bool(self.pairs) and all(p.ok for p in self.pairs)

    @property
    def bad(self) -> list[PairResult]:
        return [p for p in self.pairs if not p.ok]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> PairsReport:
        return cls([PairResult(**p) for p in doc["pairs"]], bool(doc.get("same_tokens")), doc.get("reference"),
                   list(doc.get("suspects") or []), doc.get("seconds"), doc.get("parallel"),
                   doc.get("rounds"))  # fmt: skip


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _result(pair: Pair, answer: Any) -> PairResult:
    """One pair's answer as the host gave it (not trusted: a field of the wrong type counts as missing)."""
    a = answer if isinstance(answer, dict) else {"ok": False, "msg": "no answer"}
    ok = a.get("ok") is True
    ids = a.get("output_ids")
    ids = list(ids) if isinstance(ids, list) and all(type(i) is int for i in ids) else None
    tokens = a.get("completion_tokens")
    text = a.get("text")
    error = None if ok else str(a.get("msg") or "failed")
    attempts = a.get("attempts")
    attempts = attempts if type(attempts) is int and attempts > 1 else 1
    first = str(a.get("first_msg") or "failed")[:500] if attempts > 1 else None
    return PairResult(pair.prefill.name, pair.decode.name, ok, "ok" if ok else "failed", _number(a.get("ttft")),
                      _number(a.get("latency")), tokens if type(tokens) is int else None, ids,
                      text if isinstance(text, str) else None, error, attempts, first)  # fmt: skip


def verdict(pairs: Sequence[Pair], answers: Sequence[Any], same_tokens: bool = True,
            seconds: float | None = None, parallel: int | None = None,
            rounds: int | None = None) -> PairsReport:  # fmt: skip
    """The host side's answers (one per pair, in order; a missing one is a failed pair) judged: failed pairs,
    disagreeing pairs, suspects."""
    given = list(answers) if isinstance(answers, list | tuple) else []
    padded = [*given[: len(pairs)], *[None] * (len(pairs) - len(given))]
    results = [_result(pair, answer) for pair, answer in zip(pairs, padded, strict=True)]
    report = PairsReport(results, same_tokens, seconds=_number(seconds), parallel=parallel,
                         rounds=rounds if type(rounds) is int else None)  # fmt: skip
    answered = [r for r in results if r.ok]
    if same_tokens and answered:
        counts = Counter(tuple(r.output_ids or ()) for r in answered)
        top = max(counts.values())
        reference = next(tuple(r.output_ids or ()) for r in answered if counts[tuple(r.output_ids or ())] == top)
        report.reference = list(reference)
        for r in answered:
            if tuple(r.output_ids or ()) != reference:
                r.ok, r.state = False, "disagrees"
                r.error = f"token ids {r.output_ids} differ from {report.reference} (the most pairs')"
    report.suspects = suspects(results) if report.bad else []
    return report


def judge(planned: Sequence[Pair], answer: Mapping[str, Any], same_tokens: bool = True) -> PairsReport:
    """:func:`verdict` of the host side's whole answer to :func:`host_request`."""
    return verdict(planned, answer.get("pairs") or [], same_tokens, answer.get("seconds"), answer.get("parallel"),
                   answer.get("rounds"))  # fmt: skip


def suspects(results: Sequence[PairResult]) -> list[str]:
    """The servers none of whose pairs is right."""
    servers: dict[str, list[PairResult]] = {}
    for r in results:
        servers.setdefault(r.prefill, []).append(r)
        servers.setdefault(r.decode, []).append(r)
    return [name for name, rs in servers.items() if rs and not any(r.ok for r in rs)]


def summary(report: PairsReport) -> str:
    """One line: all verified, or the pairs that failed or disagree (and the servers they share)."""
    n = len(report.pairs)
    if report.ok:
        same = ", the same token ids from each" if report.same_tokens else ""
        took = f" in {report.seconds:.1f}s" if report.seconds is not None else ""
        again = sum(1 for r in report.pairs if r.attempts > 1)
        retried = f" ({again} on a second attempt)" if again else ""
        return f"{n} of {n} prefill x decode pairs verified{same}{took}{retried}"
    parts = [f"{r.name} {r.state}" for r in report.bad]
    who = f" (the servers in every bad pair: {', '.join(report.suspects)})" if report.suspects else ""
    return f"{len(report.bad)} of {n} pairs not verified: {'; '.join(parts)}{who}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def table(report: PairsReport) -> str:
    """pair → state, TTFT, latency, tokens; then the reason of each bad pair."""
    rows = [("PAIR", "STATE", "TTFT", "LATENCY", "TOKENS")]
    rows += [(r.name, r.state, _num(r.ttft), _num(r.latency), "-" if r.tokens is None else str(r.tokens))
             for r in report.pairs]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines += [f"  {r.name}: {r.error}" for r in report.bad]
    lines += [f"  {r.name}: sent {r.attempts} times; the first attempt got: {r.first_error}"
              for r in report.pairs if r.attempts > 1]  # fmt: skip
    return "\n".join(lines)
