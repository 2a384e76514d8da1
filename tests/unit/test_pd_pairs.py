"""Every prefill x decode pair (provision/pd/pairs.py and the ``pairs`` action of remote/pd_rollout.py): the
plan of the pairs and their requests, the verdict (failed pairs, disagreeing token ids, the server to blame, the
tie), the table and its one line; and the host side run here as on a host against small HTTP servers that answer
as SGLang's prefill and decode do (a streamed decode answer: the TTFT and the token ids; cumulative and
incremental chunks), pairs in flight at once, bounded. The lab test (tests/integration/test_pd_rollout.py) runs
it against real servers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from provision.pd import build, pairs
from tests.support.cli import run_cli
from tests.support.pd import helper, hosts, inventory


def answer(ids: list[int] | None, ok: bool = True, **extra: Any) -> dict[str, Any]:
    if not ok:
        return {"ok": False, "msg": "decode http://x: HTTP 500 boom", **extra}
    return {"ok": True, "output_ids": ids, "completion_tokens": len(ids or []), "ttft": 0.1, "latency": 0.3, **extra}


def judge(answers: list[dict[str, Any] | None], p: int = 2, d: int = 2, same: bool = True) -> pairs.PairsReport:
    return pairs.verdict(pairs.plan(build(hosts(p, d))), answers, same)


def states(report: pairs.PairsReport) -> dict[str, str]:
    return {r.name: r.state for r in report.pairs}


def test_every_prefill_with_every_decode() -> None:
    deployment = build(hosts(2, 3))
    planned = pairs.plan(deployment)
    assert [p.name for p in planned] == [f"p{i}-prefill → d{j}-decode" for i in range(2) for j in range(3)]
    reqs = pairs.requests(planned)
    assert reqs[4] == {"prefill": "http://10.0.0.2:30000", "decode": "http://10.0.1.2:30000",
                       "bootstrap_host": "10.0.0.2", "bootstrap_port": 8998}  # fmt: skip
    assert pairs.runner(deployment) == "p0"  # the first router's host sends them
    assert pairs.runner(deployment, ["d0", "p0"]) == "p0" and pairs.runner(deployment, ["d0"]) is None


def test_the_same_tokens_everywhere_is_ok() -> None:
    report = judge([answer([5, 6, 7]) for _ in range(4)])
    assert report.ok and report.reference == [5, 6, 7] and report.suspects == [] and report.bad == []
    assert pairs.summary(report) == "4 of 4 prefill x decode pairs verified, the same token ids from each"


def test_a_decode_on_other_weights_is_named() -> None:
    # p0→d0, p0→d1, p1→d0, p1→d1: d1 answers other tokens; a 2-2 tie, the first pair's tokens are the reference
    report = judge([answer([5, 6]), answer([5, 9]), answer([5, 6]), answer([5, 9])])
    assert not report.ok and report.reference == [5, 6]
    assert states(report) == {"p0-prefill → d0-decode": "ok", "p0-prefill → d1-decode": "disagrees",
                              "p1-prefill → d0-decode": "ok", "p1-prefill → d1-decode": "disagrees"}  # fmt: skip
    assert report.suspects == ["d1-decode"]
    line = "2 of 4 pairs not verified: p0-prefill → d1-decode disagrees; p1-prefill → d1-decode disagrees " \
           "(the servers in every bad pair: d1-decode)"  # fmt: skip
    assert pairs.summary(report) == line


def test_the_most_pairs_win_over_the_first() -> None:
    # 2 x 3: p0's pairs are wrong (3 of 6), d-side is fine; then a 1 x 3 where the FIRST decode is the odd one
    report = judge([answer([1]), answer([1]), answer([1]), answer([2]), answer([2]), answer([2])], 2, 3)
    assert report.reference == [1] and report.suspects == ["p1-prefill"]
    report = judge([answer([9]), answer([1]), answer([1])], 1, 3)
    assert report.reference == [1] and report.suspects == ["d0-decode"]
    assert states(report)["p0-prefill → d0-decode"] == "disagrees"


def test_failed_pairs_and_no_agreement_asked() -> None:
    report = judge([answer([1]), answer(None, ok=False), answer([2]), None], same=False)
    assert states(report) == {"p0-prefill → d0-decode": "ok", "p0-prefill → d1-decode": "failed",
                              "p1-prefill → d0-decode": "ok", "p1-prefill → d1-decode": "failed"}  # fmt: skip
    assert report.reference is None and report.suspects == ["d1-decode"]  # other tokens are fine here
    assert report.pairs[1].error == "decode http://x: HTTP 500 boom" and report.pairs[3].error == "no answer"
    text = pairs.table(report)
    assert text.splitlines()[0].split() == ["PAIR", "STATE", "TTFT", "LATENCY", "TOKENS"]
    assert "p0-prefill → d0-decode  ok      0.100s  0.300s   1" in text
    assert "  p0-prefill → d1-decode: decode http://x: HTTP 500 boom" in text
    doc = report.to_dict()
    assert doc["ok"] is False and doc["pairs"][1]["state"] == "failed" and json.dumps(doc)
    # what the host answered is not trusted: a missing answer, a field of the wrong type
    odd = judge([answer([1]), {"ok": "yes", "output_ids": [1]}, {**answer([1]), "ttft": "fast", "output_ids": "1"}])
    assert [r.state for r in odd.pairs] == ["ok", "failed", "disagrees", "failed"]
    assert odd.pairs[2].ttft is None and odd.pairs[2].output_ids is None and odd.pairs[3].error == "no answer"
    assert "fast" not in pairs.table(odd)
    assert [r.state for r in judge({"not": "a list"}).pairs] == ["failed"] * 4  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ the host side
class Fake(BaseHTTPRequestHandler):
    """SGLang's ``/generate`` in PD mode, as far as the pinned request sees it."""

    ids: list[int] = []
    incremental = False
    delay = 0.0
    refuse = 0  # answer the first N requests 503, as a server that is not ready
    seen: list[dict[str, Any]] = []
    active = 0
    most = 0
    lock = threading.Lock()
    counted = False

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        with cls.lock:
            cls.seen.append(body)
            cls.active += 1
            cls.most = max(cls.most, cls.active)
        self.counted = True
        try:
            time.sleep(cls.delay)
            with cls.lock:
                cls.refuse, refused = max(0, cls.refuse - 1), cls.refuse > 0
            if refused:
                self.done()
                self.send_error(503, "not ready")
            elif body.get("stream"):
                self.stream()
            else:
                self.done()
                self.whole({"text": "x", "output_ids": cls.ids, "meta_info": {"completion_tokens": len(cls.ids)}})
        finally:
            self.done()

    def done(self) -> None:
        """The request no longer counts as in flight: called BEFORE its last bytes are written, since the client
        may send its next request as soon as it has them (counted after, a loaded machine saw two at once)."""
        if self.counted:
            self.counted = False
            cls = type(self)
            with cls.lock:
                cls.active -= 1

    def whole(self, doc: dict[str, Any]) -> None:
        raw = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        ids = type(self).ids
        for n in range(1, len(ids) + 1):
            part = ids[n - 1 : n] if type(self).incremental else ids[:n]
            chunk = {"text": "t" if type(self).incremental else "t" * n, "output_ids": part,
                     "meta_info": {"completion_tokens": n}}  # fmt: skip
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.02)
        self.done()
        self.wfile.write(b"data: [DONE]\n\n")


