"""Fleet shapes on the inventory alone: multi-host servers (pd_instance), the port plan, the guardrails for
DP attention / DeepEP / the staging buffer. Rendered and validated, no host touched."""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from provision.api import inventory_pd_vars
from provision.errors import InputError
from provision.inventory import Inventory
from provision.pd import build, validate_pd
from provision.pd.flags import effective
from provision.pd.ports import of as ports_of
from provision.pd.ports import plan
from provision.pd.scale import plan as scale_plan
from provision.pd.scale import removed_hosts, without
from provision.pd.spec import health_url
from provision.remote import path as remote_path

REPO = Path(__file__).resolve().parents[2]


def helper(action: str, request: dict[str, Any]) -> dict[str, Any]:
    """remote/pd_rollout.py ACTION as a host runs it: its one JSON answer (exit 1 when not ok)."""
    out = subprocess.run([sys.executable, str(remote_path("pd_rollout.py")), action], input=json.dumps(request),
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    answer = dict(json.loads(out.stdout.splitlines()[-1]))
    assert out.returncode == (0 if answer["ok"] else 1), out.stderr
    return answer


def two_rank(**prefill: Any) -> dict[str, dict[str, Any]]:
    """A tp-2 prefill over pf0 + pf1 (pd_instance), a decode, the router beside the decode."""
    common = {"model_path": "/m", "sglang_device": "cuda"}
    return {
        "pf0": {"group_names": ["prefill"], "ansible_host": "10.0.0.1", "tp": 2, "pd_instance": "p", **common,
                **prefill},
        "pf1": {"group_names": ["prefill"], "ansible_host": "10.0.0.2", "tp": 2, "pd_instance": "p", **common},
        "dc0": {"group_names": ["decode", "router"], "ansible_host": "10.0.0.3", "tp": 2, **common},
    }  # fmt: skip


def test_multi_host_instance_render() -> None:
    d = build(two_rank())
    assert [p.host for p in d.prefill] == ["pf0"] and [p.host for p in d.ranks] == ["pf1"]
    lead, rank = d.prefill[0], d.ranks[0]
    for proc, r in ((lead, "0"), (rank, "1")):
        assert effective(proc.args, "--nnodes") == "2" and effective(proc.args, "--node-rank") == r
        assert effective(proc.args, "--dist-init-addr") == "10.0.0.1:30200"
    assert rank.leader is lead and health_url(rank) == "http://10.0.0.1:30000/health"
    router = d.routers[0].args
    assert (
        router.count("--prefill") == 1 and "http://10.0.0.1:30000" in router and "http://10.0.0.2:30000" not in router
    )
    assert d.hosts["pf1"].server is rank  # the rank runs (pd up starts it, pd status shows it)
    fact = d.hosts["pf1"].fact()["server"]
    assert (fact["instance"], fact["node_rank"], fact["nnodes"]) == ("p", 1, 2)
    assert validate_pd(two_rank()) == []


def test_shipped_multi_host_example() -> None:
    hosts = inventory_pd_vars(Inventory.load([str(REPO / "inventory" / "multi-host.yml")], {}), {})
    assert validate_pd(hosts, {h: 8 for h in hosts}) == []
    d = build(hosts)
    assert [p.host for p in d.prefill] == ["gpu01"] and [p.host for p in d.ranks] == ["gpu02"]
    assert effective(d.ranks[0].args, "--dist-init-addr") == "10.0.0.11:30200"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"tp": 3}, "pf1: pd_instance p: its server flags differ from the leader pf0's (3 vs 2)"),
        ({"model_path": "/other"}, "pf1: pd_instance p: model_path '/m' differs from the leader pf0's '/other'"),
        ({"page_size": 16}, "pf1: pd_instance p: its server flags differ from the leader pf0's"),
        ({"ansible_host": "127.0.0.1"}, "spans machines but its leader is reached at 127.0.0.1"),
    ],
)
def test_instance_refusals(change: dict[str, Any], expected: str) -> None:
    problems = validate_pd(two_rank(**change))
    assert any(expected in p for p in problems), problems


def test_instance_tp_not_divisible_and_dp() -> None:
    hosts = two_rank()
    for h in ("pf0", "pf1"):
        hosts[h]["tp"] = 3
    assert any("tp 3 is not divisible by its 2 nodes" in p for p in validate_pd(hosts))
    for h in ("pf0", "pf1"):
        hosts[h].update(tp=2, dp=2)
    assert any("dp 2 across 2 nodes needs --enable-dp-attention" in p for p in validate_pd(hosts))


