"""A CPU-mode SGLang server's start, to ``/health``, and what its requests cost, with and without one of CPU mode's
pieces.

    python benchmarks/cpu_server_start.py [--venv ~/.provision/venv] [--model ~/.provision/models/tiny-llama]
                                          [--role decode] [--runs 3] [--compare fork|threads|registry] [--requests N]

``--compare fork`` (the default): SGLang starts its scheduler and detokenizer with the ``spawn`` start method, and
each spawned child imports SGLang again; CPU mode's shipped ``provision_cpu_compat.py`` makes that ``fork``
(``PROVISION_CPU_SPAWN=1`` keeps ``spawn``: the anchor). ``--compare threads``: CPU mode sets
``OMP_NUM_THREADS=1``; the anchor leaves torch at its default, an intra-op thread per core (``--requests`` defaults
to 30 there). ``--compare registry``: in CPU mode SGLang's model registry imports only the model's own module; the
anchor sets ``SGLANG_DISABLED_MODEL_ARCHS`` empty (every module, as SGLang has it). Each run starts one server the
way a launch script does (the CPU flags and env of :mod:`provision.sglang.cpu_compat`, the shipped files first on
``PYTHONPATH``), waits for ``/health``, reads the CPU of every process of the server from ``/proc`` (its own and
its reaped children's) and their memory (PSS: shared pages counted once), then sends ``--requests`` generations one
after another (16 tokens each: the wall and the server's CPU for all of them), and kills it. The modes alternate;
each line is the median of ``--runs`` (wall s to ``/health``, CPU s and PSS of the whole server, the requests' wall
and CPU s, then CPU s to ``/health`` by process). Needs the SGLang venv and the tiny model that CPU mode's
``pd up`` leaves on a host (the README's ``provision run site.yml -i inventory/local.yml`` makes both); the model
is made when missing. CPU-mode numbers are plumbing: they say what a start costs this machine, not what a GPU
server does.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provision.remote import __file__ as remote_init  # noqa: E402
from provision.sglang import cpu_compat  # noqa: E402
from tests.support.waiting import free_port, http_status  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from ``/proc``."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += parents.get(p, [])
    return found


def cpu_of(pid: int) -> tuple[str, float] | None:
    """A process's name and CPU seconds (its own and its reaped children's)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    line = " ".join(argv)
    name = "launcher" if "sglang.launch_server" in line else "resource tracker" if "resource_tracker" in line else ""
    return name or Path(argv[0]).name, sum(int(f) for f in fields[11:15]) / TICK


