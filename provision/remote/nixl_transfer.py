"""A real NIXL transfer between two agents in two processes, the way a PD pair moves KV cache.

Shipped to the hosts and run there by the ``nixl_transfer`` module with the venv's Python; stdlib + nixl +
numpy only (torch is imported only for ``--mem vram``).

    target    --meta-out F --result-out F --size B [--mem dram|vram] [--gpu N] [--iters K] [--timeout S]
              [--detach --log F]
    initiator --meta-in F --size B [--mem dram|vram] [--gpu N] [--iters K] [--timeout S]

The TARGET (decode side) allocates and registers a buffer, writes its agent metadata and serialized
descriptors to ``--meta-out`` (atomically: the controller copies that file to the initiator's host), then
serves K iterations and writes ``{"ok", "verified", "iterations", "errors"}`` to ``--result-out``.

The INITIATOR (prefill side) WRITEs into the target's buffer, as SGLang's prefill does:

1. ``add_remote_agent(meta)``, then a ``hello`` notification carrying its own metadata so the target can
   answer (the target acknowledges; that proves the reverse path too);
2. per iteration: fill the source with a pattern that differs each iteration, ``initialize_xfer("WRITE",
   ..., notif)`` where the notification carries the pattern's sha256, time ``transfer()`` → ``DONE``;
   the target hashes its buffer when the notification arrives and acknowledges with the verdict — the
   initiator waits for it, so the next iteration never overwrites bytes still being checked;
3. prints one JSON object on stdout: per-iteration seconds, best/median GB/s, verified.

Every log line (NIXL's Python logger writes to stdout, UCX's ``UCX_PROTO_INFO=y`` table too) is sent to
stderr: stdout holds the JSON only. The caller parses the UCX table from stderr. Errors are reported in the
JSON (``ok: false``, ``error``) with exit code 0; exit 1 is for bad usage only.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import os
import statistics
import sys
import time
import traceback
from typing import Any

POLL = 0.0005  # seconds between polls of a transfer's state
NOTIF_POLL = 0.002
BYE_WAIT = 5.0  # the target lingers this long after its last ack so that UCX delivers it


class UsageError(SystemExit):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # bad usage: exit 1 (argparse's default is 2)
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise UsageError(1)


def json_stdout() -> Any:
    """Keep the real stdout for the JSON result; everything else written to fd 1 goes to stderr."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def write_atomic(path: str, obj: dict[str, Any]) -> None:
    tmp = f"{path}.tmp{os.getpid()}-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # private from the first byte
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ------------------------------------------------------------------------------------------------ memory
class Buffer:
    """A contiguous byte buffer in DRAM (numpy) or VRAM (torch on cuda:N)."""

    def __init__(self, size: int, mem: str, gpu: int) -> None:
        import numpy as np

        self.size, self.mem, self.gpu = size, mem, gpu
        self._np = np
        if mem == "vram":
            import torch  # only here: DRAM checks must not need torch

            torch.cuda.set_device(gpu)
            self.tensor = torch.zeros(size, dtype=torch.uint8, device=f"cuda:{gpu}")
            self.addr, self.dev, self.kind = self.tensor.data_ptr(), gpu, "VRAM"
        else:
            self.array: Any = np.zeros(size, dtype=np.uint8)
            self.addr, self.dev, self.kind = self.array.ctypes.data, 0, "DRAM"
        self._words = np.arange((size + 7) // 8, dtype=np.uint64)

    def pattern(self, iteration: int) -> Any:
        """Bytes that differ in every iteration and every 8-byte word; cheap (two vector ops)."""
        np = self._np
        words = self._words * np.uint64(0x9E3779B97F4A7C15)
        words ^= np.uint64((iteration + 1) * 0xD6E8FEB86659FD93 % 2**64)
        return words.view(np.uint8)[: self.size]

    def fill(self, iteration: int) -> str:
        data = self.pattern(iteration)
        if self.mem == "vram":
            import torch

            self.tensor.copy_(torch.from_numpy(data))
            torch.cuda.synchronize(self.gpu)
        else:
            self.array[:] = data
        return hashlib.sha256(memoryview(data)).hexdigest()

    def sha256(self) -> str:
        if self.mem == "vram":
            host = self.tensor.cpu().numpy()  # copy to host first
            return hashlib.sha256(memoryview(host)).hexdigest()
        return hashlib.sha256(memoryview(self.array)).hexdigest()

    def reg_descs(self, agent: Any) -> Any:
        return agent.get_reg_descs([(self.addr, self.size, self.dev, "")], self.kind)

    def xfer_descs(self, agent: Any) -> Any:
        return agent.get_xfer_descs([(self.addr, self.size, self.dev)], self.kind)


def make_agent(name: str) -> Any:
    from nixl._api import nixl_agent, nixl_agent_config

    agent = nixl_agent(name, nixl_agent_config(backends=["UCX"]))
    if "UCX" not in agent.backends:
        raise RuntimeError(f"UCX backend missing: plugins found {agent.get_plugin_list()}")
    return agent


def notif(kind: str, **fields: Any) -> bytes:
    return json.dumps({"kind": kind, **fields}).encode()


def wait_notifs(agent: Any, deadline: float, want: str) -> list[tuple[str, dict[str, Any]]]:
    """Poll until at least one notification arrives; returns (sender, message) pairs."""
    while True:
        got = [(sender, json.loads(msg)) for sender, msgs in agent.get_new_notifs().items() for msg in msgs]
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {want}")
        time.sleep(NOTIF_POLL)


# ------------------------------------------------------------------------------------------------ target
def detach(log: str) -> None:
    """Fork into the background: the parent prints the child's pid and exits at once; the child gets its
    own session and sends stdin/stdout/stderr to ``log`` (so an SSH channel or a pipe closes)."""
    pid = os.fork()
    if pid:
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
        os._exit(0)
    os.setsid()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)


