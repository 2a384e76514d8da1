"""provision pd export: golden files for the shipped inventories, the custom objects against their CRDs' own
OpenAPI schemas (vendored), the Slurm scripts through ``bash -n`` and ``shellcheck``, secrets never written,
the same refusals as ``pd up``.

Golden files: tests/fixtures/pd_export/INVENTORY-TARGET/; after an intended change, regenerate them with
``PROVISION_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_pd_export.py`` and read the diff.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision import api, remote
from provision.pd.export import schema
from tests.support.cli import run_cli
from tests.support.wheels import H200, links  # noqa: F401  (links: the fixture, small valid wheels, offline)

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "fixtures" / "pd_export"
CASES = [("nxm", "rbg"), ("nxm", "lws"), ("nxm", "slurm"), ("two-host", "rbg"), ("two-host", "lws"),
         ("two-host", "slurm"), ("single-host-4p4", "rbg"), ("single-host-4p4", "lws"),
         ("single-host-4p4", "slurm"), ("local", "slurm")]  # fmt: skip


def export(inventory: Path | str, to: str, out: Path | None = None, **kw: Any) -> api.PdExport:
    return api.pd_export(str(inventory), to=to, output=out, **kw)


def write_inventory(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def pd_inventory(**pd_vars: Any) -> dict[str, Any]:
    return {"all": {"children": {"pd": {"vars": {"model_path": "Qwen/Qwen3-8B", **pd_vars}, "children": {
        "prefill": {"hosts": {"p1": {"ansible_host": "10.0.1.11"}, "p2": {"ansible_host": "10.0.1.12"}}},
        "decode": {"hosts": {"d1": {"ansible_host": "10.0.2.11"}}},
        "router": {"hosts": {"gw": {"ansible_host": "10.0.0.10"}}},
    }}}}}  # fmt: skip


@pytest.mark.parametrize(("inventory", "target"), CASES, ids=[f"{i}-{t}" for i, t in CASES])
def test_golden(inventory: str, target: str, tmp_path: Path) -> None:
    result = export(REPO / "inventory" / f"{inventory}.yml", target, tmp_path / "out")
    written = {str(p.relative_to(tmp_path / "out")): p.read_text() for p in (tmp_path / "out").rglob("*")
               if p.is_file()}  # fmt: skip
    assert written == result.files
    for rel in [r for r in written if r.endswith(".py")]:  # shipped checks, hostlib.py beside them, cpu_compat/
        assert written.pop(rel) == (remote.REMOTE_DIR / rel).read_text(), rel  # as they are: not golden
    for rel in [r for r in written if r.endswith(".yaml")]:
        written[rel] = _shipped_in_configmaps(written[rel])  # the same scripts inside a ConfigMap: not golden either
    golden = GOLDEN / f"{inventory}-{target}"
    if os.environ.get("PROVISION_UPDATE_GOLDEN"):
        shutil.rmtree(golden, ignore_errors=True)
        for rel, text in written.items():
            (golden / rel).parent.mkdir(parents=True, exist_ok=True)
            (golden / rel).write_text(text)
    expected = {str(p.relative_to(golden)): p.read_text() for p in golden.rglob("*") if p.is_file()}
    assert sorted(written) == sorted(expected)
    for rel, text in written.items():
        assert text == expected[rel], f"{golden / rel} differs (PROVISION_UPDATE_GOLDEN=1 regenerates it)"
    for rel in result.files:
        mode = (tmp_path / "out" / rel).stat().st_mode & 0o777
        assert mode == (0o755 if rel.endswith((".sh", ".sbatch")) else 0o644), rel


def _shipped_in_configmaps(text: str) -> str:
    """``text`` with each script a ConfigMap carries (``NAME.py: |`` and its block) checked against
    provision/remote/NAME.py and replaced by one line naming it: the golden file then says where the scripts go,
    and a change to a host script (they are tested on their own) does not rewrite every golden manifest."""
    for doc in (d for d in yaml.safe_load_all(text) if d and d.get("kind") == "ConfigMap"):
        for name, body in doc.get("data", {}).items():
            if not name.endswith(".py"):
                continue
            assert body == (remote.REMOTE_DIR / name).read_text(), name  # the file as it is in provision
            block = "".join(f"    {line}" if line.strip() else line for line in body.splitlines(keepends=True))
            rendered = f"  {name}: |\n{block}"
            assert text.count(rendered) == 1, f"{name}: not one literal block in the manifest"
            text = text.replace(rendered, f"  {name}: |\n    # provision/remote/{name}, as it is\n")
    return text


def _custom(files: dict[str, str]) -> list[dict[str, Any]]:
    docs = [d for name, text in files.items() if name.endswith(".yaml") for d in yaml.safe_load_all(text) if d]
    return [d for d in docs if (d["apiVersion"], d["kind"]) in schema.SCHEMAS]


@pytest.mark.parametrize("target", ["rbg", "lws"])
def test_the_custom_objects_are_valid_against_the_vendored_crd_schemas(target: str) -> None:
    result = export(REPO / "inventory" / "nxm.yml", target)
    objects = _custom(result.files)
    assert objects and all(schema.errors(o) == [] for o in objects)
    assert len(result.validated) == len(objects)
    source = schema.vendored(objects[0]["apiVersion"], objects[0]["kind"])["source"]
    assert len(source["commit"]) == 40 and source["commit"][:12] in result.validated[0]


def test_the_validator_rejects_what_an_api_server_would_prune_or_refuse() -> None:
    rbg = _custom(export(REPO / "inventory" / "nxm.yml", "rbg").files)[0]
    typo = copy.deepcopy(rbg)
    typo["spec"]["roles"][0]["replica"] = typo["spec"]["roles"][0].pop("replicas")  # misspelt: pruned on apply
    assert any("replica" in e for e in schema.errors(typo))
    wrong = copy.deepcopy(rbg)
    wrong["spec"]["roles"][0]["replicas"] = "two"
    assert any("replicas" in e and "integer" in e for e in schema.errors(wrong))
    container = copy.deepcopy(rbg)
    container["spec"]["roles"][0]["standalonePattern"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "x"
    assert any("imagePullPolice" in e for e in schema.errors(container))
    lws = _custom(export(REPO / "inventory" / "nxm.yml", "lws").files)[0]
    del lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert any("workerTemplate" in e for e in schema.errors(lws))


def test_the_router_reaches_every_worker_by_its_cluster_name() -> None:
    rbg = _custom(export(REPO / "inventory" / "nxm.yml", "rbg").files)[0]
    roles = {r["name"]: r for r in rbg["spec"]["roles"]}
    assert (roles["prefill"]["replicas"], roles["decode"]["replicas"], roles["router"]["replicas"]) == (2, 3, 1)
    assert roles["router"]["dependencies"] == ["prefill", "decode"]
    args = roles["router"]["standalonePattern"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--prefill") + 1:args.index("--prefill") + 3] == [
        "http://provision-pd-prefill-0.s-provision-pd-prefill:30000", "8998"]  # fmt: skip
    assert "http://provision-pd-decode-2.s-provision-pd-decode:30000" in args
    assert not any(a.startswith("http://10.") for a in args)
    server = roles["prefill"]["standalonePattern"]["template"]["spec"]["containers"][0]
    assert "--base-gpu-id" not in server["args"] and server["args"][server["args"].index("--host") + 1] == "0.0.0.0"
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "2"  # tp 2
    lws = _custom(export(REPO / "inventory" / "nxm.yml", "lws").files)
    router = next(o for o in lws if o["metadata"]["name"] == "provision-pd-router")
    args = router["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"]
    assert "http://provision-pd-decode-0.provision-pd-decode:30000" in args


def test_servers_that_differ_are_separate_roles_and_multi_node_is_leader_worker(tmp_path: Path) -> None:
    doc = pd_inventory(tp=8)
    hosts = doc["all"]["children"]["pd"]["children"]
    hosts["prefill"]["hosts"]["p2"]["sglang_extra_args"] = "--nnodes 2 --node-rank 0 --dist-init-addr 10.0.1.12:5000"
    rbg = _custom(export(write_inventory(tmp_path, doc), "rbg").files)[0]
    roles = {r["name"]: r for r in rbg["spec"]["roles"]}
    assert sorted(roles) == ["decode", "prefill-1", "prefill-2", "router"]
    multi = roles["prefill-2"]["leaderWorkerPattern"]
    assert multi["size"] == 2
    c = multi["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"  # tp 8 over 2 nodes
    assert c["args"][c["args"].index("--dist-init-addr") + 1] == "$(RBG_LWP_LEADER_ADDRESS):5000"
    assert c["args"][c["args"].index("--node-rank") + 1] == "$(RBG_LWP_WORKER_INDEX)"
    with pytest.raises(api.InputError, match="--nnodes 2: one inventory host is one Slurm node"):
        export(write_inventory(tmp_path, doc), "slurm")
    lws = _custom(export(write_inventory(tmp_path, doc), "lws").files)
    assert {o["metadata"]["name"]: o["spec"]["leaderWorkerTemplate"]["size"] for o in lws}[
        "provision-pd-prefill-2"
    ] == 2


def test_secrets_are_references_never_values(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path, pd_inventory(hf_token="hf_SECRETVALUE123", pd_env={"MY_API_KEY": "k3y-v4lue"}))
    for target in ("rbg", "lws", "slurm"):
        files = export(inv, target, tmp_path / target).files
        text = "\n".join(files.values())
        assert "hf_SECRETVALUE123" not in text and "k3y-v4lue" not in text, target
        for p in (tmp_path / target).rglob("*"):
            assert b"hf_SECRETVALUE123" not in p.read_bytes() if p.is_file() else True
    rbg = _custom(export(inv, "rbg").files)[0]
    env = {
        e["name"]: e for e in rbg["spec"]["roles"][0]["standalonePattern"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "provision-pd-hf-token", "key": "token"}
    assert env["MY_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "provision-pd-env", "key": "MY_API_KEY"}
    node = export(inv, "slurm").files["node-0.sh"]
    assert ': "${HF_TOKEN:?' in node and ': "${MY_API_KEY:?' in node


def test_the_same_refusals_as_pd_up_before_anything_is_written(tmp_path: Path) -> None:
    doc = pd_inventory()
    del doc["all"]["children"]["pd"]["children"]["decode"]
    out = tmp_path / "out"
    with pytest.raises(api.InputError, match="no host in group 'decode'"):
        export(write_inventory(tmp_path, doc), "rbg", out)
    assert not out.exists()
    res = run_cli(["pd", "export", "-i", str(write_inventory(tmp_path, doc)), "--to", "slurm", "-o", str(out)])
    assert res.code == 5 and "Traceback" not in res.err and "decode" in res.err and not out.exists()
    cpu = write_inventory(tmp_path, pd_inventory(sglang_device="cpu"))
    with pytest.raises(api.InputError, match="sglang_device=cpu exports to slurm only"):
        export(cpu, "lws", out)
    res = run_cli(["pd", "export", "-i", str(cpu), "--to", "rbg", "-o", str(out), "--name", "Bad_Name"])
    assert res.code == 5 and "--name 'Bad_Name'" in res.err and not out.exists()


def test_slurm_scripts_pass_bash_n_and_shellcheck(tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is not installed (scripts/test installs it)"
    for inventory in ("nxm", "local", "single-host-4p4", "multi-host"):  # multi-host: a pd_instance, a node per rank
        out = tmp_path / inventory
        export(REPO / "inventory" / f"{inventory}.yml", "slurm", out)
        scripts = sorted(str(p) for p in out.iterdir() if p.suffix in (".sh", ".sbatch"))
        for script in scripts:
            subprocess.run(["bash", "-n", script], check=True)
        proc = subprocess.run([shellcheck, "-s", "bash", *scripts], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout


def test_the_kubernetes_checks_run_from_their_configmap_and_fail_with_exit_1(tmp_path: Path) -> None:
    """The init container's NIXL gate and the verify Job, run as written against the ConfigMap's files (each
    check as it is in provision, hostlib.py and its codec.py beside them: nothing else): a host Python without
    nixl fails the gate, a router that does not answer fails the verify; each prints its one failure answer and
    exits 1 (the pod's / Job's failure)."""
    files = export(REPO / "inventory" / "nxm.yml", "rbg").files
    docs = [d for name, text in files.items() if name.endswith(".yaml") for d in yaml.safe_load_all(text) if d]
    checks = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-provision-checks"))
    assert sorted(checks["data"]) == ["codec.py", "hostlib.py", "nixl_probe.py", "pd_verify.py", "verify-request.json"]
    here = tmp_path / "checks"
    here.mkdir()
    for name, text in checks["data"].items():
        (here / name).write_text(text)
    (here / "verify-request.json").write_text(json.dumps({"url": f"http://127.0.0.1:{_free_ports(1)[0]}",
                                                          "timeout": 1, "interval": 0.2}))  # fmt: skip
    group = next(d for d in docs if d["kind"] == "RoleBasedGroup")
    pod = group["spec"]["roles"][0]
    template = (pod.get("standalonePattern") or pod["leaderWorkerPattern"])["template"]
    gate = template["spec"]["initContainers"][0]["command"]
    job = next(d for d in docs if d["kind"] == "Job")["spec"]["template"]["spec"]["containers"][0]["command"]
    for command, failure in ((gate, "import nixl._api failed"), (job, "Connection refused")):
        assert command[:2] == ["sh", "-c"]
        proc = subprocess.run(["sh", "-c", command[2].replace("/opt/provision", str(here))], capture_output=True,
                              text=True, timeout=60, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
        (line,) = proc.stdout.splitlines()
        answer = json.loads(line)
        assert proc.returncode == 1 and answer["ok"] is False and answer["failed"] is True, proc.stdout + proc.stderr
        assert failure in answer["msg"], answer


def test_slurm_nodes_are_machines_and_addresses_are_the_jobs() -> None:
    files = export(REPO / "inventory" / "single-host-4p4.yml", "slurm").files
    assert "#SBATCH --nodes=1" in files["pd.sbatch"] and "#SBATCH --gpus-per-node=8" in files["pd.sbatch"]
    node = files["node-0.sh"]
    assert "10.0.0.11" not in node and '--host "${PD_NODE_0}" --port 30001' in node
    assert "--base-gpu-id 4" in node  # within the node, the GPUs are the plan's
    nxm = export(REPO / "inventory" / "nxm.yml", "slurm").files
    assert "#SBATCH --nodes=6" in nxm["pd.sbatch"]
    router = nxm["node-5.sh"]
    assert '--prefill "http://${PD_NODE_1}:30000" 8998' in router
    assert router.index('wait_http "http://${PD_NODE_4}:30000/health"') < router.index("start gw01-router")


def test_each_server_waits_as_long_as_its_own_pd_server_timeout(tmp_path: Path) -> None:
    """A host's ``pd_server_timeout`` (a slower model's) bounds its own server's wait in every target, as in pd
    up: the Slurm router's wait for that worker, the verify's wait for the router (the longest worker's + 120 s)
    and the pod's startupProbe; the others keep theirs."""
    doc = pd_inventory()
    doc["all"]["children"]["pd"]["children"]["decode"]["hosts"]["d1"]["pd_server_timeout"] = 1800
    files = export(write_inventory(tmp_path, doc), "slurm").files
    router = next(text for text in files.values() if "start gw-router" in text)
    assert 'wait_http "http://${PD_NODE_2}:30000/health" 1800' in router
    assert 'wait_http "http://${PD_NODE_0}:30000/health" 900' in router
    assert 'wait_http "$url/readiness" 1920' in files["verify.sh"]
    probes = {r["name"]: r["standalonePattern"]["template"]["spec"]["containers"][0].get("startupProbe")
              for r in _custom(export(write_inventory(tmp_path, doc), "rbg").files)[0]["spec"]["roles"]}  # fmt: skip
    assert {name: p and p["failureThreshold"] * p["periodSeconds"] for name, p in probes.items()} == {
        "prefill": 900, "decode": 1800, "router": None}  # fmt: skip


def test_containerfile_from_the_wheelhouse_lock(tmp_path: Path) -> None:
    wheels = ["nixl-1.5.1-py3-none-any.whl", "sglang-0.5.23-py3-none-any.whl"]
    hosts = {h: {"target": {"python": "3.12", "machine": "x86_64"}, "files": wheels, "lock": [], "release": "x",
                 "reason": "", "deps": True, "requirements": []} for h in ("prefill01", "prefill02", "decode01",
                                                                         "decode02", "decode03", "gw01")}  # fmt: skip
    manifest = {"version": 1, "hosts": hosts, "files": {w: {"sha256": "ab" * 32, "size": 1} for w in wheels}}
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "manifest.json").write_text(json.dumps(manifest))
    files = export(REPO / "inventory" / "nxm.yml", "rbg", wheelhouse=str(tmp_path / "wh")).files
    text = files["Containerfile"]
    assert "ARG BASE=docker.io/library/python:3.12-slim" in text
    assert "COPY nixl-1.5.1-py3-none-any.whl sglang-0.5.23-py3-none-any.whl /wheels/" in text
    assert f"{'ab' * 32}  /wheels/nixl-1.5.1-py3-none-any.whl" in text and "--no-index --no-deps" in text
    hosts["gw01"]["files"] = wheels[:1]
    (tmp_path / "wh" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(api.InputError, match="2 different locks"):
        export(REPO / "inventory" / "nxm.yml", "rbg", wheelhouse=str(tmp_path / "wh"))


# ---- the Slurm launchers, run: a stand-in server (tests/fixtures/pd_export_fake/fake_server.py) for SGLang
FAKE = REPO / "tests" / "fixtures" / "pd_export_fake" / "fake_server.py"


def _free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _fake_deployment(tmp_path: Path) -> tuple[Path, dict[str, Any], list[int]]:
    ports = _free_ports(5)
    fake = ["python3", str(FAKE)]
    common = {
        "ansible_connection": "local",
        "model_path": "fake/model",
        "sglang_server_cmd": fake,
        "sglang_router_cmd": fake,
        "pd_stop_timeout": 5,
        "pd_server_timeout": 20,
        "pd_verify_timeout": 20,
    }
    doc = {"all": {"vars": common, "children": {
        "prefill": {"hosts": {"p1": {"server_port": ports[0], "bootstrap_port": ports[1], "router_port": ports[3],
                                     "router_prometheus_port": ports[4]}}},
        "decode": {"hosts": {"d1": {"server_port": ports[2]}}},
        "router": {"hosts": {"p1": {}}}}}}  # fmt: skip
    out = tmp_path / "out"
    export(write_inventory(tmp_path, doc), "slurm", out)
    (tmp_path / "rec").mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PD_NODE_0": "127.0.0.1",
           "FAKE_RECORD_DIR": str(tmp_path / "rec")}  # fmt: skip
    return out, env, ports


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def _records(tmp_path: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in (tmp_path / "rec").glob("*.json")}


