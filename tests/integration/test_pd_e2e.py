"""The PD deployment end to end on two lab hosts, in CPU mode: REAL SGLang servers (prefill on lab0, decode
on lab1: two Unix users on two loopback addresses), the REAL router on lab0, a real generation whose KV
cache crosses between the hosts over NIXL/UCX.

One pair at a time (~10 GB of RAM; ~85 s to start both servers on 2 cores). The tests run in order and
share the deployment: a failed run cleans up after itself → up → status → rerun is all ok → one changed
launch parameter restarts one process → the decode, the prefill and the router, each killed with SIGKILL under
a client's load, come back by themselves (the supervisor) and serve again → a crash-looping router stays down
and status says so → down leaves nothing, and nothing respawns.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.cli import cli
from provision.cli.pd import pd
from tests.support.cli import Client, CliResult, lab_ssh_config, run_cli_in, task
from tests.support.stack import (  # the session's SGLang venv (fixture sglang_stack in conftest.py)
    VENV,
    SglangStack,
    install_sglang_stack,
)
from tests.support.waiting import until

pytestmark = pytest.mark.lab

if "pd" not in cli.commands:  # provision/cli/app.py registers it
    cli.add_command(pd)

REPO = Path(__file__).resolve().parents[2]
EVIDENCE = "NIXL KVManager initialized with backend: UCX"
# the supervisor's restart policy here: quick first restarts, a start limit reached in a few crashes
RESTART = {"pd_restart_delay": 1, "pd_restart_max_delay": 8, "pd_start_limit_burst": 2, "pd_start_limit_interval": 900}
FAKE_SERVER = (
    'case "$*" in *"disaggregation-mode decode"*) echo "boom: the decode cannot start" >&2; sleep 2; exit 3;; '
    "*) exec sleep 600;; esac"
)


@dataclass
class Deployment:
    lab: Any
    inventory: Path
    workdir: Path
    install_seconds: float

    def provision(self, *argv: str) -> CliResult:
        return run_cli_in(self.workdir, [*argv, "-i", str(self.inventory)])

    def up(self, *extra: str) -> tuple[CliResult, dict[str, Any]]:
        return self._json("pd", "up", "--json", *extra)

    def site(self) -> tuple[CliResult, dict[str, Any]]:
        """The main job: site.yml (bootstrap, install, smoke, preflight, pd-up) in CPU mode."""
        return self._json("run", str(REPO / "playbooks" / "site.yml"), "--json")

    def _json(self, *argv: str) -> tuple[CliResult, dict[str, Any]]:
        result = self.provision(*argv)
        try:
            return result, json.loads(result.out)
        except ValueError:
            pytest.fail(f"{' '.join(argv[:2])} printed no JSON (exit {result.code}): {result.err[-4000:]}")

    def status(self) -> tuple[int, dict[tuple[str, str], dict[str, Any]]]:
        result = self.provision("pd", "status", "--json")
        rows = json.loads(result.out)["procs"]
        return result.code, {(r["host"], r["role"]): r for r in rows}

    def pids(self) -> dict[str, int]:
        return {role: row["pid"] for (_, role), row in self.status()[1].items()}

    def log(self, i: int, name: str) -> str:
        return str(self.lab.run_as(i, ["cat", f".provision/pd/logs/{name}.log"]).stdout)


def user_processes(lab: Any, i: int) -> list[str]:
    """The host user's live SGLang (or fake server) processes; zombies (dead, not yet reaped) do not count."""
    out = lab.run_as(i, ["ps", "-u", lab.hosts[i].user, "-o", "stat=,pid=,args="]).stdout
    live = [line.split(None, 1)[1] for line in out.splitlines() if line.strip() and not line.lstrip().startswith("Z")]
    return [line for line in live if "sglang" in line or "sleep 600" in line]


