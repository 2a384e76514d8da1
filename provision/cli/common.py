"""What every command shares: the option set (``common_options``), the fleet and the API options they
build (``load_fleet``, ``api_options``), ``execute`` (a planned run through the API, reported, its exit code)
and the debug log.

The commands are built on :mod:`provision.api` (loading, validation, runs, results) and only print: the human
output and ``--json`` are the reporter listening to the run's events. Imported by :mod:`.app` and :mod:`.pd`;
imports the API and the reporter (when a command runs: ``provision --help`` and ``--version`` import no engine
module), never another cli module.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import EXIT_FAILED, EXIT_UNREACHABLE, UsageError, did_you_mean
from ..localfiles import append_private

if TYPE_CHECKING:  # the engine is imported by the commands that use it: `provision --help` stays light
    from ..api import Fleet, Listener, Options, PlannedRun
    from ..inventory import Inventory
    from ..results import RunSummary

DEBUG_LOG = Path(os.environ.get("PROVISION_DEBUG_LOG", "~/.cache/provision/debug.log")).expanduser()
STATE: dict[str, int] = {"verbosity": 0}  # this invocation's -v count (and the signal that stopped it)
ARGV: list[str] = []  # this invocation's arguments, for the debug log (masked there)


# ------------------------------------------------------------------------------------------- engine helpers
def parse_extra_vars(values: Iterable[str]) -> dict[str, Any]:
    """``-e`` values (:func:`provision.api.parse_extra_vars`: -e parsing lives in the API)."""
    from ..api import parse_extra_vars as parse

    return parse(values)


def mask(text: str, *, colour: bool = False) -> str:
    """Text for the operator (terminal, debug log): host control characters shown as escapes
    (:func:`provision.terminal.printable`; ``colour``: SGR colours of SGLang's logs kept) and secrets masked
    (:data:`provision.commands.MASKER`), the last step before it leaves the process."""
    from ..commands import MASKER
    from ..terminal import printable

    return MASKER.mask(printable(text, colour=colour))


def mask_obj(obj: Any) -> Any:
    from ..commands import MASKER

    return MASKER.mask_obj(obj)


# ------------------------------------------------------------------------------------------- option helpers
class Group(click.Group):
    """A command group whose unknown word names the nearest command: ``provision rnu`` says "No such command
    'rnu' (did you mean 'run'?)" with every click release (:func:`provision.errors.did_you_mean` picks it)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            ctx.fail(f"No such command {name!r}{did_you_mean(name, self.list_commands(ctx))}")
        return super().resolve_command(ctx, args)


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
    if value >= 3:  # the round trips by phase, one ``rtt:`` line per host (provision.transport.trace)
        from ..transport import trace

        trace.enable()
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
        click.option("--persist", type=click.FloatRange(min=0), default=0.0,
                     help="keep the SSH connections this long (s) after the run (provision persist stop ends it)"),
        click.option("-T", "--timeout", "command_timeout", type=Seconds(), default=1800.0, show_default=True,
                     help="default timeout of each remote command (s)"),
    ]  # fmt: skip
    for option in reversed(options):
        fn = option(fn)
    return vault_options(fn)


def vault_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--vault-id`` (repeatable), ``--vault-password-file`` (repeatable), ``--ask-vault-pass``, as
    ansible-playbook's: the secrets are read (prompted, scripts run) before anything is loaded, so every vaulted
    file and ``!vault`` value decrypts as it loads (:mod:`provision.vault`)."""

    @functools.wraps(fn)
    def with_vault(*args: Any, vault_ids: tuple[str, ...], vault_password_files: tuple[str, ...],
                   ask_vault_pass: bool, **kw: Any) -> Any:  # fmt: skip
        use_vault(vault_ids, vault_password_files, ask_vault_pass)
        return fn(*args, **kw)

    options = [
        click.option("--vault-id", "vault_ids", multiple=True, metavar="[LABEL@]SOURCE",
                     help="a vault id and its password source: a file, an executable, or 'prompt' (repeatable)"),
        click.option("--vault-password-file", "--vault-pass-file", "vault_password_files", multiple=True,
                     metavar="FILE", help="the default vault id's password file or script (repeatable; "
                     "else $ANSIBLE_VAULT_PASSWORD_FILE)"),
        click.option("-J", "--ask-vault-pass", "ask_vault_pass", is_flag=True, help="prompt for the vault password"),
    ]  # fmt: skip
    wrapped: Callable[..., Any] = with_vault
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped


def use_vault(vault_ids: Iterable[str], password_files: Iterable[str], ask_vault_pass: bool) -> None:
    from .. import vault

    vault.use(vault.secrets_from_options(list(vault_ids), list(password_files), ask_vault_pass))


def load_fleet(inventories: tuple[str, ...], extra: dict[str, Any], *, trace: bool = False) -> Fleet:
    """``-i`` (repeatable; else $PROVISION_INVENTORY) with the parsed ``-e``: the API's :class:`Fleet`."""
    paths = list(inventories) or [p for p in [os.environ.get("PROVISION_INVENTORY")] if p]
    if not paths:
        raise UsageError("no inventory given: use -i INVENTORY (or set PROVISION_INVENTORY)")
    from ..api import load

    return load(paths, extra_vars=extra, trace=trace)


def load_inventory(inventories: tuple[str, ...], extra: dict[str, Any], *, trace: bool = False) -> Inventory:
    return load_fleet(inventories, extra, trace=trace).inventory