def _start_node(out: Path, env: dict[str, Any], tmp_path: Path) -> subprocess.Popen[bytes]:
    """node-0.sh in a session of its own (as srun starts a step), its output to tmp_path/node-0.out."""
    with open(tmp_path / "node-0.out", "w") as log:
        return subprocess.Popen(["bash", str(out / "node-0.sh")], env=env, start_new_session=True, stdout=log,
                                stderr=subprocess.STDOUT)  # fmt: skip


def _kill_what_is_left(node: subprocess.Popen[bytes], tmp_path: Path) -> None:
    import signal

    if node.poll() is None:
        os.killpg(node.pid, signal.SIGKILL)
        node.wait()
    for r in _records(tmp_path).values():
        if _alive(r["pid"]):
            os.kill(r["pid"], signal.SIGKILL)


def test_the_slurm_launchers_start_verify_and_stop_a_deployment(tmp_path: Path) -> None:
    import signal

    out, env, ports = _fake_deployment(tmp_path)
    node = _start_node(out, env, tmp_path)
    try:
        verify = subprocess.run(["bash", str(out / "verify.sh")], env=env, capture_output=True, text=True, timeout=60)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert json.loads(verify.stdout.strip().splitlines()[-1])["completion_tokens"] == 2
        rec = _records(tmp_path)
        assert sorted(rec) == ["decode", "prefill", "router"]
        argv = rec["router"]["argv"]
        assert argv[argv.index("--prefill") + 1:argv.index("--prefill") + 3] == [f"http://127.0.0.1:{ports[0]}",
                                                                                str(ports[1])]  # fmt: skip
        assert f"http://127.0.0.1:{ports[2]}" in argv and argv[argv.index("--host") + 1] == "127.0.0.1"
        assert rec["prefill"]["env"]["SGLANG_HOST_IP"] == "127.0.0.1"
        assert rec["decode"]["env"]["SGLANG_DISAGGREGATION_NIXL_BACKEND"] == "UCX"
        os.killpg(node.pid, signal.SIGTERM)  # as scancel / the end of the step
        assert node.wait(timeout=30) == 143
        assert not any(_alive(r["pid"]) for r in rec.values())
    finally:
        _kill_what_is_left(node, tmp_path)


