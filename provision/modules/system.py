"""``setup``, ``tempfile``, ``pause``, ``service`` and ``systemd_service`` (also ``systemd``).

``setup`` is the play's fact gathering as a task (:func:`provision.facts.gather`: one round trip): what it
gathers becomes the host's facts (``ansible_facts``, the top-level ``ansible_*`` names), ``filter`` keeps only
the facts whose ``ansible_`` name matches one of its shell patterns. ``tempfile`` makes a file or directory
with ``mkstemp``/``mkdtemp`` on the host (``remote/transfer.py``, through the agent). ``pause`` waits on the
controller: ``seconds``/``minutes``; a ``prompt`` without them needs an interactive terminal and is refused
with one clear line when there is none (a run under CI would otherwise sail past a human gate).
``systemd_service`` is ansible-core's module of that name (``systemctl`` on the host); ``service`` reads the
host's service manager as Ansible's action does and runs the ``systemd_service`` logic on a systemd host, or
drives a SysV init script as ansible-core's ``service`` module does on a Linux host without systemd. Both run
on the host in one round trip (``remote/service.py``) and, to change anything, need root (``become``); a host
run by upstart or OpenRC fails ``service`` in one line.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import sys
import threading
import time
from typing import Any

from ..errors import HostError
from .base import Arg, ArgError, HelperError, Module, ModuleContext, ModuleResult, register

SUBSETS = frozenset({
    "all", "min", "all_ipv4_addresses", "all_ipv6_addresses", "apparmor", "architecture", "caps", "chroot",
    "cmdline", "date_time", "default_ipv4", "default_ipv6", "devices", "distribution", "distribution_major_version",
    "distribution_release", "distribution_version", "dns", "effective_group_ids", "effective_user_id", "env",
    "facter", "fips", "hardware", "interfaces", "is_chroot", "iscsi", "kernel", "local", "lsb", "machine",
    "machine_id", "mounts", "network", "ohai", "os_family", "pkg_mgr", "platform", "processor", "processor_cores",
    "processor_count", "python", "python_version", "real_user_id", "selinux", "service_mgr", "ssh_host_key_dsa_public",
    "ssh_host_key_ecdsa_public", "ssh_host_key_ed25519_public", "ssh_host_key_rsa_public", "ssh_host_pub_keys",
    "ssh_pub_keys", "system", "system_capabilities", "system_capabilities_enforced", "user", "user_dir", "user_gecos",
    "user_gid", "user_id", "user_shell", "user_uid", "virtual", "virtualization_role", "virtualization_type",
    "loadavg",
})  # fmt: skip


def _check_subsets(values: list[Any]) -> None:
    for value in values:
        name = str(value).strip().lstrip("!")
        if name not in SUBSETS:
            raise ArgError(f"setup: gather_subset {value!r} is not a known subset (like all, min, network, hardware)")


@register
class Setup(Module):
    name = "setup"
    args = {
        "gather_subset": Arg("list", default=["all"]),
        "gather_timeout": Arg("int", default=10),
        "filter": Arg("list", default=[]),
        "fact_path": Arg("path"),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        subset = args.get("gather_subset")
        if subset is not None and not is_template(subset):
            _check_subsets(subset if isinstance(subset, list) else str(subset).split(","))

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        from ..facts import gather  # imported when a play runs setup

        _check_subsets(args["gather_subset"])
        venv = str(ctx.variables.get("venv_path") or "~")
        try:
            facts = gather(ctx.conn, venv, timeout=max(60, args["gather_timeout"]))
        except HostError as exc:
            return ModuleResult(failed=True, msg=exc.msg)
        patterns = [str(p) for p in args["filter"] if str(p)]
        if patterns:
            facts = {k: v for k, v in facts.items() if any(fnmatch.fnmatchcase(f"ansible_{k}", p) for p in patterns)}
        shown = {f"ansible_{k}": v for k, v in facts.items()}
        return ModuleResult(data={"ansible_facts": shown}, gathered=ctx.facts_with(facts))


@register
class Tempfile(Module):
    name = "tempfile"
    args = {
        "state": Arg(default="file", choices=("file", "directory")),
        "path": Arg("path"),
        "prefix": Arg(default="ansible."),
        "suffix": Arg(default=""),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if ctx.check:  # Ansible's tempfile does not support check mode
            return ModuleResult(skipped=True, msg="remote module (tempfile) does not support check mode")
        request = {k: args[k] for k in ("state", "path", "prefix", "suffix")}
        try:
            answer = ctx.call_helper("transfer.py", "tempfile", stdin=json.dumps(request).encode(), what="tempfile",
                                     check_rc=False)  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        if not answer.get("ok"):
            return ModuleResult(failed=True, msg=str(answer.get("msg")))
        answer.pop("ok", None)
        return ModuleResult(changed=True, data=answer)


_PROMPT_LOCK = threading.Lock()


@register
class Pause(Module):
    name = "pause"
    controller_only = True
    args = {
        "seconds": Arg("int"),
        "minutes": Arg("int"),
        "prompt": Arg("str"),
        "echo": Arg("bool", default=True),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        if args.get("seconds") is not None and args.get("minutes") is not None:
            raise ArgError("pause: parameters are mutually exclusive: minutes|seconds")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        seconds, unit = None, "minutes"
        if args["minutes"] is not None:
            seconds = args["minutes"] * 60
        elif args["seconds"] is not None:
            seconds, unit = args["seconds"], "seconds"
        started, start_text = time.monotonic(), str(datetime.datetime.now())
        user_input = ""
        if seconds is not None:
            time.sleep(max(1, seconds))
        elif not sys.stdin.isatty():
            return ModuleResult(
                failed=True,
                msg="pause: a prompt without seconds or minutes needs an interactive terminal (stdin is not a "
                "tty): give seconds or minutes, or run from a terminal",
            )
        else:
            with _PROMPT_LOCK:
                text = args["prompt"] or "Press enter to continue, Ctrl+C to interrupt"
                sys.stderr.write(f"[{ctx.host}]\n{text}:")
                sys.stderr.flush()
                user_input = sys.stdin.readline().rstrip("\n")
        duration = time.monotonic() - started
        shown = round(duration / 60.0, 2) if unit == "minutes" else round(duration, 2)
        data = {
            "rc": 0,
            "stderr": "",
            "stdout": f"Paused for {shown} {unit}",
            "start": start_text,
            "stop": str(datetime.datetime.now()),
            "delta": int(duration),
            "echo": args["echo"],
            "user_input": user_input,
        }
        return ModuleResult(data=data)


def _service_helper(ctx: ModuleContext, request: dict[str, Any]) -> ModuleResult:
    request["check"] = ctx.check
    try:
        answer = ctx.call_helper(
            "service.py", "apply", stdin=json.dumps(request).encode(), what=request["module"], check_rc=False
        )
    except HelperError as exc:
        return exc.as_result()
    return ModuleResult.from_answer(answer)


def systemd_unit(ctx: ModuleContext, **request: Any) -> ModuleResult:
    """ansible-core's ``systemd_service`` on the host (``service.py``) for a module that manages a unit of its
    own (``name``, ``state``, ``enabled``, ``daemon_reload``, ...): the one place provision drives systemctl."""
    return _service_helper(ctx, {"module": "systemd", **request})


SYSTEMD_ARGS = {
    "name": Arg(aliases=("service", "unit")),
    "state": Arg(choices=("reloaded", "restarted", "started", "stopped")),
    "enabled": Arg("bool"),
    "force": Arg("bool"),
    "masked": Arg("bool"),
    "daemon_reload": Arg("bool", default=False, aliases=("daemon-reload",)),
    "daemon_reexec": Arg("bool", default=False, aliases=("daemon-reexec",)),
    "scope": Arg(default="system", choices=("system", "user", "global")),
    "no_block": Arg("bool", default=False),
}
# what only systemd_service takes (the service module passes them on; a SysV host refuses them)
SYSTEMD_ONLY = ("masked", "daemon_reload", "daemon_reexec", "force", "no_block")


def _system_scope(module: str, args: Any, is_template: Any) -> None:
    scope = args.get("scope", "system")
    if scope is not None and not is_template(scope) and scope != "system":
        raise ArgError(f"{module}: scope {scope!r} is not supported by provision (only system)")


@register
class Service(Module):
    name = "service"
    args = {
        "name": Arg(),
        "state": Arg(choices=("started", "stopped", "reloaded", "restarted")),
        "sleep": Arg("int"),
        "pattern": Arg(),
        "enabled": Arg("bool"),
        "runlevel": Arg(default="default"),  # OpenRC's; accepted and unused, as Ansible on a SysV host
        "arguments": Arg(default="", aliases=("args",)),
        "use": Arg(default="auto", choices=("auto", "service", "systemd")),
        # Ansible's service action hands every other argument to systemd_service on a systemd host: these work
        # there (docker's role: `service: {daemon_reload: true}`), and fail the task on a SysV host, as there
        **{k: SYSTEMD_ARGS[k] for k in (*SYSTEMD_ONLY, "scope")},
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        wanted = ("state", "enabled", "masked", "daemon_reload", "daemon_reexec")
        if not any(args.get(k) is not None for k in wanted):
            raise ArgError(f"service: one of the following is required: {', '.join(wanted)}")
        for key in ("state", "enabled", "masked"):
            if args.get(key) is not None and args.get("name") is None:
                raise ArgError(f"service: missing parameter(s) required by '{key}': name")
        _system_scope(cls.name, args, is_template)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        keys = ("name", "state", "enabled", "sleep", "pattern", "arguments", *SYSTEMD_ONLY)
        request = {k: args.get(k) for k in keys}
        request["module"] = "systemd" if args["use"] == "systemd" else "service"
        return _service_helper(ctx, request)


@register
class SystemdService(Module):
    name = "systemd_service"
    args = SYSTEMD_ARGS

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        wanted = ("state", "enabled", "masked", "daemon_reload", "daemon-reload", "daemon_reexec", "daemon-reexec")
        if not any(args.get(k) is not None for k in wanted):
            raise ArgError(
                f"{cls.name}: one of the following is required: state, enabled, masked, daemon_reload, daemon_reexec"
            )
        has_name = any(args.get(k) is not None for k in ("name", "service", "unit"))
        for key in ("state", "enabled", "masked"):
            if args.get(key) is not None and not has_name:
                raise ArgError(f"{cls.name}: missing parameter(s) required by '{key}': name")
        _system_scope(cls.name, args, is_template)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if args["scope"] != "system":
            return ModuleResult(failed=True, msg=f"{self.name}: scope {args['scope']!r} is not supported by provision")
        keys = ("name", "state", "enabled", "force", "masked", "daemon_reload", "daemon_reexec", "no_block")
        return _service_helper(ctx, {"module": "systemd", **{k: args[k] for k in keys}})


@register
class Systemd(SystemdService):
    name = "systemd"  # ansible.builtin.systemd: the same module under its older name


__all__ = ["Pause", "Service", "Setup", "Systemd", "SystemdService", "Tempfile", "systemd_unit"]
