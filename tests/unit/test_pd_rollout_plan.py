"""The rollout's plan and order (provision/pd/rollout.py) against a scripted runner: which servers change, the
batches (canary first, never the last server of a role), the refusal up front, the order of the steps of a
batch, and the rollback of a failed one. The lab test (tests/integration/test_pd_rollout.py) runs it for real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.cli import cli
from provision.cli.pd import pd
from provision.data import roles_dir
from provision.errors import InputError
from provision.pd import build
from provision.pd.rollout import RolloutOptions, ServerChange, batch_size, plan_batches, render, rollout
from provision.templating import render as render_value
from tests.support.cli import run_cli
from tests.support.pd import Hosts, hosts, inventory

if "pd" not in cli.commands:  # provision/cli/app.py registers it
    cli.add_command(pd)


def test_batch_size() -> None:
    assert batch_size("2", 4) == 2 and batch_size("25%", 4) == 1 and batch_size("50%", 5) == 3
    for bad in ("0", "-1", "x", "0%", "150%"):
        with pytest.raises(InputError):
            batch_size(bad, 4)


def change(host: str, role: str) -> ServerChange:
    return ServerChange(host, role, f"{host}-{role}", "", ["script"])


def test_batches_keep_a_server_of_each_role() -> None:
    d = build(hosts(2, 2))
    changes = [change("p0", "prefill"), change("p1", "prefill"), change("d0", "decode"), change("d1", "decode")]
    batches = plan_batches(d, changes, RolloutOptions(batch="100%"))
    assert [[c.host for c in b] for b in batches] == [["p0"], ["p1", "d0"], ["d1"]]
    batches = plan_batches(d, changes, RolloutOptions(batch="1", canary=0))
    assert [[c.host for c in b] for b in batches] == [["p0"], ["p1"], ["d0"], ["d1"]]


def test_a_single_server_of_a_role_is_refused_unless_downtime_is_allowed() -> None:
    d = build(hosts(1, 2))
    changes = [change("p0", "prefill"), change("d0", "decode")]
    with pytest.raises(InputError, match="p0-prefill on p0 needs a restart and is the only prefill server"):
        plan_batches(d, changes, RolloutOptions())
    batches = plan_batches(d, changes, RolloutOptions(batch="2", allow_downtime=True))
    assert [[c.host for c in b] for b in batches] == [["p0"], ["d0"]]
    # nothing to roll: nothing refused
    assert plan_batches(d, [change("d0", "decode")], RolloutOptions()) == [[change("d0", "decode")]]


def test_refused_before_any_change() -> None:
    run = Hosts(changed={"p0"})
    with pytest.raises(InputError):
        rollout(hosts(1, 1), run)
    assert set(run.actions()) <= {"pd_config", "template", "pd_status", "stack"}  # only the read-only detection


def test_the_order_of_a_batch() -> None:
    run = Hosts(changed={"d1"})
    result = rollout(hosts(2, 2), run)
    assert result.ok and result.code == 0
    assert [c.host for c in result.changes] == ["d1"] and sorted(result.unchanged) == ["d0-decode", "p0-prefill",
                                                                                      "p1-prefill"]  # fmt: skip
    order = [a for a in run.actions() if a not in ("pd_config", "pd_status", "template", "router_metrics", "stack")]
    assert order == ["router_remove", "drain", "files", "process", "pd_wait", "pairs", "router_add", "files"]
    assert [h for h, _, a in run.calls if a == "process"] == ["d1"]  # only the changed server restarts
    assert [h for h, _, a in run.calls if a.startswith("router_") and a != "router_metrics"] == ["p0", "p0"]
    report = result.batches[0]
    assert report.canary and report.ok and report.drain["d1"]["drained"] and report.verify["d1"]["peer"] == "p0-prefill"
    assert report.verify["d1"]["ttft"] == 0.1 and report.pairs is not None and len(report.pairs["pairs"]) == 4
    assert [h for h, _, a in run.calls if a == "pairs"] == ["p0"]  # one round trip, from the router's host
    assert "rollout ok: 1 servers in 1 batches" in render(result)
    assert "pairs: 4 of 4 prefill x decode pairs verified, the same token ids from each" in render(result)
    # without all pairs: the one generation pinned to the server and a peer, as before
    run = Hosts(changed={"d1"})
    assert rollout(hosts(2, 2), run, RolloutOptions(all_pairs=False)).ok
    assert "pinned" in run.actions() and "pairs" not in run.actions()


def test_serial_start_restarts_a_batch_one_server_at_a_time() -> None:
    """With ``pd_serial_start`` a batch's servers restart one after another, each waited for (servers that share a
    GPU: SGLang sizes a server's KV cache from the memory free at its own start); without it, in one play."""

    def restarts(serial: bool) -> list[list[str]]:
        layout = hosts(2, 2)
        for variables in layout.values():
            variables["pd_serial_start"] = serial
        run = Hosts(changed={"p0", "p1", "d0", "d1"})
        result = rollout(layout, run, RolloutOptions(batch="2"))
        assert result.ok, result.reason
        assert [len(b.hosts) for b in result.batches] == [1, 2, 1]
        return [names for names, tasks in run.plays if "restart" in tasks]

    assert restarts(serial=False) == [["p0"], ["p1", "d0"], ["d1"]]
    assert restarts(serial=True) == [["p0"], ["p1"], ["d0"], ["d1"]]


