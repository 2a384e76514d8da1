"""Fabric tasks for the stages: ``fab -H gpu1,gpu2 bootstrap install smoke preflight pd-up``.

A ``fabfile.py`` needs one line (``examples/fabfile.py``)::

    from provision.fabric import *  # noqa: F403  (the tasks: bootstrap, install, smoke, ..., pd-up, pd-status)

Each task runs provision's engine (:mod:`provision.api`), not Fabric's own ``c.run``: the same playbooks, one
SSH connection per host, host keys verified against known_hosts (an unknown key is refused unless
``--accept-new-host-keys`` or the config's ``accept_new_host_keys``; a changed one always), the same output
(the play recap) and the same exit codes as ``provision`` (0 ok, 2 failed hosts, 3 usage, 4 unreachable,
5 invalid input): a stage that is not ok stops ``fab`` with its code.

Fabric calls a task once per ``-H`` host; a stage is ONE run over all of them (in parallel, as ``provision
run``), made at the first host's call; the other hosts' calls of that stage find it done. Fabric's conventions
carry over:

* ``-H/--hosts``: the hosts (``user@host:port`` shorthand too), resolved through the ssh_config by provision
  as by Fabric; ``-S/--ssh-config``: that ssh_config (default ``~/.ssh/config`` or ``$PROVISION_SSH_CONFIG``).
* ``-i/--identity``: the private key (the first one given); ``-t/--connect-timeout``: the connect timeout.
* ``--prompt-for-login-password``: the SSH password (``ansible_password``; masked like every secret).
* ``--prompt-for-passphrase`` does not apply: provision does not decrypt keys itself. Load the key into
  ``ssh-agent`` (``ssh-add``), which provision uses; the task refuses the passphrase (exit 3).

The PD roles: the first ``-H`` host is ``prefill`` (and the router), the others ``decode``, unless the Fabric
config says otherwise. The config's ``provision`` section (``fabric.yaml`` beside the fabfile)::

    provision:
      inventory: fleet/gpu.yml        # a provision inventory instead: -H is then its --limit
      prefill: [gpu1]                 # roles for the -H hosts (default: the first / the others)
      decode: [gpu2]
      extra_vars: {model_path: /models/llama}   # -e, for every stage
      accept_new_host_keys: false
      forks: 20
      timeout: 1800                   # -T, seconds per remote command

Every stage also takes ``--extra-vars k=v`` (repeatable), ``--check`` and ``--accept-new-host-keys``.
Imports :mod:`provision.api`, Fabric and Invoke; never the command line.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from fabric import Connection
from fabric.connection import derive_shorthand
from fabric.tasks import task
from invoke import Collection, Exit
from invoke.context import Context

from . import api
from .errors import EXIT_OK, EXIT_USAGE, ProvisionError
from .report import Reporter

__all__ = [
    "bootstrap",
    "fleet_for",
    "install",
    "namespace",
    "pd_down",
    "pd_status",
    "pd_up",
    "pd_verify",
    "playbook",
    "preflight",
    "site",
    "smoke",
]

_DONE: dict[str, int] = {}  # stage → calls seen in this process (a stage runs at the first of every len(-H))


# ------------------------------------------------------------------------------------------------ hosts
def cli_hosts(c: Context) -> list[str]:
    """The ``-H`` hosts of this ``fab`` invocation (Fabric's own program parses them), else the task's host."""
    try:
        from fabric.main import program

        value = program.core[0].args.hosts.value if program.core else None
    except (AttributeError, IndexError, ImportError):
        value = None
    own = getattr(c, "original_host", None)
    hosts = [h.strip() for h in str(value).split(",") if h.strip()] if value else []
    if own is not None and own not in [derive_shorthand(h)["host"] for h in hosts]:
        return [_shorthand(c)]
    return hosts


def _shorthand(c: Context) -> str:
    assert isinstance(c, Connection)
    return f"{c.user}@{c.original_host}:{c.port}"


def _settings(c: Context) -> dict[str, Any]:
    section = c.config.get("provision") or {}
    return dict(section) if isinstance(section, Mapping) else {}


def fleet_for(c: Context, hosts: list[str], workdir: Path) -> tuple[api.Fleet, dict[str, Any]]:
    """The fleet the ``-H`` hosts make (an inventory written in ``workdir``), or the config's inventory limited to
    them; and the connection options Fabric's flags give (``-S``, ``-t``)."""
    settings = _settings(c)
    connect_kwargs = dict(c.config.get("connect_kwargs") or {})
    if connect_kwargs.get("passphrase"):
        raise api.UsageError(
            "--prompt-for-passphrase does not apply: provision does not decrypt keys itself; "
            "load the key into ssh-agent (ssh-add) and run without it"
        )
    opts: dict[str, Any] = {}
    # -S sets Fabric's runtime ssh_config path (also the config's ssh_config_path); -t the connect timeout
    ssh_config = getattr(c.config, "_runtime_ssh_path", None) or c.config.get("ssh_config_path")
    if ssh_config:
        opts["ssh_config"] = str(ssh_config)
    connect_timeout = connect_kwargs.get("timeout") or (c.config.get("timeouts") or {}).get("connect")
    if connect_timeout:
        opts["connect_timeout"] = float(connect_timeout)
    extra = dict(settings.get("extra_vars") or {})
    names = [derive_shorthand(h)["host"] for h in hosts]
    if settings.get("inventory"):
        return api.load(str(settings["inventory"]), extra_vars=extra, limit=",".join(names)), opts
    keys = connect_kwargs.get("key_filename") or []
    keys = [keys] if isinstance(keys, str) else list(keys)
    host_vars: dict[str, dict[str, Any]] = {}
    for spec in hosts:
        parts = derive_shorthand(spec)
        one: dict[str, Any] = {"ansible_host": parts["host"]}
        if parts["user"]:
            one["ansible_user"] = parts["user"]
        if parts["port"]:
            one["ansible_port"] = int(parts["port"])
        if keys:
            one["ansible_ssh_private_key_file"] = str(keys[0])
        if connect_kwargs.get("password"):
            one["ansible_password"] = str(connect_kwargs["password"])
        host_vars[parts["host"]] = one
    prefill = list(settings.get("prefill") or names[:1])
    decode = list(settings.get("decode") or [n for n in names if n not in prefill])
    groups: dict[str, Any] = {"prefill": prefill, "decode": decode}
    if settings.get("router"):
        groups["router"] = list(settings["router"])
    unknown = sorted({h for members in groups.values() for h in members} - set(host_vars))
    if unknown:
        raise api.UsageError(f"the Fabric config's provision roles name hosts not in -H: {', '.join(unknown)}")
    grouped = {h for members in groups.values() for h in members}
    doc = {
        "all": {
            "hosts": {n: v for n, v in host_vars.items() if n not in grouped} or None,
            "children": {g: {"hosts": {h: host_vars[h] for h in members}} for g, members in groups.items() if members},
        }
    }
    path = workdir / "fabric-hosts.yml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # it may hold a password
    with os.fdopen(fd, "w") as out:
        yaml.safe_dump(doc, out, sort_keys=False)
    return api.load(str(path), extra_vars=extra), opts


# ------------------------------------------------------------------------------------------------ runs
def _options(c: Context, conn_opts: dict[str, Any], extra_vars: list[str], check: bool,
             accept_new_host_keys: bool) -> dict[str, Any]:  # fmt: skip
    settings = _settings(c)
    opts: dict[str, Any] = dict(conn_opts)
    opts["extra_vars"] = api.parse_extra_vars(extra_vars)
    opts["check"] = check
    opts["accept_new_host_keys"] = accept_new_host_keys or bool(settings.get("accept_new_host_keys", False))
    if settings.get("forks"):
        opts["forks"] = int(settings["forks"])
    if settings.get("timeout"):
        opts["timeout"] = float(settings["timeout"])
    return opts


def report(result: api.RunResult, reporter: Reporter) -> int:
    """The one ERROR line on stderr as ``provision run`` prints it (the reporter printed the recap on the run's
    last event); the exit code."""
    if result.exit_code != EXIT_OK:
        reporter.out.flush()
        print(api.masked(f"ERROR: {result.reason}"), file=sys.stderr)
    return result.exit_code


def _stage(c: Context, name: str, body: Callable[[api.Fleet, dict[str, Any]], int], extra_vars: list[str],
           check: bool, accept_new_host_keys: bool) -> None:  # fmt: skip
    """Run ``body`` once for all ``-H`` hosts (at the first host's call); stop ``fab`` with its exit code."""
    hosts = cli_hosts(c) if isinstance(c, Connection) else []
    if not hosts:
        raise Exit(f"ERROR: {name}: no hosts: give them with fab -H host1,host2", code=EXIT_USAGE)
    seen = _DONE.get(name, 0)
    _DONE[name] = seen + 1
    if seen % len(hosts):
        return  # this stage already ran for every -H host, at the first one's call
    try:
        with tempfile.TemporaryDirectory(prefix="provision-fab-") as tmp:
            fleet, conn_opts = fleet_for(c, hosts, Path(tmp))
            code = body(fleet, _options(c, conn_opts, extra_vars, check, accept_new_host_keys))
    except ProvisionError as exc:
        raise Exit(api.masked(f"ERROR: {exc}"), code=exc.exit_code) from None
    if code != EXIT_OK:
        raise Exit(code=code)


def _playbook_stage(playbook_name: str) -> Callable[[api.Fleet, dict[str, Any]], int]:
    def body(fleet: api.Fleet, opts: dict[str, Any]) -> int:
        reporter = Reporter()
        return report(api.run_playbook(playbook_name, fleet, on_event=reporter.handle, **opts), reporter)

    return body


_QUERY_HELP = {
    "extra_vars": "k=v, @file.yml or JSON (repeatable); always wins",
    "accept_new_host_keys": "trust unknown host keys and save them",
}
_HELP = {**_QUERY_HELP, "check": "predict changes, change nothing"}


def _make(stage: str, playbook_name: str, doc: str) -> Any:
    def fn(c: Context, extra_vars: list[str] | None = None, check: bool = False,
           accept_new_host_keys: bool = False) -> None:  # fmt: skip
        _stage(c, stage, _playbook_stage(playbook_name), extra_vars or [], check, accept_new_host_keys)

    fn.__name__ = fn.__qualname__ = stage
    fn.__doc__ = doc
    return task(fn, name=stage.replace("_", "-"), iterable=["extra_vars"], help=_HELP, auto_shortflags=False)


site = _make("site", "site.yml", "Everything, in order: bootstrap, install, smoke, preflight, pd-up (site.yml).")
bootstrap = _make("bootstrap", "bootstrap.yml", "A Python >= 3.10 that can build venvs (bootstrap.yml).")
install = _make("install", "install.yml", "The venv: pinned SGLang, sglang-router and NIXL (install.yml).")
smoke = _make("smoke", "smoke.yml", "The NIXL gate: imports, UCX, VRAM_SEG on GPU hosts (smoke.yml).")
preflight = _make("preflight", "preflight.yml", "A real NIXL transfer prefill -> decode, measured (preflight.yml).")
pd_down = _make("pd_down", "pd-down.yml", "Stop router, decode and prefill (pd-down.yml; idempotent).")


@task(iterable=["extra_vars"], help=_HELP, auto_shortflags=False)
def pd_up(c: Context, extra_vars: list[str] | None = None, check: bool = False,
          accept_new_host_keys: bool = False) -> None:  # fmt: skip
    """Start prefill -> decode -> router and verify one generation (pd-up.yml, the layout checked first).

    When the run fails, what it started is stopped again (unless -e pd_keep_failed=true)."""

    def body(fleet: api.Fleet, opts: dict[str, Any]) -> int:
        reporter = Reporter()
        planned = api.plan_pd_up(fleet, **opts)
        code = report(planned.run(on_event=reporter.handle), reporter)
        stopped = api.clean_up_failed_up(planned, code)
        if stopped is not None:
            print(api.masked(api.stopped_line(stopped)), file=sys.stderr)
        return code

    _stage(c, "pd_up", body, extra_vars or [], check, accept_new_host_keys)


@task(iterable=["extra_vars"], help=_QUERY_HELP, auto_shortflags=False)
def pd_status(c: Context, extra_vars: list[str] | None = None, accept_new_host_keys: bool = False) -> None:
    """One line per PD process: host, role, state, pid, uptime, health, port (exit 2 when one is not up)."""

    def body(fleet: api.Fleet, opts: dict[str, Any]) -> int:
        opts.pop("check", None)
        status = api.pd_status(fleet, **opts)
        print(status.table())
        for line in status.error_lines():
            print(api.masked(line), file=sys.stderr)
        return status.exit_code

    _stage(c, "pd_status", body, extra_vars or [], False, accept_new_host_keys)


@task(iterable=["extra_vars"], help=_QUERY_HELP, auto_shortflags=False)
def pd_verify(c: Context, extra_vars: list[str] | None = None, accept_new_host_keys: bool = False) -> None:
    """One real generation through each router: completion, latency, TTFT."""

    def body(fleet: api.Fleet, opts: dict[str, Any]) -> int:
        opts.pop("check", None)
        verified = api.pd_verify(fleet, **opts)
        for line in verified.lines():
            print(api.masked(line))
        return verified.exit_code

    _stage(c, "pd_verify", body, extra_vars or [], False, accept_new_host_keys)


@task(iterable=["extra_vars"], help={**_HELP, "name": "a playbook file, or a shipped playbook's name"},
      auto_shortflags=False)  # fmt: skip
def playbook(c: Context, name: str, extra_vars: list[str] | None = None, check: bool = False,
             accept_new_host_keys: bool = False) -> None:  # fmt: skip
    """Any playbook (a file, or a shipped one by name) on the -H hosts."""
    _stage(c, f"playbook:{name}", _playbook_stage(name), extra_vars or [], check, accept_new_host_keys)


namespace = Collection(site, bootstrap, install, smoke, preflight, pd_up, pd_status, pd_verify, pd_down, playbook)