def test_the_slurm_verify_fails_with_its_answer_printed_when_the_generation_fails(tmp_path: Path) -> None:
    """pd_verify.py exits 1 with a failure answer: verify.sh prints that answer and exits 1 (set -e never cuts
    it off before the answer)."""
    out, env, _ = _fake_deployment(tmp_path)
    env = {**env, "FAKE_GENERATE_STATUS": "500"}
    node = _start_node(out, env, tmp_path)
    try:
        verify = subprocess.run(["bash", str(out / "verify.sh")], env=env, capture_output=True, text=True, timeout=60)
        assert verify.returncode == 1, verify.stdout + verify.stderr
        answer = json.loads(verify.stdout.strip().splitlines()[-1])
        assert answer["ok"] is False and answer["failed"] is True and answer["status"] == 500, answer
        assert answer["msg"] == answer["error"] and "fake failure" in answer["msg"], answer
    finally:
        _kill_what_is_left(node, tmp_path)


def test_a_process_that_exits_ends_the_node_and_stops_the_others(tmp_path: Path) -> None:
    import signal

    out, env, _ = _fake_deployment(tmp_path)
    node = subprocess.run(["bash", str(out / "node-0.sh")], env={**env, "FAKE_EXIT_ROUTER": "3"}, capture_output=True,
                          text=True, timeout=60, start_new_session=True)  # fmt: skip
    rec = _records(tmp_path)
    try:
        assert node.returncode == 3, node.stdout + node.stderr
        assert "a process of node 0 exited (rc=3): stopping the others" in node.stderr
        assert sorted(rec) == ["decode", "prefill", "router"] and not any(_alive(r["pid"]) for r in rec.values())
    finally:
        for r in rec.values():
            if _alive(r["pid"]):
                os.kill(r["pid"], signal.SIGKILL)
    missing = subprocess.run(["bash", str(out / "node-0.sh")], env={"PATH": os.environ["PATH"]}, capture_output=True,
                             text=True, timeout=30)  # fmt: skip
    assert missing.returncode == 1 and "PD_NODE_0 is not set" in missing.stderr


