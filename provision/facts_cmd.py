"""Gathering facts over a connection (for plays and for ``provision facts``)."""

from __future__ import annotations

import json
import posixpath
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import click

from .commands import MASKER
from .connection import Connection, open_connection
from .errors import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, HostError, UnreachableError
from .facts import facts_command, parse_facts
from .inventory import Inventory


def gather(conn: Connection, venv_path: str, timeout: float = 60.0) -> dict[str, Any]:
    """One round trip: run the gather script on the host and parse it into a JSON-able dict."""
    parent = posixpath.dirname(venv_path.rstrip("/")) or venv_path
    command, script = facts_command(parent)
    result = conn.run(command, timeout=timeout, stdin=script)
    if result.rc != 0:
        raise HostError(conn.name, f"fact gathering failed (rc={result.rc}): {result.tail()}")
    try:
        return parse_facts(result.stdout).to_dict()
    except ValueError as exc:  # what a host returns is not trusted: bad output fails that host, nothing more
        raise HostError(conn.name, f"fact gathering: {exc}") from None


def _summary(name: str, facts: dict[str, Any]) -> str:
    os_info = facts.get("os") or {}
    gpus = facts.get("gpus") or []
    py = ", ".join(f"{p['version']}" for p in facts.get("pythons") or [])
    disk = facts.get("disk") or {}
    free = f"{disk.get('free_bytes', 0) / 2**30:.0f} GiB free" if disk else "disk ?"
    gpu_text = f"{len(gpus)}x {gpus[0]['name']}" if gpus else "no GPU"
    cuda = f", driver {facts.get('driver_version')} (CUDA {facts.get('cuda_version')})" if gpus else ""
    return f"{name}: {os_info.get('pretty_name', '?')}; python {py or 'none'}; {free}; {gpu_text}{cuda}"


def run_facts(inventory: Inventory, options: Any, *, json_mode: bool) -> int:
    hosts = [h for h in inventory.select(options.limit or "all")]
    results: dict[str, Any] = {}
    code = EXIT_OK

    def one(host: Any) -> tuple[str, Any]:
        conn = open_connection(host.name, host.vars, options.connect)
        try:
            return host.name, gather(conn, str(host.vars.get("venv_path", options.defaults.get("venv_path", "~"))))
        except HostError as exc:
            return host.name, exc
        finally:
            conn.close()

    with ThreadPoolExecutor(max_workers=options.forks) as pool:
        for name, value in pool.map(one, hosts):
            results[name] = value
    doc: dict[str, Any] = {}
    for name, value in results.items():
        if isinstance(value, Exception):
            code = max(code, EXIT_UNREACHABLE if isinstance(value, UnreachableError) else EXIT_FAILED)
            click.echo(MASKER.mask(f"{name}: {'UNREACHABLE' if isinstance(value, UnreachableError) else 'FAILED'}"
                                   f" => {value.msg}"), err=True)  # type: ignore[attr-defined]  # fmt: skip
            doc[name] = {"failed": True, "msg": str(value)}
        else:
            doc[name] = value
            if not json_mode:
                click.echo(_summary(name, value))
    if json_mode or options.verbosity:
        click.echo(json.dumps(MASKER.mask_obj(doc), indent=2, default=str))
    return code