def test_a_failing_pair_of_the_batch_rolls_it_back() -> None:
    run = Hosts(changed={"d1"}, down=frozenset({"d1"}))
    result = rollout(hosts(2, 2), run)
    assert not result.ok and result.failed_host == "d1"
    assert "no verified generation through p0-prefill → d1-decode: decode http://10.0.1.2:30000: HTTP 500" in (
        result.reason or "")  # fmt: skip
    assert result.batches[0].rolled_back and not result.batches[0].rollback["ok"]  # its pairs still fail


def test_other_tokens_are_noted_per_batch_and_fail_the_rollout_after_the_last() -> None:
    # d1 comes back on other weights: the mixed deployment is noted in batch 1 (a rollout may change the
    # model); once every server is rolled, the pairs must agree: d1 is named
    run = Hosts(changed={"p0", "d1"}, odd=frozenset({"d1"}))
    result = rollout(hosts(2, 2), run, RolloutOptions(canary=0))
    assert [b.hosts for b in result.batches] == [["p0"], ["d1"]] and all(b.ok for b in result.batches)
    assert not result.ok and result.code == 2 and result.failed_host == "d1"
    assert result.reason == ("after the last batch: 2 of 4 pairs not verified: p0-prefill → d1-decode disagrees; "
                             "p1-prefill → d1-decode disagrees (the servers in every bad pair: d1-decode)")  # fmt: skip
    # the same with the agreement turned off (pd_verify_same_tokens: false)
    run = Hosts(changed={"p0", "d1"}, odd=frozenset({"d1"}))
    assert rollout(hosts(2, 2), run, RolloutOptions(canary=0, same_tokens=False)).ok


def test_a_failed_batch_is_rolled_back_and_stops_the_rollout() -> None:
    run = Hosts(changed={"p0", "p1", "d0", "d1"}, fail={("p0", "health"): "p0-prefill exited while starting"})
    result = rollout(hosts(2, 2), run)
    assert not result.ok and result.code == 2
    assert result.failed_host == "p0" and "exited while starting" in (result.reason or "")
    assert len(result.batches) == 1 and result.batches[0].rolled_back and result.batches[0].rollback["ok"]
    # the canary: backup, new files, restart (fails) → restore, restart, verify, re-admit; nobody else restarted
    assert [h for h, _, a in run.calls if a == "process"] == ["p0", "p0"]
    files = [t for h, t, a in run.calls if a == "files"]
    assert len(files) == 3  # backup, restore, discard
    assert run.actions("p0")[-2:] == ["pd_config", "files"]
    assert "router_add" in run.actions("p0")
    assert "FAILED on p0" in render(result)


def test_only_rolls_the_limited_hosts() -> None:
    run = Hosts(changed={"p0", "d0", "d1"})
    result = rollout(hosts(2, 2), run, RolloutOptions(only=frozenset({"d1"})))
    assert result.ok and [c.host for c in result.changes] == ["d1"]
    assert {"p0-prefill", "d0-decode"} <= set(result.unchanged)
    assert [h for h, _, a in run.calls if a == "process"] == ["d1"]


