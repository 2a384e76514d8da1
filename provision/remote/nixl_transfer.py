"""A real NIXL transfer between two agents in two processes, the way a PD pair moves KV cache.

Shipped to the hosts and run there by the ``nixl_transfer`` module with the venv's Python; stdlib + nixl +
numpy only (torch is imported only for ``"mem": "vram"``). Two actions in the host library's envelope
(``hostlib.serve``: the request a JSON object on stdin, ONE JSON answer, exit 1 when not ok):

    target     {"meta_out", "result_out", "size", "mem": dram|vram, "gpu", "iters", "timeout", "detach", "log"}
    initiator  {"meta_in", "size", "mem", "gpu", "iters", "timeout", "reference_gpu"}

The TARGET (decode side) allocates and registers a buffer, writes its agent metadata and serialized
descriptors to ``meta_out`` (atomically: the controller copies that file to the initiator's host), then
serves K iterations and writes ``{"ok", "verified", "iterations", "errors"}`` to ``result_out``. With
``detach`` it answers ``{"pid"}`` at once and goes on in the background (its own session, its output to
``log``).

The INITIATOR (prefill side) WRITEs into the target's buffer, as SGLang's prefill does:

1. ``add_remote_agent(meta)``, then a ``hello`` notification carrying its own metadata so the target can
   answer (the target acknowledges; that proves the reverse path too);
2. per iteration: fill the source with a pattern that differs each iteration, ``initialize_xfer("WRITE",
   ..., notif)`` where the notification carries the pattern's sha256, time ``transfer()`` → ``DONE``;
   the target hashes its buffer when the notification arrives and acknowledges with the verdict — the
   initiator waits for it, so the next iteration never overwrites bytes still being checked;
3. answers per-iteration seconds, best/median GB/s, verified (``ok: false`` and ``msg`` when it failed).

Every log line (NIXL's Python logger writes to stdout, UCX's ``UCX_PROTO_INFO=y`` table too) is sent to
stderr: stdout holds the answer only. The caller parses the UCX table from stderr.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import statistics
import sys
import time
import traceback
from types import SimpleNamespace
from typing import Any

import hostlib

POLL = 0.0005  # seconds between polls of a transfer's state
NOTIF_POLL = 0.002
BYE_WAIT = 5.0  # the target lingers this long after its last ack so that UCX delivers it


def json_stdout() -> Any:
    """Keep the real stdout for the JSON result; everything else written to fd 1 goes to stderr."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def write_atomic(path: str, obj: dict[str, Any]) -> None:
    hostlib.atomic_write(path, json.dumps(obj).encode(), 0o600)  # private from the first byte


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
def detach(log: str) -> int:
    """Fork into the background: the parent gets the child's pid (0 in the child, as ``fork``); the child gets
    its own session and sends stdin/stdout/stderr to ``log`` (so an SSH channel or a pipe closes)."""
    sys.stdout.flush()
    pid = os.fork()
    if pid:
        return pid
    os.setsid()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)
    return 0


def run_target(args: Any) -> dict[str, Any]:
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
def run_initiator(args: Any) -> dict[str, Any]:
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


def options(req: dict[str, Any], role: str) -> Any:
    """The request's fields with their defaults (a missing or mistyped one is a bad request)."""
    args = SimpleNamespace(
        size=int(req["size"]), mem=str(req.get("mem", "dram")), gpu=int(req.get("gpu", 0)),
        iters=int(req.get("iters", 4)), timeout=float(req.get("timeout", 120.0)),
    )  # fmt: skip
    if args.mem not in ("dram", "vram"):
        raise ValueError("mem must be dram or vram, not %r" % args.mem)
    if args.size <= 0 or args.iters <= 0 or args.timeout <= 0:
        raise ValueError("size, iters and timeout must be positive")
    if role == "target":
        args.meta_out, args.result_out = str(req["meta_out"]), str(req["result_out"])
        args.detach, args.log = bool(req.get("detach")), str(req.get("log") or os.devnull)
    else:
        args.meta_in = str(req["meta_in"])
        args.reference_gpu = None if req.get("reference_gpu") is None else int(req["reference_gpu"])
    return args


def _failed(result: dict[str, Any]) -> dict[str, Any]:
    if not result.get("ok"):
        result["msg"] = result.get("error") or "; ".join(result.get("errors", [])) or "failed"
    return result


def target(req: dict[str, Any]) -> dict[str, Any]:
    args = options(req, "target")
    if args.detach:
        pid = detach(args.log)
        if pid:
            return {"pid": pid}
    return _failed(run_target(args))  # (detached: the answer goes to the log)


def initiator(req: dict[str, Any]) -> dict[str, Any]:
    args = options(req, "initiator")
    stdout = json_stdout()
    try:
        return _failed(run_initiator(args))
    finally:
        sys.stdout = stdout  # the answer goes to the real stdout


ACTIONS = {"target": target, "initiator": initiator}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