def pss_mib(pid: int) -> float:
    """A process's proportional share of memory (shared pages divided among their users), MiB; 0 when gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def server_cpu(pid: int) -> float:
    """CPU seconds of a server: every live process of its tree, each with its reaped children."""
    return sum(c for _, c in filter(None, (cpu_of(p) for p in tree(pid))))


def generate(port: int, requests: int) -> None:
    """``requests`` generations one after another (a plain server: PD roles need a peer), 16 tokens each."""
    for i in range(requests):
        body = {"text": f"Hello world {i}", "sampling_params": {"max_new_tokens": 16, "temperature": 0,
                                                                "ignore_eos": True}}  # fmt: skip
        request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=120) as answer:
            answer.read()


def start_once(
    venv: Path, model: Path, role: str, env_mode: dict[str, str | None], log: Path, timeout: float, requests: int
) -> dict[str, object]:
    """One server started (``env_mode``: variables set over CPU mode's env, None removes one), measured, killed."""
    port = free_port()
    argv = [str(venv / "bin" / "python"), "-m", "sglang.launch_server", "--model-path", str(model),
            "--host", "127.0.0.1", "--port", str(port), "--nccl-port", str(free_port())]  # fmt: skip
    if requests == 0:  # a PD role's start; generations need a plain server (a PD server waits for its peer)
        argv += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl"]
        if role == "prefill":
            argv += ["--disaggregation-bootstrap-port", str(free_port())]
        if role == "decode":
            argv += [w for flag in cpu_compat.CPU_DECODE_FLAGS for w in flag]
    argv += [w for flag in cpu_compat.cpu_server_flags() for w in flag]
    env = {**os.environ, **cpu_compat.cpu_env(str(cpu_compat.SHIPPED_DIR))}
    env.pop("PROVISION_CPU_SPAWN", None)
    for name, value in env_mode.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while http_status(f"http://127.0.0.1:{port}/health") != 200:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited ({proc.returncode}) before /health: see {log}")
            if time.monotonic() - started > timeout:
                raise SystemExit(f"no /health after {timeout:.0f}s: see {log}")
            time.sleep(0.25)
        wall = time.monotonic() - started
        pids = tree(proc.pid)
        procs = [c for c in (cpu_of(p) for p in pids) if c is not None]
        cpu = sum(c for _, c in procs)
        pss = sum(pss_mib(p) for p in pids)
        begun = time.monotonic()
        generate(port, requests)
        request_wall, request_cpu = time.monotonic() - begun, server_cpu(proc.pid) - cpu
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    forked = "children are forked, not spawned" in log.read_text(errors="replace")
    return {"wall": wall, "cpu": cpu, "pss": pss, "procs": procs, "forked": forked,
            "request_wall": request_wall, "request_cpu": request_cpu}  # fmt: skip


# each comparison: (the anchor, CPU mode's way), as variables over CPU mode's env (None: unset)
MODES: dict[str, dict[str, dict[str, str | None]]] = {
    "fork": {"spawned (SGLang)": {"PROVISION_CPU_SPAWN": "1"}, "forked (CPU mode)": {}},
    "threads": {"a thread per core (torch)": {"OMP_NUM_THREADS": None}, "one thread (CPU mode)": {}},
    "registry": {"every model module (SGLang)": {"SGLANG_DISABLED_MODEL_ARCHS": ""}, "the model's own (CPU mode)": {}},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, default=Path.home() / ".provision" / "venv")
    ap.add_argument("--model", type=Path, default=Path.home() / ".provision" / "models" / "tiny-llama")
    ap.add_argument("--role", choices=("decode", "prefill"), default="decode")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--compare", choices=sorted(MODES), default="fork", help="which piece of CPU mode, on and off")
    ap.add_argument("--requests", type=int, default=None, help="generations after /health (threads: 30, fork: 0)")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of the lines")
    args = ap.parse_args()
    requests = args.requests if args.requests is not None else (30 if args.compare == "threads" else 0)
    role = args.role if requests == 0 else "plain (no PD role: its generations need no peer)"
    if not (args.venv / "bin" / "python").exists():
        raise SystemExit(f"no SGLang venv at {args.venv}: run the README's `provision run site.yml` first, or --venv")
    if not (args.model / "config.json").exists():
        maker = Path(remote_init).parent / "make_tiny_model.py"
        subprocess.run([str(args.venv / "bin" / "python"), str(maker), "make"], check=True, timeout=600,
                       input=json.dumps({"dest": str(args.model)}), text=True, capture_output=True)  # fmt: skip
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "provision-cpu-server-start.log"
    modes = MODES[args.compare]
    runs: dict[str, list[dict[str, object]]] = {mode: [] for mode in modes}
    for _ in range(args.runs):
        for mode, rows in runs.items():
            row = start_once(args.venv, args.model, args.role, modes[mode], log, args.timeout, requests)
            if row["forked"] == mode.startswith("spawned"):
                raise SystemExit(f"{mode}: the server's log says otherwise: see {log}")
            rows.append(row)
    summary = {}
    for mode, rows in runs.items():
        by_name: dict[str, list[float]] = {}
        for row in rows:
            for name, cpu in row["procs"]:  # type: ignore[attr-defined]
                by_name.setdefault(name, []).append(cpu)
        summary[mode] = {
            "wall_s": round(statistics.median(float(r["wall"]) for r in rows), 1),  # type: ignore[arg-type]
            "cpu_s": round(statistics.median(float(r["cpu"]) for r in rows), 1),  # type: ignore[arg-type]
            "pss_mib": round(statistics.median(float(r["pss"]) for r in rows)),  # type: ignore[arg-type]
            "requests_wall_s": round(statistics.median(float(r["request_wall"]) for r in rows), 2),  # type: ignore[arg-type]
            "requests_cpu_s": round(statistics.median(float(r["request_cpu"]) for r in rows), 2),  # type: ignore[arg-type]
            "by_process": {n: round(statistics.median(v), 1) for n, v in by_name.items()},
        }
    if args.json:
        print(json.dumps({"role": role, "runs": args.runs, "requests": requests, "modes": summary}, indent=1))
        return
    then = f", then {requests} generations of 16 tokens" if requests else ""
    print(f"a CPU-mode {role} server to /health{then}; medians of {args.runs} (alternating), {os.cpu_count()} cores")
    for mode, s in summary.items():
        procs = ", ".join(f"{n} {c}" for n, c in s["by_process"].items())  # type: ignore[attr-defined]
        done = f"requests: wall {s['requests_wall_s']:5.2f} s, CPU {s['requests_cpu_s']:5.2f} s   " if requests else ""
        start = f"wall {s['wall_s']:5.1f} s   CPU {s['cpu_s']:5.1f} s   PSS {s['pss_mib']:5} MiB"
        print(f"  {mode:26} {start}   {done}({procs})")


if __name__ == "__main__":
    main()
