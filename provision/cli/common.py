"""What every command shares: the option set (``common_options``), ``-e`` parsing, the inventory and run
options they build, ``execute`` (run plays, report, exit code) and the debug log.

Imported by :mod:`.app` and :mod:`.pd`; imports the engine (executor, plan, report, ...), never another cli
module.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import yaml

from ..commands import MASKER
from ..data import defaults
from ..errors import EXIT_FAILED, EXIT_UNREACHABLE, InputError, UsageError
from ..executor import Executor, InternalError, playbook_dir_of
from ..inventory import MAX_DEPTH, Inventory, nesting_too_deep
from ..localfiles import append_private
from ..masking import register_inventory_secrets
from ..playbook import Play
from ..report import Reporter, write_retry_file
from ..results import RunSummary
from ..state import RunOptions
from ..transport import ConnectOptions

DEBUG_LOG = Path(os.environ.get("PROVISION_DEBUG_LOG", "~/.cache/provision/debug.log")).expanduser()
STATE: dict[str, int] = {"verbosity": 0}  # this invocation's -v count (and the signal that stopped it)
ARGV: list[str] = []  # this invocation's arguments, for the debug log (masked there)


# ------------------------------------------------------------------------------------------- option helpers
def parse_extra_vars(values: tuple[str, ...]) -> dict[str, Any]:
    """``-e k=v k2='v 2'``, ``-e @file.yml`` or ``-e '{"json": 1}'``; later ones win.

    Extra vars often carry secrets, so an error never quotes their text: it names the file, line and column.
    The secret-named values are registered with MASKER as soon as they are parsed."""
    out: dict[str, Any] = {}
    for value in values:
        text = value.strip()
        if text.startswith("@"):
            out.update(_extra_vars_file(Path(text[1:])))
        elif text.startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(f"-e: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
            except RecursionError:
                raise InputError("-e: JSON nested too deeply") from None
            if not isinstance(data, dict):
                raise InputError("-e: JSON extra vars must be an object")
            out.update(data)
        else:
            try:
                words = shlex.split(text)
            except ValueError as exc:
                raise InputError(f"-e: cannot split key=value words: {exc}") from None
            for n, word in enumerate(words, 1):
                if "=" not in word:
                    raise InputError(f"-e: expected key=value, @file or JSON; word {n} has no '='")
                key, val = word.split("=", 1)
                if not key.isidentifier():
                    raise InputError(f"-e: word {n}: {key!r} is not a valid variable name")
                out[key] = val
        MASKER.add_vars(out)
    if nesting_too_deep(out):
        raise InputError(f"-e: values nested deeper than {MAX_DEPTH} levels")
    return out


def _extra_vars_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"-e @file: cannot read: {exc.strerror}", file=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"-e @file: not UTF-8 text (byte {exc.start})", file=str(path)) from None
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise InputError("-e @file: nested too deeply", file=str(path)) from None
    except yaml.YAMLError as exc:
        # str(exc) quotes the offending line: only the problem and its position are shown
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or type(exc).__name__
        column = f", column {mark.column + 1}" if mark else ""
        raise InputError(
            f"-e @file: invalid YAML{column}: {problem}", file=str(path), line=mark.line + 1 if mark else None
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else type(data).__name__
        raise InputError(f"-e @file must hold a mapping, not a {kind}", file=str(path))
    if not all(isinstance(k, str) for k in data):
        raise InputError("-e @file must hold a mapping of variable names", file=str(path))
    return data


class Seconds(click.ParamType):
    """A finite number of seconds > 0 (``nan``, ``inf``, 0 and negatives are refused up front)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds > 0):
            self.fail(f"{value!r} is not a number of seconds > 0", param, ctx)
        return seconds


def remember_verbosity(ctx: click.Context, param: click.Parameter, value: int) -> int:
    """Known before anything is loaded: -vvv shows the traceback of an input error too."""
    STATE["verbosity"] = value
    return value


def common_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("-i", "--inventory", "inventories", multiple=True, help="inventory file or dir (repeatable)"),
        click.option("-l", "--limit", help="host pattern: names, groups, globs, !exclude, &intersect, @file"),
        click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; always wins"),
        click.option("-f", "--forks", type=click.IntRange(1, 1000), default=20, show_default=True),
        click.option("--json", "json_mode", is_flag=True, help="one JSON document on stdout"),
        click.option("-v", "--verbose", "verbosity", count=True, help="-v results, -vvv tracebacks",
                     is_eager=True, callback=remember_verbosity),
        click.option("--accept-new-host-keys", is_flag=True, help="trust unknown host keys and save them"),
        click.option("--connect-timeout", type=Seconds(), default=10.0, show_default=True),
        click.option("-T", "--timeout", "command_timeout", type=Seconds(), default=1800.0, show_default=True,
                     help="default timeout of each remote command (s)"),
    ]  # fmt: skip
    for option in reversed(options):
        fn = option(fn)
    return fn


