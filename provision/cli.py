"""The command line. It only wires the stages together: inventory → playbook → plan → executor → report.

Exit codes (interface.md): 0 ok, 2 failed hosts, 3 usage, 4 unreachable, 5 invalid input, 130 interrupted
(SIGINT), 143 terminated (SIGTERM).
Every non-zero exit prints one line saying why; the traceback goes to the debug log (and to stderr with -vvv).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import yaml

from . import __version__
from .commands import MASKER
from .connection import ConnectOptions
from .errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    InputError,
    Interrupted,
    ProvisionError,
    SigTerm,
    UsageError,
)
from .executor import (
    Executor,
    InternalError,
    RunOptions,
    playbook_dir_of,
    register_inventory_secrets,
    register_secrets,
)
from .inventory import MAX_DEPTH, Inventory, nesting_too_deep
from .localfiles import append_private
from .plan import check_plan
from .playbook import Play, load_playbook, parse_task
from .report import Reporter, write_retry_file
from .results import RunSummary
from .templating import Vars

DEBUG_LOG = Path(os.environ.get("PROVISION_DEBUG_LOG", "~/.cache/provision/debug.log")).expanduser()
_state: dict[str, int] = {"verbosity": 0}
_argv: list[str] = []  # this invocation's arguments, for the debug log (masked there)


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


def _remember_verbosity(ctx: click.Context, param: click.Parameter, value: int) -> int:
    """Known before anything is loaded: -vvv shows the traceback of an input error too."""
    _state["verbosity"] = value
    return value


def _common(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("-i", "--inventory", "inventories", multiple=True, help="inventory file or dir (repeatable)"),
        click.option("-l", "--limit", help="host pattern: names, groups, globs, !exclude, &intersect, @file"),
        click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; always wins"),
        click.option("-f", "--forks", type=click.IntRange(1, 1000), default=20, show_default=True),
        click.option("--json", "json_mode", is_flag=True, help="one JSON document on stdout"),
        click.option("-v", "--verbose", "verbosity", count=True, help="-v results, -vvv tracebacks",
                     is_eager=True, callback=_remember_verbosity),
        click.option("--accept-new-host-keys", is_flag=True, help="trust unknown host keys and save them"),
        click.option("--connect-timeout", type=Seconds(), default=10.0, show_default=True),
        click.option("-T", "--timeout", "command_timeout", type=Seconds(), default=1800.0, show_default=True,
                     help="default timeout of each remote command (s)"),
    ]  # fmt: skip
    for option in reversed(options):
        fn = option(fn)
    return fn


def _inventory(inventories: tuple[str, ...], extra: dict[str, Any]) -> Inventory:
    paths = list(inventories) or [p for p in [os.environ.get("PROVISION_INVENTORY")] if p]
    if not paths:
        raise UsageError("no inventory given: use -i INVENTORY (or set PROVISION_INVENTORY)")
    inventory = Inventory.load(paths, extra)
    register_inventory_secrets(inventory, extra)
    return inventory


def _options(kw: dict[str, Any], extra: dict[str, Any], **more: Any) -> RunOptions:
    _state["verbosity"] = kw["verbosity"]
    return RunOptions(
        forks=kw["forks"],
        limit=kw["limit"],
        extra_vars=extra,
        verbosity=kw["verbosity"],
        command_timeout=kw["command_timeout"],
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
        _debug_log("".join(traceback.format_exception(error.exc)))
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
        _debug_log(f"ERROR: {reason}\n{failures}")
    return code


def _plain_recap(summary: RunSummary) -> None:
    """The recap without the reporter (when the reporter is what failed)."""
    click.echo("\nPLAY RECAP")
    for host, st in summary.stats.items():
        click.echo(MASKER.mask(f"{host} : ok={st.ok} changed={st.changed} unreachable={st.unreachable} "
                               f"failed={st.failed} skipped={st.skipped} ignored={st.ignored}"))  # fmt: skip


# ------------------------------------------------------------------------------------------------ commands
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provision")
def cli() -> None:
    """Ansible-style provisioning of SGLang prefill/decode pairs over NIXL/UCX on plain SSH hosts."""


@cli.command()
@click.argument("playbook", type=click.Path(dir_okay=False))
@_common
@click.option("-t", "--tags", default="", help="only tasks with these tags (comma separated)")
@click.option("--skip-tags", default="", help="skip tasks with these tags")
@click.option("-C", "--check", is_flag=True, help="predict changes, change nothing")
@click.option("-D", "--diff", is_flag=True, help="show diffs of changed files")
@click.option("--start-at-task", help="start at the task with this name")
@click.option("--list-tasks", is_flag=True)
@click.option("--list-hosts", is_flag=True)
def run(playbook: str, tags: str, skip_tags: str, check: bool, diff: bool, start_at_task: str | None,
        list_tasks: bool, list_hosts: bool, **kw: Any) -> int:  # fmt: skip
    """Apply PLAYBOOK (like ansible-playbook)."""
    extra = parse_extra_vars(kw["extra_vars"])
    inventory = _inventory(kw["inventories"], extra)
    plays = load_playbook(playbook)
    options = _options(
        kw, extra, check=check, diff=diff, start_at_task=start_at_task,
        tags={t.strip() for t in tags.split(",") if t.strip()},
        skip_tags={t.strip() for t in skip_tags.split(",") if t.strip()},
    )  # fmt: skip
    check_plan(plays, inventory, extra, options.limit, start_at_task, playbook_dir_of(playbook))
    if list_hosts or list_tasks:
        return _listing(plays, inventory, options, list_hosts=list_hosts, list_tasks=list_tasks)
    return execute(plays, inventory, options, json_mode=kw["json_mode"], playbook=playbook)


def _listing(
    plays: list[Play], inventory: Inventory, options: RunOptions, *, list_hosts: bool, list_tasks: bool
) -> int:
    from .executor import task_selected

    executor = Executor(inventory, options, Reporter(stream=sys.stdout))
    for play in plays:
        click.echo(f"\nplay: {play.name} ({play.where})")
        if list_hosts:
            hosts = executor.play_hosts(play)
            click.echo(f"  hosts ({len(hosts)}):")
            for host in hosts:
                click.echo(f"    {host}")
        if list_tasks:
            click.echo("  tasks:")
            for task in play.tasks:
                if task_selected(task, options.tags, options.skip_tags):
                    tags = f"  TAGS: [{', '.join(sorted(task.tags))}]" if task.tags else ""
                    click.echo(f"    {task.name}{tags}")
    executor.close()
    return 0


@cli.command()
@click.argument("module")
@click.option("-a", "--args", "module_args", default="", help="module arguments: 'k=v ...' or free-form")
@_common
@click.option("-C", "--check", is_flag=True)
@click.option("-D", "--diff", is_flag=True)
@click.option("-b", "--become", is_flag=True)
def task(module: str, module_args: str, check: bool, diff: bool, become: bool, **kw: Any) -> int:
    """Run one MODULE ad hoc on the hosts of --limit (like ansible -m)."""
    from .modules import load_all, lookup

    extra = parse_extra_vars(kw["extra_vars"])
    inventory = _inventory(kw["inventories"], extra)
    load_all()
    cls = lookup(module)
    if cls is None:
        raise InputError(f"unknown module {module!r}")
    try:
        shlex.split(module_args)
    except ValueError as exc:
        raise InputError(f"-a arguments: {exc} (the value is not shown: it may hold a secret)") from None
    raw: Any = module_args if cls.free_form else (module_args or None)
    node: dict[str, Any] = {"name": module, module: raw}
    parsed = parse_task(node, "<command line>")
    pattern = kw["limit"] or "all"
    options = _options(kw, extra, check=check, diff=diff)
    options.limit = None
    play = Play(name=f"ad hoc: {module}", hosts=pattern, file="<command line>", line=0, gather_facts=False,
                become=become, tasks=[parsed])  # fmt: skip
    check_plan([play], inventory, extra, None, None, os.getcwd())
    return execute([play], inventory, options, json_mode=kw["json_mode"], playbook="adhoc.yml")


@cli.command("inventory")
@click.option("-i", "--inventory", "inventories", multiple=True)
@click.option("-e", "--extra-vars", "extra_vars", multiple=True)
@click.option("--list", "as_list", is_flag=True, help="every group and host with merged vars (JSON)")
@click.option("--graph", is_flag=True, help="the group tree")
@click.option("--host", "host_name", help="the merged vars of one host (JSON)")
def inventory_cmd(inventories: tuple[str, ...], extra_vars: tuple[str, ...], as_list: bool, graph: bool,
                  host_name: str | None) -> int:  # fmt: skip
    """Show hosts, groups and merged vars."""
    if sum([as_list, graph, host_name is not None]) != 1:
        raise UsageError("give exactly one of --list, --graph, --host NAME")
    inv = _inventory(inventories, parse_extra_vars(extra_vars))
    if graph:
        click.echo(inv.graph())
    elif host_name is not None:
        if host_name not in inv.hosts:
            raise InputError(f"host {host_name!r} is not in the inventory")
        click.echo(json.dumps(MASKER.mask_obj(_masked_vars(inv.hosts[host_name].vars)), indent=2, default=str))
    else:
        doc = inv.to_list_json()
        for name, hv in doc.get("_meta", {}).get("hostvars", {}).items():
            doc["_meta"]["hostvars"][name] = _masked_vars(hv)
        click.echo(json.dumps(MASKER.mask_obj(doc), indent=2, default=str))
    return 0


def _masked_vars(variables: dict[str, Any]) -> dict[str, Any]:
    register_secrets(Vars(variables))
    return variables


@cli.command()
@_common
def facts(**kw: Any) -> int:
    """Gather and print host facts (OS, Python, disk, GPUs, driver/CUDA, topology, RDMA, NICs)."""
    from .facts_cmd import run_facts

    extra = parse_extra_vars(kw["extra_vars"])
    inventory = _inventory(kw["inventories"], extra)
    options = _options(kw, extra)
    if options.limit:
        inventory.select(options.limit)
    return run_facts(inventory, options, json_mode=kw["json_mode"])


# ---------------------------------------------------------------------------------------------------- main
def _debug_log(text: str) -> None:
    """Append one record (masked) to the debug log: created 0600, never written through a symlink."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record = f"--- {stamp} provision {shlex.join(_argv)}\n{text.rstrip()}\n"
    with contextlib.suppress(OSError):
        append_private(DEBUG_LOG, MASKER.mask(record))


