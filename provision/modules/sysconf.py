"""Host settings that GPU-host playbooks make (RDMA, NCCL, scratch disks, access, jobs): ``pam_limits``
(community.general's: ``memlock unlimited``), ``sysctl``, ``mount`` (the fstab only: states ``present`` and
``absent_from_fstab``) and ``authorized_key`` (ansible.posix's), also under their FQCNs, and ansible-core's
``known_hosts`` and ``cron`` (a user's crontab through ``crontab``, or a ``cron_file``), and community.general's
``modprobe`` (``remote/modprobe.py``: the kernel module loaded or unloaded, its ``/etc/modules-load.d`` and
``/etc/modprobe.d`` lines), and ansible-core's ``hostname`` (``remote/hostname.py``: ``/etc/hostname``,
``/etc/sysconfig/network`` or ``hostnamectl``, the strategy chosen as Ansible chooses it). The host side is
``remote/sysconf.py`` (``remote/authorized_key.py``, ``remote/known_hosts.py``, ``remote/cron.py``), one round
trip: the file read, the line fixed with the module's own rules, written atomically (check mode writes nothing;
``--diff`` shows the change of ``pam_limits``, ``authorized_key``, ``known_hosts`` and ``cron``, as Ansible).
``backup`` is refused before the run."""

from __future__ import annotations

import json
from typing import Any

from .base import REGISTRY, Arg, ArgError, HelperError, Module, ModuleContext, ModuleResult, register
from .files import text_diff

LIMIT_ITEMS = ("core", "data", "fsize", "memlock", "nofile", "rss", "stack", "cpu", "nproc", "as", "maxlogins",
               "maxsyslogins", "priority", "locks", "sigpending", "msgqueue", "nice", "rtprio", "chroot")  # fmt: skip


def add_fqcn(collection: str, cls: type[Module]) -> None:
    """A registered module also under its collection's FQCN (``ansible.posix.sysctl``)."""
    REGISTRY[f"{collection}.{cls.name}"] = cls


def apply_helper(
    ctx: ModuleContext,
    action: str,
    request: dict[str, Any],
    script: str = "sysconf.py",
    path: str | None = None,
    what: str | None = None,
) -> ModuleResult:
    """The helper's answer (``script ACTION``, the task's check mode in the request) as the task's result; with
    ``path`` (a helper that edited one file and answered its ``before``/``after``) the ``--diff`` of that file,
    those two keys not returned (without it, a helper's own ``before``/``after`` are returned values)."""
    request["check"] = ctx.check
    try:
        answer = ctx.call_helper(script, action, stdin=json.dumps(request).encode(), what=what or action,
                                 check_rc=False)  # fmt: skip
    except HelperError as exc:
        return exc.as_result()
    if path is None:
        return ModuleResult.from_answer(answer)
    before, after = answer.pop("before", ""), answer.pop("after", "")
    result = ModuleResult.from_answer(answer)
    if ctx.diff and result.changed:
        result.diff = text_diff(before.encode(), after.encode(), path or str(answer.get("keyfile") or ""))
    return result


def _refuse_backup(name: str, args: Any) -> None:
    if args.get("backup") is True or str(args.get("backup")).lower() in ("yes", "true"):
        raise ArgError(f"{name}: backup is not supported by provision")