def test_the_command_line_says_what_it_validated_and_wrote(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = run_cli(["pd", "export", "-i", str(REPO / "inventory" / "nxm.yml"), "--to", "lws", "-o", str(out), "--json"])
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["files"] == ["README.md", "leaderworkersets.yaml", "verify-job.yaml"] and doc["directory"] == str(out)
    assert len(doc["validated"]) == 3 and all(
        "valid against leaderworkerset.x-k8s.io/v1" in v for v in doc["validated"]
    )
    res = run_cli(["pd", "export", "-i", str(REPO / "inventory" / "nxm.yml"), "--to", "rbg", "-o", str(out / "r"),
                   "--name", "llm", "--image", "registry.example/pd:1"])  # fmt: skip
    assert res.code == 0 and "RoleBasedGroup llm: valid against workloads.x-k8s.io/v1alpha2" in res.out
    assert "image: registry.example/pd:1" in (out / "r" / "rolebasedgroup.yaml").read_text()


def test_containerfile_from_a_real_wheelhouse_checks_and_lists_its_files(tmp_path: Path, links: Path) -> None:  # noqa: F811
    common = {"ansible_connection": "local", "sglang_version": "auto", "wheelhouse_target": H200,
              "model_path": "Qwen/Qwen3-8B"}  # fmt: skip
    doc = {"all": {"vars": common, "children": {
        "prefill": {"hosts": {"p1": {"server_port": 30000}}}, "decode": {"hosts": {"d1": {"server_port": 30001}}},
        "router": {"hosts": {"p1": {}}}}}}  # fmt: skip
    inv = write_inventory(tmp_path, doc)
    house = tmp_path / "house"
    made = run_cli(["wheelhouse", "-i", str(inv), "-d", str(house), "--find-links", str(links), "--no-index"])
    assert made.code == 0, made.err
    manifest = json.loads((house / "manifest.json").read_text())
    text = export(inv, "rbg", wheelhouse=str(house)).files["Containerfile"]
    copied = next(line for line in text.splitlines() if line.startswith("COPY ")).split()[1:-1]
    assert copied == sorted(manifest["hosts"]["p1"]["files"]) and "ARG BASE=docker.io/library/python:3.12-slim" in text
    check = next(line for line in text.splitlines() if "sha256sum -c" in line).removeprefix("RUN ")
    ok = subprocess.run(["sh", "-c", check.replace("/wheels/", f"{house}/")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr  # the build's check passes on the wheelhouse's files
    (house / copied[0]).write_bytes(b"tampered")
    bad = subprocess.run(["sh", "-c", check.replace("/wheels/", f"{house}/")], capture_output=True, text=True)
    assert bad.returncode != 0 and "FAILED" in bad.stdout