def listening(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((address, port)) == 0


@pytest.fixture(scope="module")
def deployment(
    lab: Any,
    sglang_stack: SglangStack,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp("pd-e2e")
    started = time.monotonic()
    install_sglang_stack(lab, [1], workdir / "install")  # the decode host's venv: seconds from the warm cache
    install_seconds = time.monotonic() - started
    common = {"sglang_device": "cpu", "venv_path": VENV, "python": "/usr/bin/python3", **RESTART}
    inventory = lab.write_inventory(
        workdir / "hosts.yml",
        extra_host_vars={"lab0": common, "lab1": common},
        groups={"prefill": ["lab0"], "decode": ["lab1"], "router": ["lab0"]},
    )
    deployed = Deployment(lab, inventory, workdir, install_seconds)
    with lab_ssh_config(lab):
        try:
            yield deployed
        finally:
            deployed.provision("pd", "down")


def test_a_failed_up_names_the_process_and_stops_what_it_started(deployment: Deployment) -> None:
    fake = json.dumps({"sglang_server_cmd": ["/bin/sh", "-c", FAKE_SERVER, "fake-sglang"], "pd_server_timeout": 6})
    result = deployment.provision("pd", "up", "-e", fake)
    assert result.code == 2, result.err[-3000:]
    assert "the decode server lab1-decode on lab1 is not running (it exited while starting" in result.out
    assert "boom: the decode cannot start" in result.out  # the tail of its log
    assert "stopped what this run started: lab0-prefill on lab0" in result.err
    assert user_processes(deployment.lab, 0) == [] and user_processes(deployment.lab, 1) == []


def test_up_generates_through_the_router(deployment: Deployment) -> None:
    started = time.monotonic()
    result, report = deployment.site()
    assert result.code == 0, result.err[-4000:]
    gate = task(report, "NIXL loads its plugins", "lab1")
    assert "UCX" in gate["plugins"]
    preflight = task(report, "NIXL WRITE prefill -> decode, verified and timed", "lab0")["results"][0]
    assert preflight["verified"] and preflight["gbps_best"] > 0
    verified = task(report, "A real generation through the router", "lab0")
    assert verified["text"].strip() and verified["completion_tokens"] >= 1
    assert verified["latency"] > 0 and verified["ttft"] is not None and verified["ttft"] > 0
    print(
        f"\npd up → verified generation: {time.monotonic() - started:.1f}s; latency {verified['latency']}s, "
        f"TTFT {verified['ttft']}s; install of the decode host's venv {deployment.install_seconds:.1f}s"
    )
    prefill, decode = deployment.log(0, "lab0-prefill"), deployment.log(1, "lab1-decode")
    for log in (prefill, decode):
        assert EVIDENCE in log
        assert "provision cpu compat: NIXL mem type VRAM relabelled DRAM" in log
        assert "provision cpu compat: the server's children are forked, not spawned" in log
        assert "provision cpu compat: SGLang's model registry imports only llama (of " in log
    # the prefill ran the prompt and the decode answered the router: the decode cannot produce a token of
    # a PD request without the prefill's KV cache, so it went from one host to the other
    assert "Prefill batch" in prefill and '"POST /generate HTTP/1.1" 200' in decode
    assert verified["output_ids"]
    pids = deployment.pids()
    for role in ("prefill", "decode"):  # CPU mode's launch env reached the server itself: one intra-op thread
        environ = Path(f"/proc/{pids[role]}/environ").read_bytes().split(b"\0")
        assert b"OMP_NUM_THREADS=1" in environ and b"SGLANG_USE_CPU_ENGINE=1" in environ, role
    hosts = deployment.lab.hosts
    assert f"--host {hosts[0].address}" in " ".join(user_processes(deployment.lab, 0))
    assert f"--host {hosts[1].address}" in " ".join(user_processes(deployment.lab, 1))


def test_status_table(deployment: Deployment) -> None:
    result = deployment.provision("pd", "status")
    assert result.code == 0, result.out + result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["HOST", "ROLE", "STATE", "PID", "UPTIME", "HEALTH", "PORT", "SUPERVISOR", "RESTARTS"]
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], r[1], r[2], r[5], r[6], r[7], r[8]) for r in rows] == [
        ("lab0", "prefill", "up", "ok", "30000", "provision", "0"),
        ("lab1", "decode", "up", "ok", "30000", "provision", "0"),
        ("lab0", "router", "up", "ok", "8000", "provision", "0"),
    ]  # fmt: skip


