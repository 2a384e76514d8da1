"""The command line. It only wires the stages together: inventory → playbook → plan → executor → report.

Exit codes (interface.md): 0 ok, 2 failed hosts, 3 usage, 4 unreachable, 5 invalid input, 130 interrupted
(SIGINT), 143 terminated (SIGTERM).
Every non-zero exit prints one line saying why; the traceback goes to the debug log (and to stderr with -vvv).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
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
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    InputError,
    Interrupted,
    ProvisionError,
    SigTerm,
    UsageError,
)
from .executor import Executor, RunOptions, playbook_dir_of
from .inventory import Inventory
from .plan import check_plan
from .playbook import Play, load_playbook, parse_task
from .report import Reporter, write_retry_file

DEBUG_LOG = Path(os.environ.get("PROVISION_DEBUG_LOG", "~/.cache/provision/debug.log")).expanduser()
_state: dict[str, int] = {"verbosity": 0}


# ------------------------------------------------------------------------------------------- option helpers
def parse_extra_vars(values: tuple[str, ...]) -> dict[str, Any]:
    """``-e k=v k2='v 2'``, ``-e @file.yml`` or ``-e '{"json": 1}'``; later ones win."""
    out: dict[str, Any] = {}
    for value in values:
        text = value.strip()
        if text.startswith("@"):
            path = Path(text[1:])
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except OSError as exc:
                raise InputError(f"-e {text}: {exc.strerror}", file=str(path)) from None
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                raise InputError(
                    f"-e: YAML error: {exc}", file=str(path), line=mark.line + 1 if mark else None
                ) from None
            if not isinstance(data, dict):
                raise InputError("-e file must hold a mapping", file=str(path))
            out.update(data)
        elif text.startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(f"-e: invalid JSON: {exc}") from None
            out.update(data)
        else:
            for word in shlex.split(text):
                if "=" not in word:
                    raise InputError(f"-e: expected key=value, @file or JSON, got {word!r}")
                key, val = word.split("=", 1)
                out[key] = val
    return out


def _common(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("-i", "--inventory", "inventories", multiple=True, help="inventory file or dir (repeatable)"),
        click.option("-l", "--limit", help="host pattern: names, groups, globs, !exclude, &intersect, @file"),
        click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; always wins"),
        click.option("-f", "--forks", type=click.IntRange(1, 1000), default=20, show_default=True),
        click.option("--json", "json_mode", is_flag=True, help="one JSON document on stdout"),
        click.option("-v", "--verbose", "verbosity", count=True, help="-v results, -vvv tracebacks"),
        click.option("--accept-new-host-keys", is_flag=True, help="trust unknown host keys and save them"),
        click.option("--connect-timeout", type=float, default=10.0, show_default=True),
        click.option("-T", "--timeout", "command_timeout", type=float, default=1800.0, show_default=True,
                     help="default timeout of each remote command (s)"),
    ]  # fmt: skip
    for option in reversed(options):
        fn = option(fn)
    return fn


def _inventory(inventories: tuple[str, ...], extra: dict[str, Any]) -> Inventory:
    paths = list(inventories) or [p for p in [os.environ.get("PROVISION_INVENTORY")] if p]
    if not paths:
        raise UsageError("no inventory given: use -i INVENTORY (or set PROVISION_INVENTORY)")
    return Inventory.load(paths, extra)


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
    """Run plays and report; returns the exit code."""
    reporter = Reporter(json_mode=json_mode, verbosity=options.verbosity)
    executor = Executor(inventory, options, reporter, playbook_dir_of(playbook))
    try:
        summary = executor.run(plays)
    finally:
        executor.close()
    reporter.recap(summary)
    retry = write_retry_file(playbook, summary)
    if retry:
        reporter.line(f"retry file: {retry} (rerun just those hosts with -l @{retry})")
    if json_mode:
        reporter.emit_json(summary)
    code = summary.exit_code()
    if code:
        reason = summary.aborted or (
            f"failed hosts: {', '.join(summary.failed_hosts)}" if summary.failed_hosts
            else f"unreachable hosts: {', '.join(summary.unreachable_hosts)}"
        )  # fmt: skip
        click.echo(MASKER.mask(f"ERROR: {reason}"), err=True)
    return code


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
    MASKER.add_vars(variables)
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
def _debug_log(exc: BaseException) -> None:
    try:
        DEBUG_LOG.parent.mkdir(parents=True, exist_ok=True)
        with DEBUG_LOG.open("a", encoding="utf-8") as fh:
            fh.write(MASKER.mask("".join(traceback.format_exception(exc))) + "\n")
    except OSError:
        pass


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
    _state.pop("signal", None)
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handlers[signum] = signal.signal(signum, _on_signal)
    try:
        code = cli.main(args=argv, prog_name="provision", standalone_mode=False)
    except click.exceptions.UsageError as exc:
        exc.show()
        code = EXIT_USAGE
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        line, code = _interrupted_line(exc)
        click.echo(line, err=True)
    except ProvisionError as exc:
        _debug_log(exc)
        if _state["verbosity"] >= 3:
            traceback.print_exc()
        click.echo(MASKER.mask(f"ERROR: {exc}"), err=True)
        code = exc.exit_code
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