def test_instance_in_two_roles_and_one_machine() -> None:
    hosts = two_rank()
    hosts["dc0"]["pd_instance"] = "p"
    assert "pd_instance 'p' has members in groups" in validate_pd(hosts)[0]
    hosts = two_rank()
    hosts["pf1"]["ansible_host"] = "10.0.0.1"
    hosts["pf1"]["server_port"] = 30001
    assert any("two of its ranks are on one machine" in p for p in validate_pd(hosts))


def test_ranks_on_one_machine_on_disjoint_gpus_when_asked() -> None:
    """pd_instance_one_machine (a multi-node server tried on one multi-GPU host, issue 31's two-rank run): the
    ranks may share the machine on disjoint GPUs; without it, or on the same GPUs, refused."""
    hosts = two_rank()
    hosts["pf1"].update({"ansible_host": "10.0.0.1", "server_port": 30001, "nccl_port": 30101, "base_gpu_id": 1})
    gpus = {h: 2 for h in hosts}
    assert any("two of its ranks are on one machine" in p for p in validate_pd(hosts, gpus))
    hosts["pf0"]["pd_instance_one_machine"] = True
    assert any("two of its ranks are on one machine" in p for p in validate_pd(hosts, gpus))  # every member says it
    hosts["pf1"]["pd_instance_one_machine"] = "true"
    assert validate_pd(hosts, gpus) == []
    assert effective(build(hosts).ranks[0].args, "--base-gpu-id") == "1"
    hosts["pf1"]["base_gpu_id"] = 0  # both ranks on GPU 0: the GPU check refuses it
    assert any("share GPU 0" in p for p in validate_pd(hosts, gpus))
    hosts["pf1"]["pd_instance_one_machine"] = "maybe"
    assert any("pd_instance_one_machine" in p for p in validate_pd(hosts, gpus))


def four_names() -> dict[str, dict[str, Any]]:
    """Four inventory names on one machine: 2 prefill + 2 decode, the router beside the first prefill."""
    hosts: dict[str, dict[str, Any]] = {}
    for i, role in enumerate(["prefill", "prefill", "decode", "decode"]):
        groups = [role, "router"] if i == 0 else [role]
        hosts[f"m-{i}"] = {"group_names": groups, "ansible_host": "10.0.0.9", "model_path": "/m",
                           "server_port": 30000 + i, "bootstrap_port": 8998 + i}  # fmt: skip
    return hosts


def test_port_plan_unique_per_machine() -> None:
    d = build(four_names())
    uses = plan(d)
    ports = [u.port for u in uses]
    assert len(ports) == len(set(ports)), uses
    assert {(u.host, u.what): u.port for u in uses if u.what == "nccl"} == {
        ("m-0", "nccl"): 30100,
        ("m-1", "nccl"): 30101,
        ("m-2", "nccl"): 30102,
        ("m-3", "nccl"): 30103,
    }
    assert {u.what for u in uses} == {"http", "bootstrap", "nccl", "router", "router-metrics"}
    assert validate_pd(four_names()) == []


def test_derived_port_bumps_past_a_planned_one_and_an_explicit_clash_is_refused() -> None:
    hosts = four_names()
    hosts["m-1"]["server_port"] = 30100  # where m-0's nccl port would be
    nccl = {u.host: u.port for u in plan(build(hosts)) if u.what == "nccl"}
    assert nccl["m-0"] == 30101 and len(set(nccl.values())) == 4
    hosts["m-2"]["nccl_port"] = 30100  # explicitly on m-1's HTTP port
    assert any("port 30100 on 10.0.0.9 is planned twice: http of m-1-prefill and nccl of m-2-decode" in p
               for p in validate_pd(hosts))  # fmt: skip


def test_nccl_port_is_machine_wide_even_on_distinct_loopback_addresses() -> None:
    hosts = {"lab0": {"group_names": ["prefill", "router"], "ansible_host": "127.0.9.10", "sglang_device": "cpu"},
             "lab1": {"group_names": ["decode"], "ansible_host": "127.0.9.11", "sglang_device": "cpu"}}  # fmt: skip
    nccl = [u.port for u in plan(build(hosts)) if u.what == "nccl"]
    assert nccl == [30100, 30101]  # torch.distributed's store listens on every address


