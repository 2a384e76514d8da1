"""NIXL checks: ``nixl_smoke`` (the seed's gate: the plugins load) and ``nixl_transfer`` (a real KV-style
transfer between two hosts, verified and measured).

Both run the package's remote helpers (``provision/remote/nixl_probe.py``, ``nixl_transfer.py``) with the
venv's Python on the host; they change nothing on the hosts (temp files are removed), so they run in check
mode too and always report ``changed: false``.

``nixl_transfer`` runs on the INITIATOR (prefill) host and WRITEs into the ``target`` (decode) host's memory,
as SGLang's prefill does::

    controller                  target host (decode)                  initiator host (prefill)
    put script ─────────────▶  nixl_transfer.py target --detach
    get meta.json ◀──────────  (agent metadata + buffer descriptors)
    put meta.json ─────────────────────────────────────────────▶  nixl_transfer.py initiator
                                ◀═══════ UCX: K verified WRITEs ══════  (UCX_PROTO_INFO=y)
    get result.json ◀────────  verified per iteration                JSON: GB/s; stderr: UCX's table

Metadata travels over the controller's connections: no port is needed besides UCX's own.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

from .. import remote
from ..commands import Command
from ..errors import HostError, ModuleError
from ..modules.base import Arg, HelperError, Module, ModuleContext, ModuleResult, helper_answer, register
from ..transport import Connection
from ..transport.base import lock_name as lock_safe
from .pairing import choose_pair
from .ucx import check_ucx_env, default_min_gbps, diagnostics, parse_proto_info, split_list, ucx_env

LINKS = ("nvlink", "pcie", "cross-host", "loopback")
SCRIPT = "nixl_transfer.py"
POLL_SECONDS = 0.2


def venv_python(ctx_or_conn: ModuleContext | Connection, venv: str) -> str:
    expand = ctx_or_conn.expand if isinstance(ctx_or_conn, ModuleContext) else ctx_or_conn.expand_path
    return expand(venv.rstrip("/")) + "/bin/python"


VENV_HINT = "is the venv there?"


# ------------------------------------------------------------------------------------------------ smoke
@register
class NixlSmoke(Module):
    """Import nixl, list its plugins, require ``backends`` (and VRAM support on GPU hosts)."""

    name = "nixl_smoke"
    show_msg = True
    args = {
        "venv": Arg("path", required=True),
        "backends": Arg("list", default=("UCX",)),
        "require_vram": Arg("bool", default=False),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        python = venv_python(ctx, args["venv"])
        request = {"backends": [str(b) for b in args["backends"]] or ["UCX"], "require_vram": args["require_vram"]}
        try:  # the probe reports a failed smoke test in its answer (rc 1)
            report = ctx.call_helper(
                "nixl_probe.py", "probe", stdin=json.dumps(request).encode(), python=python, timeout=120,
                what="the NIXL probe", hint=VENV_HINT, check_rc=False,
            )  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        data = {
            "nixl_version": report.get("nixl_version"),
            "variant": report.get("variant"),
            "plugins": report.get("plugins", []),
            "mem_types": report.get("mem_types", {}),
            "import_seconds": report.get("import_seconds"),
            "plugin_dir": report.get("plugin_dir"),
        }
        if not report.get("ok"):
            msg = f"NIXL smoke test failed: {report.get('error') or report.get('msg')}"
            if report.get("hint"):
                msg += f" — {report['hint']}"
            return ModuleResult(failed=True, msg=msg, data={**data, "report": report})
        mems = "; ".join(f"{b} {','.join(m)}" for b, m in data["mem_types"].items())
        msg = f"nixl {data['nixl_version']} ({data['variant']}): {mems}; import {data['import_seconds']}s"
        return ModuleResult(changed=False, msg=msg, data=data)


# --------------------------------------------------------------------------------------------- transfer
@register
class NixlTransfer(Module):
    """A verified, timed NIXL WRITE from this host (prefill) into ``target``'s memory (decode)."""

    name = "nixl_transfer"
    show_msg = True
    args = {
        "venv": Arg("path", required=True),
        "target": Arg("str", required=True),
        "size_mb": Arg("int", default=64),
        # auto: chosen from both hosts' facts and vars (provision.nixl.pairing): VRAM when both have GPUs
        "mem": Arg("str", default="dram", choices=("dram", "vram", "auto")),
        "src_gpu": Arg("int"),
        "dst_gpu": Arg("int"),
        "iters": Arg("int", default=4),
        "min_gbps": Arg("float"),
        "link": Arg("str", choices=LINKS),
        "ucx_tls": Arg("raw"),
        "ucx_net_devices": Arg("raw"),
        "timeout": Arg("float", default=120.0),
        # same-host VRAM pairs: also time a plain GPU→GPU copy in the same run, and fail when NIXL reaches
        # less than this share of it (0.9: "within 10% of what the link does")
        "reference_copy": Arg("bool", default=True),
        # false: a UCX_TLS known to be bad is reported as a warning and the transfer runs anyway, so its
        # cost is measured (e.g. no cuda_ipc on a same-host GPU pair); the floor still gives the verdict
        "ucx_env_check": Arg("bool", default=True),
        "min_copy_ratio": Arg("float"),
        # a pass is remembered on this host (~/.provision/preflight/TARGET.json) with what it depended on: both
        # hosts' stack (the venv's real path and its site-packages' mtime) and boot, the pair's memory, GPUs
        # and link, the size, the UCX settings and the floor. The same inputs within max_age_hours report the
        # remembered figures instead of measuring again; cache: false (preflight_force) always measures.
        "cache": Arg("bool", default=True),
        "max_age_hours": Arg("float", default=24.0),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if ctx.peer is None:
            return ModuleResult(failed=True, msg="nixl_transfer needs the target's connection (no peers here)")
        if args["size_mb"] <= 0 or args["iters"] <= 0:
            return ModuleResult(failed=True, msg="nixl_transfer: size_mb and iters must be positive")
        peer = ctx.peer(args["target"])
        args = _resolve_pair(ctx, args)
        mine, theirs = _identity(ctx.conn, args["venv"]), _identity(peer, args["venv"])
        same_host = args["target"] == ctx.host or (mine["boot"] is not None and mine["boot"] == theirs["boot"])
        link = args["link"] or _default_link(args["mem"], same_host)
        size = args["size_mb"] * 1024 * 1024
        floor = args["min_gbps"] if args["min_gbps"] is not None else default_min_gbps(link, size)

        ucx_vars = {
            "ucx_tls": _first(args["ucx_tls"], ctx.environment.get("UCX_TLS"), ctx.variables.get("ucx_tls")),
            "ucx_net_devices": _first(
                args["ucx_net_devices"],
                ctx.environment.get("UCX_NET_DEVICES"),
                ctx.variables.get("ucx_net_devices"),
            ),
        }
        problems = check_ucx_env(
            split_list(ucx_vars["ucx_tls"]),
            split_list(ucx_vars["ucx_net_devices"]),
            same_host_gpu_pair=same_host and args["mem"] == "vram",
        )
        errors = [p.message for p in problems if p.level == "error"]
        if errors and args["ucx_env_check"]:
            return ModuleResult(failed=True, msg="UCX environment: " + "; ".join(errors))
        env = {**ctx.environment, **ucx_env(ucx_vars)}
        inputs = {k: v for k, v in args.items() if k not in ("cache", "max_age_hours", "timeout")}
        key = _stamp_key(inputs, env, floor, link, mine, theirs)
        stamp_path = f"~/.provision/preflight/{lock_safe(args['target'])}.json"
        if args["cache"]:
            remembered = _remembered(ctx, stamp_path, key, args["max_age_hours"])
            if remembered is not None:
                return remembered
        run = _Run(ctx, peer, args, env)
        run.same_host = same_host
        try:
            result = run.execute()
        finally:
            run.cleanup()
        result.data.update(floor=floor, link=link, same_host=same_host)
        result.data["warnings"] = [p.message for p in problems]
        judged = _judge(result, floor, link, args, ctx.host)
        if not judged.failed and not ctx.check:
            _remember(ctx, stamp_path, key, judged)
        return judged


def _resolve_pair(ctx: ModuleContext, args: dict[str, Any]) -> dict[str, Any]:
    """``mem: auto``: memory, GPUs and link from both hosts' vars (:func:`choose_pair`); given values win."""
    if args["mem"] != "auto":
        return {**args, "src_gpu": args["src_gpu"] or 0, "dst_gpu": args["dst_gpu"] or 0}
    target = args["target"]
    hostvars = ctx.variables.get("hostvars") or {}  # executor.task_vars.HostVarsView: each host rendered lazily
    mine = {k: ctx.variables.get(k) for k in ("ansible_facts", "base_gpu_id", "tp")}
    theirs = hostvars.get(target) or {}
    peer = {k: theirs.get(k) for k in ("ansible_facts", "base_gpu_id", "tp")}
    pair = choose_pair(mine, peer, same_inventory_host=target == ctx.host)
    given = {k: args[k] for k in ("src_gpu", "dst_gpu", "link") if args[k] is not None}
    return {**args, "mem": pair.mem, "src_gpu": pair.src_gpu, "dst_gpu": pair.dst_gpu, "link": pair.link, **given}


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None and v != ""), None)


