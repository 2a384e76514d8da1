"""``ping``, ``stat``, ``slurp`` and ``raw``, with Ansible's arguments and return values.

``ping``/``stat``/``slurp`` ask the shipped ``remote/info.py`` (through the host's agent: one round trip, no
interpreter start); ``raw`` runs its text with ``/bin/sh`` and needs no Python on the host when the agent is
not there (the runner's sh fallback), as Ansible's ``raw`` is used to bootstrap one.
"""

from __future__ import annotations

import json
from typing import Any

from ..commands import Command
from .base import Arg, HelperError, Module, ModuleContext, ModuleResult, register

HELPER = "info.py"


def _ask(ctx: ModuleContext, action: str, request: dict[str, Any]) -> dict[str, Any]:
    return ctx.call_helper(HELPER, action, json.dumps(request), what=action, check_rc=False)


@register
class Ping(Module):
    name = "ping"
    args = {"data": Arg("raw", default="pong")}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if args["data"] == "crash":  # Ansible's documented way to see a module failure
            return ModuleResult(failed=True, msg="boom")
        try:
            answer = _ask(ctx, "ping", {"data": args["data"]})
        except HelperError as exc:
            return exc.as_result()
        return ModuleResult(data={"ping": answer.get("ping")})


@register
class Stat(Module):
    name = "stat"
    args = {
        "path": Arg("path", required=True, aliases=("dest", "name")),
        "follow": Arg("bool", default=False),
        "get_checksum": Arg("bool", default=True),
        "checksum_algorithm": Arg(
            default="sha1",
            choices=("md5", "sha1", "sha224", "sha256", "sha384", "sha512"),
            aliases=("checksum", "checksum_algo"),
        ),
        "get_mime": Arg("bool", default=True, aliases=("mime", "mime_type", "mime-type")),
        "get_attributes": Arg("bool", default=True, aliases=("attr", "attributes")),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        keys = ("path", "follow", "get_checksum", "checksum_algorithm", "get_mime", "get_attributes")
        request = {k: args[k] for k in keys}
        try:
            answer = _ask(ctx, "stat", request)
        except HelperError as exc:
            return exc.as_result()
        return ModuleResult(data={"stat": answer.get("stat", {"exists": False})})


@register
class Slurp(Module):
    name = "slurp"
    args = {"src": Arg("path", required=True, aliases=("path",))}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        try:
            answer = _ask(ctx, "slurp", {"src": args["src"]})
        except HelperError as exc:
            return exc.as_result()
        if not answer.get("ok"):
            return ModuleResult(failed=True, msg=str(answer.get("msg")))
        return ModuleResult(data={"content": answer["content"], "encoding": "base64", "source": answer["source"]})


@register
class Raw(Module):
    name = "raw"
    free_form = "_raw_params"
    check_mode_support = False
    args = {"_raw_params": Arg("str", required=True), "executable": Arg("path")}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if ctx.check:
            return ModuleResult(skipped=True, msg="check mode not supported for raw")
        text = args["_raw_params"]
        cmd = Command.of(args["executable"], "-c", text) if args["executable"] else Command.shell(text)
        result = ctx.run(cmd)
        data = {
            "rc": result.rc,
            "stdout": result.stdout,
            "stdout_lines": result.stdout.splitlines(),
            "stderr": result.stderr,
            "stderr_lines": result.stderr.splitlines(),
        }
        if result.rc != 0:
            return ModuleResult(changed=True, failed=True, msg="non-zero return code", data=data)
        return ModuleResult(changed=True, data=data)


__all__ = ["Ping", "Raw", "Slurp", "Stat"]
