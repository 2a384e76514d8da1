"""``fetch``, ``get_url``, ``unarchive`` and ``script``: files between the controller, the host and the web.

Each host side is ONE command: ``fetch`` and ``unarchive`` ask ``remote/transfer.py`` through the host's agent
(a controller-side archive travels on its stdin); ``get_url`` runs ``remote/get_url.py`` on the host (the
download happens there, as in Ansible; the request, headers included, travels on stdin, never in argv);
``script`` sends the controller's script on stdin to ``remote/run_script.py``, which runs it from a private
temp dir. ``fetch`` writes on the controller: the path there is built only from the inventory name, the
playbook's ``src`` and ``dest`` (never from anything the host answers), checked to stay inside ``dest``,
and written atomically (a link planted at the target is replaced, not followed).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import posixpath
import shlex
from typing import Any

from .. import remote
from ..localfiles import replace_file
from .base import Arg, ArgError, HelperError, Module, ModuleContext, ModuleResult, register
from .controller_files import find_controller_file
from .files import read_controller_file, remote_stat
from .modes import parse_mode

HELPER = "transfer.py"


def _absolute_mode(module: str, mode: Any, is_template: Any = lambda _: False) -> None:
    """get_url and unarchive set the mode on the host: a symbolic mode that depends on the old one, or
    ``preserve``, is refused."""
    if mode is not None and not is_template(mode) and not isinstance(parse_mode(mode), int):
        raise ArgError(f"{module}: mode {mode!r} depends on the file's current mode: give it in octal or as "
                       "'u=...,g=...,o=...'")  # fmt: skip


def _ask(ctx: ModuleContext, action: str, request: dict[str, Any], stdin: bytes | None = None) -> dict[str, Any]:
    return ctx.call_helper(HELPER, action, stdin=remote.request(request, stdin), what=action, check_rc=False)


def _md5(data: bytes) -> str | None:
    try:
        return hashlib.md5(data).hexdigest()
    except ValueError:  # FIPS
        return None


# ------------------------------------------------------------------------------------------------- fetch
def fetch_dest(controller_dir: str, host: str, src: str, dest: str, flat: bool) -> str:
    """The controller path of a fetched file, as Ansible lays it out (``dest/<inventory_hostname>/<src>``, or
    ``dest`` itself with ``flat``), from the playbook's text and the inventory name only. Raises ArgError
    when it would leave ``dest`` (``..`` in ``src``)."""
    base = os.path.expanduser(dest)
    if not os.path.isabs(base):
        base = os.path.join(controller_dir, base)
    if flat:
        if base.endswith(os.sep):
            path = os.path.join(base, posixpath.basename(src))
            if os.path.isdir(path):
                raise ArgError(f"calculated dest '{path}' is an existing directory, use another path")
        elif os.path.isdir(base):
            raise ArgError(
                "dest is an existing directory, use a trailing slash if you want to fetch src into that directory"
            )
        else:
            path = base
        root = os.path.normpath(base if base.endswith(os.sep) else os.path.dirname(base))
    else:
        if not host or "/" in host or host in (".", "..") or "\0" in host:  # dest/<name> must stay in dest
            raise ArgError(f"fetch: the inventory name {host[:80]!r} cannot be a directory under dest")
        root = os.path.normpath(os.path.join(base, host))
        if os.path.dirname(root) != os.path.normpath(base):
            raise ArgError(f"fetch: the inventory name {host[:80]!r} would leave dest {dest!r}")
        path = f"{root}/{src.lstrip('/')}"
    path = os.path.normpath(path)
    if path != root and not path.startswith(root.rstrip(os.sep) + os.sep):
        raise ArgError(f"fetch: src {src!r} would leave dest {dest!r} (directory traversal)")
    return path


def _local_content(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


@register
class Fetch(Module):
    name = "fetch"
    check_mode_support = False
    args = {
        "src": Arg("str", required=True),
        "dest": Arg("str", required=True),
        "flat": Arg("bool", default=False),
        "fail_on_missing": Arg("bool", default=True),
        "validate_checksum": Arg("bool", default=True),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if ctx.check:
            return ModuleResult(skipped=True, msg="check mode not (yet) supported for this module")
        src, missing_ok = args["src"], not args["fail_on_missing"]
        try:
            dest = fetch_dest(ctx.controller_dir, ctx.host, src, args["dest"], args["flat"])
        except ArgError as exc:
            return ModuleResult(failed=True, msg=str(exc))
        local = _local_content(dest)
        have = hashlib.sha1(local).hexdigest() if local is not None else None
        try:
            answer = _ask(ctx, "fetch", {"src": src, "have": have})
        except HelperError as exc:
            return exc.as_result()
        if not answer.get("ok"):
            return ModuleResult(failed=not missing_ok, msg=str(answer.get("msg")), data={"file": src})
        if not answer.get("exists") or answer.get("isdir"):
            if answer.get("isdir"):
                msg = "remote file is a directory, fetch cannot work on directories"
                msg += ", not transferring, ignored" if missing_ok else ""
            else:
                msg = "the remote file does not exist, not transferring, ignored"
            return ModuleResult(failed=not missing_ok, msg=msg, data={"file": src})
        remote_sum = str(answer.get("checksum"))
        if "content" not in answer:  # the controller's copy already has the host's content
            data = {"file": src, "dest": dest, "checksum": have, "md5sum": _md5(local or b"")}
            return ModuleResult(data=data)
        try:
            content = base64.b64decode(str(answer["content"]), validate=True)
        except ValueError:
            return ModuleResult(failed=True, msg="fetch: the host's answer is not base64", data={"file": src})
        new_sum = hashlib.sha1(content).hexdigest()
        data = {"dest": dest, "checksum": new_sum, "md5sum": _md5(content), "remote_checksum": remote_sum}
        data["remote_md5sum"] = None
        if args["validate_checksum"] and new_sum != remote_sum:
            return ModuleResult(failed=True, msg="checksum mismatch", data={**data, "file": src})
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            replace_file(dest, content)
        except OSError as exc:
            return ModuleResult(failed=True, msg=f"Failed to fetch the file: {exc}", data={"file": src})
        return ModuleResult(changed=True, data=data)


# ----------------------------------------------------------------------------------------------- get_url
def _check_checksum(value: Any) -> None:
    algorithm, sep, digest = str(value).partition(":")
    if not sep or not digest.strip():
        raise ArgError("get_url: checksum has to be in format <algorithm>:<checksum>")
    if algorithm not in hashlib.algorithms_guaranteed:
        raise ArgError(
            f"get_url: checksum algorithm {algorithm!r} is not one of {sorted(hashlib.algorithms_guaranteed)}"
        )
    if "://" in digest:
        raise ArgError("get_url: a checksum URL is not supported; give the digest itself (<algorithm>:<hex>)")


@register
class GetUrl(Module):
    name = "get_url"
    args = {
        "url": Arg("str", required=True),
        "dest": Arg("path", required=True),
        "checksum": Arg("str", default=""),
        "mode": Arg("mode"),
        "force": Arg("bool", default=False),
        "timeout": Arg("int", default=10),
        "headers": Arg("dict", default={}, secret=True),
        "validate_certs": Arg("bool", default=True),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        _absolute_mode("get_url", args.get("mode"), is_template)
        checksum = args.get("checksum")
        if checksum and not is_template(checksum):
            _check_checksum(checksum)
        timeout = args.get("timeout")
        if timeout is not None and not is_template(timeout) and int(timeout) <= 0:
            raise ArgError("get_url: timeout must be a positive number of seconds")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        _absolute_mode("get_url", args["mode"])
        if args["checksum"]:
            _check_checksum(args["checksum"])
        if args["timeout"] <= 0:
            raise ArgError("get_url: timeout must be a positive number of seconds")
        if not str(args["url"]).startswith(("http://", "https://")):
            return ModuleResult(
                failed=True, msg=f"get_url: only http:// and https:// URLs are supported: {args['url']}"
            )
        request = {
            "url": args["url"],
            "dest": args["dest"],
            "checksum": args["checksum"],
            "mode": args["mode"],
            "force": args["force"],
            "timeout": args["timeout"],
            "headers": {str(k): str(v) for k, v in args["headers"].items()},
            "validate_certs": args["validate_certs"],
            "check": ctx.check,
        }
        try:
            answer = ctx.call_helper(
                "get_url.py", "get", stdin=json.dumps(request).encode(), what="get_url", check_rc=False,
                timeout=args["timeout"] * 3 + 60,
            )  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        return ModuleResult.from_answer(answer)


# --------------------------------------------------------------------------------------------- unarchive
@register
class Unarchive(Module):
    name = "unarchive"
    args = {
        "src": Arg("path", required=True),
        "dest": Arg("path", required=True),
        "remote_src": Arg("bool", default=False),
        "creates": Arg("path"),
        "mode": Arg("mode"),
        "owner": Arg(),
        "group": Arg(),
        "list_files": Arg("bool", default=False),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        _absolute_mode("unarchive", args.get("mode"), is_template)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        _absolute_mode("unarchive", args["mode"])
        request: dict[str, Any] = {
            "dest": args["dest"],
            "creates": args["creates"],
            "mode": args["mode"],
            "owner": args["owner"],
            "group": args["group"],
            "check": ctx.check,
            "list_files": args["list_files"],
            "name": args["src"],
        }
        stdin = None
        if args["remote_src"]:
            request["src"] = args["src"]
            shown_src = args["src"]
        else:
            if find_controller_file(ctx.controller_dir, os.path.expanduser(args["src"])) is None:
                return ModuleResult(failed=True, msg=f"Could not find or access '{args['src']}' on the controller")
            shown_src, stdin = read_controller_file(ctx, args["src"])
        try:
            answer = _ask(ctx, "unarchive", request, stdin=stdin if stdin is not None else b"")
        except HelperError as exc:
            return exc.as_result()
        if not answer.pop("ok", False):
            return ModuleResult(failed=True, msg=str(answer.get("msg")))
        if answer.pop("skipped", False):
            return ModuleResult(skipped=True, msg=str(answer.get("msg")))
        changed = bool(answer.pop("changed", False))
        return ModuleResult(changed=changed, data={**answer, "src": shown_src})


# ------------------------------------------------------------------------------------------------ script
@register
class Script(Module):
    name = "script"
    free_form = "_raw_params"
    args = {
        "_raw_params": Arg("str", aliases=("cmd",)),
        "creates": Arg("str"),
        "removes": Arg("str"),
        "chdir": Arg("str"),
        "executable": Arg("str"),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        if not args.get("_raw_params"):
            raise ArgError("script: give the script (free form or cmd)")
        chdir = args.get("chdir")
        if chdir and not is_template(chdir) and not str(chdir).startswith("/"):
            raise ArgError(f"script: chdir {chdir} must be an absolute path")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        try:
            words = shlex.split(str(args["_raw_params"]).strip())
        except ValueError as exc:
            raise ArgError(f"script: cannot split {args['_raw_params']!r}: {exc}") from None
        if not words:
            raise ArgError("script: give the script (free form or cmd)")
        if args["chdir"] and not args["chdir"].startswith("/"):
            return ModuleResult(failed=True, msg=f"chdir {args['chdir']} must be an absolute path")
        if find_controller_file(ctx.controller_dir, os.path.expanduser(words[0])) is None:
            return ModuleResult(failed=True, msg=f"Could not find or access '{words[0]}' on the controller")
        _, source = read_controller_file(ctx, words[0])
        if ctx.check:
            checks = [p for p in (args["creates"], args["removes"]) if p]
            if not checks:
                return ModuleResult(skipped=True, msg="Check mode is not supported for this task.")
            states = remote_stat(ctx, checks)
            skip = self._skip(args, {p: st["exists"] for p, st in zip(checks, states, strict=True)})
            return ModuleResult(skipped=True, msg=skip) if skip else ModuleResult(changed=True)
        request = {
            "argv": words[1:],
            "executable": args["executable"],
            "chdir": args["chdir"],
            "creates": args["creates"],
            "removes": args["removes"],
            "name": posixpath.basename(words[0]),
        }
        try:
            answer = ctx.call_helper("run_script.py", "run", stdin=remote.request(request, source), what="script",
                                     check_rc=False)  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        if answer.get("skipped"):
            return ModuleResult(skipped=True, msg=str(answer.get("msg")))
        out, err, rc = str(answer.get("stdout", "")), str(answer.get("stderr", "")), int(answer.get("rc", 1))
        data = {
            "rc": rc,
            "stdout": out,
            "stdout_lines": out.splitlines(),
            "stderr": err,
            "stderr_lines": err.splitlines(),
        }
        if rc != 0:
            return ModuleResult(
                changed=True, failed=True, msg=str(answer.get("msg") or "non-zero return code"), data=data
            )
        return ModuleResult(changed=True, data=data)

    @staticmethod
    def _skip(args: dict[str, Any], exists: dict[str, bool]) -> str | None:
        if args["creates"] and exists.get(args["creates"]):
            return f"{args['creates']} exists, matching creates option"
        if args["removes"] and not exists.get(args["removes"]):
            return f"{args['removes']} does not exist, matching removes option"
        return None


__all__ = ["Fetch", "GetUrl", "Script", "Unarchive", "fetch_dest"]