@register
class PamLimits(Module):
    name = "pam_limits"
    args = {
        "domain": Arg(required=True),
        "limit_type": Arg(required=True, choices=("soft", "hard", "-")),
        "limit_item": Arg(required=True, choices=LIMIT_ITEMS),
        "value": Arg(required=True),
        "use_max": Arg("bool", default=False),
        "use_min": Arg("bool", default=False),
        "backup": Arg("bool", default=False),
        "dest": Arg(default="/etc/security/limits.conf"),
        "comment": Arg(default=""),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        _refuse_backup(cls.name, args)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        keys = ("domain", "limit_type", "limit_item", "value", "use_max", "use_min", "dest", "comment")
        return apply_helper(ctx, "pam_limits", {k: args[k] for k in keys}, path=args["dest"])


@register
class Sysctl(Module):
    name = "sysctl"
    args = {
        "name": Arg(required=True, aliases=("key",)),
        "value": Arg(aliases=("val",)),
        "state": Arg(default="present", choices=("present", "absent")),
        "reload": Arg("bool", default=True),
        "sysctl_set": Arg("bool", default=False),
        "ignoreerrors": Arg("bool", default=False),
        "sysctl_file": Arg("path", default="/etc/sysctl.conf"),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        if args.get("state", "present") == "present" and args.get("value", args.get("val")) is None:
            raise ArgError("sysctl: state is present but all of the following are missing: value")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if args["name"] == "":
            return ModuleResult(failed=True, msg="name cannot be blank")
        if args["state"] == "present" and args["value"] == "":
            return ModuleResult(failed=True, msg="value cannot be blank")
        keys = ("name", "value", "state", "reload", "sysctl_set", "ignoreerrors")
        request = {k: args[k] for k in keys}
        request["sysctl_file"] = ctx.expand(args["sysctl_file"])
        return apply_helper(ctx, "sysctl", request)


FSTAB_STATES = ("present", "absent_from_fstab")  # the others mount or unmount: not offered


@register
class Mount(Module):
    name = "mount"
    args = {
        "path": Arg("path", required=True, aliases=("name",)),
        "state": Arg(
            required=True, choices=(*FSTAB_STATES, "absent", "mounted", "unmounted", "remounted", "ephemeral")
        ),
        "src": Arg(),
        "fstype": Arg(),
        "opts": Arg(),
        "opts_no_log": Arg("bool", default=False),
        "dump": Arg(default="0"),
        "passno": Arg(default="0"),
        "boot": Arg("bool", default=True),
        "fstab": Arg(),
        "backup": Arg("bool", default=False),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        state = args.get("state")
        if state is not None and not is_template(state) and state not in FSTAB_STATES:
            raise ArgError(f"mount: state {state!r} is not supported by provision (only present, absent_from_fstab)")
        if state == "present" and (args.get("src") is None or args.get("fstype") is None):
            raise ArgError("mount: state is present but all of the following are missing: src, fstype")
        _refuse_backup(cls.name, args)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if args["state"] not in FSTAB_STATES:
            return ModuleResult(failed=True, msg=f"mount: state {args['state']!r} is not supported by provision")
        keys = ("path", "state", "src", "fstype", "opts", "dump", "passno", "boot", "fstab")
        return apply_helper(ctx, "mount", {k: args[k] for k in keys})


@register
class AuthorizedKey(Module):
    name = "authorized_key"
    args = {
        "user": Arg(required=True),
        "key": Arg(required=True),
        "path": Arg("path"),
        "manage_dir": Arg("bool", default=True),
        "state": Arg(default="present", choices=("absent", "present")),
        "key_options": Arg(),
        "exclusive": Arg("bool", default=False),
        "comment": Arg(),
        "validate_certs": Arg("bool", default=True),
        "follow": Arg("bool", default=False),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        request = dict(args)
        if request["path"] is not None:
            request["path"] = ctx.expand(request["path"])
        return apply_helper(ctx, "authorized_key", request, script="authorized_key.py", path="")  # "": the keyfile


@register
class KnownHosts(Module):
    name = "known_hosts"
    args = {
        "name": Arg(required=True, aliases=("host",)),
        "key": Arg(),
        "path": Arg("path", default="~/.ssh/known_hosts"),
        "hash_host": Arg("bool", default=False),
        "state": Arg(default="present", choices=("absent", "present")),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        request = dict(args, path=ctx.expand(args["path"]))
        return apply_helper(ctx, "known_hosts", request, script="known_hosts.py", path=request["path"])


SPECIAL_TIMES = ("reboot", "yearly", "annually", "monthly", "weekly", "daily", "hourly")


@register
class Cron(Module):
    name = "cron"
    args = {
        "name": Arg(required=True),
        "user": Arg(),
        "job": Arg(aliases=("value",)),
        "cron_file": Arg("path"),
        "state": Arg(default="present", choices=("present", "absent")),
        "backup": Arg("bool", default=False),
        "minute": Arg(default="*"),
        "hour": Arg(default="*"),
        "day": Arg(default="*", aliases=("dom",)),
        "month": Arg(default="*"),
        "weekday": Arg(default="*", aliases=("dow",)),
        "special_time": Arg(choices=SPECIAL_TIMES),
        "disabled": Arg("bool", default=False),
        "env": Arg("bool", default=False),
        "insertafter": Arg(),
        "insertbefore": Arg(),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        if args.get("insertafter") is not None and args.get("insertbefore") is not None:
            raise ArgError("cron: parameters are mutually exclusive: insertafter|insertbefore")
        _refuse_backup(cls.name, args)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        request = {k: v for k, v in args.items() if k != "backup"}
        if request["cron_file"] is not None:
            request["cron_file"] = ctx.expand(request["cron_file"])
        return apply_helper(ctx, "cron", request, script="cron.py", path=request["cron_file"] or "crontab")


@register
class Modprobe(Module):
    name = "modprobe"
    args = {
        "name": Arg(required=True),
        "state": Arg(default="present", choices=("absent", "present")),
        "params": Arg(default=""),
        "persistent": Arg(default="disabled", choices=("disabled", "present", "absent")),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        request = {k: args[k] for k in ("name", "state", "params", "persistent")}
        return apply_helper(ctx, "apply", request, "modprobe.py")


HOSTNAME_USES = ("alpine", "debian", "freebsd", "generic", "macos", "macosx", "darwin", "openbsd", "openrc", "redhat",
                 "sles", "solaris", "systemd")  # fmt: skip
HOSTNAME_OFFERED = ("debian", "redhat", "systemd")  # Linux hosts of a GPU fleet (debian is hostnamectl, as Ansible)


@register
class Hostname(Module):
    name = "hostname"
    args = {"name": Arg(required=True), "use": Arg(choices=HOSTNAME_USES)}
    returned_facts = frozenset({"ansible_hostname", "ansible_nodename", "ansible_fqdn", "ansible_domain"})

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        use = args.get("use")
        if use is not None and not is_template(use) and use not in HOSTNAME_OFFERED:
            raise ArgError(f"hostname: use {use!r} is not supported by provision (only debian, redhat, systemd)")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if args["use"] is not None and args["use"] not in HOSTNAME_OFFERED:
            return ModuleResult(failed=True, msg=f"hostname: use {args['use']!r} is not supported by provision")
        result = apply_helper(ctx, "apply", {"name": args["name"], "use": args["use"]}, "hostname.py", path="hostname")
        if not result.failed:
            result.facts = dict(result.data.get("ansible_facts") or {})  # the top-level ansible_hostname, ...
        return result


add_fqcn("community.general", PamLimits)
add_fqcn("community.general", Modprobe)
add_fqcn("ansible.posix", AuthorizedKey)
add_fqcn("ansible.posix", Sysctl)
add_fqcn("ansible.posix", Mount)

__all__ = ["AuthorizedKey", "Cron", "Hostname", "KnownHosts", "Modprobe", "Mount", "PamLimits", "Sysctl", "add_fqcn"]
