"""What syncing a model to a fleet costs: a synthetic model (random shards, a config, a tokenizer file) from the
controller to N lab hosts with ``provision model sync``: fan-out (hosts that completed serve the others),
controller-only push (``--no-fanout``), and a naive loop of ``scp -r`` (and ``rsync -a`` when installed), one
host after another; then the converged rerun, and the resume of a sync killed halfway.

    python benchmarks/model_sync.py [--hosts 8] [--size-gb 2] [--shards 4] [--slots 2]

Needs root: it starts a lab of real sshd hosts (tests/support/lab.py). The lab's hosts are users of ONE machine: they
share its disk, its page cache and its cores, and every "link" is loopback. A real fleet has a disk and a NIC
per host: fan-out's gain there is the number of sources that send at once (1, 2, 4, ... hosts), here it is
bounded by the one disk and the 2 cores that every transfer shares, so the figures below are a floor for the
gain, not its size. Prints seconds and bytes; asserts nothing.

Anchors (what the same job costs elsewhere, for reading the figures): srt-slurm's ``stage_model.sh`` copies
the model to each node's local disk with ``cp``/``rsync`` (one copy per node from shared storage) and checks
name+size; OME's model agent downloads per node with checksums; Dynamo's ModelExpress downloads once and
serves peers. The naive loop below is the first; ``--no-fanout`` the second's shape from one source; fan-out
the third's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provision import api  # noqa: E402
from tests.support.lab import Lab  # noqa: E402

MB = 1 << 20


def make_model(path: Path, size: int, shards: int) -> Path:
    (path / "tokenizer").mkdir(parents=True)
    per = size // shards
    block = os.urandom(MB)
    for i in range(shards):
        with open(path / f"model-{i + 1:05d}-of-{shards:05d}.safetensors", "wb") as fh:
            for j in range(per // MB):  # distinct blocks: no file system dedups or compresses them away
                fh.write(block[j % 256 :] + block[: j % 256] if j % 7 else os.urandom(MB))
    (path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (path / "tokenizer" / "tokenizer.json").write_text('{"version": "1.0"}')
    return path


def clean(lab: Lab, names: list[int]) -> None:
    for i in names:
        for name in ("models", "models-naive"):
            shutil.rmtree(Path(lab.host(i).home) / name, ignore_errors=True)
    subprocess.run(["sync"], check=False)


def row(name: str, wall: float, moved: int, hosts: int, size: int, note: str = "") -> str:
    rate = hosts * size / wall / 1e6 if wall > 0 else 0.0
    return f"| {name:<28} | {wall:8.1f} | {moved / 1e9:8.2f} | {rate:8.0f} | {note}"


def timed_sync(inv: Path, src: Path, **kw: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = api.model_sync(inv, str(src), **kw)
    took = time.perf_counter() - started
    if result.exit_code != 0:
        raise SystemExit(f"model sync failed: {result.as_dict()}")
    return took, result


def naive(lab: Lab, tool: str, src: Path, hosts: list[int]) -> float:
    started = time.perf_counter()
    for i in hosts:
        name = lab.host(i).name
        if tool == "scp":
            argv = ["scp", "-q", "-r", "-F", str(lab.ssh_config_path), str(src), f"{name}:models-naive"]
        else:
            argv = ["rsync", "-a", "-e", f"ssh -F {lab.ssh_config_path}", f"{src}/", f"{name}:models-naive/"]
        subprocess.run(argv, check=True)
    return time.perf_counter() - started


def resume(lab: Lab, inv: Path, src: Path, size: int, host: int) -> tuple[float, int, int]:
    """A sync to one host killed when half is staged; the rerun's seconds, bytes sent and bytes kept."""
    staged = Path(lab.host(host).home) / "models" / ".m.provision-partial"
    argv = [sys.executable, "-m", "provision", "model", "sync", "-i", str(inv), "--src", str(src),
            "-l", lab.host(host).name]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None:
        got = sum(p.stat().st_size for p in staged.rglob("*") if p.is_file()) if staged.exists() else 0
        if got >= size // 2:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    time.sleep(1)
    kept = sum(p.stat().st_size for p in staged.rglob("*") if p.is_file()) if staged.exists() else 0
    took, result = timed_sync(inv, src, limit=lab.host(host).name)
    return took, result.sent, kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--slots", type=int, default=2)
    opts = parser.parse_args()
    size = int(opts.size_gb * 1e9) // MB * MB
    with tempfile.TemporaryDirectory(prefix="provision-bench-") as tmp, Lab(opts.hosts, Path(tmp) / "lab") as lab:
        os.environ["PROVISION_SSH_CONFIG"] = str(lab.ssh_config_path)
        model = make_model(Path(tmp) / "model", size, opts.shards)
        total = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
        hosts = list(range(opts.hosts))
        names = [lab.host(i).name for i in hosts]
        inv = lab.write_inventory(Path(tmp) / "inv.yml", groups={"prefill": names[:1], "decode": names[1:]},
                                  extra_host_vars={n: {"model_path": "~/models/m"} for n in names})  # fmt: skip
        api.model_sync(inv, str(model), limit=names[0], check=True)  # the controller's manifest, hashed once
        print(f"model: {opts.shards} shards, {total / 1e9:.2f} GB; {opts.hosts} lab hosts; slots {opts.slots}")
        print(f"| {'run':<28} | {'wall s':>8} | {'GB sent':>8} | {'MB/s agg':>8} | notes")
        print(f"|{'-' * 30}|{'-' * 10}|{'-' * 10}|{'-' * 10}|------")
        clean(lab, hosts)
        took, result = timed_sync(inv, model, slots=opts.slots)
        peers = sum(1 for h in result.hosts.values() if h.source != "controller")
        print(row("fan-out", took, result.sent, opts.hosts, total, f"{peers} hosts served by a peer"), flush=True)
        took, again = timed_sync(inv, model)
        calls = sorted({h.commands for h in again.hosts.values()})
        print(row("rerun (converged)", took, again.sent, opts.hosts, total, f"helper calls per host: {calls}"))
        clean(lab, hosts)
        took, result = timed_sync(inv, model, slots=opts.slots, fanout=False)
        print(row("controller push (no fan-out)", took, result.sent, opts.hosts, total, "every byte from here"))
        for tool in ("scp", "rsync"):
            if not shutil.which(tool):
                print(f"| naive {tool} loop: {tool} is not installed")
                continue
            clean(lab, hosts)
            took = naive(lab, tool, model, hosts)
            print(row(f"naive {tool} loop", took, total * opts.hosts, opts.hosts, total, "one host after another"))
        clean(lab, hosts)
        took, sent, kept = resume(lab, inv, model, total, 1)
        print(row("resume after a kill at 50%", took, sent, 1, total, f"{kept / 1e9:.2f} GB kept, not resent"))
        clean(lab, hosts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