def test_cli_refuses_an_invalid_layout_and_a_bad_batch(tmp_path: Path) -> None:
    bad = run_cli(["pd", "rollout", "-i", str(inventory(tmp_path, router_port=30000))])
    assert bad.code == 5 and "the PD deployment is not valid" in bad.err
    unreachable = run_cli(["pd", "rollout", "-i", str(inventory(tmp_path)), "--connect-timeout", "1", "--json"])
    assert unreachable.code == 2  # the state of the servers cannot be read: nothing is touched
    doc = json.loads(unreachable.out)
    assert doc["batches"] == [] and doc["failed_host"] in ("p1", "d1") and "cannot read its state" in doc["reason"]


def test_a_server_running_another_venv_is_a_change() -> None:
    run = Hosts(changed=set(), stacked=frozenset({"p1"}))
    result = rollout(hosts(2, 2), run)
    assert result.ok and [(c.host, c.reasons) for c in result.changes] == [("p1", ["stack"])]
    assert [h for h, _, a in run.calls if a == "process"] == ["p1"]


def test_a_router_that_will_not_let_go_stops_before_any_restart() -> None:
    run = Hosts(changed={"p0", "p1", "d0", "d1"}, fail={("p0", "router_remove"): "router_remove: HTTP 500"})
    result = rollout(hosts(2, 2), run)
    assert not result.ok and result.code == 2 and "could not take the batch out of the routers" in (result.reason or "")
    assert "process" not in run.actions()  # nothing was restarted
    assert "router_add" in run.actions("p0")  # whatever left the router is put back


def test_a_router_that_will_not_take_them_back_fails_the_batch() -> None:
    run = Hosts(changed={"d1"}, fail={("p0", "router_add"): "router_add: the router does not list it"})
    result = rollout(hosts(2, 2), run)
    assert not result.ok and "re-admission: router_add" in (result.reason or "")
    assert result.failed_host == "p0"


def test_a_changed_router_restarts_after_the_servers_alone() -> None:
    run = Hosts(changed={"router"})
    result = rollout(hosts(2, 2), run)
    assert result.ok and result.changes == [] and result.router_changes == ["p0-router"]
    assert [h for h, _, a in run.calls if a == "process"] == ["p0"]  # the router only, once
    assert [a for a in run.actions("p0") if a in ("files", "process", "pd_wait", "pd_verify")] == [
        "files", "process", "pd_wait", "pd_verify", "files"]  # fmt: skip
    assert result.routers[0]["ok"] and "router p0-router: restarted" in render(result)


def test_a_router_that_does_not_come_back_gets_its_previous_script() -> None:
    run = Hosts(changed={"router"}, fail={("p0", "ready"): "p0-router did not answer /readiness"})
    result = rollout(hosts(2, 2), run)
    assert not result.ok and result.failed_host == "p0" and "did not answer /readiness" in (result.reason or "")
    assert result.routers[0]["rolled_back"] is True
    assert [t for h, t, a in run.calls if a == "files"][-3:] == ["files", "files", "files"]  # backup, restore, discard


def with_instance() -> dict[str, dict[str, Any]]:
    """hosts(2, 2) with p0 a two-host prefill (pd_instance): its other rank p0b."""
    out = hosts(2, 2)
    out["p0"].update(pd_instance="big", tp=2)
    rank = {
        "group_names": ["prefill"],
        "ansible_host": "10.0.0.9",
        "sglang_device": "cpu",
        "pd_instance": "big",
        "tp": 2,
    }
    return {"p0": out["p0"], "p0b": rank, **{h: v for h, v in out.items() if h != "p0"}}


