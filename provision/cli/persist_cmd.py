"""``provision persist status|stop``: the user's keeper of SSH connections (``--persist SECONDS``, see
:mod:`provision.transport.persist`)."""

from __future__ import annotations

import json

import click

from .common import Group


@click.group("persist", cls=Group)
def persist_cmd() -> None:
    """The connections kept between runs (--persist SECONDS): status, stop."""


@persist_cmd.command("status")
def status() -> None:
    """Whether a keeper runs, and how many connections it keeps (JSON)."""
    from ..transport import persist

    doc = persist.status()
    click.echo(json.dumps(doc if doc is not None else {"running": False}))


@persist_cmd.command("stop")
def stop() -> None:
    """End the keeper: every kept connection closes."""
    from ..transport import persist

    click.echo("stopped" if persist.stop() else "no keeper running")