def run_target(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"ok": False, "verified": False, "iterations": [], "errors": []}
    deadline = time.monotonic() + args.timeout
    try:
        buf = Buffer(args.size, args.mem, args.gpu)
        agent = make_agent("target")
        agent.register_memory(buf.reg_descs(agent))
        write_atomic(
            args.meta_out,
            {
                "agent": agent.name,
                "metadata": b64(agent.get_agent_metadata()),
                "descs": b64(agent.get_serialized_descs(buf.xfer_descs(agent))),
                "size": args.size,
                "mem": args.mem,
                "pid": os.getpid(),
            },
        )
        peer = None
        done = 0
        while done < args.iters:
            for sender, msg in wait_notifs(agent, deadline, f"iteration {done + 1} of {args.iters}"):
                if msg.get("kind") == "hello":
                    peer = agent.add_remote_agent(base64.b64decode(msg["metadata"]))
                    agent.send_notif(peer, notif("ready"))
                elif msg.get("kind") == "iter":
                    actual = buf.sha256()
                    ok = actual == msg["sha256"]
                    result["iterations"].append({"i": msg["i"], "verified": ok})
                    if not ok:
                        result["errors"].append(f"iteration {msg['i']}: sha256 {actual} != {msg['sha256']}")
                    agent.send_notif(peer or sender, notif("ack", i=msg["i"], verified=ok))
                    done += 1
        result["verified"] = all(it["verified"] for it in result["iterations"])
        result["ok"] = result["verified"]
        write_atomic(args.result_out, result)
        with contextlib.suppress(TimeoutError):  # stay until the initiator has seen the last ack
            wait_notifs(agent, min(deadline, time.monotonic() + BYE_WAIT), "bye")
        return result
    except Exception as exc:
        traceback.print_exc()
        result["errors"].append(f"{type(exc).__name__}: {exc}")
        result["error"] = result["errors"][-1]
        write_atomic(args.result_out, result)
        return result