def test_a_multi_host_server_rolls_whole() -> None:
    """A change of any rank restarts the instance: out of the routers and drained through its leader, every rank
    stopped, then every rank started and waited for, verified and re-admitted through the leader alone."""
    run = Hosts(changed={"p0b"})
    result = rollout(with_instance(), run)
    assert result.ok, result.reason
    assert [(c.host, c.members, c.reasons) for c in result.changes] == [("p0", ["p0b"], ["p0b: env", "p0b: script"])]
    assert "p0-prefill on p0 (a multi-host server: restarts whole, with p0b): p0b: env, p0b: script" in render(result)
    order = [(h, t) for h, t, a in run.calls if a in ("router_remove", "drain", "process", "pd_wait", "router_add")]
    assert order[:4] == [("p0", "router_remove"), ("p0", "drain"), ("p0", "stop"), ("p0b", "stop")]  # every rank
    assert sorted(order[4:8]) == [("p0", "health"), ("p0", "restart"), ("p0b", "health"), ("p0b", "restart")]
    assert order[8:] == [("p0", "router_add")]  # (this runner runs a play host by host; the executor task by task)
    requests = [t["pd_rollout_step"]["request"] for t in run.tasks if t["name"] in ("router_remove", "router_add")]
    assert requests[0]["urls"] == ["http://10.0.0.1:30000"] and [w["url"] for w in requests[1]["workers"]] == [
        "http://10.0.0.1:30000"]  # the leader alone  # fmt: skip
    files = [(h, t["pd_rollout_step"]["request"]["op"]) for (h, _, a), t in zip(run.calls, run.tasks, strict=True)
             if a == "files"]  # fmt: skip
    assert files == [("p0", "backup"), ("p0b", "backup"), ("p0", "discard"), ("p0b", "discard")]
    batch = result.batches[0]
    assert batch.members == {"p0": ["p0b"]} and batch.stop_seconds is not None
    assert batch.health_seconds.keys() == {"p0", "p0b"}
    assert "multi-host servers restarted whole (p0 with p0b): every rank stopped" in render(result)
    # unchanged: nothing restarts; -l with the rank alone still rolls the instance
    assert not rollout(with_instance(), Hosts(changed=set())).changes
    run = Hosts(changed={"p0b", "d1"})
    assert [c.host for c in rollout(with_instance(), run, RolloutOptions(only=frozenset({"p0b"}))).changes] == ["p0"]


def test_the_role_and_the_rollout_read_one_answer_to_which_servers_start_alone() -> None:
    """``pd_serial_start`` with a multi-host server: its ranks start together (its leader answers ``/health`` once
    every rank has joined), the other servers alone. The role (``pd.server.starts_alone``: prepare.yml's group for
    pd-up.yml's plays of one host) and the rollout's groups read the same ``Proc.starts_alone``."""
    layout = with_instance()
    for variables in layout.values():
        variables["pd_serial_start"] = True
    d = build(layout)
    servers = {h: d.hosts[h].fact()["server"] for h in ("p0", "p0b", "p1", "d0")}
    assert {h: (s["serial_start"], s["starts_alone"]) for h, s in servers.items()} == {
        "p0": (True, False), "p0b": (True, False), "p1": (True, True), "d0": (True, True)}  # fmt: skip
    run = Hosts(changed={"p0b", "d1"})
    result = rollout(layout, run, RolloutOptions(batch="100%"))
    assert result.ok, result.reason
    assert [names for names, tasks in run.plays if "restart" in tasks] == [["p0", "p0b"], ["d1"]]


def test_each_server_is_waited_for_as_long_as_its_own_pd_server_timeout() -> None:
    """A server's ``/health`` wait after its restart is its host's ``pd_server_timeout`` (a slow model's hosts set
    more), read from the ``pd`` fact as ``pd up``'s wait.yml reads it; a ``RolloutOptions.server_timeout`` (the
    Python API's) overrides it for every host."""
    layout = hosts(2, 2)
    layout["d1"]["pd_server_timeout"] = 1800
    d = build(layout)
    facts = {h: d.hosts[h].fact() for h in ("p0", "d1")}
    assert {h: (f["server_timeout"], f["start_gate"]["timeout"]) for h, f in facts.items()} == {
        "p0": (900.0, 900.0), "d1": (1800.0, 1800.0)}  # fmt: skip

    def waits(options: RolloutOptions) -> dict[str, Any]:
        run = Hosts(changed={"p0", "p1", "d0", "d1"})
        assert rollout(layout, run, options).ok
        tasks = [t for t in run.tasks if t["name"] == "health"]
        return {h: render_value(tasks[0]["pd_wait"]["timeout"], {"pd": f}) for h, f in facts.items()}

    assert waits(RolloutOptions(batch="2")) == {"p0": 900.0, "d1": 1800.0}
    assert waits(RolloutOptions(batch="2", server_timeout=60)) == {"p0": 60, "d1": 60}
    (wait,) = yaml.safe_load(Path(roles_dir(), "provision.sglang_pd/tasks/wait.yml").read_text())  # pd up's
    assert render_value(wait["pd_wait"]["timeout"], {"pd": facts["d1"]}) == 1800.0


def test_a_multi_host_server_that_fails_is_rolled_back_whole() -> None:
    run = Hosts(changed={"p0"}, fail={("p0b", "health"): "the leader did not answer /health"})
    result = rollout(with_instance(), run)
    assert not result.ok and result.failed_host == "p0b" and result.batches[0].rollback["ok"]
    stops = [h for h, t, a in run.calls if t == "stop"]
    assert stops == ["p0", "p0b", "p0", "p0b"]  # the rollback stops every rank again, then starts the old files
    ops = [t["pd_rollout_step"]["request"]["op"] for t in run.tasks if t["name"] == "files"]
    assert ops == ["backup", "backup", "restore", "restore", "discard", "discard"]