def test_dp_attention_and_dist_init_ports_are_planned() -> None:
    hosts = two_rank(sglang_extra_args=["--enable-dp-attention"], dp=2)
    hosts["pf1"].update(dp=2, sglang_extra_args=["--enable-dp-attention"])
    uses = {(u.host, u.what, u.port) for u in plan(build(hosts))}
    assert ("pf0", "dist-init", 30200) in uses
    assert {p for h, w, p in uses if w == "dp-attention"} == set(range(30201, 30207))
    assert not any(h == "pf1" and w in ("http", "bootstrap", "dist-init") for h, w, _ in uses)
    single = {"a": {"group_names": ["serve"], "ansible_host": "10.0.0.1", "model_path": "/m", "tp": 2, "dp": 2,
                    "sglang_extra_args": "--enable-dp-attention"}}  # fmt: skip
    assert {u.port for u in plan(build(single)) if u.what == "dp-attention"} == set(range(30233, 30240))


def test_guardrails() -> None:
    hosts = two_rank()
    hosts["dc0"]["sglang_extra_args"] = "--enable-dp-attention"
    assert any("dc0: --enable-dp-attention needs dp > 1 and tp divisible by dp (tp 2, dp 1)" in p
               for p in validate_pd(hosts))  # fmt: skip
    hosts = two_rank(sglang_extra_args="--moe-a2a-backend deepep")
    hosts["pf1"]["sglang_extra_args"] = "--moe-a2a-backend deepep"
    problems = validate_pd(hosts)
    assert any("pf0: --moe-a2a-backend deepep across hosts needs RDMA, and no facts are known" in p for p in problems)
    active = {"rdma": [{"name": "mlx5_0", "ports": [{"port": 1, "state": "ACTIVE"}]}]}
    down = {"rdma": [{"name": "mlx5_0", "ports": [{"port": 1, "state": "DOWN"}]}]}
    hosts["pf0"].update(ansible_facts=active, pd_peer_memory=True)
    hosts["pf1"].update(ansible_facts=down)
    problems = validate_pd(hosts)
    assert not any(p.startswith("pf0:") for p in problems)
    assert any("pf1: --moe-a2a-backend deepep across hosts needs an ACTIVE RDMA port" in p for p in problems)
    hosts["pf1"].update(ansible_facts=active)
    assert any("pf1: --moe-a2a-backend deepep across hosts needs GPU peer memory" in p for p in validate_pd(hosts))
    hosts["pf1"]["pd_peer_memory"] = True
    assert validate_pd(hosts) == []


def test_staging_buffer_when_tp_differs() -> None:
    hosts = two_rank()
    hosts["dc0"]["tp"] = 1
    problem = next(p for p in validate_pd(hosts) if "SGLANG_DISAGG_STAGING_BUFFER" in p)
    assert "prefill tp 2 and decode tp 1 differ" in problem and "on pf0, dc0" in problem
    for h in ("pf0", "pf1", "dc0"):
        hosts[h]["pd_env"] = {"SGLANG_DISAGG_STAGING_BUFFER": "1"}
    assert validate_pd(hosts) == []


# ------------------------------------------------------------------ the plan against real processes
BINDER = """
import os, socket, sys, time
socks = []
for port in sys.argv[1:]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((os.environ.get("BIND", "127.0.0.1"), int(port)))  # no SO_REUSEADDR: a held port is a bind error
    s.listen(8)
    socks.append(s)
print("bound", flush=True)
time.sleep(600)
"""


def free_base(span: int = 128) -> int:
    """A first port whose next ``span`` ports are all free on every address of this machine now, below the
    kernel's ephemeral range (32768-60999 by default: fixed ports there were taken, now and then, by the client end
    of another test's connection)."""
    for base in random.sample(range(20000, 32768 - span, span), 20):
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + span):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("0.0.0.0", port))  # no SO_REUSEADDR, as BINDER: a port held on any address fails
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError(f"no {span} free ports in a row below 32768")


def local_four(base: int) -> dict[str, dict[str, Any]]:
    """four_names() on this machine, on ports from ``base`` (clear of the usual defaults)."""
    hosts = four_names()
    for i, v in enumerate(hosts.values()):
        v.update(ansible_host="127.0.0.1", server_port=base + i, bootstrap_port=base + 50 + i,
                 router_port=base + 60, router_prometheus_port=base + 61)  # fmt: skip
    return hosts


