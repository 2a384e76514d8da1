"""``apt``, ``package`` and ``dnf``: packages present, latest or absent, with Ansible's arguments and return
values, and check mode. The host does it in one round trip (``remote/packages.py``, the request on stdin); it
needs root (``become``).

``apt`` (Debian/Ubuntu): ``cache_updated``, ``cache_update_time``, ``stdout``/``stderr`` when apt-get ran; check
mode is ``apt-get --simulate``. Every apt-get waits for apt's and dpkg's locks up to ``lock_timeout`` seconds
(60, Ansible's default: a freshly booted host's unattended-upgrades is waited for), ``apt-get update`` and the
download lock included, which apt itself does not wait for. ``deb``: a .deb on the host or a URL fetched there,
installed with its dependencies (``apt-get install ./file.deb``), left alone when its name and version are
installed; ``autoclean``, ``clean``, ``fail_on_autoremove``, ``allow_unauthenticated``,
``allow_change_held_packages``, ``policy_rc_d`` and ``update_cache_retries``/``update_cache_retry_max_delay`` as
Ansible's. ``package`` is ``apt`` on hosts that have it; on dnf/yum hosts it fails in one line (naming ``dnf``
where the host has it). Refused by name: ``upgrade`` other than no (it upgrades every package of a host: no test
here could run it without upgrading the test machine itself, so it stays refused), ``build-dep``/``fixed``
states, wildcards in names.

``dnf`` (dnf 4's command line and ``rpm``): ``results`` (``Installed: NEVRA``, ``Removed: NEVRA``), ``msg``,
``rc``, ``failures``, as Ansible's ``dnf``; ``installroot``, ``releasever``, ``conf_file``, repos and plugins
enabled/disabled per call. Refused: the arguments in ``DNF_UNSUPPORTED``, the ``dnf5`` backend, and names that
are not package specs (wildcards, ``@group``/``@module``, ``.rpm`` files, URLs).
"""

from __future__ import annotations

import json
from typing import Any

from .base import Arg, ArgError, HelperError, Module, ModuleContext, ModuleResult, register

HELPER = "packages.py"
DNF_UNSUPPORTED = (
    "allowerasing", "best", "nobest", "bugfix", "security", "cacheonly", "disable_excludes", "download_only",
    "download_dir", "exclude", "list", "lock_timeout", "skip_broken", "update_only", "validate_certs", "sslverify",
    "install_repoquery",
)  # fmt: skip
DNF_PASSED = (
    "installroot", "releasever", "conf_file", "disable_gpg_check", "enablerepo", "disablerepo", "enable_plugin",
    "disable_plugin", "update_cache", "autoremove", "allow_downgrade", "install_weak_deps",
)  # fmt: skip
APT_PASSED = (
    "deb", "update_cache", "update_cache_retries", "update_cache_retry_max_delay", "cache_valid_time", "purge",
    "autoremove", "autoclean", "clean", "fail_on_autoremove", "install_recommends", "force", "only_upgrade",
    "allow_downgrade", "allow_unauthenticated", "allow_change_held_packages", "default_release", "dpkg_options",
    "policy_rc_d", "lock_timeout",
)  # fmt: skip
REQUIRED_ONE = ("name", "deb", "update_cache", "autoremove", "autoclean", "clean")  # Ansible's required_one_of
APT_COUNTS = ("lock_timeout", "update_cache_retries", "update_cache_retry_max_delay")  # never below 0


def _state(value: str) -> str:
    return {"installed": "present", "removed": "absent"}.get(value, value)


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).split(",")
    return [str(i).strip() for i in items if str(i).strip()]


def _apply(ctx: ModuleContext, request: dict[str, Any], what: str = "apt") -> ModuleResult:
    inner = list(request.get("requests", {}).values())  # package with use: auto: one request per backend
    for name in request.get("names") or (inner[0].get("names", []) if inner else []):
        if any(c in name for c in "*?["):
            return ModuleResult(failed=True, msg=f"{what}: wildcards in package names are not supported: {name}")
    request["check"] = ctx.check
    try:
        answer = ctx.call_helper(HELPER, "apply", stdin=json.dumps(request).encode(), what=what, check_rc=False)
    except HelperError as exc:
        return exc.as_result()
    result = ModuleResult.from_answer(answer)  # cache_updated, cache_update_time, stdout, stderr, rc, diff
    for stream in ("stdout", "stderr"):
        if stream in result.data:
            result.data[f"{stream}_lines"] = str(result.data[stream]).splitlines()
    return result