def serve(ids: list[int], incremental: bool = False, delay: float = 0.0,
          refuse: int = 0) -> tuple[ThreadingHTTPServer, type[Fake]]:  # fmt: skip
    handler = type("Server", (Fake,), {"ids": ids, "incremental": incremental, "delay": delay, "seen": [],
                                       "lock": threading.Lock(), "refuse": refuse, "active": 0, "most": 0})  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


@pytest.fixture
def servers() -> Iterator[list[tuple[str, type[Fake]]]]:
    """A prefill, a decode (ids 3 1 3 3), a decode streaming increments (the same ids), a decode of other ids."""
    made = [serve([3, 1, 3, 3], delay=0.3), serve([3, 1, 3, 3], delay=0.3), serve([3, 1, 3, 3], True, 0.3),
            serve([3, 2, 2], delay=0.3)]  # fmt: skip
    yield [(f"http://127.0.0.1:{s.server_address[1]}", h) for s, h in made]
    for s, _ in made:
        s.shutdown()
        s.server_close()


def pair(prefill: str, decode: str) -> dict[str, Any]:
    return {"prefill": prefill, "decode": decode, "bootstrap_host": "10.9.9.9", "bootstrap_port": 8998}


def test_the_host_side_pins_each_pair_in_parallel(servers: list[tuple[str, type[Fake]]]) -> None:
    (prefill, pre), (d0, _), (d1, _), (d2, _) = servers
    req = {"pairs": [pair(prefill, d) for d in (d0, d1, d2, "http://127.0.0.1:9")], "stream": True, "timeout": 10,
           "parallel": 2, "max_new_tokens": 4}  # fmt: skip
    out = helper("pairs", req)
    assert out["ok"] and out["parallel"] == 2
    got = out["pairs"]
    assert [g["decode"] for g in got] == [d0, d1, d2, "http://127.0.0.1:9"]  # in the order given
    assert got[0]["output_ids"] == got[1]["output_ids"] == [3, 1, 3, 3] and got[2]["output_ids"] == [3, 2, 2]
    assert got[0]["text"] == got[1]["text"] == "tttt"
    assert all(0.3 <= g["ttft"] <= g["latency"] for g in got[:3])
    assert not got[3]["ok"] and "Connection refused" in got[3]["msg"]
    assert got[3]["attempts"] == 2 and "Connection refused" in got[3]["first_msg"]  # sent again, failed again
    assert all("attempts" not in g for g in got[:3])
    # each pair: the same bootstrap fields to its prefill and its decode, its own room; at most 2 pairs at once
    rooms = {b["bootstrap_room"] for b in pre.seen}
    assert len(pre.seen) == 5 and len(rooms) == 5 and pre.most <= 2  # the failed pair's second attempt too
    assert all(b["bootstrap_host"] == "10.9.9.9" and b["bootstrap_port"] == 8998 for b in pre.seen)
    assert all(b["sampling_params"] == {"max_new_tokens": 4, "temperature": 0} for b in pre.seen)
    assert out["seconds"] < sum(g["latency"] for g in got)  # two rounds of two, not four in a row
    report = pairs.verdict(pairs.plan(build(hosts(1, 4))), got)
    assert [r.state for r in report.pairs] == ["ok", "ok", "disagrees", "failed"]


