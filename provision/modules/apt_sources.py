"""``apt_repository`` (ansible-core's): a one-line APT source added or removed (``remote/apt_repository.py``, one
round trip: the sources read where ``apt-config`` says they are, the line fixed with the module's rules, every
changed file written atomically, then ``apt-get update`` when ``update_cache``). Check mode writes nothing;
``--diff`` shows the files added or removed, as Ansible's. A ``ppa:`` repository is refused when the task runs
(the module asks Launchpad for it over the network and adds its key); ``mode`` is octal (a symbolic one is
refused); ``install_python_apt``, ``validate_certs`` and ``codename`` (PPA only) are accepted and unused: the
host side needs no python3-apt."""

from __future__ import annotations

import json
from typing import Any

from .base import Arg, HelperError, Module, ModuleContext, ModuleResult, register
from .files import text_diff


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


__all__ = ["AptRepository"]