def _default_link(mem: str, same_host: bool) -> str:
    if not same_host:
        return "cross-host"
    return "loopback" if mem == "dram" else "pcie"


# what a host's side of a transfer depends on, in one round trip: the venv's real path (an install makes a new
# env and switches the link), the mtime of its site-packages (a package changed in place) and the boot id
# (the same machine: cuda_ipc applies; a reboot re-measures)
_IDENTITY = (
    'v=$(readlink -f "$1" 2>/dev/null || echo "$1"); echo "$v"; '
    'for d in "$v"/lib/python*/site-packages; do stat -c %Y "$d" 2>/dev/null; done | sort | tr "\\n" " "; echo; '
    "cat /proc/sys/kernel/random/boot_id 2>/dev/null || cat /etc/machine-id 2>/dev/null || echo"
)


def _identity(conn: Connection, venv: str) -> dict[str, str | None]:
    try:
        result = conn.run(Command.of("sh", "-c", _IDENTITY, "identity", conn.expand_path(venv)), timeout=30)
    except HostError:
        return {"venv": None, "mtime": None, "boot": None}
    lines = [*result.stdout.splitlines(), "", "", ""][:3]
    return {"venv": lines[0].strip() or None, "mtime": lines[1].strip() or None, "boot": lines[2].strip() or None}


