"""``provision pd rollout`` end to end on four lab hosts in CPU mode: REAL SGLang servers (prefill on lab0 and
lab1, decode on lab2 and lab3), the REAL router on lab0, and a client that sends requests through the router
all along, each checked for a completion.

The tests run in order and share the deployment (four CPU servers: about 10 GB of RAM; run this file alone):
up → a rollout of a changed server flag and a changed ``pd_env`` (zero failed client requests, each server
restarted once with the new command line and env, every batch verified, the router untouched) → a rollout
whose new launch command cannot start (the canary rolls back, the others keep their pids, zero client
failures, exit 2) → a rollout with nothing to change touches nothing → ``pd scale --remove`` and ``--add``
of lab3's decode under the client (zero failures, the router's pid unchanged) → lab2's decode taken out of the
router as a cut-off rollout leaves it: ``pd status`` says "not routed" (exit 2), ``pd up`` puts it back and the
next ``pd up`` changes nothing (pids unchanged) → a rollout of lab2's decode interrupted (SIGINT) once it
is out of the router, under the client: it puts lab2 back itself, exit 130, nothing restarted, zero failures;
run again, it rolls lab2 → lab2's venv link switched to a
new env and its decode killed under the client (zero failures): the supervisor brings it back on its old env,
``pd up`` leaves it there, ``pd rollout`` moves it (reason ``stack``, zero client failures) → a router-only
change restarts only the router → lab1's prefill and lab3's decode killed at once: their supervisors restart
them one after the other (the start gate of ``pd_serial_start``) → ``pd verify --all-pairs`` proves the 4
prefill x decode pairs, each with a TTFT and the same token ids, in two rounds of two (no server in two pairs
at once) → lab3's decode restarted on a tiny model of another seed: ``--all-pairs`` names lab3-decode and its
two pairs, exit 2, and ``pd up`` fails at its verify stage the same way. (``pd up`` itself ends with the 4
pairs verified, and with ``pd_serial_start`` it started the four servers one at a time, each after the one
before was up.)
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import Client, CliResult, lab_ssh_config, run_cli_in, task
from tests.support.pd import helper, serving_again
from tests.support.stack import VENV, SglangStack, install_sglang_stack
from tests.support.waiting import until

pytestmark = pytest.mark.lab

SERVERS = {"lab0": "prefill", "lab1": "prefill", "lab2": "decode", "lab3": "decode"}
BASE_ARGS: list[str] = []  # CPU mode already sleeps on idle: four servers on a small machine do not busy-poll
NEW_ARGS = [*BASE_ARGS, "--max-running-requests", "48"]
PAIRS = [f"lab{p}-prefill → lab{d}-decode" for p in (0, 1) for d in (2, 3)]
REPO = Path(__file__).resolve().parents[2]
OTHER_MODEL = "~/other-seed-model"  # the tiny model of another seed (same shapes and tokenizer, other weights)
FAILING_CMD = ["/bin/sh", "-c", "echo 'boom: the new server cannot start' >&2; exit 3", "fake-sglang"]
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")  # SGLang's log lines: [2026-12-07 02:37:13] ...


@dataclass
class Deployment:
    lab: Any
    inventory: Path
    workdir: Path
    leftovers_after_down: list[tuple[int, str]] = field(default_factory=list)  # (host, path) removed at the end

    def provision(self, *argv: str) -> CliResult:
        return run_cli_in(self.workdir, [*argv, "-i", str(self.inventory)])

    def rollout(self, *extra: str) -> tuple[CliResult, dict[str, Any]]:
        result = self.provision("pd", "rollout", "--json", *extra)
        try:
            return result, json.loads(result.out)
        except ValueError:
            pytest.fail(f"pd rollout printed no JSON (exit {result.code}): {result.out[-2000:]}{result.err[-4000:]}")

    def pids(self) -> dict[str, int]:
        """Each process's pid; every one must be running (its /health may be slow on a busy machine: status
        exits 2 when one does not answer within 2 s, which is not what this reads)."""
        result = self.provision("pd", "status", "--json")
        assert result.code in (0, 2), result.out + result.err
        rows = json.loads(result.out)["procs"]
        assert all(r["running"] for r in rows), result.out
        return {r["name"]: r["pid"] for r in rows}

    def pairs(self) -> tuple[CliResult, dict[str, Any], float]:
        started = time.monotonic()
        result = self.provision("pd", "verify", "--all-pairs", "--json")
        seconds = time.monotonic() - started
        try:
            return result, json.loads(result.out), seconds
        except ValueError:
            pytest.fail(f"pd verify --all-pairs printed no JSON (exit {result.code}): {result.out}{result.err[-3000:]}")

    def set_host_var(self, host: str, name: str, value: Any) -> None:
        inv = yaml.safe_load(self.inventory.read_text())
        inv["all"]["children"][SERVERS[host]]["hosts"][host][name] = value
        self.inventory.write_text(yaml.safe_dump(inv, sort_keys=False))

    def set_vars(self, **values: Any) -> None:
        inv = yaml.safe_load(self.inventory.read_text())
        inv["all"].setdefault("vars", {}).update(values)
        self.inventory.write_text(yaml.safe_dump(inv, sort_keys=False))

    def index(self, host: str) -> int:
        return int(host.removeprefix("lab"))

    def cmdline(self, host: str, pid: int) -> list[str]:
        out = self.lab.run_as(self.index(host), ["cat", f"/proc/{pid}/cmdline"]).stdout
        return out.split("\0")

    def environ(self, host: str, pid: int) -> str:
        return str(self.lab.run_as(self.index(host), ["cat", f"/proc/{pid}/environ"]).stdout)

    def no_request_lost(self, client: Client) -> None:
        """Assert the client lost no request; else print the router's and every server's log first: the captured
        output is shown whole, an assertion's message is cut short (a request that hung 120 s in a canary's
        rollback, once, 2026-12-06, could not be traced from the 60 lines the message kept)."""
        if client.failures:
            for host, name in [("lab0", "lab0-router"), *((h, f"{h}-{role}") for h, role in SERVERS.items())]:
                log = self.lab.run_as(self.index(host), ["tail", "-n", "400", f".provision/pd/logs/{name}.log"])
                print(f"\n--- {name}.log (last 400 lines)\n{log.stdout}")
        assert client.failures == [], client.failures[:10]

    def started_and_up(self, host: str) -> tuple[str, str]:
        """When the server's last start printed its ``server_args`` (after its imports) and when it said it was
        up (``fired up and ready``), from its log's own time stamps."""
        name = f"{host}-{SERVERS[host]}"
        log = str(self.lab.run_as(self.index(host), ["cat", f".provision/pd/logs/{name}.log"]).stdout)
        stamped = [(m.group(1), line) for line in log.splitlines() if (m := STAMP.match(line))]
        start = max(i for i, (_, line) in enumerate(stamped) if "server_args=" in line)
        up = next(stamp for stamp, line in stamped[start:] if "fired up and ready" in line)
        return stamped[start][0], up

    def leftovers(self, host: str) -> str:
        listing = self.lab.run_as(self.index(host), ["sh", "-c", "ls .provision/pd/ | grep rollout-prev || true"])
        return str(listing.stdout)


