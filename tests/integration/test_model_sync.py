"""``provision model sync`` against real lab hosts: a synthetic model (random shards, a config, a nested tokenizer
file) to 3 hosts with fan-out (a host gets its files from a peer), a rerun that sends nothing in one round trip
per host, a truncated shard found and resent alone, a sync killed halfway that resumes, a host short of disk (a
real 4 MiB tmpfs) refused with the shortfall before a byte is written, a seed host (HOST:DIR) with --no-fanout,
a hub id from a controller-side Hugging Face cache, model-sync.yml applied twice, and ``pd up`` refusing a
decode whose model differs (or is missing) before any server starts (no SGLang needed: it stops in the
prepare play)."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision import api
from provision.remote.model_sync import manifest_of
from tests.support.cli import run_cli, run_cli_in

pytestmark = pytest.mark.lab
MB = 1 << 20


@pytest.fixture(scope="module")
def lab_env(lab: Any) -> Iterator[Any]:
    with lab.pointed_at():
        yield lab


def make_model(path: Path, shards: int = 3, size: int = 2 * MB) -> Path:
    (path / "tokenizer").mkdir(parents=True)
    for i in range(shards):
        (path / f"model-{i + 1:05d}-of-{shards:05d}.safetensors").write_bytes(os.urandom(size))
    (path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (path / "tokenizer" / "tokenizer.json").write_text('{"version": "1.0"}')
    return path


def inventory(lab: Any, path: Path, model_path: str, hosts: tuple[int, ...] = (1, 2, 3), **more: Any) -> Path:
    names = [lab.host(i).name for i in hosts]
    return lab.write_inventory(
        path,
        groups={"prefill": names[:1], "decode": names[1:]},
        extra_host_vars={n: {"model_path": model_path, **more} for n in names},
    )


def on_host(lab: Any, i: int, rel: str) -> Path:
    return Path(lab.host(i).home) / rel


def files(path: Path) -> dict[str, list[Any]]:
    return manifest_of(str(path), None)[0]


def chown(lab: Any, i: int, path: Path) -> None:
    user = pwd.getpwnam(lab.host(i).user)
    for base, dirs, names in os.walk(path):
        for name in [base, *(os.path.join(base, n) for n in dirs + names)]:
            os.chown(name, user.pw_uid, user.pw_gid)


def test_sync_fans_out_to_three_hosts_and_a_rerun_sends_nothing(
    lab_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = lab_env
    monkeypatch.setattr("provision.model.sync.FETCH_BATCH", 3 * MB)  # a peer's files in several pulls
    model = make_model(tmp_path / "m")
    want = files(model)
    inv = inventory(lab, tmp_path / "inv.yml", "~/models/fan")
    first = api.model_sync(inv, str(model), slots=1)  # one transfer per source: the third host waits for a peer
    assert first.exit_code == 0, first.as_dict()
    sources = {h.source for h in first.hosts.values()}
    assert "controller" in sources and sources & {"lab1", "lab2", "lab3"}, sources  # a host served a peer
    assert all(h.status == "changed" and h.sent == first.size for h in first.hosts.values())
    for i in (1, 2, 3):
        assert files(on_host(lab, i, "models/fan")) == want
        assert not on_host(lab, i, "models/.fan.provision-partial").exists()  # staged, then one rename
    again = run_cli(["model", "sync", "-i", str(inv), "--src", str(model), "--json"])
    assert again.code == 0, again.err
    doc = yaml.safe_load(again.out)
    assert doc["sent"] == 0 and doc["digest"] == first.digest
    for host in doc["hosts"].values():  # converged: one helper call per host, nothing sent, nothing changed
        assert host["status"] == "ok" and host["sent"] == 0 and host["commands"] == 1, host


def test_truncated_shard_is_found_and_resent_alone(lab_env: Any, tmp_path: Path) -> None:
    lab = lab_env
    model = make_model(tmp_path / "m")
    inv = inventory(lab, tmp_path / "inv.yml", "~/models/trunc", hosts=(1, 2))
    assert api.model_sync(inv, str(model)).exit_code == 0
    shard = on_host(lab, 2, "models/trunc/model-00002-of-00003.safetensors")
    with open(shard, "r+b") as fh:
        fh.truncate(MB // 2)
    result = api.model_sync(inv, str(model))
    assert result.exit_code == 0
    assert result.hosts["lab1"].status == "ok" and result.hosts["lab1"].sent == 0
    assert result.hosts["lab2"].status == "changed" and result.hosts["lab2"].sent == 2 * MB  # that shard only
    assert files(on_host(lab, 2, "models/trunc")) == files(model)


def test_interrupted_sync_resumes_where_it_stopped(lab_env: Any, tmp_path: Path) -> None:
    lab = lab_env
    model = make_model(tmp_path / "m", shards=2, size=12 * MB)
    inv = inventory(lab, tmp_path / "inv.yml", "~/models/resume", hosts=(3,))
    staged = on_host(lab, 3, "models/.resume.provision-partial")
    argv = [sys.executable, "-m", "provision", "model", "sync", "-i", str(inv), "--src", str(model), "--chunk-mb", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = sum(p.stat().st_size for p in staged.rglob("*.safetensors")) if staged.exists() else 0
            if got >= 4 * MB:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # the controller dies mid-transfer
    finally:
        proc.wait(30)
    time.sleep(1)  # the host's runner saw the channel close and stopped the write
    assert not on_host(lab, 3, "models/resume").exists()  # complete or not at all
    kept = sum(p.stat().st_size for p in staged.rglob("*.safetensors"))
    assert 0 < kept < 24 * MB
    result = api.model_sync(inv, str(model), chunk_mb=4)
    assert result.exit_code == 0, result.as_dict()
    host = result.hosts["lab3"]
    assert host.status == "changed" and host.sent <= 24 * MB - kept + 4 * MB and host.sent < 24 * MB
    assert files(on_host(lab, 3, "models/resume")) == files(model)


def test_host_short_of_disk_is_refused_with_the_shortfall(lab_env: Any, tmp_path: Path) -> None:
    lab = lab_env
    small = on_host(lab, 2, "small")
    small.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)], check=True)
    try:
        chown(lab, 2, small)
        model = make_model(tmp_path / "m", shards=3, size=2 * MB)  # 6 MiB and a bit, on a 4 MiB filesystem
        inv = inventory(lab, tmp_path / "inv.yml", "~/small/m", hosts=(2,))
        st = os.statvfs(small)
        free = st.f_bavail * st.f_frsize
        result = api.model_sync(inv, str(model))
        host = result.hosts["lab2"]
        assert result.exit_code == 2 and host.status == "failed" and host.sent == 0
        need = sum(v[0] for v in files(model).values())
        assert f"needs {need:,} bytes, {free:,} are free" in host.msg and f"{need - free:,} bytes short" in host.msg
        assert os.listdir(small) == []  # refused before anything was written
    finally:
        subprocess.run(["umount", str(small)], check=True)
        small.rmdir()


def test_seed_host_without_fanout_serves_every_host(lab_env: Any, tmp_path: Path) -> None:
    lab = lab_env
    model = make_model(tmp_path / "m")
    seed = on_host(lab, 0, "seedmodel")
    shutil.rmtree(seed, ignore_errors=True)
    shutil.copytree(model, seed)
    chown(lab, 0, seed)
    inv = lab.write_inventory(
        tmp_path / "inv.yml",
        groups={"seed": ["lab0"], "prefill": ["lab1"], "decode": ["lab2"]},
        extra_host_vars={n: {"model_path": "~/models/seeded"} for n in ("lab1", "lab2")},
    )
    result = api.model_sync(inv, "lab0:~/seedmodel", fanout=False, slots=1)
    assert result.exit_code == 0, result.as_dict()
    assert {h.source for h in result.hosts.values()} == {"lab0"}  # no host served another
    for i in (1, 2):
        assert files(on_host(lab, i, "models/seeded")) == files(model)


def test_hub_id_is_resolved_in_the_controller_cache(lab_env: Any, tmp_path: Path, monkeypatch: Any) -> None:
    lab = lab_env
    cache = tmp_path / "hub"
    repo = cache / "models--tiny-org--tiny-model"
    commit = hashlib.sha1(b"rev").hexdigest()
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for name, data in (("config.json", b'{"a": 1}'), ("model.safetensors", os.urandom(MB))):
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(os.path.relpath(blob, snap))  # as the hub cache holds files
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    inv = inventory(lab, tmp_path / "inv.yml", "~/models/hub", hosts=(1,))
    result = api.model_sync(inv, "tiny-org/tiny-model")
    assert result.exit_code == 0 and result.source.startswith("tiny-org/tiny-model@main"), result.as_dict()
    placed = on_host(lab, 1, "models/hub/model.safetensors")
    assert not placed.is_symlink() and placed.read_bytes() == (snap / "model.safetensors").read_bytes()
    missing = run_cli(["model", "sync", "-i", str(inv), "--src", "tiny-org/not-here"])
    assert missing.code == 5 and "not in the controller's Hugging Face cache" in missing.err
    assert "Traceback" not in missing.err


def test_model_sync_playbook_twice_changes_nothing_the_second_time(lab_env: Any, tmp_path: Path) -> None:
    lab = lab_env
    model = make_model(tmp_path / "m", shards=2, size=MB)
    inv = inventory(lab, tmp_path / "inv.yml", "~/models/play", hosts=(1, 2))
    first = api.run_playbook("model-sync.yml", inv, extra_vars={"model_src": str(model)})
    assert first.ok and first.changed == 2, first.reason
    second = api.run_playbook("model-sync.yml", inv, extra_vars={"model_src": str(model)})
    assert second.ok and second.changed == 0, second.reason
    assert files(on_host(lab, 2, "models/play")) == files(model)


def test_pd_up_refuses_a_decode_with_other_weights_before_starting_anything(lab_env: Any, tmp_path: Path) -> None:
    lab = lab_env
    model = make_model(tmp_path / "m")
    inv = inventory(lab, tmp_path / "inv.yml", "~/models/pd", hosts=(1, 2), sglang_device="cpu",
                    pd_cpu_model_path="~/models/pd")  # fmt: skip
    assert api.model_sync(inv, str(model)).exit_code == 0
    shard = on_host(lab, 2, "models/pd/model-00003-of-00003.safetensors")
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF  # same size, other bytes
    shard.write_bytes(bytes(data))
    refused = run_cli_in(tmp_path, ["pd", "up", "-i", str(inv)])
    assert refused.code == 2
    assert "the servers' model directories differ" in refused.out and "model-00003-of-00003.safetensors" in refused.out
    assert "lab1" in refused.out and "lab2" in refused.out and "sha256" in refused.out
    assert "start the prefill servers" not in refused.out  # nothing started
    shutil.rmtree(on_host(lab, 2, "models/pd"))
    missing = run_cli_in(tmp_path, ["pd", "up", "-i", str(inv)])
    assert missing.code == 2 and "the model directory is missing on lab2" in missing.out, missing.out
    assert "start the prefill servers" not in missing.out
