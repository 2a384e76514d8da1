"""The model's task modules: ``model_sync`` (one host's ``model_path`` from a controller directory: the shipped
``model-sync.yml``; the fleet-wide sync with fan-out is ``provision model sync``), ``model_manifest`` (a host's
manifest of a directory, cached on the host) and ``model_same`` (pd-up: every server's manifest the same, else
a refusal naming the hosts and the first file that differs)."""

from __future__ import annotations

from typing import Any

from ..errors import ModuleError
from ..modules.base import Arg, Module, ModuleContext, ModuleResult, register
from .source import Source, SourceError, resolve
from .sync import Sync, SyncFailure, Target, call

SYNC_HINT = "sync them: provision model sync -i INVENTORY --src DIR"


@register
class ModelSync(Module):
    """``src`` (a controller directory or a hub id in the controller's cache) to ``dest`` on this host:
    verified by manifest, resumable, committed with one rename; ``ok`` when the host already holds it (one
    round trip). No fan-out: every host is sent its files by the controller."""

    name = "model_sync"
    args = {
        "src": Arg("str", required=True),
        "dest": Arg("path", required=True),
        "reserve_gb": Arg("float", default=0.0),
        "chunk_mb": Arg("int", default=64),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        try:
            source = resolve(str(args["src"]), [])
        except SourceError as exc:
            return ModuleResult(failed=True, msg=str(exc))
        if source.kind != "controller":
            return ModuleResult(failed=True, msg="model_sync: src is a directory on the controller (or a hub id)")
        target = Target(ctx.host, ctx, str(args["dest"]), ctx.host, int(args["reserve_gb"] * 1e9))
        sync = Sync(Source("controller", source.path, hub=source.hub), [target], fanout=False,
                    chunk=int(args["chunk_mb"]) << 20, check=ctx.check, timeout=ctx.timeout or 3600)  # fmt: skip
        try:
            result = sync.run()
        except (SourceError, SyncFailure) as exc:
            return ModuleResult(failed=True, msg=str(exc))
        host = result.hosts[ctx.host]
        data = {"sent": host.sent, "files": result.files, "size": result.size, "digest": result.digest,
                "path": target.path}  # fmt: skip
        if host.status in ("failed", "unreachable"):
            return ModuleResult(failed=True, msg=host.msg, data=data)
        return ModuleResult(changed=host.status == "changed", msg=host.msg, data=data)


@register
class ModelManifest(Module):
    """A directory's manifest on this host (``files``: path -> [size, sha256], ``digest``); ``exists: false``
    when there is none. Reads only (the host's cache aside: hashed again only what changed)."""

    name = "model_manifest"
    args = {"path": Arg("path", required=True)}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        try:
            answer = call(ctx, "manifest", {"dir": ctx.expand(args["path"])}, timeout=ctx.timeout or 3600)
        except SyncFailure as exc:
            return ModuleResult(failed=True, msg=f"model_manifest: {exc}")
        except ModuleError as exc:
            return ModuleResult(failed=True, msg=exc.msg)
        data = {"host": ctx.host, "path": answer.get("dir"), "exists": bool(answer.get("exists")),
                "files": answer.get("files") or {}, "digest": answer.get("digest")}  # fmt: skip
        what = f"{len(data['files'])} files, manifest {str(data['digest'])[:12]}" if data["exists"] else "missing"
        return ModuleResult(msg=f"{data['path']}: {what}", data=data)


def first_difference(a: dict[str, Any], b: dict[str, Any], name_a: str = "a", name_b: str = "b") -> str:
    """The first file (in path order) where two manifests differ, said in words."""
    for rel in sorted(set(a) | set(b)):
        if rel not in a or rel not in b:
            return f"{rel} (only on {name_b if rel not in a else name_a})"
        if list(a[rel]) != list(b[rel]):
            (sa, ha), (sb, hb) = a[rel], b[rel]
            if sa != sb:
                return f"{rel} ({sa:,} vs {sb:,} bytes)"
            return f"{rel} (sha256 {str(ha)[:12]} vs {str(hb)[:12]})"
    return "(none)"


def compare(manifests: list[Any]) -> tuple[bool, str]:
    """(same, message) for the registered ``model_manifest`` results of the servers (skipped ones ignored)."""
    got = [m for m in manifests if isinstance(m, dict) and not m.get("skipped") and "host" in m]
    if not got:
        return True, "no server's model directory to compare (tiny model or hub ids)"
    missing = [f"{m['host']} ({m.get('path')})" for m in got if not m.get("exists")]
    if missing:
        return False, f"the model directory is missing on {', '.join(missing)}: {SYNC_HINT}"
    groups: dict[str, list[dict[str, Any]]] = {}
    for m in got:
        groups.setdefault(str(m.get("digest")), []).append(m)
    if len(groups) == 1:
        count, digest = len(got[0]["files"]), next(iter(groups))[:12]
        return True, f"{len(got)} servers hold the same model ({count} files, manifest {digest})"
    ordered = sorted(groups.values(), key=len, reverse=True)
    ref = ordered[0][0]
    lines = []
    for group in ordered[1:]:
        other = group[0]
        names = ", ".join(m["host"] for m in group)
        diff = first_difference(ref["files"], other["files"], ref["host"], other["host"])
        lines.append(f"{names} vs {ref['host']}: first difference {diff}")
    return False, f"the servers' model directories differ: {'; '.join(lines)}: nothing was started; {SYNC_HINT}"


@register
class ModelSame(Module):
    """Every server holds the same model: ``manifests`` are the registered ``model_manifest`` results."""

    name = "model_same"
    controller_only = True
    args = {"manifests": Arg("list", required=True)}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        same, msg = compare(list(args["manifests"]))
        return ModuleResult(failed=not same, msg=msg)


__all__ = ["ModelManifest", "ModelSame", "ModelSync", "compare", "first_difference"]