# --------------------------------------------------------------------------------------------- initiator
def run_initiator(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"ok": False, "size": args.size, "mem": args.mem, "iterations": []}
    deadline = time.monotonic() + args.timeout
    try:
        with open(args.meta_in) as fh:
            meta = json.load(fh)
        if int(meta["size"]) != args.size:
            raise ValueError(f"target buffer is {meta['size']} bytes, initiator asked for {args.size}")
        out["target_mem"] = meta.get("mem")
        buf = Buffer(args.size, args.mem, args.gpu)
        agent = make_agent("initiator")
        agent.register_memory(buf.reg_descs(agent))
        out["mem_types"] = agent.get_backend_mem_types("UCX")
        target = agent.add_remote_agent(base64.b64decode(meta["metadata"]))
        remote = agent.deserialize_descs(base64.b64decode(meta["descs"]))
        local = buf.xfer_descs(agent)

        agent.send_notif(target, notif("hello", metadata=b64(agent.get_agent_metadata())))
        wait_notifs(agent, deadline, "the target's ready")

        for i in range(args.iters):
            digest = buf.fill(i)
            handle = agent.initialize_xfer("WRITE", local, remote, target, notif("iter", i=i, sha256=digest))
            started = time.perf_counter()
            state = agent.transfer(handle)
            while state == "PROC":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"iteration {i}: transfer not DONE within {args.timeout:g}s")
                time.sleep(POLL)
                state = agent.check_xfer_state(handle)
            seconds = time.perf_counter() - started
            agent.release_xfer_handle(handle)
            if state != "DONE":
                raise RuntimeError(f"iteration {i}: transfer state {state}")
            ack = wait_notifs(agent, deadline, f"the target's check of iteration {i}")[-1][1]
            out["iterations"].append(
                {
                    "i": i,
                    "seconds": seconds,
                    "gbps": args.size / seconds / 1e9,
                    "verified": ack.get("verified"),
                }
            )
        agent.send_notif(target, notif("bye"))
        if args.reference_gpu is not None and args.mem == "vram":
            out["copy_gbps"] = reference_copy(args.size, args.gpu, args.reference_gpu, args.iters)
        times = [it["seconds"] for it in out["iterations"]]
        out["gbps_best"] = args.size / min(times) / 1e9
        out["gbps_median"] = args.size / statistics.median(times) / 1e9
        out["verified"] = all(it["verified"] is True for it in out["iterations"])
        out["ok"] = out["verified"]
        if not out["verified"]:
            out["error"] = "the target's bytes did not match what was written"
    except Exception as exc:
        traceback.print_exc()
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def reference_copy(size: int, src: int, dst: int, iters: int) -> float:
    """What the link itself does: a plain torch device-to-device copy, GPU src → GPU dst, best of ``iters``
    (after one warm-up copy). The preflight compares NIXL's figure with this one, measured in the same run."""
    import torch

    a = torch.ones(size, dtype=torch.uint8, device=f"cuda:{src}")
    b = torch.empty(size, dtype=torch.uint8, device=f"cuda:{dst}")
    best = float("inf")
    for i in range(iters + 1):
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)
        started = time.perf_counter()
        b.copy_(a, non_blocking=True)
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)
        if i:  # the first copy warms up the peer mapping
            best = min(best, time.perf_counter() - started)
    del a, b
    return size / best / 1e9


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog="nixl_transfer.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="role", required=True)
    for role in ("target", "initiator"):
        p = sub.add_parser(role)
        p.error = parser.error  # type: ignore[method-assign]
        p.add_argument("--size", type=int, required=True)
        p.add_argument("--mem", choices=("dram", "vram"), default="dram")
        p.add_argument("--gpu", type=int, default=0)
        p.add_argument("--iters", type=int, default=4)
        p.add_argument("--timeout", type=float, default=120.0)
        if role == "target":
            p.add_argument("--meta-out", required=True)
            p.add_argument("--result-out", required=True)
            p.add_argument("--detach", action="store_true")
            p.add_argument("--log", default=os.devnull)
        else:
            p.add_argument("--meta-in", required=True)
            p.add_argument("--reference-gpu", type=int, help="also time a plain torch copy GPU --gpu → this GPU")
    args = parser.parse_args(argv)
    if args.size <= 0 or args.iters <= 0 or args.timeout <= 0:
        parser.error("--size, --iters and --timeout must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError:
        return 1
    if args.role == "target":
        if args.detach:
            detach(args.log)
        result = run_target(args)
        return 0 if result["ok"] else 3
    stdout = json_stdout()
    result = run_initiator(args)
    stdout.write(json.dumps(result) + "\n")
    stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