def metrics_rows(deployment: Deployment) -> dict[str, dict[str, float]]:
    result = deployment.provision("pd", "status", "--metrics", "--json")
    assert result.code == 0, result.err[-2000:]
    rows = json.loads(result.out)["procs"]
    assert all(not r.get("metrics_error") for r in rows if r["role"] != "router"), rows
    return {r["role"]: r.get("metrics") or {} for r in rows if r["role"] != "router"}


def chromium_shows(report: Path, shot: Path) -> tuple[str, int]:
    """The report in a real headless browser: its DOM after load, and how many pixels of its screenshot are
    not background (the plots drawn: a missing image is a small icon). Debian's ``chromium`` (scripts/test)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is not installed (scripts/test installs it)"
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,2200"]
    dom = subprocess.run([*flags, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=120,
                         check=True).stdout  # fmt: skip
    subprocess.run([*flags, f"--screenshot={shot}", report.as_uri()], capture_output=True, timeout=120, check=True)
    from PIL import Image  # matplotlib's own dependency

    with Image.open(shot) as image:
        inked = sum(image.convert("L").histogram()[:200])  # pixels darker than the page's near-white
    return dom, inked


def test_bench_measures_through_the_router_writes_the_report_and_gates_slos(deployment: Deployment) -> None:
    before = metrics_rows(deployment)  # --enable-metrics (pd_metrics): both servers answer /metrics
    assert "sglang:startup_time_seconds" in before["prefill"] and "sglang:startup_time_seconds" in before["decode"]
    out = deployment.workdir / "bench-pd"
    slo = "ttft_p99=0.001ms,failures=0"
    result = deployment.provision("pd", "bench", "--num-prompts", "3", "--input-len", "16", "--output-len", "4",
                                  "--concurrency", "1,2", "-o", str(out), "--slo", slo)  # fmt: skip
    assert result.code == 2, result.out + result.err[-4000:]  # the impossible SLO, and only it, is missed
    misses = [line for line in result.err.splitlines() if line.startswith("SLO miss:")]
    assert [m.split(":")[1].strip() for m in misses] == ["concurrency 1", "concurrency 2"], result.err
    assert all("ttft_p99 = " in m and "over the limit 0.001ms" in m for m in misses), misses
    assert "[1/2 points, " in result.err and "[2/2 points, " in result.err  # progress while it ran
    doc = json.loads((out / "bench.json").read_text())
    assert doc["kind"] == "pd" and doc["device"] == "cpu" and doc["versions"]["sglang"] == "0.5.23"
    assert [p["concurrency"] for p in doc["points"]] == [1, 2]
    for point in doc["points"]:
        assert point["ok"] and point["completed"] == 3 and point["failures"] == 0, point
        assert 0 < point["ttft_ms"]["p50"] <= point["ttft_ms"]["p99"] and point["output_tps"] > 0
        assert point["argv"][1:3] == ["-m", "sglang.bench_serving"] and "--pd-separated" in point["argv"]
        assert point["argv"][point["argv"].index("--dataset-name") + 1] == "random-ids"
    assert {p["role"] for p in doc["layout"]} == {"prefill", "decode", "router"}
    assert all("--enable-metrics" in p["argv"] for p in doc["layout"] if p["role"] != "router")  # pd_metrics
    assert len(doc["serving_path"]) == 2 and all(not p["warnings"] for p in doc["serving_path"].values())
    assert [m["metric"] for m in doc["slo_misses"]] == ["ttft_p99", "ttft_p99"]
    after = metrics_rows(deployment)  # the counters moved: 3 + 3 prompts (+ warm-up) went through both
    for role in ("prefill", "decode"):
        key = "sglang:prompt_tokens_total"
        assert after[role].get(key, 0) >= before[role].get(key, 0) + 6 * 16, (role, before[role], after[role])
    assert after["decode"]["sglang:generation_tokens_total"] > before["decode"].get("sglang:generation_tokens_total", 0)
    table = deployment.provision("pd", "status", "--metrics", "--serving-path")
    assert "PROMPT-TOK" in table.out and "KV-USAGE" in table.out, table.out
    for line in ("lab0 prefill: attention ", "lab1 decode: attention "):  # what each server runs, read from it
        assert line in table.out, table.out
    assert "warning:" not in table.err  # CPU mode runs the CPU paths by design
    dom, inked = chromium_shows(out / "report.html", deployment.workdir / "report.png")
    assert dom.count("<img ") == 5 and dom.count('src="data:image/png;base64,') == 5, dom[:2000]
    assert "concurrency 2" in dom and "SLO miss" in dom and "CPU mode" in dom
    assert inked > 40000, inked  # five drawn plots, not five broken-image icons
    print(f"\npd bench (2 points, 3 prompts each): {doc['seconds']}s; report screenshot {inked} inked pixels")


def test_rerun_is_all_ok(deployment: Deployment) -> None:
    before = deployment.pids()
    for rerun in (deployment.site, deployment.up):  # the whole main job, then `pd up` alone
        result, report = rerun()
        assert result.code == 0, result.err[-3000:]
        assert {h: s["changed"] for h, s in report["stats"].items()} == {"lab0": 0, "lab1": 0}
        assert deployment.pids() == before


def test_a_site_playbook_of_roles_runs_a_site_role_beside_provisions_roles(deployment: Deployment) -> None:
    """The shipped example site-roles.yml: the site's own ``common`` role, then provision.bootstrap, .stack,
    .nixl_smoke, .nixl_preflight and .sglang_pd (one play over prefill:decode:router). On the deployment the
    shipped playbooks brought up, only the site role changes something; the PD stays as it was (same pids)
    and still answers a real generation through the router; the rerun changes nothing."""
    example = REPO / "provision" / "data" / "playbooks" / "examples" / "site-roles.yml"
    before = deployment.pids()
    for changes in ({"lab0": 2, "lab1": 2}, {"lab0": 0, "lab1": 0}):  # the site dir and notice are new, then in place
        result, report = deployment._json("run", str(example), "--json")
        assert result.code == 0, result.err[-3000:]
        assert {h: s["changed"] for h, s in report["stats"].items()} == changes
        verified = task(report, "A real generation through the router", "lab0")
        assert verified["text"].strip() and not verified["changed"]
        assert task(report, "Prefill server running", "lab0")["action"] == "none"  # running as it was
        assert task(report, "Decode server running", "lab1")["action"] == "none"
        assert task(report, "Prefill server running", "lab1")["skipped"]  # each stage on its group's hosts only
        assert task(report, "Decode server running", "lab0")["skipped"]
    for i, host in enumerate(("lab0", "lab1")):
        notice = deployment.lab.run_as(i, ["cat", "site/NOTICE"]).stdout
        assert notice.startswith(f"{host} (Debian ") and "Contact: gpu-oncall@example.com." in notice
    assert deployment.pids() == before


def test_a_changed_launch_parameter_restarts_only_that_process(deployment: Deployment) -> None:
    before = deployment.pids()
    inv = yaml.safe_load(deployment.inventory.read_text())
    inv["all"]["children"]["router"]["hosts"]["lab0"]["router_health_check_interval"] = 4
    deployment.inventory.write_text(yaml.safe_dump(inv))
    result, report = deployment.up()
    assert result.code == 0, result.err[-3000:]
    assert task(report, "Router launch script", "lab0")["changed"]
    assert task(report, "Router running", "lab0")["action"] == "restarted"
    assert not task(report, "Prefill server running", "lab0")["changed"]
    assert not task(report, "Decode server running", "lab1")["changed"]
    after = deployment.pids()
    assert after["prefill"] == before["prefill"] and after["decode"] == before["decode"]
    assert after["router"] != before["router"]


def serving_again(client: Client, killed: float, timeout: float = 420) -> tuple[float, int]:
    """(seconds from the kill until the first of three successes in a row among the requests sent after it,
    requests that failed in between). Fails the test when serving does not come back within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        after = [e for e in client.since(killed) if e[0] > killed]
        for i in range(len(after) - 2):
            if all(e[2] is None for e in after[i : i + 3]):
                failed = sum(1 for e in client.since(killed) if e[2] is not None and e[1] <= after[i][1])
                return after[i][1] - killed, failed
        time.sleep(0.5)
    pytest.fail(f"not serving {timeout:.0f}s after the kill; last failures: {client.failures[-3:]}")