def load_inventory(inventories: tuple[str, ...], extra: dict[str, Any], *, trace: bool = False) -> Inventory:
    paths = list(inventories) or [p for p in [os.environ.get("PROVISION_INVENTORY")] if p]
    if not paths:
        raise UsageError("no inventory given: use -i INVENTORY (or set PROVISION_INVENTORY)")
    inventory = Inventory.load(paths, extra, trace=trace)
    default_router(inventory)
    register_inventory_secrets(inventory, extra)
    return inventory


def default_router(inventory: Inventory) -> None:
    """An inventory with a ``prefill`` group and no ``router`` group gets the router on its first prefill
    host (an implicit ``router`` group; ``provision inventory --graph`` shows it), so two hosts in
    ``prefill``/``decode`` are a whole deployment. A ``router`` group, even an empty one, is left as it is."""
    prefill = inventory.group_members("prefill")
    if prefill and "router" not in inventory.groups:
        inventory.add_group("router", prefill[:1])


def run_options(kw: dict[str, Any], extra: dict[str, Any], **more: Any) -> RunOptions:
    STATE["verbosity"] = kw["verbosity"]
    return RunOptions(
        forks=kw["forks"],
        limit=kw["limit"],
        extra_vars=extra,
        verbosity=kw["verbosity"],
        command_timeout=kw["command_timeout"],
        defaults=defaults(),  # every run, shipped playbook or not: docs/architecture.md, "Defaults"
        connect=ConnectOptions(
            connect_timeout=kw["connect_timeout"],
            accept_new_host_keys=kw["accept_new_host_keys"],
        ),
        **more,
    )


def execute(plays: list[Play], inventory: Inventory, options: RunOptions, *, json_mode: bool, playbook: str) -> int:
    """Run plays and report; returns the exit code. An internal error (a bug, see executor.InternalError) still
    gets the recap and the retry file, then one line naming it and exit 2; its traceback goes to the debug log
    (and to stderr with -vvv)."""
    reporter = Reporter(json_mode=json_mode, verbosity=options.verbosity)
    executor = Executor(inventory, options, reporter, playbook_dir_of(playbook))
    try:
        summary = executor.run(plays)
    finally:
        executor.close()
    errors = executor.internal_errors
    try:
        reporter.recap(summary)
    except Exception as exc:
        errors.append(InternalError(f"internal error in the recap: {type(exc).__name__}: {exc}", exc))
        _plain_recap(summary)
    retry = write_retry_file(playbook, summary)
    if retry:
        click.echo(MASKER.mask(f"retry file: {retry} (rerun just those hosts with -l @{retry})"), err=json_mode)
    if json_mode:
        reporter.emit_json(summary)
    code = summary.exit_code()
    for error in errors:
        debug_log("".join(traceback.format_exception(error.exc)))
        if options.verbosity >= 3:
            traceback.print_exception(error.exc, file=sys.stderr)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        click.echo(MASKER.mask(f"ERROR: {errors[0].message}{more}; this is a bug in provision, "
                               f"the traceback is in {DEBUG_LOG}"), err=True)  # fmt: skip
        return EXIT_FAILED if code in (0, EXIT_UNREACHABLE) else code
    if code:
        reason = summary.aborted or (
            f"failed hosts: {', '.join(summary.failed_hosts)}" if summary.failed_hosts
            else f"unreachable hosts: {', '.join(summary.unreachable_hosts)}"
        )  # fmt: skip
        click.echo(MASKER.mask(f"ERROR: {reason}"), err=True)
        failures = "".join(f"  {r.host}: {r.task}: {r.status.value}: {r.msg}\n" for r in reporter.failures)
        debug_log(f"ERROR: {reason}\n{failures}")
    return code


def _plain_recap(summary: RunSummary) -> None:
    """The recap without the reporter (when the reporter is what failed)."""
    click.echo("\nPLAY RECAP")
    for host, st in summary.stats.items():
        click.echo(MASKER.mask(f"{host} : ok={st.ok} changed={st.changed} unreachable={st.unreachable} "
                               f"failed={st.failed} skipped={st.skipped} ignored={st.ignored}"))  # fmt: skip


def debug_log(text: str) -> None:
    """Append one record (masked) to the debug log: created 0600, never written through a symlink."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record = f"--- {stamp} provision {shlex.join(ARGV)}\n{text.rstrip()}\n"
    with contextlib.suppress(OSError):
        append_private(DEBUG_LOG, MASKER.mask(record))