@pytest.fixture(scope="module")
def deployment(lab: Any, sglang_stack: SglangStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp("pd-rollout")
    install_sglang_stack(lab, [1, 2, 3], workdir / "install")  # the other hosts' venvs, from the warm uv cache
    common = {"sglang_device": "cpu", "venv_path": VENV, "python": "/usr/bin/python3"}
    inventory = lab.write_inventory(
        workdir / "hosts.yml",
        extra_host_vars={name: common for name in SERVERS},
        groups={"prefill": ["lab0", "lab1"], "decode": ["lab2", "lab3"], "router": ["lab0"]},
    )
    deployed = Deployment(lab, inventory, workdir)
    # pd_serial_start: one server at a time, in inventory order (servers that share a GPU need it: docs/pd.md)
    deployed.set_vars(sglang_extra_args=BASE_ARGS, pd_env={"PROVISION_ROLLOUT_MARK": "v1"}, pd_serial_start=True)
    with lab_ssh_config(lab):
        made = deployed.provision("task", "sglang_tiny_model", "-a", f"path={OTHER_MODEL} venv={VENV} seed=1",
                                  "-l", "lab3")  # fmt: skip
        assert made.code == 0, made.out + made.err
        try:
            started = time.monotonic()
            result = deployed.provision("pd", "up")
            assert result.code == 0, result.out[-4000:] + result.err[-2000:]
            print(f"\npd up of 2 prefill + 2 decode + router: {time.monotonic() - started:.1f}s; its pairs (cold):")
            print("\n".join(line for line in (result.out + result.err).splitlines() if "→" in line or "pairs" in line))
            assert "4 of 4 prefill x decode pairs verified, the same token ids from each" in result.out + result.err
            times = {host: deployed.started_and_up(host) for host in SERVERS}
            print(f"server start / up: {times}")
            order = list(SERVERS)  # the prefills, then the decodes, each in inventory order
            for before, after in itertools.pairwise(order):
                assert times[after][0] >= times[before][1], f"{after} started before {before} was up: {times}"
            yield deployed
        finally:
            deployed.provision("pd", "down")
            for i, path in deployed.leftovers_after_down:
                lab.run_as(i, ["rm", "-rf", "--", path], timeout=300)


def router_url(d: Deployment) -> str:
    return f"http://{d.lab.hosts[0].address}:8000"


def routed(d: Deployment) -> dict[str, bool]:
    """The router's workers as its API lists them: URL → healthy."""
    answer = helper("router_list", {"router": router_url(d)})
    return {w["url"].rstrip("/"): bool(w.get("is_healthy")) for w in answer["workers"]}


def show(report: dict[str, Any], client: Client, seconds: float) -> None:
    print(f"\nrollout: exit {report['code']} in {seconds:.1f}s; client: {client.served} served, "
          f"{len(client.failures)} failed; latency max {max(client.latencies, default=0):.2f}s")  # fmt: skip
    for b in report["batches"]:
        print(f"  batch {b['number']} {b['hosts']} ok={b['ok']} {b['seconds']}s removed {b['removed_seconds']}s "
              f"drain {b['drain']} restart {b['restart_seconds']} health {b['health_seconds']} "
              f"verify {b['verify']} readmit {b['readmit_seconds']}s served {b['served']} "
              f"rolled_back={b['rolled_back']} {b['reason'] or ''}")  # fmt: skip


def test_rollout_of_a_flag_and_pd_env_loses_no_request(deployment: Deployment) -> None:
    before = deployment.pids()
    deployment.set_vars(sglang_extra_args=NEW_ARGS, pd_env={"PROVISION_ROLLOUT_MARK": "v2"})
    started = time.monotonic()
    with Client(router_url(deployment)) as client:
        time.sleep(3)  # requests are flowing before the rollout starts
        result, report = deployment.rollout("--batch", "2")
        time.sleep(3)  # and after it ends
    show(report, client, time.monotonic() - started)
    assert result.code == 0, json.dumps(report, indent=1)[-6000:]
    deployment.no_request_lost(client)
    assert client.served > 0
    changes = {c["host"]: c for c in report["changes"]}
    assert set(changes) == set(SERVERS)
    assert all(set(c["reasons"]) == {"env", "script"} for c in changes.values()), changes
    # canary first, then batches that always leave a prefill and a decode in the routers
    batches = report["batches"]
    assert batches[0]["canary"] and len(batches[0]["hosts"]) == 1
    rolled = [h for b in batches for h in b["hosts"]]
    assert sorted(rolled) == sorted(SERVERS)  # each server in exactly one batch
    for b in batches:
        assert b["ok"] and not b["rolled_back"]
        for role in ("prefill", "decode"):
            assert sum(SERVERS[h] == role for h in b["hosts"]) < 2
        for host in b["hosts"]:
            assert b["drain"][host]["drained"] is True
            assert b["verify"][host]["tokens"] >= 1
    times = {host: deployment.started_and_up(host) for host in SERVERS}
    print(f"server start / up after the rollout: {times}")
    for b in batches:  # pd_serial_start: a batch's servers restart one after another, each once the one before is up
        for first, then in itertools.pairwise(b["hosts"]):
            assert times[then][0] >= times[first][1], f"{then} restarted before {first} was up: {times}"
    after = deployment.pids()
    for host, role in SERVERS.items():
        name = f"{host}-{role}"
        assert after[name] != before[name], f"{name} was not restarted"
        argv = deployment.cmdline(host, after[name])
        assert "--max-running-requests" in argv and "48" in argv, argv
        assert "PROVISION_ROLLOUT_MARK=v2" in deployment.environ(host, after[name])
        assert deployment.leftovers(host) == ""  # the previous files are removed when the rollout ends well
    assert after["lab0-router"] == before["lab0-router"]  # the router is never restarted
    assert report["router_changes"] == []


def test_a_failing_new_command_rolls_the_canary_back(deployment: Deployment) -> None:
    before = deployment.pids()
    script_before = deployment.lab.run_as(0, ["cat", ".provision/pd/lab0-prefill.sh"]).stdout
    started = time.monotonic()
    with Client(router_url(deployment)) as client:
        time.sleep(3)
        result, report = deployment.rollout("--batch", "2", "-e", json.dumps({"sglang_server_cmd": FAILING_CMD}))
        time.sleep(3)
    show(report, client, time.monotonic() - started)
    assert result.code == 2, json.dumps(report, indent=1)[-6000:]
    deployment.no_request_lost(client)
    assert client.served > 0
    assert len(report["batches"]) == 1  # the canary only: later batches are never started
    canary = report["batches"][0]
    assert canary["hosts"] == ["lab0"] and not canary["ok"]
    assert report["failed_host"] == "lab0" and canary["failed_host"] == "lab0"
    # the restart step or the health wait, whichever sees the exit first, names it (timing: CI saw both)
    exited = ("lab0-prefill exited", "lab0-prefill on lab0 is not running (it exited while starting")
    assert any(e in report["reason"] for e in exited) and "boom: the new server cannot start" in report["reason"]
    assert canary["rolled_back"] and canary["rollback"]["ok"], canary["rollback"]
    assert canary["rollback"]["verify"]["lab0"]["tokens"] >= 1
    after = deployment.pids()
    assert after["lab0-prefill"] != before["lab0-prefill"]  # the canary runs its previous script again
    for name in ("lab1-prefill", "lab2-decode", "lab3-decode", "lab0-router"):
        assert after[name] == before[name], f"{name} was touched"
    assert deployment.lab.run_as(0, ["cat", ".provision/pd/lab0-prefill.sh"]).stdout == script_before
    argv = deployment.cmdline("lab0", after["lab0-prefill"])
    assert "--max-running-requests" in argv  # the previous (current) command line, not the failing one
    assert deployment.leftovers("lab0") == ""


def test_nothing_changed_nothing_restarted(deployment: Deployment) -> None:
    before = deployment.pids()
    result, report = deployment.rollout()
    assert result.code == 0, result.err[-3000:]
    assert report["changes"] == [] and report["batches"] == []
    assert sorted(report["unchanged"]) == sorted(f"{h}-{r}" for h, r in SERVERS.items())
    assert deployment.pids() == before
    human = deployment.provision("pd", "rollout")
    assert human.code == 0 and "nothing to roll" in human.out


def test_scale_a_decode_out_and_in_under_a_client(deployment: Deployment) -> None:
    """``pd scale --remove lab3`` then ``--add lab3`` while a client sends requests through the router: zero
    failed requests, the router's pid unchanged (its worker API, no restart), its script rewritten each time
    (lab3 out, then in again) and adopted: ``pd status`` does not call it stale, so ``pd up`` leaves it."""
    before = deployment.pids()
    script = ".provision/pd/lab0-router.sh"
    lab3 = f"http://{deployment.lab.hosts[3].address}:30000"
    started = time.monotonic()
    with Client(router_url(deployment)) as client:
        time.sleep(3)
        removed = deployment.provision("pd", "scale", "--remove", "lab3", "--json")
        out_script = deployment.lab.run_as(0, ["cat", script]).stdout
        time.sleep(3)  # lab2 alone serves the decodes meanwhile
        added = deployment.provision("pd", "scale", "--add", "lab3", "--json")
        time.sleep(3)
    seconds = time.monotonic() - started
    print(f"\npd scale --remove + --add of lab3-decode: {seconds:.1f}s, client {client.served} served, "
          f"{len(client.failures)} failed; {removed.out[-800:]} {added.out[-800:]}")  # fmt: skip
    assert removed.code == 0, removed.out[-3000:] + removed.err[-3000:]
    assert added.code == 0, added.out[-3000:] + added.err[-3000:]
    deployment.no_request_lost(client)
    assert client.served > 0
    report = json.loads(added.out)
    assert [a["host"] for a in report["added"]] == ["lab3"] and report["added"][0]["verify_tokens"] >= 1
    assert [r["host"] for r in json.loads(removed.out)["removed"]] == ["lab3"]
    assert lab3 not in out_script and lab3 in deployment.lab.run_as(0, ["cat", script]).stdout
    after = deployment.pids()
    assert after["lab0-router"] == before["lab0-router"]  # never restarted
    assert after["lab3-decode"] != before["lab3-decode"]  # stopped, then started again
    for name in ("lab0-prefill", "lab1-prefill", "lab2-decode"):
        assert after[name] == before[name], f"{name} was touched"
    rows = json.loads(deployment.provision("pd", "status", "--json").out)["procs"]
    router = next(r for r in rows if r["name"] == "lab0-router")
    assert router["script_changed"] is False  # it adopted its new script: the next pd up leaves it running


def test_pd_up_puts_back_a_server_a_cut_off_rollout_left_out_of_the_router(deployment: Deployment) -> None:
    """A rollout or scale cut off between taking a server out of the router and putting it back (Ctrl-C, a
    controller that died) leaves the server running but routed to by nobody. ``pd up`` lists every server in
    the router again: lab2's decode, taken out with the rollout's own step (the router's worker API), is put
    back (that task changed, nothing restarted, the router lists it healthy), and the ``pd up`` after it
    changes nothing on any host. Meanwhile ``pd status`` shows it healthy but "not routed", and exits 2."""
    before = deployment.pids()
    lab2 = f"http://{deployment.lab.hosts[2].address}:30000"

    def listed() -> dict[str, bool]:
        return routed(deployment)

    assert listed().get(lab2) is True
    out = helper("router_remove", {"router": router_url(deployment), "urls": [lab2], "timeout": 60})
    assert out["ok"] and out["removed"] == [lab2], out
    assert lab2 not in listed()
    status = deployment.provision("pd", "status", "--json")  # healthy, but served by nobody: not up (exit 2)
    rows = {r["name"]: r for r in json.loads(status.out)["procs"]}
    assert status.code == 2 and rows["lab2-decode"]["unrouted"] == ["lab0-router"], status.out
    assert [n for n, r in rows.items() if r.get("unrouted")] == ["lab2-decode"]
    table = deployment.provision("pd", "status").out
    assert "ok, not routed" in next(line for line in table.splitlines() if line.startswith("lab2 ")), table
    for again in (False, True):
        result = deployment.provision("pd", "up", "--json")
        assert result.code == 0, result.out[-3000:] + result.err[-3000:]
        report = json.loads(result.out)
        step = task(report, "Router lists every server (puts back one a cut-off rollout or scale left out)", "lab0")
        print(f"\npd up {'again' if again else 'after the cut-off'}: {step['msg']}")
        if again:
            assert not step["changed"] and step["added"] == [], step
            assert {h: s["changed"] for h, s in report["stats"].items()} == dict.fromkeys(SERVERS, 0)
        else:
            assert step["changed"] and step["added"] == [lab2], step
            assert "re-admitted to the router" in step["msg"] and lab2 in step["msg"]
        assert listed().get(lab2) is True
    rows = {r["name"]: r for r in json.loads(deployment.provision("pd", "status", "--json").out)["procs"]}
    assert not any(r.get("unrouted") for r in rows.values()) and len(rows["lab0-router"]["workers"]) == 4
    assert deployment.pids() == before


def test_an_interrupted_rollout_puts_its_batch_back_into_the_router(deployment: Deployment) -> None:
    """Ctrl-C (SIGINT) to ``pd rollout`` once its batch (lab2's decode, the only change) is out of the router,
    under a client: the rollout puts it back itself (it still answers /health) and exits 130, nothing was
    restarted, no client request failed; the same rollout run again then rolls it (exit 0)."""
    before = deployment.pids()
    lab2 = f"http://{deployment.lab.hosts[2].address}:30000"
    deployment.set_host_var("lab2", "pd_env", {"PROVISION_ROLLOUT_MARK": "v3"})
    env = {**os.environ, "PYTHONPATH": str(REPO), **deployment.lab.ssh_env()}
    argv = [sys.executable, "-m", "provision", "pd", "rollout", "--json", "-i", str(deployment.inventory)]
    with Client(router_url(deployment)) as client:
        time.sleep(3)
        proc = subprocess.Popen(argv, cwd=deployment.workdir, env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)  # fmt: skip
        try:
            until("lab2 out of the router", lambda: lab2 not in routed(deployment) or proc.poll() is not None,
                  timeout=300, interval=0.1)  # fmt: skip
            interrupted_at = time.monotonic()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        seconds = time.monotonic() - interrupted_at
        back = routed(deployment).get(lab2)
        time.sleep(3)
    print(f"\npd rollout interrupted once lab2 left the router: exit {proc.returncode} {seconds:.1f}s after the "
          f"SIGINT; lab2 listed healthy again: {back}; client {client.served} served, {len(client.failures)} "
          f"failed")  # fmt: skip
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    report = json.loads(out)
    batch = report["batches"][0]
    print(f"  batch {batch['hosts']}: interrupted={batch['interrupted']} put_back={batch['put_back']} "
          f"left_out={batch['left_out']} drain={batch['drain']} restart={batch['restart_seconds']}")  # fmt: skip
    assert report["interrupted"] == "interrupted" and report["code"] == 130
    assert batch["hosts"] == ["lab2"] and batch["put_back"] == ["lab2"] and batch["left_out"] == []
    assert back is True
    deployment.no_request_lost(client)
    assert deployment.pids() == before  # nothing restarted
    result, report = deployment.rollout()  # and the same rollout again finishes it
    assert result.code == 0 and [b["hosts"] for b in report["batches"]] == [["lab2"]], result.out[-3000:]
    after = deployment.pids()
    assert after["lab2-decode"] != before["lab2-decode"]
    assert "PROVISION_ROLLOUT_MARK=v3" in deployment.environ("lab2", after["lab2-decode"])
    assert deployment.leftovers("lab2") == "" and routed(deployment).get(lab2) is True


def test_a_crashed_server_comes_back_on_its_env_and_only_the_rollout_moves_it(deployment: Deployment) -> None:
    """install.yml switches the venv link under running servers: lab2's link is pointed at a new env (a
    hard-linked copy of its current one, so the servers still agree), then its decode is killed with SIGKILL
    under a client: no request is lost (lab3's decode serves; see pd_transfer_timeout).
    The supervisor starts it again on the env it was started and verified with (PROVISION_PD_VENV and the
    site-packages it maps), ``pd up`` leaves it there; ``pd rollout`` then finds it on another stack than the
    link's and moves it, with no failed client request."""
    venv = deployment.lab.run_as(2, ["readlink", "-f", VENV.replace("~", str(deployment.lab.hosts[2].home))])
    old = venv.stdout.strip()
    new = f"{old}-rollout-test"
    deployment.leftovers_after_down.append((2, new))
    copied = deployment.lab.run_as(2, ["cp", "-al", old, new], timeout=300)
    assert copied.returncode == 0, copied.stderr
    link = VENV.replace("~", str(deployment.lab.hosts[2].home))
    switched = deployment.lab.run_as(2, ["sh", "-c", 'ln -sfn "$1" "$2.tmp" && mv -T "$2.tmp" "$2"', "-", new, link])
    assert switched.returncode == 0, switched.stderr
    before = deployment.pids()
    with Client(router_url(deployment)) as client:  # lab3's decode serves meanwhile: no request may be lost
        time.sleep(3)
        killed_at = time.monotonic()
        killed = deployment.lab.run_as(2, ["kill", "-9", str(before["lab2-decode"])])
        assert killed.returncode == 0, killed.stderr

        def restarted() -> dict[str, Any] | None:
            rows = {r["name"]: r for r in json.loads(deployment.provision("pd", "status", "--json").out)["procs"]}
            row = rows["lab2-decode"]
            return row if serving_again(row, before["lab2-decode"]) else None

        row = until("lab2's decode restarted by its supervisor", restarted, timeout=400, interval=1)
        time.sleep(3)
    slow = [(round(start - killed_at, 1), round(end - start, 1)) for start, end, error in client.events
            if error is None and end - start > 5]  # fmt: skip
    print(
        f"\nkill -9 lab2-decode under a client: {client.served} served, {len(client.failures)} failed; "
        f"served after more than 5 s (sent at s after the kill, seconds): {slow}"
    )
    # A request in flight on the killed decode, or sent to it before the router's health checks took it out,
    # waits for its prefill's pd_transfer_timeout (CPU mode: 15 s), fails there, and the router retries it on
    # lab3's decode. With SGLang's own 300 s such requests outlasted the client's 120 s (2 of them per kill).
    deployment.no_request_lost(client)
    assert row["running"] and row["health"] == 200 and row["restarts"] == 1, row
    pid = row["pid"]
    assert f"PROVISION_PD_VENV={old}" in deployment.environ("lab2", pid).split("\0")
    maps = deployment.lab.run_as(2, ["cat", f"/proc/{pid}/maps"]).stdout
    assert f"{old}/lib/" in maps and f"{new}/lib/" not in maps  # its old env's site-packages, not the new one's
    up = deployment.provision("pd", "up", "-e", "pd_verify_all_pairs=false")
    assert up.code == 0, up.out[-3000:] + up.err[-2000:]
    assert deployment.pids()["lab2-decode"] == pid  # pd up does not move a server to another stack
    with Client(router_url(deployment)) as client:
        time.sleep(3)
        result, report = deployment.rollout()
        time.sleep(3)
    show(report, client, report.get("seconds") or 0)
    assert result.code == 0, json.dumps(report, indent=1)[-6000:]
    deployment.no_request_lost(client)
    assert [(c["host"], c["reasons"]) for c in report["changes"]] == [("lab2", ["stack"])], report["changes"]
    moved = deployment.pids()
    assert moved["lab2-decode"] != pid
    assert f"PROVISION_PD_VENV={new}" in deployment.environ("lab2", moved["lab2-decode"]).split("\0")
    assert {k: v for k, v in moved.items() if k != "lab2-decode"} == {
        k: v for k, v in before.items() if k != "lab2-decode"}  # fmt: skip


def test_a_router_only_change_restarts_only_the_router(deployment: Deployment) -> None:
    before = deployment.pids()
    deployment.set_vars(router_health_check_interval=4)
    result, report = deployment.rollout()
    print(f"\nrouter-only rollout: exit {report['code']} in {report['seconds']}s; router {report['routers']}")
    assert result.code == 0, json.dumps(report, indent=1)[-4000:]
    assert report["changes"] == [] and report["batches"] == [] and report["router_changes"] == ["lab0-router"]
    router = report["routers"][0]
    assert router["ok"] and router["name"] == "lab0-router" and router["verify_latency"] > 0
    after = deployment.pids()
    assert after["lab0-router"] != before["lab0-router"]
    assert {k: v for k, v in after.items() if k != "lab0-router"} == {
        k: v for k, v in before.items() if k != "lab0-router"}  # fmt: skip
    script = deployment.lab.run_as(0, ["cat", ".provision/pd/lab0-router.sh"]).stdout
    assert "--health-check-interval-secs 4" in script  # the new script is the one that runs (pid above)


def test_servers_that_die_together_restart_one_after_the_other(deployment: Deployment) -> None:
    """``pd_serial_start`` orders the supervisors' own restarts too: lab1's prefill and lab3's decode are killed
    with SIGKILL at once under a client (lab0 and lab2 serve meanwhile). Their supervisors restart both after
    the same delay; the start gate in their launch scripts (``start_gate.py``: the machine's start lock) lets
    one start, and the other only once the first answers ``/health``, as servers sharing a GPU need."""
    before = deployment.pids()
    victims = {"lab1": "lab1-prefill", "lab3": "lab3-decode"}
    with Client(router_url(deployment)) as client:
        time.sleep(3)
        for host, name in victims.items():
            deployment.lab.run_as(deployment.index(host), ["kill", "-9", str(before[name])])

        def both_back() -> dict[str, Any] | None:
            rows = {r["name"]: r for r in json.loads(deployment.provision("pd", "status", "--json").out)["procs"]}
            ok = all(serving_again(rows[name], before[name]) for name in victims.values())
            return rows if ok else None

        rows = until("lab1's prefill and lab3's decode restarted by their supervisors", both_back, timeout=600,
                     interval=1)  # fmt: skip
        time.sleep(3)
    times = {host: deployment.started_and_up(host) for host in victims}
    print(f"\nkill -9 of lab1-prefill and lab3-decode at once under a client: {client.served} served, "
          f"{len(client.failures)} failed; restarted (server_args / up): {times}")  # fmt: skip
    first, then = sorted(victims, key=lambda h: times[h][0])
    assert times[then][0] >= times[first][1], f"{then} started before {first} was up: {times}"
    gate = deployment.lab.run_as(deployment.index(then), ["cat", f".provision/pd/logs/{victims[then]}.log"]).stdout
    assert f"waiting for the start lock: {victims[first]} is starting" in gate, gate[-3000:]
    assert "took the start lock after" in gate
    for name in victims.values():
        assert rows[name]["restarts"] >= 1 and rows[name]["health"] == 200, rows[name]
    assert client.served > 0
    others = {k: v for k, v in deployment.pids().items() if k not in victims.values()}
    assert others == {k: v for k, v in before.items() if k not in victims.values()}


def test_every_pair_is_verified_in_rounds_of_pairs_at_once(deployment: Deployment) -> None:
    started = time.monotonic()
    one = deployment.provision("pd", "verify", "--json")
    one_seconds = time.monotonic() - started
    assert one.code == 0, one.out + one.err
    result, doc, seconds = deployment.pairs()
    assert result.code == 0, json.dumps(doc, indent=1)
    pairs = doc["pairs"]
    print(f"\npd verify (through the router): {one_seconds:.1f}s, {json.loads(one.out)['lab0']['latency']}s on "
          f"the host; pd verify --all-pairs: {seconds:.1f}s, {doc['seconds']}s on the host ({doc['rounds']} "
          f"rounds of {doc['parallel']}); per pair: "
          f"{[(p['prefill'], p['decode'], p['ttft'], p['latency']) for p in pairs]}")  # fmt: skip
    assert doc["ok"] and doc["host"] == "lab0" and doc["parallel"] == 2 and doc["rounds"] == 2
    assert [f"{p['prefill']} → {p['decode']}" for p in pairs] == PAIRS
    for p in pairs:
        assert p["state"] == "ok" and p["tokens"] >= 1 and 0 < p["ttft"] <= p["latency"], p
    ids = {tuple(p["output_ids"]) for p in pairs}
    assert len(ids) == 1 and len(next(iter(ids))) == pairs[0]["tokens"]  # greedy, the same weights: one answer
    assert doc["reference"] == pairs[0]["output_ids"] and doc["suspects"] == []
    assert doc["seconds"] < sum(p["latency"] for p in pairs)  # two at once: not the sum of the pairs
    assert all(p["attempts"] == 1 for p in pairs)  # warm pairs: none needed a second attempt
    human = deployment.provision("pd", "verify", "--all-pairs")
    assert human.code == 0, human.out + human.err
    for name in PAIRS:
        assert any(line.startswith(name) and " ok " in line for line in human.out.splitlines()), human.out
    assert "4 of 4 prefill x decode pairs verified" in human.out


def test_a_decode_on_other_weights_is_named(deployment: Deployment) -> None:
    deployment.set_host_var("lab3", "pd_cpu_model_path", OTHER_MODEL)
    moved = deployment.provision("pd", "up", "-e", "pd_verify_all_pairs=false")  # restarts lab3's decode only
    assert moved.code == 0, moved.out[-4000:] + moved.err[-2000:]
    result, doc, _ = deployment.pairs()
    assert result.code == 2, json.dumps(doc, indent=1)
    states = {f"{p['prefill']} → {p['decode']}": p["state"] for p in doc["pairs"]}
    assert states == {PAIRS[0]: "ok", PAIRS[1]: "disagrees", PAIRS[2]: "ok", PAIRS[3]: "disagrees"}, states
    assert doc["suspects"] == ["lab3-decode"] and not doc["ok"]
    assert all(p["tokens"] >= 1 for p in doc["pairs"])  # every pair answered: other tokens, not an error
    human = deployment.provision("pd", "verify", "--all-pairs")
    assert human.code == 2
    line = "2 of 4 pairs not verified: lab0-prefill → lab3-decode disagrees; lab1-prefill → lab3-decode disagrees " \
           "(the servers in every bad pair: lab3-decode)"  # fmt: skip
    assert line in human.err, human.out + human.err
    up = deployment.provision("pd", "up")  # nothing to restart; its verify stage finds the same pairs
    assert up.code == 2, up.out[-3000:]
    assert line in up.out + up.err, up.out[-3000:] + up.err[-2000:]