RECOVERY: dict[str, tuple[float, int, float]] = {}  # role -> (recovery s, failed requests, restart delay s)
KILL_CLIENT_TIMEOUT = 30  # each request's, s: a 64-token generation takes ~0.5 s here, a few s on a loaded machine


@pytest.mark.parametrize("role", ["decode", "prefill", "router"])
def test_a_killed_process_comes_back_by_itself_under_load(deployment: Deployment, role: str) -> None:
    """kill -9 under a client's load; no provision command is run until it serves again through the router."""
    host = {"decode": 1, "prefill": 0, "router": 0}[role]
    before = deployment.pids()
    # a client's own timeout, as a real one has: a request in flight when a prefill or decode dies gets no answer
    # until the surviving server's wait for its dead peer ends (pd_transfer_timeout: 15 s in CPU mode, SGLang's
    # 300 s before it; with one pair the router's retries have nowhere else to go): at 300 s and a 120 s client
    # timeout both threads were held 120 s, and "serving again" read 121 s
    with Client(f"http://{deployment.lab.hosts[0].address}:8000", timeout=KILL_CLIENT_TIMEOUT) as client:
        time.sleep(3)
        assert client.served > 0, client.failures[-3:]
        killed = time.monotonic()
        deployment.lab.run_as(host, ["kill", "-9", str(before[role])])
        seconds, failed = serving_again(client, killed)
        recovered_at = time.monotonic()
        time.sleep(10)  # after recovery every request succeeds
        late = [e for e in client.since(recovered_at) if e[0] > recovered_at]
    assert late and all(e[2] is None for e in late), [e for e in late if e[2]][:3]
    _, rows = deployment.status()
    row = rows[(f"lab{host}", role)]
    assert row["running"] and row["pid"] != before[role] and row["restarts"] == 1, row
    assert row["last_exit"]["signal"] == "SIGKILL" and row["supervisor"] == "provision"
    others = {r: p for r, p in deployment.pids().items() if r != role}
    assert others == {r: p for r, p in before.items() if r != role}  # nothing else was restarted
    RECOVERY[role] = (seconds, failed, RESTART["pd_restart_delay"])
    print(f"\nkill -9 {role}: serving again after {seconds:.1f}s, {failed} requests failed, "
          f"{client.served} served in all; restart delay {RESTART['pd_restart_delay']}s")  # fmt: skip