def api_options(kw: dict[str, Any], **more: Any) -> Options:
    """The common options as the API's keyword options (the ``-e`` values travel with the fleet)."""
    from ..api import Options

    STATE["verbosity"] = kw["verbosity"]
    opts = Options(
        limit=kw["limit"],
        forks=kw["forks"],
        verbosity=kw["verbosity"],
        timeout=kw["command_timeout"],
        connect_timeout=kw["connect_timeout"],
        accept_new_host_keys=kw["accept_new_host_keys"],
        persist=kw["persist"],
    )
    opts.update(more)  # type: ignore[typeddict-item]
    return opts


def quiet_listener(verbosity: int) -> Listener | None:
    """The PD queries' runs are shown only with -v (on stderr, one level less verbose)."""
    from ..report import Reporter

    return Reporter(stream=sys.stderr, verbosity=verbosity - 1, recap=False).handle if verbosity else None


def execute(planned: PlannedRun, *, json_mode: bool, profile: bool = False, adhoc: str | None = None) -> int:
    """Run a planned run through the API and report it; returns the exit code. The human output and the
    ``--json`` document are the reporter listening to the run's events. An internal error (a bug, see
    executor.InternalError) still gets the recap and the retry file, then one line naming it and exit 2; its
    traceback goes to the debug log (and to stderr with -vvv). ``profile``: each task's time in the recap;
    ``adhoc``: the module of ``provision task``, each host's result shown as Ansible's ad hoc shows it."""
    from ..report import Reporter

    options = planned.options
    reporter = Reporter(json_mode=json_mode, verbosity=options.verbosity, profile=profile, adhoc=adhoc)
    result = planned.run(on_event=reporter.handle)  # the reporter prints the recap on the run's last event
    summary = result.summary
    errors = list(result.internal_errors)
    if not reporter.recapped:  # the reporter failed before or in its recap (an internal error the run recorded)
        _plain_recap(summary)
    retry = result.write_retry_file()
    if retry:
        click.echo(mask(f"retry file: {retry} (rerun just those hosts with -l @{retry})"), err=json_mode)
    if json_mode:
        reporter.emit_json(summary)
    code = summary.exit_code()
    for error in errors:
        debug_log("".join(traceback.format_exception(error.exc)))
        if options.verbosity >= 3:
            traceback.print_exception(error.exc, file=sys.stderr)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        click.echo(mask(f"ERROR: {errors[0].message}{more}; this is a bug in provision, "
                        f"the traceback is in {DEBUG_LOG}"), err=True)  # fmt: skip
        return EXIT_FAILED if code in (0, EXIT_UNREACHABLE) else code
    if code:
        reason = result.reason
        click.echo(mask(f"ERROR: {reason}"), err=True)
        failures = "".join(f"  {r.host}: {r.task}: {r.status.value}: {r.msg}\n" for r in reporter.failures)
        debug_log(f"ERROR: {reason}\n{failures}")
    return code


def _plain_recap(summary: RunSummary) -> None:
    """The recap without the reporter (when the reporter is what failed)."""
    click.echo("\nPLAY RECAP")
    for host, st in summary.stats.items():
        click.echo(mask(f"{host} : ok={st.ok} changed={st.changed} unreachable={st.unreachable} "
                        f"failed={st.failed} skipped={st.skipped} ignored={st.ignored}"))  # fmt: skip


class LibraryLog(logging.Handler):
    """The log records of the libraries under provision (paramiko: "Exception (client): Error reading SSH
    protocol banner" and its traceback when a port accepts and closes) go to the debug log, as ONE record when
    the command ends (:meth:`flush`); to stderr as well only with -vvv. Without this handler Python's last-resort
    handler prints them on stderr, beside the one UNREACHABLE line that already says what happened."""

    LOGGERS = ("paramiko", "invoke", "fabric")
    LIMIT = 2000  # lines kept for one command (a flapping fleet must not fill memory); the rest are counted

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s %(levelname)s: %(message)s"))
        self.lines: list[str] = []
        self.dropped = 0
        self._saved: list[tuple[logging.Logger, bool]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # a record that cannot be formatted is not worth a traceback either
            text = f"{record.name} {record.levelname}: (unprintable record {record.msg!r})"
        if len(self.lines) < self.LIMIT:
            self.lines.append(text)
        else:
            self.dropped += 1
        if STATE["verbosity"] >= 3:
            sys.stderr.write(mask(text) + "\n")

    def flush(self) -> None:
        with self.lock or contextlib.nullcontext():
            lines, dropped = self.lines, self.dropped
            self.lines, self.dropped = [], 0
        if lines:
            more = f"\n({dropped} more lines not kept)" if dropped else ""
            debug_log("log of the libraries (paramiko):\n" + "\n".join(lines) + more)

    def __enter__(self) -> LibraryLog:
        for name in self.LOGGERS:
            logger = logging.getLogger(name)
            self._saved.append((logger, logger.propagate))
            logger.addHandler(self)
            logger.propagate = False  # a handler the embedding program put on the root does not print them
        return self

    def __exit__(self, *exc: object) -> None:
        for logger, propagate in self._saved:
            logger.removeHandler(self)
            logger.propagate = propagate
        self._saved.clear()
        self.flush()


def debug_log(text: str) -> None:
    """Append one record (masked) to the debug log: created 0600, never written through a symlink."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record = f"--- {stamp} provision {shlex.join(ARGV)}\n{text.rstrip()}\n"
    with contextlib.suppress(OSError):
        append_private(DEBUG_LOG, mask(record))