def spawn(ports: list[int], bind: str = "127.0.0.1") -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", BINDER, *map(str, ports)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "BIND": bind})  # fmt: skip


def test_four_names_of_one_machine_up_and_down_five_times() -> None:
    """Every process of the plan binds all its planned ports at once, four servers and the router together,
    five times over: no bind error (what SGLang's free-port probe raced for), and the helper that ``pd up``
    runs first finds each port free before and held, by that pid, while they run."""
    d = build(local_four(free_base()))
    procs = [*d.procs, *d.ranks]
    planned = {p.name: [u.port for u in ports_of(p)] for p in procs}
    every = [u for p in procs for u in d.hosts[p.host].fact()["ports"] if u["name"] == p.name]
    assert len({u["port"] for u in every}) == len(every) == 2 * 3 + 2 * 2 + 2  # prefill: http, bootstrap, nccl
    for _ in range(5):
        assert helper("ports", {"ports": every}) == {"ok": True, "held": [], "msg": ""}
        running = [spawn(planned[p.name]) for p in procs]
        try:
            for proc in running:
                assert proc.stdout is not None and proc.stdout.readline().strip() == "bound", proc.stderr
            answer = helper("ports", {"ports": every})
            assert not answer["ok"] and {h["pid"] for h in answer["held"]} == {p.pid for p in running}
        finally:
            for proc in running:
                proc.kill()
                proc.wait(timeout=30)
                proc.stdout.close()  # type: ignore[union-attr]
                proc.stderr.close()  # type: ignore[union-attr]


def test_a_held_planned_port_is_refused_naming_pid_and_command() -> None:
    base = free_base()
    d = build(local_four(base))
    mine = d.hosts["m-2"].fact()["ports"]
    holder = spawn([u["port"] for u in mine if u["what"] == "nccl"])
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "bound"
        answer = helper("ports", {"ports": mine})
        assert not answer["ok"]
        assert answer["msg"].startswith(f"port {base + 102} (nccl of m-2-decode) is held by pid {holder.pid}: ")
        assert "-c import os, socket, sys, time" in answer["msg"]  # its command line, on one line
        http = [u for u in mine if u["what"] == "http"]
        assert helper("ports", {"ports": http})["ok"]  # its other ports are free
        own = Path(tempfile.mkdtemp()) / "m-2-decode.json"  # the process's own session holds it: its own
        own.write_text(json.dumps({"sid": os.getsid(holder.pid)}))
        assert helper("ports", {"ports": [dict(u, pidfile=str(own)) for u in mine]})["ok"]
    finally:
        holder.kill()
        holder.wait(timeout=30)
        holder.stdout.close()  # type: ignore[union-attr]
        holder.stderr.close()  # type: ignore[union-attr]


def test_a_port_held_by_its_own_systemd_unit_is_its_own() -> None:
    """Under ``pd_supervisor: systemd`` a running server keeps no provision record: the listener is its own when
    it sits in the unit's cgroup (``unit``: provision-pd-NAME.service, the last component of a cgroup path).
    Here the holder inherits this test's cgroup, whose last component stands for the unit's name."""
    d = build(local_four(free_base()))
    mine = d.hosts["m-2"].fact()["ports"]
    assert {u["unit"] for u in mine} == {"provision-pd-m-2-decode.service"}
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    group = next((p.rstrip("/").rpartition("/")[2] for p in (line.split(":", 2)[2] for line in lines)
                  if p.rstrip("/")), None)  # fmt: skip
    assert group, f"this test needs a process in a named cgroup: {lines}"
    holder = spawn([u["port"] for u in mine if u["what"] == "nccl"])
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "bound"
        assert not helper("ports", {"ports": mine})["ok"]  # provision-pd-m-2-decode.service: not its cgroup
        assert helper("ports", {"ports": [dict(u, unit=group) for u in mine]})["ok"]
        assert not helper("ports", {"ports": [dict(u, unit=group + "x") for u in mine]})["ok"]
    finally:
        holder.kill()
        holder.wait(timeout=30)
        holder.stdout.close()  # type: ignore[union-attr]
        holder.stderr.close()  # type: ignore[union-attr]


