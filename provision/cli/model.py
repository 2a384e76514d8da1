"""``provision model sync -i INV --src DIR|HOST:DIR|org/name[@rev]``: the model directory to every server's
``model_path``, verified by manifest, resumable, fanned out host to host (:func:`provision.api.model_sync`,
:mod:`provision.model.sync`). Prints one line per host and a total; ``--json`` the result. Exit 0 when every
host holds the model, 2 when one failed (short of disk, a transfer that failed), 4 when one was unreachable.
"""

from __future__ import annotations

import json
from typing import Any

import click

from .common import Group, api_options, common_options, load_fleet, mask, parse_extra_vars


@click.group("model", cls=Group)
def model() -> None:
    """Model weights on the hosts: sync a model directory to every server's model_path."""


@model.command("sync")
@common_options
@click.option("--src", required=True, help="a directory here, HOST:DIR on a seed host, or a hub id org/name[@rev]")
@click.option("--no-fanout", is_flag=True, help="send from the source only (no host serves another)")
@click.option("--slots", type=click.IntRange(1, 64), default=2, show_default=True,
              help="transfers at once from each source")  # fmt: skip
@click.option("--chunk-mb", type=click.IntRange(1, 1024), default=64, show_default=True,
              help="MiB per SSH write from the controller")  # fmt: skip
@click.option("-C", "--check", is_flag=True, help="say what would be sent, send nothing")
def sync(src: str, no_fanout: bool, slots: int, chunk_mb: int, check: bool, **kw: Any) -> int:
    """Sync --src to the model_path of the selected hosts (default: prefill and decode)."""
    from .. import api

    fleet = load_fleet(kw["inventories"], parse_extra_vars(kw["extra_vars"]))
    echo = (lambda line: click.echo(mask(line), err=True)) if kw["verbosity"] else None
    result = api.model_sync(fleet, src, fanout=not no_fanout, slots=slots, chunk_mb=chunk_mb, on_line=echo,
                            **api_options(kw, check=check))  # fmt: skip
    if kw["json_mode"]:
        click.echo(mask(json.dumps(result.as_dict(), indent=1, sort_keys=True)))
        return result.exit_code
    for host in result.hosts.values():
        click.echo(mask(f"{host.host}: {host.status}: {host.msg}"))
    peers = sum(1 for h in result.hosts.values() if h.sent and h.source != "controller")
    click.echo(
        f"{result.source}: {result.files} files, {result.size / 1e6:.0f} MB, manifest {result.digest[:12]}; "
        f"{len(result.hosts)} host(s), {result.sent / 1e6:.0f} MB sent ({peers} from a peer) in {result.seconds:.1f}s"
    )
    return result.exit_code


__all__ = ["model"]