def test_a_prefill_is_readmitted_on_the_bootstrap_port_it_listens_on() -> None:
    """``sglang_extra_args`` may move a prefill's bootstrap port; the router's own ``--prefill URL PORT`` flag
    follows it, and so must the worker entry the rollout re-admits it with (a wrong one pairs the decodes with a
    port nobody listens on)."""
    layout = hosts(2, 2)
    layout["p1"]["sglang_extra_args"] = ["--disaggregation-bootstrap-port", "9100"]
    run = Hosts(changed={"p1"})
    result = rollout(layout, run)
    assert result.ok, result.reason
    added = [t["pd_rollout_step"]["request"]["workers"] for t in run.tasks if t["name"] == "router_add"]
    assert added == [[{"url": "http://10.0.0.2:30000", "worker_type": "prefill", "bootstrap_port": 9100}]]
    router = build(layout).routers[0]
    assert "--prefill http://10.0.0.2:30000 9100 " in " ".join(router.args)


def test_an_interrupted_batch_is_put_back_into_the_routers() -> None:
    """Ctrl-C while the canary drains: nothing restarted, the canary back in the router, exit 130; the kept
    files are left (the rollout did not end well)."""
    run = Hosts(changed={"p0", "p1", "d0", "d1"}, interrupt={("p0", "drain"): KeyboardInterrupt()})
    result = rollout(hosts(2, 2), run)
    assert not result.ok and result.interrupted == "interrupted" and result.code == 130
    assert len(result.batches) == 1 and result.batches[0].put_back == ["p0"] and not result.batches[0].left_out
    assert "process" not in run.actions() and "files" not in run.actions()
    adds = [t["pd_rollout_step"]["request"] for t in run.tasks if t["name"] == "router_add"]
    assert [(r["healthy_only"], r["wait"], [w["url"] for w in r["workers"]]) for r in adds] == [
        (True, "added", ["http://10.0.0.1:30000"])]  # fmt: skip
    text = render(result)
    assert "batch 1 (canary): p0: INTERRUPTED" in text and "interrupted: put back into the routers: p0" in text
    assert text.endswith("rollout interrupted in batch 1")


def test_a_server_that_does_not_answer_after_a_sigterm_is_left_out_and_named() -> None:
    """SIGTERM while the new server starts (the executor re-raises it as Terminated): a server that does not
    answer /health is not put back (the router would route to it); named, exit 143."""
    from provision.errors import Terminated

    run = Hosts(changed={"p0", "p1", "d0", "d1"}, interrupt={("p0", "health"): Terminated("terminated (SIGTERM)")},
                unhealthy=frozenset({"p0"}))  # fmt: skip
    result = rollout(hosts(2, 2), run)
    assert result.code == 143 and result.batches[0].left_out == ["p0"] and result.batches[0].put_back == []
    assert "LEFT OUT of the routers (no answer on /health): p0" in render(result)
    assert json.loads(json.dumps(result.to_dict()))["code"] == 143


def test_an_interrupted_removal_puts_the_server_back() -> None:
    from provision.pd.scale import render as scale_render
    from provision.pd.scale import scale

    layout = hosts(2, 2)
    run = Hosts(changed=set(), interrupt={("d1", "drain"): KeyboardInterrupt()})
    result = scale(layout, run, run, lambda names: (True, ""), [], ["d1"])
    assert result.interrupted == "interrupted" and result.code == 130 and result.removed == []
    assert "process" not in run.actions()  # not stopped
    assert [a for a in run.actions("p0") if a.startswith("router_")] == ["router_remove", "router_add"]
    assert scale_render(result) == ("pd scale interrupted: put back into the routers: d1; the same pd scale again "
                                    "finishes it")  # fmt: skip
    run = Hosts(changed=set(), interrupt={("p0", "router_remove"): KeyboardInterrupt()})  # before any is out
    result = scale(layout, run, run, lambda names: (True, ""), [], ["d1"])
    assert result.code == 130 and [a for a in run.actions("p0") if a.startswith("router_")] == [
        "router_remove", "router_add"]  # fmt: skip