def test_a_port_held_on_another_address_of_the_machine_is_not_a_clash() -> None:
    """The lab's hosts are loopback addresses of one machine: the same HTTP port on another address is free."""
    port = free_base(1)
    holder = spawn([port], bind="127.0.0.2")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "bound"
        planned = {"port": port, "what": "http", "name": "x"}
        assert helper("ports", {"ports": [dict(planned, bind="127.0.0.1")]})["ok"]
        assert not helper("ports", {"ports": [dict(planned, bind="127.0.0.2")]})["ok"]
        assert not helper("ports", {"ports": [dict(planned, bind="0.0.0.0")]})["ok"]
    finally:
        holder.kill()
        holder.wait(timeout=30)
        holder.stdout.close()  # type: ignore[union-attr]
        holder.stderr.close()  # type: ignore[union-attr]


def test_adopt_takes_the_rewritten_script_as_the_running_ones(tmp_path: Path) -> None:
    script, record = tmp_path / "r.sh", tmp_path / "r.json"
    script.write_text("#!/bin/sh\nexec old\n")
    record.write_text(json.dumps({"pid": 1, "sha256": hashlib.sha256(script.read_bytes()).hexdigest()}))
    assert helper("adopt", {"pidfile": str(record), "script": str(script)})["done"] is False  # same: nothing
    script.write_text("#!/bin/sh\nexec new\n")
    assert helper("adopt", {"pidfile": str(record), "script": str(script)})["done"] is True
    assert json.loads(record.read_text())["sha256"] == hashlib.sha256(script.read_bytes()).hexdigest()
    assert helper("adopt", {"pidfile": str(tmp_path / "none.json"), "script": str(script)})["done"] is False


# ------------------------------------------------------------------ pd scale: what is refused before any host
def scale_hosts() -> dict[str, dict[str, Any]]:
    hosts = four_names()
    hosts["m-3"]["group_names"] = ["decode"]
    return hosts


@pytest.mark.parametrize(
    ("add", "remove", "expected"),
    [
        ([], [], "give --add HOST... or --remove HOST..."),
        (["m-2"], ["m-2"], "m-2 is given to both --add and --remove"),
        (["nope"], [], "nope is not a prefill or decode host of the inventory"),
        ([], ["m-2", "m-3"], "no host in group 'decode'"),
    ],
)
def test_scale_refusals(add: list[str], remove: list[str], expected: str) -> None:
    with pytest.raises(InputError) as err:
        scale_plan(scale_hosts(), add, remove)
    assert expected in str(err.value)


def test_scale_plan_and_the_router_script_after_a_removal() -> None:
    d, adding, removing = scale_plan(scale_hosts(), ["m-3"], ["m-2"])
    assert [p.name for p in adding] == ["m-3-decode"] and [p.name for p in removing] == ["m-2-decode"]
    after = build(without(scale_hosts(), ["m-2"]))
    assert "http://10.0.0.9:30002" in d.routers[0].args and "http://10.0.0.9:30002" not in after.routers[0].args
    assert "http://10.0.0.9:30003" in after.routers[0].args


def two_prefills() -> dict[str, dict[str, Any]]:
    """two_rank() with a second, single-host prefill: the instance can leave and the routers keep a prefill."""
    hosts = two_rank()
    hosts["pf2"] = {**hosts["pf1"], "ansible_host": "10.0.0.4"}
    del hosts["pf2"]["pd_instance"]
    return hosts


def test_scale_takes_an_instance_whole_by_any_of_its_hosts() -> None:
    for name in ("pf0", "pf1"):  # the leader or another rank: the instance
        removing = scale_plan(two_prefills(), [], [name])[2]
        assert [p.host for p in removing] == ["pf0"] and removing[0].instance == "p"
        assert removed_hosts(two_prefills(), [name]) == ["pf0", "pf1"]
    assert removed_hosts(two_prefills(), ["pf2", "dc0"]) == ["pf2", "dc0"]
    after = build(without(two_prefills(), removed_hosts(two_prefills(), ["pf1"])))
    assert [p.host for p in after.prefill] == ["pf2"] and not after.ranks  # the routers' script after it
    with pytest.raises(InputError, match="no host in group 'prefill'"):  # the only prefill, whole
        scale_plan(two_rank(), [], ["pf1"])


