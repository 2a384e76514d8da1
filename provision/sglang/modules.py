"""SGLang on the host: ``sglang_args`` (validate launch commands with the installed SGLang's own parser),
``sglang_tiny_model`` (CPU mode's tiny model, generated on the host) and ``sglang_cpu_compat`` (ship CPU
mode's compatibility files, see :mod:`provision.sglang.cpu_compat`).

Each runs in one round trip with a remote helper (``provision/remote/sglang_args_check.py``,
``make_tiny_model.py``) or a stat plus the writes that are needed.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from ..commands import Command
from ..modules.base import Arg, ArgError, HelperError, Module, ModuleContext, ModuleResult, register
from ..modules.files import ship_files
from .cpu_compat import SGLANG_VERSION, shipped_files


def _python(ctx: ModuleContext, args: dict[str, Any]) -> str:
    if args.get("python"):
        return ctx.expand(str(args["python"]))
    venv = args.get("venv") or ctx.variables.get("venv_path")
    if not venv:
        raise ArgError("give python (the venv's interpreter) or venv")
    return ctx.expand(str(venv).rstrip("/")) + "/bin/python"


SGLANG_HINT = "is SGLang installed there?"


@register
class SglangArgs(Module):
    """Each launch command line must pass the installed SGLang's parser and its combination checks."""

    name = "sglang_args"
    args = {
        "argv": Arg("list", required=True),  # one argv (list of words) or a list of argvs
        "names": Arg("list", default=None),  # what each argv is, for messages
        "python": Arg("path"),
        "venv": Arg("path"),
        "env": Arg("dict", default=None),
        "hf_token_file": Arg("path"),
        "stamp_dir": Arg("path", default="~/.provision/sglang_args"),
        "cache": Arg("bool", default=True),
        "timeout": Arg("float", default=300.0),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        raw = args["argv"]
        argvs = [raw] if raw and all(isinstance(w, (str, int, float)) for w in raw) else raw
        if not argvs or not all(isinstance(a, (list, tuple)) for a in argvs):
            return ModuleResult(failed=True, msg="sglang_args: argv must be a list of words or a list of lists")
        argvs = [[str(w) for w in a] for a in argvs]
        names = [str(n) for n in (args["names"] or [])] or [f"command {i + 1}" for i in range(len(argvs))]
        python = _python(ctx, args)
        request = {
            "argvs": argvs,
            "env": {str(k): str(v) for k, v in (args["env"] or {}).items()},
            "stamp_dir": ctx.expand(args["stamp_dir"]) if args["cache"] else None,
            "hf_token_file": ctx.expand(args["hf_token_file"]) if args["hf_token_file"] else None,
        }
        try:  # the check reports a rejected command line in its answer
            with ctx.waiting(f"SGLang ({python}) to check the launch command of {', '.join(names)}", args["timeout"]):
                report = ctx.call_helper(
                    "sglang_args_check.py", "check", python=python, stdin=json.dumps(request).encode(),
                    timeout=args["timeout"], what="sglang_args", hint=SGLANG_HINT, check_rc=False,
                )  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        if not report.get("ok") and "results" not in report:  # it could not check
            return ModuleResult(failed=True, msg=f"sglang_args: {report.get('msg')}", data=report)
        version = report.get("sglang_version")
        failures = [(n, r["error"]) for n, r in zip(names, report.get("results", []), strict=False) if not r.get("ok")]
        data = {"cached": report.get("cached", False), "sglang_version": version, "seconds": report.get("seconds")}
        if failures:
            lines = [f"SGLang {version or '?'} rejects the launch command of {n}:\n  {err}" for n, err in failures]
            return ModuleResult(failed=True, msg="\n".join(lines), data={**data, "failures": dict(failures)})
        if report.get("cached"):
            return ModuleResult(msg=f"{', '.join(names)}: unchanged since SGLang validated them", data=data)
        note = "" if version == SGLANG_VERSION else f" (provision was tested with {SGLANG_VERSION})"
        return ModuleResult(
            msg=f"{', '.join(names)}: accepted by SGLang {version}{note} in {report.get('seconds')}s", data=data
        )


@register
class SglangTinyModel(Module):
    """CPU mode's tiny random-weight Llama, made on the host with the venv's Python (skipped when present)."""

    name = "sglang_tiny_model"
    args = {"path": Arg("path", required=True), "python": Arg("path"), "venv": Arg("path"), "seed": Arg("int")}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        path = ctx.expand(args["path"])
        if ctx.check:
            probe = ctx.run(Command.of("test", "-f", posixpath.join(path, ".provision-tiny-model.json")))
            present = probe.rc == 0
            return ModuleResult(changed=not present, msg="present" if present else f"would make {path}")
        python = _python(ctx, args)
        if ctx.progress:
            ctx.progress(f"tiny model at {path} (made once, ~5-15 s)")
        request = {"dest": path} if args["seed"] is None else {"dest": path, "seed": args["seed"]}
        try:
            report = ctx.call_helper(
                "make_tiny_model.py", "make", stdin=json.dumps(request).encode(), python=python, timeout=900,
                what="sglang_tiny_model", hint=SGLANG_HINT, check_rc=False,
            )  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        if not report.get("ok"):
            error = report.get("error") or report.get("msg")
            return ModuleResult(failed=True, msg=f"making the tiny model failed: {error}", data=report)
        if report.get("changed"):
            return ModuleResult(changed=True, msg=f"made {path} in {report.get('seconds')}s", data=report)
        return ModuleResult(msg=f"{path} is present", data=report)


@register
class SglangCpuCompat(Module):
    """Put CPU mode's compatibility files (``provision/remote/cpu_compat/``) into ``dest`` on the host."""

    name = "sglang_cpu_compat"
    args = {"dest": Arg("path", required=True)}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        return ship_files(ctx, ctx.expand(args["dest"]).rstrip("/"), shipped_files())
