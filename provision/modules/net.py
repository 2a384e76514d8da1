"""``wait_for`` and ``uri``: network checks made FROM the host (remote helper scripts run with its Python),
each in one round trip; both only read, so they never report ``changed``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from .base import Arg, ArgError, HelperError, Module, ModuleContext, ModuleResult, register

READ_ONLY_METHODS = ("GET", "HEAD", "OPTIONS")


@register
class WaitFor(Module):
    name = "wait_for"
    args = {
        "host": Arg(default="127.0.0.1"),
        "port": Arg("int"),
        "path": Arg("path"),
        "state": Arg(default="started", choices=("started", "stopped", "present", "absent")),
        "timeout": Arg("float", default=300.0),
        "delay": Arg("float", default=0.0),
        "sleep": Arg("float", default=1.0),
        "connect_timeout": Arg("float", default=5.0),
        "search_regex": Arg(),
        "msg": Arg(),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        if args.get("port") is not None and args.get("path") is not None:
            raise ArgError("wait_for: port and path are mutually exclusive")

    @staticmethod
    def describe(args: dict[str, Any]) -> str:
        if args["port"] is not None:
            what = f"{args['host']}:{args['port']}"
        elif args["path"]:
            what = f"file {args['path']}"
        else:
            return f"{args['timeout']:g}s"
        if args["search_regex"] and args["state"] in ("started", "present"):
            what = f"search string {args['search_regex']!r} in {what}"
        return what if args["state"] in ("started", "present") else f"{what} to be {args['state']}"

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        request = {k: args[k] for k in ("host", "port", "path", "state", "sleep", "connect_timeout", "search_regex")}
        probe_once = ctx.check and (args["port"] is not None or args["path"])
        request["timeout"] = 0 if probe_once else args["timeout"]
        request["delay"] = 0 if probe_once else args["delay"]
        budget = request["timeout"] + request["delay"] + args["connect_timeout"] + 30
        what = self.describe(args)
        waited = what if args["port"] is not None or args["path"] else "the timeout to pass"
        try:
            with ctx.waiting(waited, None if probe_once else request["timeout"] + request["delay"]):
                answer = ctx.call_helper("wait_for.py", "wait", stdin=json.dumps(request).encode(), timeout=budget,
                                         what="wait_for", check_rc=False)  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        if not answer.get("ok") and "elapsed" not in answer:  # the host library's failure answer (a bad request)
            return ModuleResult(failed=True, msg=f"wait_for failed: {answer.get('msg')}", data=answer)
        data = {
            "state": args["state"],
            "elapsed": answer["elapsed"],
            "path": args["path"],
            "port": args["port"],
        }
        for key in ("match", "groups", "groupdict"):
            if key in answer:
                data[{"groups": "match_groups", "groupdict": "match_groupdict"}.get(key, key)] = answer[key]
        if answer["ok"]:
            return ModuleResult(msg=f"{what}: ok after {answer['elapsed']:g}s", data=data)
        if probe_once:
            return ModuleResult(skipped=True, msg=f"check mode: not waiting for {what}", data=data)
        msg = args["msg"] or f"Timeout when waiting for {what} (waited {answer['elapsed']:g}s)"
        return ModuleResult(failed=True, msg=msg, data=data)


@register
class Uri(Module):
    name = "uri"
    args = {
        "url": Arg(required=True),
        "method": Arg(default="GET"),
        "body": Arg("raw"),
        "body_format": Arg(default="raw", choices=("raw", "json", "form-urlencoded")),
        "headers": Arg("dict", default=None),
        "status_code": Arg("list", default=[200]),
        "return_content": Arg("bool", default=False),
        "timeout": Arg("float", default=30.0),
        "validate_certs": Arg("bool", default=True),
        "follow_redirects": Arg(default="safe", choices=("all", "safe", "none", "urllib2", "yes", "no")),
    }

    @staticmethod
    def encode_body(args: dict[str, Any], headers: dict[str, str]) -> str | None:
        body, fmt = args["body"], args["body_format"]
        if body is None:
            return None
        names = {k.lower() for k in headers}
        if fmt == "json":
            if "content-type" not in names:
                headers["Content-Type"] = "application/json"
            return body if isinstance(body, str) else json.dumps(body)
        if fmt == "form-urlencoded":
            if "content-type" not in names:
                headers["Content-Type"] = "application/x-www-form-urlencoded"
            return urlencode(body, doseq=True) if isinstance(body, (Mapping, list)) else str(body)
        return body if isinstance(body, str) else json.dumps(body)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        method = args["method"].upper()
        try:
            codes = [int(c) for c in args["status_code"]]
        except (TypeError, ValueError):
            return ModuleResult(failed=True, msg=f"uri: status_code {args['status_code']!r} must be integers")
        if ctx.check and method not in READ_ONLY_METHODS:
            return ModuleResult(skipped=True, msg=f"skipped in check mode ({method} may change state)")
        headers = {str(k): str(v) for k, v in (args["headers"] or {}).items()}
        body = self.encode_body(args, headers)
        request = {
            "url": args["url"],
            "method": method,
            "body": body,
            "headers": headers,
            "timeout": args["timeout"],
            "validate_certs": args["validate_certs"],
            "follow_redirects": "none" if args["follow_redirects"] in ("none", "no") else "yes",
        }
        try:
            answer = ctx.call_helper(
                "http_request.py",
                "request",
                stdin=json.dumps(request).encode(),
                timeout=args["timeout"] + 30,
                what="uri",
            )
        except HelperError as exc:
            return exc.as_result()
        return self.report(answer, codes, args["return_content"])

    @staticmethod
    def report(answer: dict[str, Any], codes: list[int], return_content: bool) -> ModuleResult:
        status = int(answer["status"])
        headers = answer.get("headers") or {}
        content = answer.get("content") or ""
        data: dict[str, Any] = {
            "status": status,
            "url": answer.get("url"),
            "elapsed": answer.get("elapsed"),
            "headers": headers,
            "content_type": headers.get("content-type"),
        }
        if "json" in str(headers.get("content-type", "")) and content:
            with contextlib.suppress(ValueError):
                data["json"] = json.loads(content)
        ok = status in codes
        if return_content or not ok:
            data["content"] = content
        if ok:
            return ModuleResult(msg=f"OK ({len(content)} bytes)", data=data)
        reason = answer.get("error") or answer.get("reason") or ""
        msg = f"Status code was {status} and not {codes}: {reason}".rstrip(": ")
        return ModuleResult(failed=True, msg=msg, data=data)