def _stamp_key(
    inputs: dict[str, Any], env: dict[str, str], floor: float, link: str, mine: dict[str, Any], theirs: dict[str, Any]
) -> str:
    ucx = {k: v for k, v in env.items() if k.startswith("UCX_")}
    doc = json.dumps([inputs, ucx, floor, link, mine, theirs], sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()


def _remembered(ctx: ModuleContext, path: str, key: str, max_age_hours: float) -> ModuleResult | None:
    """The pass remembered for the same inputs, if it is recent enough."""
    try:
        raw = ctx.get(path)
        stamp = json.loads(raw) if raw else None
    except (HostError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("key") != key or not isinstance(stamp.get("time"), (int, float)):
        return None
    age = time.time() - float(stamp["time"])
    if age < 0 or age > max_age_hours * 3600:
        return None
    data: dict[str, Any] = stamp["data"] if isinstance(stamp.get("data"), dict) else {}
    when = f"{age / 60:.0f} min" if age < 7200 else f"{age / 3600:.1f} h"
    msg = (
        f"{stamp.get('msg', 'passed')} — not measured again: it passed {when} ago for the same stack, boot, link "
        "and settings (-e preflight_force=true measures again)"
    )
    return ModuleResult(changed=False, msg=msg, data={**data, "cached": True, "age_seconds": round(age)})


def _remember(ctx: ModuleContext, path: str, key: str, result: ModuleResult) -> None:
    keep = ("gbps_best", "gbps_median", "transports", "floor", "link", "same_host", "mem", "copy_gbps", "size_bytes")
    stamp = {"key": key, "time": time.time(), "msg": result.msg, "data": {k: result.data.get(k) for k in keep}}
    try:
        ctx.run(Command.of("mkdir", "-p", "-m", "700", ctx.expand("~/.provision/preflight")), timeout=30)
        ctx.put(json.dumps(stamp).encode(), path, 0o600)
    except HostError:
        pass  # not remembering only costs a measurement next time


def _judge(result: ModuleResult, floor: float, link: str, args: dict[str, Any], host: str) -> ModuleResult:
    if result.failed:
        return result
    d = result.data
    kind = args["mem"].upper()
    over = f" over {', '.join(d['transports'])}" if d["transports"] else ""
    head = f"{args['size_mb']} MiB {kind}→{kind} {host}→{args['target']}"
    figures = f"best {d['gbps_best']:.2f} GB/s (median {d['gbps_median']:.2f}){over}"
    if not d["verified"]:
        return ModuleResult(failed=True, msg=f"{head}: {figures}, but the bytes did NOT verify", data=d)
    if d["gbps_best"] < floor:
        hint = ""
        local_gpus = d.get("same_host") or link in ("nvlink", "pcie") or link.upper().startswith("NV")
        if args["mem"] == "vram" and local_gpus and not any("cuda_ipc" in t for t in d["transports"]):
            hint = " — UCX did not use cuda_ipc (check UCX_TLS)"
        msg = f"{head}: {figures} is below the floor of {floor:g} GB/s for a {link} link{hint}"
        return ModuleResult(failed=True, msg=msg, data=d)
    copy = d.get("copy_gbps")
    if copy:
        d["copy_ratio"] = round(d["gbps_best"] / copy, 3)
        figures += f"; a plain GPU copy does {copy:.2f} GB/s here ({100 * d['copy_ratio']:.0f}%)"
        wanted = args.get("min_copy_ratio")
        if wanted and d["copy_ratio"] < wanted:
            msg = f"{head}: {figures}: below {100 * wanted:.0f}% of what the link does"
            return ModuleResult(failed=True, msg=msg, data=d)
    warnings = "".join(f" (warning: {w})" for w in d.get("warnings", []))
    return ModuleResult(changed=False, msg=f"{head}: {figures}, bytes verified{warnings}", data=d)


class _Run:
    """One transfer: files under ``~/.provision/nixl-<id>-{t,i}`` on each side, removed afterwards."""

    def __init__(self, ctx: ModuleContext, peer: Connection, args: dict[str, Any], env: dict[str, str]) -> None:
        self.ctx, self.peer, self.args, self.env = ctx, peer, args, env
        tag = uuid.uuid4().hex[:10]
        self.tdir = peer.expand_path(f"~/.provision/nixl-{tag}-t")
        self.idir = ctx.expand(f"~/.provision/nixl-{tag}-i")
        self.size = args["size_mb"] * 1024 * 1024
        self.deadline = time.monotonic() + args["timeout"]
        self.source = remote.source(SCRIPT)
        self.target_pid: int | None = None
        self.finished = False
        self.same_host = False

    def progress(self, line: str) -> None:
        if self.ctx.progress:
            self.ctx.progress(line)

    def execute(self) -> ModuleResult:
        meta, failure = self.start_target()
        if failure:
            return failure
        assert meta is not None
        self.ctx.run(Command.of("mkdir", "-p", "-m", "700", self.idir), check_rc=True, timeout=30)
        self.ctx.put(meta, f"{self.idir}/meta.json", 0o600)
        self.progress(f"writing {self.args['size_mb']} MiB x {self.args['iters']} into {self.args['target']}")
        python = venv_python(self.ctx, self.args["venv"])
        request = {"meta_in": f"{self.idir}/meta.json", **self.common(self.args["src_gpu"]), **self.reference()}
        result = self.ctx.run_script(
            SCRIPT, "initiator", python=python, env={**self.env, "UCX_PROTO_INFO": "y"},
            stdin=json.dumps(request).encode(), timeout=self.args["timeout"] + 30,
        )  # fmt: skip
        try:  # the raw result too: its stderr holds UCX_PROTO_INFO's lines
            report = helper_answer(
                result, self.ctx.host, SCRIPT, python, what="the NIXL initiator", hint=VENV_HINT, check_rc=False
            )
        except HelperError as exc:
            return exc.as_result()
        target = self.wait_target_result()
        data: dict[str, Any] = {
            "gbps_best": report.get("gbps_best"),
            "gbps_median": report.get("gbps_median"),
            "size_bytes": self.size,
            "mem": self.args["mem"],
            "mem_types": report.get("mem_types"),
            "transports": parse_proto_info(result.stderr, mem=self.args["mem"]),
            "iterations": report.get("iterations", []),
            "copy_gbps": report.get("copy_gbps"),
            "verified": bool(report.get("verified")) and bool(target and target.get("verified")),
            "target_result": target,
        }
        if not report.get("ok") or not target:
            why = report.get("msg") or (target or {}).get("error") or "the target wrote no result"
            tail = "\n".join(diagnostics(result.stderr) or result.stderr.strip().splitlines()[-8:])
            return ModuleResult(
                failed=True, msg=f"NIXL transfer to {self.args['target']} failed: {why}\n{tail}", data=data
            )
        self.finished = True
        return ModuleResult(data=data)

    def reference(self) -> dict[str, Any]:
        a = self.args
        if a["mem"] != "vram" or not a["reference_copy"] or not self.same_host:
            return {}
        return {"reference_gpu": a["dst_gpu"]}

    def common(self, gpu: int) -> dict[str, Any]:
        a = self.args
        return {"size": self.size, "mem": a["mem"], "gpu": gpu, "iters": a["iters"], "timeout": a["timeout"]}

    def start_target(self) -> tuple[bytes | None, ModuleResult | None]:
        """Launch the target detached on the peer; wait for its metadata (or its early failure)."""
        peer, t = self.peer, self.tdir
        self.progress(f"starting the NIXL target on {self.args['target']}")
        _check(peer, Command.of("mkdir", "-p", "-m", "700", t))
        peer.put(self.source, f"{t}/{SCRIPT}", 0o700)
        python = venv_python(peer, self.args["venv"])
        request = {"meta_out": f"{t}/meta.json", "result_out": f"{t}/result.json",
                   **self.common(self.args["dst_gpu"]), "detach": True, "log": f"{t}/target.log"}  # fmt: skip
        cmd = Command.of(python, f"{t}/{SCRIPT}", "target").with_env(self.env)
        launched = peer.run(cmd, timeout=60, stdin=json.dumps(request).encode())
        try:
            what = f"starting the NIXL target on {self.args['target']}"
            report = helper_answer(launched, self.args["target"], SCRIPT, python, what=what, hint=VENV_HINT)
        except HelperError as exc:
            return None, exc.as_result()
        self.target_pid = int(report["pid"])
        while time.monotonic() < self.deadline:
            meta = peer.get(f"{t}/meta.json")
            if meta is not None:
                return meta, None
            failed = peer.get(f"{t}/result.json")
            if failed is not None:
                return None, self.target_failed(json.loads(failed))
            time.sleep(POLL_SECONDS)
        return None, self.target_failed({"error": f"no metadata within {self.args['timeout']:g}s"})

    def target_failed(self, result: dict[str, Any]) -> ModuleResult:
        log = (self.peer.get(f"{self.tdir}/target.log") or b"").decode(errors="replace")
        tail = "\n".join(diagnostics(log) or log.strip().splitlines()[-8:])
        error = result.get("error") or "; ".join(result.get("errors", [])) or "unknown error"
        msg = f"the NIXL target on {self.args['target']} failed: {error}"
        if "NIXL_ERR_BACKEND" in error + log:
            msg += " (UCX backend creation failed: check UCX_TLS includes tcp and UCX_NET_DEVICES)"
        return ModuleResult(failed=True, msg=f"{msg}\n{tail}".rstrip(), data={"target_result": result})

    def wait_target_result(self) -> dict[str, Any] | None:
        deadline = min(self.deadline, time.monotonic() + 15)
        while True:
            raw = self.peer.get(f"{self.tdir}/result.json")
            if raw is not None:
                value = json.loads(raw)
                return value if isinstance(value, dict) else None
            if time.monotonic() > deadline:
                return None
            time.sleep(POLL_SECONDS)

    def cleanup(self) -> None:
        """Stop a target still running (only if /proc shows it is ours) and remove both temp dirs."""
        try:
            if self.target_pid and not self.finished:
                proc = self.peer.run(Command.of("cat", f"/proc/{self.target_pid}/cmdline"), timeout=30)
                if self.tdir in proc.stdout:
                    self.peer.run(Command.of("kill", str(self.target_pid)), timeout=30)
            self.peer.run(Command.of("rm", "-rf", self.tdir), timeout=60)
            self.ctx.run(Command.of("rm", "-rf", self.idir), timeout=60)
        except HostError:
            pass  # cleanup must not hide the transfer's own result


def _check(conn: Connection, cmd: Command) -> None:
    result = conn.run(cmd, timeout=30)
    if result.rc != 0:
        raise ModuleError(conn.name, f"command failed (rc={result.rc}): {result.command}\n{result.tail()}")