def test_a_crash_looping_router_stays_down_and_status_says_so(deployment: Deployment) -> None:
    """Crash after crash: the delays grow, and past the start limit the router stays down; status exits 2 and
    names it; the next pd up starts it again."""
    _, rows = deployment.status()
    row = rows[("lab0", "router")]
    kills = RESTART["pd_start_limit_burst"] + 1 - row["crashes"]  # crashes within the interval count already
    assert kills >= 1, row
    for _ in range(kills):
        pid = deployment.pids()["router"]
        deployment.lab.run_as(0, ["kill", "-9", str(pid)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = deployment.status()[1][("lab0", "router")]
            if now.get("pid") != pid and (now["running"] or now["state"] == "failed"):
                break
            time.sleep(0.5)
    code, rows = deployment.status()
    row = rows[("lab0", "router")]
    assert code == 2 and row["state"] == "failed" and row["crash_looping"] and not row["running"], row
    time.sleep(2 * RESTART["pd_restart_max_delay"])
    assert deployment.status()[1][("lab0", "router")]["state"] == "failed"  # stays down
    table = deployment.provision("pd", "status")
    assert table.code == 2 and any(line.split()[:3] == ["lab0", "router", "crash-looping"]
                                   for line in table.out.splitlines()), table.out  # fmt: skip
    log = deployment.log(0, "lab0-router")
    delays = [float(m) for m in re.findall(r"restarting in ([0-9.]+)s", log)]
    assert delays == sorted(delays) and delays[-1] > delays[0], delays  # they grew
    assert "over the start limit" in log
    result, report = deployment.up()  # a new start clears it
    assert result.code == 0, result.err[-3000:]
    assert task(report, "Router running", "lab0")["action"] == "started"
    row = deployment.status()[1][("lab0", "router")]
    assert row["running"] and row["restarts"] == 0 and not row["crash_looping"]


def test_down_leaves_nothing_running(deployment: Deployment) -> None:
    result = deployment.provision("pd", "down")
    assert result.code == 0, result.err[-3000:]
    lab = deployment.lab
    assert user_processes(lab, 0) == [] and user_processes(lab, 1) == []
    for address, port in ((lab.hosts[0].address, 30000), (lab.hosts[0].address, 8998),
                          (lab.hosts[1].address, 30000), (lab.hosts[0].address, 8000)):  # fmt: skip
        # a socket can outlive its process by a moment while the kernel tears it down: a short grace, no more
        deadline = time.monotonic() + 15
        while listening(address, port) and time.monotonic() < deadline:
            time.sleep(0.5)
        ss = shutil.which("ss")
        owners = subprocess.run([ss, "-ltnp"], capture_output=True, text=True, check=False).stdout if ss else ""
        assert not listening(address, port), f"{address}:{port} still listens:\n{owners}"

    def supervisors() -> list[str]:
        return [line for i in (0, 1) for line in lab.run_as(i, ["ps", "-u", lab.hosts[i].user, "-o", "args="])
                .stdout.splitlines() if "supervisor.py" in line]  # fmt: skip

    until("the supervisors to leave, with nothing to watch (nothing left to respawn a server)",
          lambda: not supervisors(), timeout=30, interval=0.5)  # fmt: skip
    time.sleep(RESTART["pd_restart_max_delay"] + 4)  # and nothing did, longer than the longest restart delay here
    assert user_processes(lab, 0) == [] and user_processes(lab, 1) == []
    again = deployment.provision("pd", "down", "--json")
    assert again.code == 0
    assert {h: s["changed"] for h, s in json.loads(again.out)["stats"].items()} == {"lab0": 0, "lab1": 0}


def test_a_colocated_baseline_comes_up_benches_beside_the_pd_run_and_goes_down(deployment: Deployment) -> None:
    """group serve: a plain SGLang server (no disaggregation, no PD router), benched and compared with the PD
    run of the bench test (its bench.json)."""
    common = {"sglang_device": "cpu", "venv_path": VENV, "python": "/usr/bin/python3", **RESTART}
    inventory = deployment.lab.write_inventory(deployment.workdir / "colocated.yml",
                                               extra_host_vars={"lab0": {**common, "server_port": 30020}},
                                               groups={"serve": ["lab0"]})  # fmt: skip
    run = lambda *argv: run_cli_in(deployment.workdir, [*argv, "-i", str(inventory)])  # noqa: E731
    try:
        up = run("pd", "up")
        assert up.code == 0, up.out[-3000:] + up.err[-3000:]
        assert "colocated server lab0-serve" in up.out
        assert "lab0 serve: attention " in up.out  # pd up ends with what the server really runs
        status = run("pd", "status")
        assert status.code == 0 and [line.split()[:3] for line in status.out.splitlines()[1:]] == [
            ["lab0", "serve", "up"]
        ], status.out
        args = " ".join(user_processes(deployment.lab, 0))
        assert "--port 30020" in args and "--disaggregation-mode" not in args and "--enable-metrics" in args
        out = deployment.workdir / "bench-colocated"
        pd_run = deployment.workdir / "bench-pd" / "bench.json"
        sweep = ("--num-prompts", "2", "--input-len", "16", "--output-len", "4", "--concurrency", "1")  # one point
        bench = run("pd", "bench", *sweep, "-o", str(out), "--compare", str(pd_run), "--slo", "failures=0",
                    "--label", "colocated")  # fmt: skip
        assert bench.code == 0, bench.out + bench.err[-3000:]
        doc = json.loads((out / "bench.json").read_text())
        assert doc["kind"] == "colocated" and doc["compared_with"] == ["bench-pd"]
        assert all(p["failures"] == 0 and "--pd-separated" not in p["argv"] for p in doc["points"])
        html_text = (out / "report.html").read_text()
        assert "colocated" in html_text and "bench-pd" in html_text and html_text.count("<img ") == 5
        assert "bench-pd" in bench.out and "colocated" in bench.out  # both runs in the printed table
    finally:
        down = run("pd", "down")
    assert down.code == 0, down.err[-2000:]
    assert user_processes(deployment.lab, 0) == []