def test_all_pairs_through_an_unreachable_router_host(tmp_path: Path) -> None:
    doc_run = run_cli(["pd", "verify", "--all-pairs", "--json", "-i", str(inventory(tmp_path)), "--connect-timeout",
                       "1"])  # fmt: skip
    assert doc_run.code == 4, doc_run.out + doc_run.err
    doc = json.loads(doc_run.out)
    assert doc["host"] == "p1" and doc["ok"] is False and doc["msg"]
    human = run_cli(["pd", "verify", "--all-pairs", "-i", str(inventory(tmp_path)), "--connect-timeout", "1"])
    assert human.code == 4 and human.out.startswith("p1: FAILED: ")


@pytest.mark.parametrize("p, d, parallel", [(1, 1, 8), (2, 2, 8), (3, 2, 8), (2, 5, 8), (4, 4, 2), (1, 4, 8)])
def test_no_server_meets_two_new_peers_at_once(p: int, d: int, parallel: int) -> None:
    planned = pairs.plan(build(hosts(p, d)))
    rounds = pairs.schedule(planned, parallel)
    assert sorted(i for r in rounds for i in r) == list(range(len(planned)))  # every pair once
    for r in rounds:
        assert 0 < len(r) <= parallel
        assert len({planned[i].prefill.name for i in r}) == len({planned[i].decode.name for i in r}) == len(r)
    assert len(rounds) == max(p, d) * -(-min(p, d) // parallel)  # the fewest rounds such a schedule can have
    assert pairs.schedule(planned[:0]) == []
    assert pairs.budget(rounds, 180) == len(rounds) * 190 * 2 + 60  # each round, and its one retry


def test_the_host_side_sends_the_rounds_in_turn_and_a_failed_pair_again() -> None:
    made = [serve([5, 6], delay=0.2), serve([5, 6], delay=0.2), serve([5, 6], delay=0.2, refuse=1),
            serve([5, 6], delay=0.2)]  # fmt: skip
    try:
        (p0, h0), (p1, h1), (d0, g0), (d1, g1) = [(f"http://127.0.0.1:{s.server_address[1]}", h) for s, h in made]
        planned = pairs.plan(build(hosts(2, 2)))
        rounds = pairs.schedule(planned)
        assert rounds == [[0, 3], [1, 2]]
        req = {"pairs": [pair(p0, d0), pair(p0, d1), pair(p1, d0), pair(p1, d1)], "rounds": rounds,
               "retries": 1, "stream": False, "timeout": 10, "parallel": 8, "max_new_tokens": 2}  # fmt: skip
        out = helper("pairs", req)
        assert out["ok"] and out["rounds"] == 2 and out["parallel"] == 2
        assert all(h.most == 1 for h in (h0, h1, g0, g1))  # no server had two pairs in flight at once
        got = out["pairs"]
        assert [g["ok"] for g in got] == [True] * 4
        assert got[0]["attempts"] == 2 and "HTTP 503" in got[0]["first_msg"]  # p0 -> d0 went first, was refused
        assert all("attempts" not in g for g in got[1:])
        report = pairs.verdict(planned, got)
        assert report.ok and report.pairs[0].attempts == 2 and "HTTP 503" in (report.pairs[0].first_error or "")
        assert pairs.summary(report).endswith("(1 on a second attempt)")
        assert "p0-prefill → d0-decode: sent 2 times; the first attempt got: decode" in pairs.table(report)
        # the same pairs without the retry: that pair fails
        g0.refuse = 1
        once = helper("pairs", dict(req, retries=0))
        assert [g["ok"] for g in once["pairs"]] == [False, True, True, True]
        assert "attempts" not in once["pairs"][0]
    finally:
        for s, _ in made:
            s.shutdown()
            s.server_close()