def _error_line(text: str) -> None:
    """The one line a failing command prints: masked like everything else that leaves the process."""
    click.echo(MASKER.mask(text), err=True)


def _on_signal(signum: int, frame: Any) -> None:
    """SIGINT/SIGTERM: unwind the main thread (the executor closes every connection on the way out, and the
    hosts kill what still runs: see provision.commands.RUNNER). A second signal leaves at once."""
    if _state.get("signal"):
        os._exit(128 + signum)
    _state["signal"] = signum
    raise SigTerm() if signum == signal.SIGTERM else KeyboardInterrupt()


def _interrupted_line(exc: BaseException | None) -> tuple[str, int]:
    while exc is not None and not isinstance(exc, (KeyboardInterrupt, Interrupted)):
        exc = exc.__cause__ or exc.__context__  # click wraps Ctrl-C in Abort
    if isinstance(exc, SigTerm) or (_state.get("signal") == signal.SIGTERM):
        return "ERROR: terminated (SIGTERM)", EXIT_TERMINATED
    return "ERROR: interrupted", EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> None:
    _argv[:] = sys.argv[1:] if argv is None else argv
    _state["verbosity"] = 0  # set again by the options of this invocation
    _state.pop("signal", None)
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handlers[signum] = signal.signal(signum, _on_signal)
    try:
        code = cli.main(args=argv, prog_name="provision", standalone_mode=False)
    except click.exceptions.UsageError as exc:
        where = f" (see {exc.ctx.command_path} --help)" if exc.ctx else ""
        _error_line(f"ERROR: {exc.format_message()}{where}")
        code = EXIT_USAGE
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        line, code = _interrupted_line(exc)
        _error_line(line)
    except ProvisionError as exc:
        _debug_log("".join(traceback.format_exception(exc)))
        if _state["verbosity"] >= 3:
            _error_line(traceback.format_exc().rstrip("\n"))
        _error_line(f"ERROR: {exc}")
        code = exc.exit_code
    except Exception as exc:  # a bug outside a run (a run keeps its recap: see execute): one line, exit 2
        _debug_log("".join(traceback.format_exception(exc)))
        if _state["verbosity"] >= 3:
            _error_line(traceback.format_exc().rstrip("\n"))
        _error_line(
            f"ERROR: internal error: {type(exc).__name__}: {exc}; this is a bug in provision, "
            f"the traceback is in {DEBUG_LOG}"
        )
        code = EXIT_FAILED
    finally:
        for signum, old in handlers.items():
            signal.signal(signum, old)
    if _state.get("signal"):
        # worker threads may still sit in a command whose connection we closed: do not wait for them
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code if isinstance(code, int) else EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)


# `provision pd ...`: registered last, because provision.pd_cli reuses the helpers above
from .pd_cli import pd  # noqa: E402

cli.add_command(pd)
