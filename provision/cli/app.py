"""The ``provision`` command group: ``run``, ``task``, ``inventory``, ``facts``, ``playbooks`` (here) and
``pd`` (:mod:`.pd`), and ``main()``, which turns every outcome into one line and an exit code.

Each command calls :mod:`provision.api` (load, validate, run, results) and prints what it returns: the API and
the command line cannot drift apart.

Exit codes (interface.md): 0 ok, 2 failed hosts, 3 usage, 4 unreachable, 5 invalid input, 130 interrupted
(SIGINT), 143 terminated (SIGTERM).
Every non-zero exit prints one line saying why; the traceback goes to the debug log (and to stderr with -vvv).

(Not named ``main.py``: the package exports the function ``main``, which would hide a submodule of that name.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .. import __version__
from ..data import DEFAULT_SOURCE, LAYOUTS, defaults, find_playbook, playbooks_dir, shipped_playbooks, starter_inventory
from ..errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    HostError,
    InputError,
    Interrupted,
    ProvisionError,
    SigTerm,
    UnreachableError,
    UsageError,
)
from ..localfiles import replace_file
from . import common
from .common import (
    ARGV,
    STATE,
    Group,
    api_options,
    common_options,
    debug_log,
    execute,
    load_fleet,
    load_inventory,
    mask,
    mask_obj,
    parse_extra_vars,
    vault_options,
)
from .model import model
from .pd import pd
from .persist_cmd import persist_cmd
from .vault_cmd import vault_cmd
from .wheelhouse import wheelhouse

if TYPE_CHECKING:  # the commands import the engine when they run: `provision --help`/`--version` do not
    from .. import api


# ------------------------------------------------------------------------------------------------ commands
@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provision")
def cli() -> None:
    """Ansible-style provisioning of SGLang prefill/decode pairs over NIXL/UCX on plain SSH hosts."""


@cli.command()
@click.argument("playbook", type=click.Path(dir_okay=False))
@common_options
@click.option("-t", "--tags", default="", help="only tasks with these tags (comma separated)")
@click.option("--skip-tags", default="", help="skip tasks with these tags")
@click.option("-C", "--check", is_flag=True, help="predict changes, change nothing")
@click.option("-D", "--diff", is_flag=True, help="show diffs of changed files")
@click.option("--start-at-task", help="start at the task with this name")
@click.option("--list-tasks", is_flag=True)
@click.option("--list-hosts", is_flag=True)
@click.option("--profile", is_flag=True, help="the time of each task in the recap, slowest first")
def run(playbook: str, tags: str, skip_tags: str, check: bool, diff: bool, start_at_task: str | None,
        list_tasks: bool, list_hosts: bool, profile: bool, **kw: Any) -> int:  # fmt: skip
    """Apply PLAYBOOK (like ansible-playbook): a file, or the name of a shipped playbook (`provision
    playbooks`) when no such file exists here."""
    from .. import api

    extra = parse_extra_vars(kw["extra_vars"])
    fleet = load_fleet(kw["inventories"], extra)
    playbook = _which_playbook(playbook, json_mode=kw["json_mode"])
    opts = api_options(kw, check=check, diff=diff, start_at_task=start_at_task, tags=tags, skip_tags=skip_tags)
    planned = api.plan_playbook(playbook, fleet, **opts)
    if list_hosts or list_tasks:
        return _listing(planned, list_hosts=list_hosts, list_tasks=list_tasks)
    return execute(planned, json_mode=kw["json_mode"], profile=profile)


def _which_playbook(name: str, *, json_mode: bool) -> str:
    """A file of that name wins; else the shipped playbook. A bare name that is also a shipped playbook says
    which one runs (one line; on stderr with --json)."""
    path, shipped = find_playbook(name)
    if shipped:
        click.echo(f"playbook: the shipped {name} ({path}): no file {name} here", err=json_mode)
    elif Path(name).parent == Path(".") and (playbooks_dir() / name).is_file():
        click.echo(f"playbook: ./{name}, a local file (not the shipped {name})", err=json_mode)
    return str(path)


def _listing(planned: api.PlannedRun, *, list_hosts: bool, list_tasks: bool) -> int:
    for warning in dict.fromkeys(w for play in planned.plays for w in play.warnings):  # as a run prints them
        click.echo(f"[WARNING]: {warning}")
    for play in planned.plays:
        click.echo(f"\nplay: {play.name} ({play.where})")
        if list_hosts:
            hosts = planned.hosts(play)
            click.echo(f"  hosts ({len(hosts)}):")
            for host in hosts:
                click.echo(f"    {host}")
        if list_tasks:
            click.echo("  tasks:")
            for task in planned.tasks(play):
                tags = f"  TAGS: [{', '.join(sorted(task.tags))}]" if task.tags else ""
                click.echo(f"    {task.name}{tags}")
    return 0


@cli.command()
@click.argument("module")
@click.option("-a", "--args", "module_args", default="", help="module arguments: 'k=v ...' or free-form")
@common_options
@click.option("-C", "--check", is_flag=True)
@click.option("-D", "--diff", is_flag=True)
@click.option("-b", "--become", is_flag=True)
def task(module: str, module_args: str, check: bool, diff: bool, become: bool, **kw: Any) -> int:
    """Run one MODULE ad hoc on the hosts of --limit (like ansible -m)."""
    from .. import api

    extra = parse_extra_vars(kw["extra_vars"])
    fleet = load_fleet(kw["inventories"], extra)
    opts = api_options(kw, check=check, diff=diff)
    planned = api.plan_module(module, module_args, fleet, become=become, **opts)
    return execute(planned, json_mode=kw["json_mode"], adhoc=planned.plays[0].tasks[0].module)


@cli.command("inventory")
@click.option("-i", "--inventory", "inventories", multiple=True)
@click.option("-e", "--extra-vars", "extra_vars", multiple=True)
@vault_options
@click.option("--list", "as_list", is_flag=True, help="every group and host with merged vars (JSON)")
@click.option("--graph", is_flag=True, help="the group tree")
@click.option(
    "--host",
    "host_name",
    help="one host's vars as a task sees them before play vars, shipped defaults included (JSON), "
    "with where each came from under '_sources'",
)
def inventory_cmd(inventories: tuple[str, ...], extra_vars: tuple[str, ...], as_list: bool, graph: bool,
                  host_name: str | None) -> int:  # fmt: skip
    """Show hosts, groups and merged vars."""
    if sum([as_list, graph, host_name is not None]) != 1:
        raise UsageError("give exactly one of --list, --graph, --host NAME")
    inv = load_inventory(inventories, parse_extra_vars(extra_vars), trace=host_name is not None)
    if graph:
        click.echo(inv.graph())
    elif host_name is not None:
        if host_name not in inv.hosts:
            raise InputError(f"host {host_name!r} is not in the inventory")
        shipped = defaults()
        shown = _masked_vars({**shipped, **inv.hosts[host_name].vars})
        sources = {**dict.fromkeys(shipped, DEFAULT_SOURCE), **inv.origins.get(host_name, {})}
        doc = {**shown, "_sources": {name: sources.get(name, "inventory") for name in shown}}
        ports = _pd_ports(inv, parse_extra_vars(extra_vars), host_name)
        if ports is not None:
            doc["_pd_ports"] = ports
        click.echo(json.dumps(mask_obj(doc), indent=2, default=str))
    else:
        doc = inv.to_list_json()
        for name, hv in doc.get("_meta", {}).get("hostvars", {}).items():
            doc["_meta"]["hostvars"][name] = _masked_vars(hv)
        click.echo(json.dumps(mask_obj(doc), indent=2, default=str))
    return 0


def _pd_ports(inv: Any, extra: dict[str, Any], host: str) -> list[dict[str, Any]] | str | None:
    """The port plan of a PD host (the one line of a plan that cannot be made, instead)."""
    from .. import api

    try:
        return api.pd_ports(inv, extra, host)
    except api.PlanError as exc:
        return str(exc)


def _masked_vars(variables: dict[str, Any]) -> dict[str, Any]:
    from ..masking import register_secrets
    from ..templating import Vars

    register_secrets(Vars(variables))
    return variables


@cli.command()
def playbooks() -> int:
    """List the shipped playbooks (`provision run NAME -i INVENTORY` runs one when no file NAME is here)."""
    found = shipped_playbooks()
    width = max((len(name) for name, _ in found), default=0)
    for name, description in found:
        click.echo(f"{name.ljust(width)}  {description}".rstrip())
    click.echo(f"(in {playbooks_dir()}; a local file of the same name wins)")
    return 0


@cli.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option(
    "--layout",
    type=click.Choice(LAYOUTS),
    default="two-host",
    show_default=True,
    help="two-host: a prefill and a decode host; single-host-4p4: one 8-GPU host split 4+4; "
    "nxm: 2 prefill x 3 decode; local: this machine, CPU mode; multi-host: one prefill server over two hosts",
)
@click.option("--force", is_flag=True, help="replace an existing DIRECTORY/inventory.yml")
def init(directory: str, layout: str, force: bool) -> int:
    """Write DIRECTORY/inventory.yml: a starter inventory for a common layout, every var commented."""
    from ..pd.spec import DEFAULTS as PD_DEFAULTS

    target = Path(directory) / "inventory.yml"
    if target.exists() and not force:
        raise InputError(f"{target} exists (--force replaces it)")
    shipped = defaults()
    more = "".join(f"#   {name}: {json.dumps(value)}\n" for name, value in PD_DEFAULTS.items() if name not in shipped)
    text = starter_inventory(layout, str(target)) + "#   # --- more PD knobs (docs/pd.md) ---\n" + more
    target.parent.mkdir(parents=True, exist_ok=True)
    replace_file(target, text)  # a temp file renamed over it: never written through a link at that name
    click.echo(f"wrote {target} ({layout}): set the hosts, then: provision run site.yml -i {target}")
    return 0


@cli.command()
@common_options
def facts(**kw: Any) -> int:
    """Gather and print host facts (OS, Python, disk, GPUs, driver/CUDA, topology, RDMA, NICs)."""
    from .. import api

    extra = parse_extra_vars(kw["extra_vars"])
    fleet = load_fleet(kw["inventories"], extra)
    gathered = api.gather_facts(fleet, **api_options(kw))
    doc: dict[str, Any] = {}
    for name, value in gathered.hosts.items():
        if isinstance(value, HostError):
            unreachable = isinstance(value, UnreachableError)
            _error_line(f"{name}: {'UNREACHABLE' if unreachable else 'FAILED'} => {value.msg}")
            doc[name] = {"failed": True, "msg": str(value)}
        else:
            doc[name] = value
            if not kw["json_mode"]:
                click.echo(mask(_facts_summary(name, value)))
    if kw["json_mode"] or kw["verbosity"]:
        click.echo(json.dumps(mask_obj(doc), indent=2, default=str))
    return gathered.exit_code


def _facts_summary(name: str, facts: dict[str, Any]) -> str:
    os_info = facts.get("os") or {}
    gpus = facts.get("gpus") or []
    py = ", ".join(f"{p['version']}" for p in facts.get("pythons") or [])
    disk = facts.get("disk") or {}
    free = f"{disk.get('free_bytes', 0) / 2**30:.0f} GiB free" if disk else "disk ?"
    gpu_text = f"{len(gpus)}x {gpus[0]['name']}" if gpus else "no GPU"
    cuda = f", driver {facts.get('driver_version')} (CUDA {facts.get('cuda_version')})" if gpus else ""
    return f"{name}: {os_info.get('pretty_name', '?')}; python {py or 'none'}; {free}; {gpu_text}{cuda}"


# ---------------------------------------------------------------------------------------------------- main
def _error_line(text: str) -> None:
    """The one line a failing command prints: masked like everything else that leaves the process."""
    click.echo(mask(text), err=True)


def _on_signal(signum: int, frame: Any) -> None:
    """SIGINT/SIGTERM: unwind the main thread (the executor closes every connection on the way out, and the
    hosts kill what still runs: see provision.commands.RUNNER). A second signal leaves at once."""
    if STATE.get("signal"):
        os._exit(128 + signum)
    STATE["signal"] = signum
    raise SigTerm() if signum == signal.SIGTERM else KeyboardInterrupt()


def _interrupted_line(exc: BaseException | None) -> tuple[str, int]:
    while exc is not None and not isinstance(exc, (KeyboardInterrupt, Interrupted)):
        exc = exc.__cause__ or exc.__context__  # click wraps Ctrl-C in Abort
    if isinstance(exc, SigTerm) or (STATE.get("signal") == signal.SIGTERM):
        return "ERROR: terminated (SIGTERM)", EXIT_TERMINATED
    return "ERROR: interrupted", EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> None:
    ARGV[:] = sys.argv[1:] if argv is None else argv
    STATE["verbosity"] = 0  # set again by the options of this invocation
    STATE.pop("signal", None)
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handlers[signum] = signal.signal(signum, _on_signal)
    library_log = common.LibraryLog().__enter__()
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
        debug_log("".join(traceback.format_exception(exc)))
        if STATE["verbosity"] >= 3:
            _error_line(traceback.format_exc().rstrip("\n"))
        _error_line(f"ERROR: {exc}")
        code = exc.exit_code
    except Exception as exc:  # a bug outside a run (a run keeps its recap: see execute): one line, exit 2
        debug_log("".join(traceback.format_exception(exc)))
        if STATE["verbosity"] >= 3:
            _error_line(traceback.format_exc().rstrip("\n"))
        _error_line(
            f"ERROR: internal error: {type(exc).__name__}: {exc}; this is a bug in provision, "
            f"the traceback is in {common.DEBUG_LOG}"
        )
        code = EXIT_FAILED
    finally:
        library_log.__exit__()
        for signum, old in handlers.items():
            signal.signal(signum, old)
    if STATE.get("signal"):
        # worker threads may still sit in a command whose connection we closed: do not wait for them
        _exit_now(code if isinstance(code, int) else EXIT_INTERRUPTED)
    if argv is None:
        # the process's own command line has done all it does: what is left is the interpreter's teardown
        # (joining each idle pool thread, freeing every object: ~0.1 s after a 64-host run). No atexit work is
        # skipped: provision registers none (paramiko's joins its transports' threads, whose sockets close with
        # the process). A caller of main([...]) in its own process returns through sys.exit as before.
        _exit_now(code if isinstance(code, int) else 0)
    sys.exit(code if isinstance(code, int) else 0)


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: the exit code still says how it ended
            stream.flush()
    os._exit(code)


cli.add_command(pd)
cli.add_command(persist_cmd)
cli.add_command(wheelhouse)
cli.add_command(model)
cli.add_command(vault_cmd)
