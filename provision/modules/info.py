"""``ping``, ``wait_for_connection``, ``stat``, ``find``, ``slurp``, ``getent`` and ``raw``, with Ansible's
arguments and return values.

``ping``/``stat``/``slurp`` ask the shipped ``remote/info.py`` (through the host's agent: one round trip, no
interpreter start); ``raw`` runs its text with ``/bin/sh`` and needs no Python on the host when the agent is
not there (the runner's sh fallback), as Ansible's ``raw`` is used to bootstrap one.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from ..commands import Command
from ..errors import HostError
from .base import Arg, ArgError, HelperError, Module, ModuleContext, ModuleResult, register
from .modes import parse_mode, resolve_mode

HELPER = "info.py"
CHECKSUM_ALGORITHM = Arg(  # stat's and find's
    default="sha1",
    choices=("md5", "sha1", "sha224", "sha256", "sha384", "sha512"),
    aliases=("checksum", "checksum_algo"),
)


def _ask(ctx: ModuleContext, action: str, request: dict[str, Any]) -> dict[str, Any]:
    return ctx.call_helper(HELPER, action, stdin=json.dumps(request).encode(), what=action, check_rc=False)


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
class WaitForConnection(Module):
    """``wait_for_connection``: ``ping`` the host (its Python answering through the connection) until it
    answers, ``delay`` seconds first, ``sleep`` between tries, each try bounded by ``connect_timeout``, for at
    most ``timeout`` seconds; ``elapsed`` (whole seconds) as Ansible's. A try that fails closes the connection:
    the next one connects anew (a host that rebooted). A host that never answers fails the task: ``timed out
    waiting for ping module test: REASON``. Skipped in check mode, as Ansible's."""

    name = "wait_for_connection"
    args = {
        "connect_timeout": Arg("int", default=5),
        "delay": Arg("int", default=0),
        "sleep": Arg("int", default=1),
        "timeout": Arg("int", default=600),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if ctx.check:  # as Ansible's action
            return ModuleResult(skipped=True)
        started = time.monotonic()
        deadline = started + max(0, args["timeout"])
        time.sleep(max(0, args["delay"]))
        reason = "no attempt"
        with ctx.waiting(f"{ctx.host} to answer", float(args["timeout"])):
            while True:
                try:
                    answer = ctx.call_helper(
                        HELPER,
                        "ping",
                        stdin=json.dumps({"data": "pong"}).encode(),
                        what="ping",
                        timeout=float(args["connect_timeout"]),
                    )
                    if answer.get("ping") == "pong":
                        return ModuleResult(data={"elapsed": int(time.monotonic() - started)})
                    reason = f"unexpected answer {str(answer)[:100]!r}"
                except HostError as exc:  # unreachable, timed out, no Python yet: try again until the deadline
                    reason = str(exc)
                    ctx.conn.close()  # a connection that broke (a host that rebooted): the next try opens a new one
                if time.monotonic() + args["sleep"] > deadline:
                    break
                time.sleep(max(0, args["sleep"]))
        return ModuleResult(
            failed=True,
            msg=f"timed out waiting for ping module test: {reason}",
            data={"elapsed": int(time.monotonic() - started)},
        )


@register
class Stat(Module):
    name = "stat"
    args = {
        "path": Arg("path", required=True, aliases=("dest", "name")),
        "follow": Arg("bool", default=False),
        "get_checksum": Arg("bool", default=True),
        "checksum_algorithm": CHECKSUM_ALGORITHM,
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


_AGE = re.compile(r"^(-?\d+)(s|m|h|d|w)?$")
_SIZE = re.compile(r"^(-?\d+)(b|k|m|g|t)?$")


def _scaled(value: Any, pattern: re.Pattern[str], units: dict[str, int]) -> int | None:
    """``3d``/``-1w`` (age) or ``10k``/``-2m`` (size) as seconds or bytes; None when not given, ArgError when bad."""
    if value is None:
        return None
    m = pattern.match(str(value).lower())
    if not m:
        raise ArgError("failed to process")
    return int(m.group(1)) * units.get(m.group(2) or "", 1)


@register
class Find(Module):
    name = "find"
    args = {
        "paths": Arg("list", required=True, aliases=("name", "path")),
        "patterns": Arg("list", default=[], aliases=("pattern",)),
        "excludes": Arg("list", aliases=("exclude",)),
        "contains": Arg("str"),
        "read_whole_file": Arg("bool", default=False),
        "file_type": Arg(default="file", choices=("any", "directory", "file", "link")),
        "age": Arg("str"),
        "age_stamp": Arg(default="mtime", choices=("atime", "ctime", "mtime")),
        "size": Arg("str"),
        "recurse": Arg("bool", default=False),
        "hidden": Arg("bool", default=False),
        "follow": Arg("bool", default=False),
        "get_checksum": Arg("bool", default=False),
        "checksum_algorithm": CHECKSUM_ALGORITHM,
        "use_regex": Arg("bool", default=False),
        "depth": Arg("int"),
        "mode": Arg("str"),
        "exact_mode": Arg("bool", default=True),
        "encoding": Arg("str"),
        "limit": Arg("int"),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        try:
            age = _scaled(args["age"], _AGE, {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800})
        except ArgError:
            return ModuleResult(failed=True, msg="failed to process age", data={"age": args["age"]})
        try:
            size = _scaled(args["size"], _SIZE, {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4})
        except ArgError:
            return ModuleResult(failed=True, msg="failed to process size", data={"size": args["size"]})
        if args["limit"] is not None and args["limit"] <= 0:
            return ModuleResult(failed=True, msg=f"limit cannot be {args['limit']} (use None for unlimited)")
        # a symbolic mode: what it makes of mode 0000, as Ansible computes it (preserve: refused, as elsewhere)
        mode = resolve_mode(parse_mode(args["mode"]), {"exists": True, "mode": 0}) if args["mode"] else None
        keys = ("paths", "patterns", "excludes", "contains", "read_whole_file", "file_type", "age_stamp", "recurse",
                "hidden", "follow", "get_checksum", "checksum_algorithm", "use_regex", "depth", "exact_mode",
                "encoding", "limit")  # fmt: skip
        request = {**{k: args[k] for k in keys}, "age": age, "size": size, "mode": mode}
        try:
            answer = _ask(ctx, "find", request)
        except HelperError as exc:
            return exc.as_result()
        if not answer.get("ok"):
            return ModuleResult(failed=True, msg=str(answer.get("msg")))
        data = {k: answer[k] for k in ("files", "matched", "examined", "skipped_paths")}
        return ModuleResult(msg=str(answer["msg"]), data=data)


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


GETENT_COLON = ("passwd", "shadow", "group", "gshadow")  # the databases split at ':' unless `split` says
GETENT_FAILURES = {
    1: "Missing arguments, or database unknown.",
    2: "One or more supplied key could not be found in the database.",
    3: "Enumeration not supported on this database.",
}


@register
class Getent(Module):
    """ansible-core's ``getent``: ``getent DATABASE [KEY] [-s SERVICE]`` on the host, each line split (at ``:``
    for the colon databases, else at whitespace, or at ``split``) into ``ansible_facts.getent_DATABASE``:
    {first field: the others}, a list of them for a key met twice; with ``fail_key: false`` a missing key is
    None."""

    name = "getent"
    args = {
        "database": Arg("str", required=True),
        "key": Arg("str"),
        "service": Arg("str"),
        "split": Arg("str"),
        "fail_key": Arg("bool", default=True),
    }

    @classmethod
    def facts_defined(cls, args: Any, is_template: Any) -> frozenset[str] | None:
        database = args.get("database")
        return None if is_template(database) else frozenset({f"getent_{database}"})

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        database, key, split = args["database"], args["key"], args["split"]
        argv = ["getent", database] + ([key] if key is not None else [])
        argv += ["-s", args["service"]] if args["service"] is not None else []
        if split is None and database in GETENT_COLON:
            split = ":"
        result = ctx.run(Command.of(*argv), timeout=60)
        tree = f"getent_{database}"
        if result.rc == 127:
            why = result.stderr.strip()
            return ModuleResult(failed=True, msg=f'Failed to find required executable "getent": {why}')
        if result.rc == 0:
            found: dict[str, Any] = {}
            seen: dict[str, int] = {}
            for line in result.stdout.splitlines():
                record = line.split(split)
                first, rest = record[0], record[1:]
                if first in seen:  # a key met again: a list of its records, as Ansible's
                    if seen[first] == 1:
                        found[first] = [found[first]]
                    found[first].append(rest)
                    seen[first] += 1
                else:
                    found[first], seen[first] = rest, 1
            return _with_facts(ctx, ModuleResult(), {tree: found})
        msg = GETENT_FAILURES.get(result.rc, "Unexpected failure!")
        if result.rc == 2 and not args["fail_key"]:
            return _with_facts(ctx, ModuleResult(msg=msg), {tree: {key: None}})
        return ModuleResult(failed=True, msg=msg)


def _with_facts(ctx: ModuleContext, result: ModuleResult, facts: dict[str, Any]) -> ModuleResult:
    """A module's ``ansible_facts``, as Ansible keeps them: in the host's ``ansible_facts`` and as variables."""
    result.gathered = ctx.facts_with(facts)
    result.facts = facts
    result.data["ansible_facts"] = facts
    return result


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


__all__ = ["Getent", "Ping", "Raw", "Slurp", "Stat"]