@register
class Apt(Module):
    name = "apt"
    args = {
        "name": Arg("raw", aliases=("package", "pkg")),
        "state": Arg(default="present", choices=("present", "installed", "latest", "absent", "removed")),
        "update_cache": Arg("bool", default=False, aliases=("update-cache",)),
        "cache_valid_time": Arg("int", default=0),
        "purge": Arg("bool", default=False),
        "autoremove": Arg("bool", default=False),
        "install_recommends": Arg("bool", aliases=("install-recommends",)),
        "force": Arg("bool", default=False),
        "only_upgrade": Arg("bool", default=False),
        "allow_downgrade": Arg("bool", default=False, aliases=("allow-downgrade", "allow_downgrades")),
        "default_release": Arg(aliases=("default-release",)),
        "dpkg_options": Arg(default="force-confdef,force-confold"),
        "upgrade": Arg(default="no"),
        "deb": Arg(),
        "autoclean": Arg("bool", default=False),
        "clean": Arg("bool", default=False),
        "fail_on_autoremove": Arg("bool", default=False),
        "allow_unauthenticated": Arg("bool", default=False, aliases=("allow-unauthenticated",)),
        "allow_change_held_packages": Arg("bool", default=False),
        "policy_rc_d": Arg("int"),
        "lock_timeout": Arg("int", default=60),
        "update_cache_retries": Arg("int", default=5),
        "update_cache_retry_max_delay": Arg("int", default=12),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        upgrade = args.get("upgrade", "no")
        if not is_template(upgrade) and str(upgrade).lower() not in ("no", "false"):
            raise ArgError("apt: upgrade is not supported by provision (only upgrade: no)")
        if "deb" in args and "name" in args:  # (aliases are resolved by now)
            raise ArgError("apt: parameters are mutually exclusive: deb|package")
        state = args.get("state", "present")
        if "deb" in args and not is_template(state) and _state(str(state)) != "present":
            raise ArgError("apt: deb only supports state=present")
        for name in APT_COUNTS:
            value = args.get(name)
            if value is not None and not is_template(value) and str(value).lstrip("-").isdigit() and int(value) < 0:
                raise ArgError(f"apt: {name} must be 0 or more")
        if not any(key in args for key in REQUIRED_ONE):
            raise ArgError(f"apt: one of the following is required: {', '.join(REQUIRED_ONE)}")

    @staticmethod
    def request(args: dict[str, Any]) -> dict[str, Any]:
        """The host helper's request for these (coerced) arguments."""
        return {
            "manager": "apt",
            "names": _names(args["name"]),
            "state": _state(args["state"]),
            **{k: args[k] for k in APT_PASSED},
        }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        return _apply(ctx, self.request(args))


@register
class Dnf(Module):
    name = "dnf"
    args = {
        "name": Arg("raw", aliases=("pkg",)),
        # no default: with autoremove alone the module removes what is no longer needed, as Ansible's
        "state": Arg(choices=("present", "installed", "latest", "absent", "removed")),
        "installroot": Arg(default="/"),
        "releasever": Arg(),
        "conf_file": Arg(),
        "disable_gpg_check": Arg("bool", default=False),
        "enablerepo": Arg("list", default=[]),
        "disablerepo": Arg("list", default=[]),
        "enable_plugin": Arg("list", default=[]),
        "disable_plugin": Arg("list", default=[]),
        "update_cache": Arg("bool", default=False, aliases=("expire-cache",)),
        "autoremove": Arg("bool", default=False),
        "allow_downgrade": Arg("bool", default=False),
        "install_weak_deps": Arg("bool", default=True),
        # Ansible's dnf action picks the module by this; every choice but dnf5 is dnf 4 here
        "use_backend": Arg(default="auto", choices=("auto", "dnf", "dnf4", "yum", "yum4")),
        **{name: Arg("raw") for name in DNF_UNSUPPORTED},
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        for name in DNF_UNSUPPORTED:
            if name in args:
                raise ArgError(f"dnf: {name!r} is not supported by provision")

    @staticmethod
    def request(args: dict[str, Any]) -> dict[str, Any]:
        """The host helper's request for these (coerced) arguments; ArgError for a name that is no package spec."""
        names = _names(args["name"])
        for name in names:
            if name.startswith("@") or name.endswith(".rpm") or "://" in name:
                raise ArgError(f"dnf: only package specs are supported, not {name}")
        state = _state(args["state"]) if args["state"] else None
        return {"manager": "dnf", "names": names, "state": state, **{k: args[k] for k in DNF_PASSED}}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        try:
            request = self.request(args)
        except ArgError as exc:
            return ModuleResult(failed=True, msg=str(exc))
        return _apply(ctx, request, what="dnf")


BACKENDS: dict[str, type[Apt] | type[Dnf]] = {"apt": Apt, "dnf": Dnf}
# what `package` hands on to its backend, as Ansible's package action does (every argument but `use`); each
# backend checks them when the task runs (apt refuses dnf's `installroot`, as Ansible's apt does)
PACKAGE_PASSED = sorted(
    {key for cls in BACKENDS.values() for name, spec in cls.args.items() for key in (name, *spec.aliases)}
    - {"name", "state", "package", "pkg"}
)


def _backend_request(backend: str, args: dict[str, Any]) -> dict[str, Any]:
    """``package``'s arguments as the backend's request, or ``{"manager": backend, "error": why}``."""
    cls = BACKENDS[backend]
    given = {k: v for k, v in args.items() if k != "use" and v is not None}
    try:
        return cls.request(cls.coerce(cls.validate_static(given, lambda _: False)))
    except ArgError as exc:
        return {"manager": backend, "error": str(exc)}


@register
class Package(Module):
    name = "package"
    args = {
        "name": Arg("raw", required=True),
        # ansible-core documents state as required, but its package action hands the arguments to the backend,
        # whose default (present) applies: `package: name=git` installs git there, and here
        "state": Arg(default="present", choices=("present", "installed", "latest", "absent", "removed")),
        # auto: the host's package manager (apt where apt-get is, else dnf), as Ansible's pkg_mgr fact picks it
        "use": Arg(default="auto", choices=("auto", "apt", "dnf")),
        **{name: Arg("raw") for name in PACKAGE_PASSED},
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        backends = list(BACKENDS) if args["use"] == "auto" else [args["use"]]
        requests = {backend: _backend_request(backend, args) for backend in backends}
        if len(requests) == 1:
            request = next(iter(requests.values()))
            if "error" in request:
                return ModuleResult(failed=True, msg=request["error"])
            return _apply(ctx, request, what=request["manager"])
        return _apply(ctx, {"manager": "auto", "requests": requests}, what="package")
