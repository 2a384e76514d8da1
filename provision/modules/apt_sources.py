"""``apt_repository`` (ansible-core's): a one-line APT source added or removed (``remote/apt_repository.py``, one
round trip: the sources read where ``apt-config`` says they are, the line fixed with the module's rules, every
changed file written atomically, then ``apt-get update`` when ``update_cache``). Check mode writes nothing;
``--diff`` shows the files added or removed, as Ansible's. A ``ppa:`` repository is refused when the task runs
(the module asks Launchpad for it over the network and adds its key); ``mode`` is octal (a symbolic one is
refused); ``install_python_apt``, ``validate_certs`` and ``codename`` (PPA only) are accepted and unused: the
host side needs no python3-apt.

``deb822_repository`` (ansible-core's): a source in the deb822 format, ``/etc/apt/sources.list.d/SLUG.sources``
(``remote/deb822_repository.py``: the text rendered as python-debian renders it, so the host needs no
python3-debian; a ``signed_by`` URL fetched by the host into ``/etc/apt/keyrings``). Check mode writes nothing;
there is no ``--diff``, as in Ansible's; ``mode`` is octal.

``apt_key`` (ansible-core's): a key added to or removed from APT's keyring or a ``keyring`` file through the host's
``apt-key`` and ``gpg`` (``remote/apt_key.py``; a ``url`` is fetched by the host). Check mode changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .base import Arg, ArgError, HelperError, Module, ModuleContext, ModuleResult, register
from .files import text_diff
from .modes import parse_mode
from .sysconf import apply_helper


@register
class AptRepository(Module):
    name = "apt_repository"
    args = {
        "repo": Arg(required=True),
        "state": Arg(default="present", choices=("absent", "present")),
        "mode": Arg("mode"),
        "update_cache": Arg("bool", default=True, aliases=("update-cache",)),
        "update_cache_retries": Arg("int", default=5),
        "update_cache_retry_max_delay": Arg("int", default=12),
        "filename": Arg(),
        "install_python_apt": Arg("bool", default=True),
        "validate_certs": Arg("bool", default=True),
        "codename": Arg(),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if str(args["repo"]).startswith("ppa:"):
            return ModuleResult(failed=True, msg="apt_repository: ppa: repositories are not supported by provision")
        if args["mode"] is not None and not isinstance(args["mode"], int):
            msg = "apt_repository: give mode in octal (a symbolic mode is not supported)"
            return ModuleResult(failed=True, msg=msg)
        keys = ("repo", "state", "mode", "update_cache", "update_cache_retries", "update_cache_retry_max_delay")
        request = {k: args[k] for k in keys}
        request |= {"filename": args["filename"], "check": ctx.check}
        try:
            answer = ctx.call_helper(
                "apt_repository.py", "apply", stdin=json.dumps(request).encode(), what="apt_repository", check_rc=False
            )
        except HelperError as exc:
            return exc.as_result()
        answer.pop("ok", None)
        diffs = answer.pop("diffs", [])
        result = ModuleResult.from_answer(answer)
        if ctx.diff and result.changed:
            parts = [text_diff(d["before"].encode(), d["after"].encode(), d["path"]) for d in diffs]
            result.diff = "".join(p for p in parts if p) or None
        return result


DEB822_LISTS = ("architectures", "components", "languages", "suites", "targets", "types", "uris")
DEB822_BOOLS = ("allow_downgrade_to_insecure", "allow_insecure", "allow_weak", "by_hash", "check_date",
                "check_valid_until", "enabled", "pdiffs", "trusted")  # fmt: skip
SOURCE_TYPES = ("deb", "deb-src")


@register
class Deb822Repository(Module):
    name = "deb822_repository"
    args = {
        **{k: Arg("list") for k in DEB822_LISTS},
        **{k: Arg("bool") for k in DEB822_BOOLS},
        "types": Arg("list", default=["deb"]),
        "date_max_future": Arg("int"),
        "inrelease_path": Arg(),
        "name": Arg(required=True),
        "signed_by": Arg(),
        "mode": Arg("mode", default=0o644),
        "state": Arg(default="present", choices=("absent", "present")),
    }

    @classmethod
    def check_combination(cls, args: Mapping[str, Any], is_template: Callable[[Any], bool]) -> None:
        types = args.get("types")
        if types is not None and not is_template(types):
            listed = types if isinstance(types, list) else str(types).split(",")
            for value in listed:
                if not is_template(value) and str(value).strip() not in SOURCE_TYPES:
                    raise ArgError(f"deb822_repository: types={value!r} is not one of {list(SOURCE_TYPES)}")
        mode = args.get("mode")
        if mode is not None and not is_template(mode) and not isinstance(parse_mode(mode), int):
            raise ArgError("deb822_repository: give mode in octal (a symbolic mode is not supported)")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        bad = [t for t in args["types"] or [] if t not in SOURCE_TYPES]
        if bad:
            msg = f"value of types must be one or more of: deb, deb-src. Got no match for: {', '.join(bad)}"
            return ModuleResult(failed=True, msg=msg)
        if not isinstance(args["mode"], int):
            msg = "deb822_repository: give mode in octal (a symbolic mode is not supported)"
            return ModuleResult(failed=True, msg=msg)
        fields = {k: v for k, v in args.items() if k not in ("mode", "state")}
        request = {"name": args["name"], "state": args["state"], "mode": args["mode"], "fields": fields}
        return apply_helper(ctx, "apply", request, "deb822_repository.py", what="deb822_repository")


KEY_SOURCES = ("data", "file", "keyserver", "url")


@register
class AptKey(Module):
    name = "apt_key"
    args = {
        "id": Arg(),
        "url": Arg(),
        "data": Arg(),
        "file": Arg("path"),
        "keyring": Arg("path"),
        "validate_certs": Arg("bool", default=True),
        "keyserver": Arg(),
        "state": Arg(default="present", choices=("absent", "present")),
    }

    @classmethod
    def check_combination(cls, args: Mapping[str, Any], is_template: Callable[[Any], bool]) -> None:
        given = [k for k in KEY_SOURCES if args.get(k) is not None]
        if len(given) > 1:
            raise ArgError(f"apt_key: parameters are mutually exclusive: {'|'.join(KEY_SOURCES)}")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        request = {k: args[k] for k in ("id", "url", "data", "validate_certs", "keyserver", "state")}
        # type path in Ansible's module: ``~`` expanded on the host
        request |= {k: ctx.expand(args[k]) if args[k] else args[k] for k in ("file", "keyring")}
        return apply_helper(ctx, "apply", request, "apt_key.py", what="apt_key")


__all__ = ["AptKey", "AptRepository", "Deb822Repository"]
