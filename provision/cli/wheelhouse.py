"""``provision wheelhouse -i INV -d DIR``: download, on the controller, the wheels each host needs for ITS
Python, platform and torch (read from the host, or declared with ``wheelhouse_target``), once per distinct
need, with their sha256 in ``DIR/manifest.json``; ``install.yml -e wheelhouse=DIR`` then syncs each host its
files (checksum-verified, only missing ones) and installs them with no index (``provision/stack/wheelhouse.py``).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..data import defaults
from ..errors import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, HostError, UnreachableError
from .common import api_options, common_options, load_fleet, mask, parse_extra_vars

if TYPE_CHECKING:  # imported when the command runs (`provision --help` imports no engine module)
    from ..inventory import Inventory
    from ..stack.wheelhouse import HostPlan, Target
    from ..state import RunOptions

NAMES = ("python", "venv_path", "venv_system_site_packages", "install_sglang", "sglang_version",
         "sglang_router_version", "sglang_allow_torch_change", "nixl_version", "nixl_variant",
         "wheelhouse_packages", "wheelhouse_deps", "wheelhouse_target")  # fmt: skip


def host_values(inventory: Inventory, name: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The vars the plan needs, rendered for ``name`` as a task would see them (defaults lowest, -e wins)."""
    from ..magic import magic_vars
    from ..templating import Vars

    variables = Vars(defaults(), inventory.hosts[name].vars, extra, magic_vars(inventory, name))
    return {key: variables[key] for key in NAMES}


def read_target(inventory: Inventory, name: str, values: dict[str, Any], options: RunOptions) -> Target:
    """The host's target: ``wheelhouse_target`` as declared (no connection), else read from the host: its
    Python, machine and glibc (``stack_state.py``), its torch (as sglang_release reads it) and its CUDA (facts)."""
    from ..stack.wheelhouse import Target, WheelhouseError, target_of

    if values["wheelhouse_target"]:
        return Target.of(values["wheelhouse_target"])
    from ..facts import gather
    from ..modules.base import ModuleContext
    from ..stack.host import StackError
    from ..stack.modules import host_torch  # registers the stack modules: only when a host is read
    from ..transport import open_connection

    conn = open_connection(name, inventory.hosts[name].vars, options.connect)
    try:
        ctx = ModuleContext(host=name, conn=conn, variables=values, timeout=options.command_timeout)
        system = str(values["venv_system_site_packages"]).lower() in ("true", "yes", "1")
        try:
            torch, _, state = host_torch(ctx, str(values["python"]), str(values["venv_path"]), system)
        except StackError as exc:
            raise WheelhouseError(str(exc)) from None
        cuda = gather(conn, ctx.expand(str(values["venv_path"]))).get("cuda_version")
        return target_of(state, torch, cuda)
    finally:
        conn.close()


def plan_hosts(inventory: Inventory, extra: dict[str, Any], options: RunOptions) -> dict[str, HostPlan | str]:
    """Every selected host's plan, or the one line saying why it has none (read in parallel)."""
    from ..stack.releases import TorchMismatch
    from ..stack.wheelhouse import WheelhouseError, plan_host

    def one(name: str) -> tuple[str, HostPlan | str]:
        try:
            values = host_values(inventory, name, extra)
            return name, plan_host(name, read_target(inventory, name, values, options), values)
        except UnreachableError as exc:
            return name, f"UNREACHABLE: {exc.msg}"
        except HostError as exc:
            return name, exc.msg
        except (TorchMismatch, WheelhouseError) as exc:
            return name, str(exc)

    names = [h.name for h in inventory.select(options.limit or "all")]
    with ThreadPoolExecutor(max_workers=min(options.forks, max(len(names), 1))) as pool:
        return dict(pool.map(one, names))


@click.command()
@common_options
@click.option("-d", "--dest", required=True, type=click.Path(file_okay=False), help="the wheelhouse directory")
@click.option("--find-links", multiple=True, help="take wheels from this directory/URL too (pip --find-links)")
@click.option("--no-index", is_flag=True, help="only --find-links: no package index is contacted")
def wheelhouse(dest: str, find_links: tuple[str, ...], no_index: bool, **kw: Any) -> int:
    """Download each host's wheels once on the controller, for install.yml -e wheelhouse=DIR (air-gapped)."""
    from .. import api
    from ..stack.wheelhouse import HostPlan, WheelhouseError, build

    extra = parse_extra_vars(kw["extra_vars"])
    fleet = load_fleet(kw["inventories"], extra)
    inventory = fleet.inventory
    options = api.run_options(fleet, api_options(kw))
    planned = plan_hosts(inventory, extra, options)
    failed = {name: why for name, why in planned.items() if isinstance(why, str)}
    for name, why in failed.items():
        click.echo(mask(f"{name}: {why}"), err=True)
    plans = [p for p in planned.values() if isinstance(p, HostPlan)]
    if failed:
        unreachable = all(why.startswith("UNREACHABLE") for why in failed.values())
        click.echo(f"nothing downloaded: {len(failed)} of {len(planned)} hosts have no plan", err=True)
        return EXIT_UNREACHABLE if unreachable else EXIT_FAILED
    echo = (lambda line: click.echo(mask(line), err=True)) if kw["verbosity"] else None
    try:
        manifest = build(plans, Path(dest), find_links=find_links, no_index=no_index, on_line=echo)
    except WheelhouseError as exc:
        click.echo(mask(str(exc)), err=True)
        return EXIT_FAILED
    if kw["json_mode"]:
        click.echo(json.dumps(manifest, indent=1, sort_keys=True))
        return EXIT_OK
    for plan in plans:
        t = plan.target
        size = sum(manifest["files"][f]["size"] for f in plan.files)
        click.echo(mask(f"{plan.host}: Python {t.python} {t.machine} glibc {t.glibc}, torch {t.torch or 'none'}: "
                        f"sglang {plan.release or '-'} ({plan.reason}); {len(plan.files)} wheels, {size / 1e6:.0f} MB"
                        f"{'' if plan.deps else ', pins only (--no-deps)'}"))  # fmt: skip
    total = sum(v["size"] for v in manifest["files"].values())
    click.echo(
        f"{dest}: {len(manifest['files'])} wheels, {total / 1e6:.0f} MB, {manifest['groups']} download "
        f"set(s) for {len(plans)} host(s); install: provision run install.yml -i INV -e wheelhouse={dest}"
    )
    return EXIT_OK


__all__ = ["wheelhouse"]