def test_scale_starts_and_stops_every_rank_and_registers_only_the_leader() -> None:
    from provision.pd.scale import render as scale_render
    from provision.pd.scale import scale
    from tests.support.pd import Hosts

    hosts = two_prefills()
    run, started = Hosts(changed=set()), []

    def start(names: list[str]) -> tuple[bool, str]:
        started.append(names)
        return True, ""

    result = scale(hosts, run, run, start, ["pf1"], [])
    assert result.ok and started == [["pf0", "pf1"]], result
    assert [a["host"] for a in result.added] == ["pf0"] and result.added[0]["ranks"] == ["pf1"]
    assert "added pf0-prefill on pf0 (with its ranks on pf1)" in scale_render(result)
    adds = [t["pd_rollout_step"]["request"] for t in run.tasks if t.get("name") == "router_add"]
    assert [[w["url"] for w in r["workers"]] for r in adds] == [["http://10.0.0.1:30000"]]  # the leader only
    run = Hosts(changed=set())
    result = scale(hosts, run, run, start, [], ["pf0"])
    assert result.ok and result.removed[0]["ranks"] == ["pf1"], result
    assert [r["urls"] for r in (t["pd_rollout_step"]["request"] for t in run.tasks if t.get("name") ==
                                "router_remove")] == [["http://10.0.0.1:30000"]]  # fmt: skip
    assert sorted(h for h, t, a in run.calls if a == "process") == ["pf0", "pf1"]  # every rank stopped
    assert [h for h, t, a in run.calls if a == "drain"] == ["pf0"]  # through the leader, which serves HTTP


def test_export_writes_an_instance_as_leader_and_workers() -> None:
    """pd_instance exported: LWS (and RBG) a leader-worker group of size nnodes, each pod tp / nnodes GPUs and
    the leader's dist-init port; Slurm one node per rank, each dialing the leader's node."""
    import yaml

    from provision.pd.export import export

    docs = list(yaml.safe_load_all(export(build(two_rank()), "lws").files["leaderworkersets.yaml"]))
    lws = next(d for d in docs if d["kind"] == "LeaderWorkerSet" and "prefill" in d["metadata"]["name"])
    template = lws["spec"]["leaderWorkerTemplate"]
    assert (lws["spec"]["replicas"], template["size"]) == (1, 2)
    container = template["workerTemplate"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert effective(container["args"], "--dist-init-addr") == "$(LWS_LEADER_ADDRESS):30200"
    assert effective(container["args"], "--node-rank") == "$(LWS_WORKER_INDEX)"
    rbg = export(build(two_rank()), "rbg").files["rolebasedgroup.yaml"]
    assert "leaderWorkerPattern" in rbg
    slurm = export(build(two_rank()), "slurm").files
    assert "run_pf1_prefill() {" in slurm["node-1.sh"] and "start pf1-prefill run_pf1_prefill" in slurm["node-1.sh"]
    assert '--nnodes 2 --node-rank 1 \\\n    --dist-init-addr "${PD_NODE_0}:30200"' in slurm["node-1.sh"]
    assert '--node-rank 0 \\\n    --dist-init-addr "${PD_NODE_0}:30200"' in slurm["node-0.sh"]
    assert "pf1" not in slurm["node-2.sh"].split("wait_http")[-1]  # the router waits for the leader only


def test_the_tasks_plan_leaves_out_the_hosts_being_removed() -> None:
    """``pd scale --remove``: the routers' scripts are rendered by pd_config with ``pd_scale_removed`` set."""
    from provision.pd import hosts_from_task_vars

    hosts = scale_hosts()
    groups = {"prefill": ["m-0", "m-1"], "decode": ["m-2", "m-3"], "router": ["m-0"]}
    seen = hosts_from_task_vars({"hostvars": hosts, "groups": groups, "pd_scale_removed": ["m-2"]})
    assert list(seen) == ["m-0", "m-1", "m-3"]
    assert "http://10.0.0.9:30002" not in build(seen).routers[0].args


def test_scale_and_inventory_host_from_the_cli() -> None:
    """``pd scale`` refuses a name that is no server in one line, exit 5, before any host (nxm.yml's hosts do not
    exist); ``inventory --host`` shows the port plan."""
    from tests.support.cli import run_cli

    nxm = str(REPO / "inventory" / "nxm.yml")
    result = run_cli(["pd", "scale", "-i", nxm, "--remove", "nope"])
    assert result.code == 5 and "pd scale: nope is not a prefill or decode host of the inventory" in result.err
    shown = run_cli(["inventory", "-i", str(REPO / "inventory" / "multi-host.yml"), "--host", "gpu01"])
    assert shown.code == 0
    assert {(u["what"], u["port"]) for u in json.loads(shown.out)["_pd_ports"]} == {
        ("http", 30000),
        ("bootstrap", 8998),
        ("nccl", 30100),
        ("dist-init", 30200),
    }
