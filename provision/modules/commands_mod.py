"""``command`` and ``shell``: run a program on the host.

``command`` runs an argv (a free-form string is split with shlex; no shell ever sees it); ``shell`` runs the
user's shell text. Both report ``changed`` when they run, as Ansible does. ``creates``/``removes`` (globs,
relative to ``chdir``) are checked first in one command and turn the task into a no-op. In check mode the
program never runs: the task is skipped, or, with ``creates``/``removes``, reports whether it would run.
``creates=... removes=... chdir=...`` (and the other argument names Ansible takes there) words of a free-form
string are taken as arguments, wherever they stand, as Ansible's ``parse_kv`` does. ``command`` expands ``~``
and ``$VAR`` in its arguments on the host (Ansible's ``expand_argument_vars``, on by default). Both support
``async`` (:mod:`provision.modules.async_mod` runs what :meth:`_Runner.plan_command` returns as a detached job).
"""

from __future__ import annotations

import datetime
import posixpath
import shlex
from typing import Any

from ..commands import Command
from ..transport import CommandResult
from .args import split_args, split_kv
from .base import Arg, ArgError, Module, ModuleContext, ModuleResult, register
from .files import remote_stat

# the key=value words Ansible takes out of a free-form command line (parse_kv with check_raw)
RAW_KEYS = ("creates", "removes", "chdir", "executable", "stdin", "stdin_add_newline", "strip_empty_ends")
# run on the host: expand ~ and $VAR in each argument (os.path.expanduser(os.path.expandvars(x))), then exec
_EXPAND = (
    "import os,sys\n"
    "a=[os.path.expanduser(os.path.expandvars(x)) for x in sys.argv[1:]]\n"
    "try:\n os.execvp(a[0],a)\n"
    "except OSError as e:\n sys.stderr.write('%s: %s\\n'%(a[0],e.strerror)); sys.exit(127 if e.errno==2 else 126)\n"
)
GUARD_ARGS = {
    "chdir": Arg("path"),
    "creates": Arg("path"),
    "removes": Arg("path"),
    "stdin": Arg(),
    "stdin_add_newline": Arg("bool", default=True),
    "strip_empty_ends": Arg("bool", default=True),
}


class _Runner(Module):
    """What command and shell share: free-form parsing, guards, check mode and reporting."""

    free_form = "cmd"

    @classmethod
    def normalize(cls, raw: Any) -> dict[str, Any]:
        if not isinstance(raw, str):
            return super().normalize(raw)
        found: dict[str, Any] = {}
        text = raw
        for word, start, end in reversed(split_args(raw)):
            kv = split_kv(word)
            if kv is not None and kv[0] in RAW_KEYS and kv[0] in cls.args and kv[0] not in found:
                found[kv[0]] = kv[1]
                text = text[:start] + text[end:]
        return {"cmd": text.strip() if found else raw.strip(), **found}

    def build(self, args: dict[str, Any]) -> Command:
        raise NotImplementedError

    supports_async = True

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        planned = self.plan_command(ctx, args)
        if isinstance(planned, ModuleResult):
            return planned
        cmd, data = planned
        return self.report(ctx.run(cmd, stdin=data), args["strip_empty_ends"])

    def plan_command(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult | tuple[Command, bytes | None]:
        """The command to run and its stdin data, or the result when nothing is to run (a guard said no,
        check mode, bad arguments): what ``run`` and an ``async`` task share."""
        try:
            cmd = self.build(args)
        except (ArgError, ValueError) as exc:
            return ModuleResult(failed=True, msg=f"{self.name}: {exc}")
        shown = cmd.display()
        if args.get("expand_argument_vars") and cmd.argv and any(("~" in str(a) or "$" in str(a)) for a in cmd.argv):
            cmd = Command.of(ctx.python(), "-c", _EXPAND, *cmd.argv, chdir=cmd.chdir)
        guarded = args["creates"] is not None or args["removes"] is not None
        if guarded:
            skip = self._guard(ctx, args)
            if skip:
                return ModuleResult(msg=skip, data={"cmd": shown, "rc": 0, "stdout": "", "stderr": ""})
        if ctx.check:
            if guarded:
                return ModuleResult(
                    changed=True, msg="Command would have run if not in check mode", data={"cmd": shown}
                )
            return ModuleResult(skipped=True, msg="skipped in check mode", data={"cmd": shown})
        stdin = args["stdin"]
        data = None
        if stdin is not None:
            data = (stdin + ("\n" if args["stdin_add_newline"] else "")).encode()
        return cmd, data

    @staticmethod
    def _guard(ctx: ModuleContext, args: dict[str, Any]) -> str | None:
        """The reason not to run (creates exists / removes missing), or None: one command for both."""
        chdir = args["chdir"]

        def where(path: str) -> str:
            return posixpath.join(chdir, path) if chdir and not path.startswith(("/", "~")) else path

        names = [n for n in ("creates", "removes") if args[n] is not None]
        states = remote_stat(ctx, [where(args[n]) for n in names], glob=True)
        for name, st in zip(names, states, strict=True):
            if name == "creates" and st["exists"]:
                return f"Did not run command since '{args[name]}' exists"
            if name == "removes" and not st["exists"]:
                return f"Did not run command since '{args[name]}' does not exist"
        return None

    @staticmethod
    def report(res: CommandResult, strip: bool) -> ModuleResult:
        stdout = res.stdout.rstrip("\r\n") if strip else res.stdout
        stderr = res.stderr.rstrip("\r\n") if strip else res.stderr
        data = {
            "cmd": res.command,
            "rc": res.rc,
            "stdout": stdout,
            "stderr": stderr,
            "stdout_lines": stdout.splitlines(),
            "stderr_lines": stderr.splitlines(),
            "delta": str(datetime.timedelta(seconds=res.duration)),
        }
        if res.rc != 0:
            tail = res.tail(10)
            msg = f"non-zero return code (rc={res.rc})" + (f": {tail}" if tail else "")
            return ModuleResult(changed=True, failed=True, msg=msg, data=data)
        return ModuleResult(changed=True, data=data)


@register
class CommandModule(_Runner):
    name = "command"
    args = {"cmd": Arg("raw"), "argv": Arg("list"), "expand_argument_vars": Arg("bool", default=True), **GUARD_ARGS}

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        if not args.get("cmd") and not args.get("argv"):
            raise ArgError("command: no command given (free form, cmd or argv)")
        if args.get("cmd") and args.get("argv"):
            raise ArgError("command: give either a command string or argv, not both")

    def build(self, args: dict[str, Any]) -> Command:
        raw = args["argv"] if args["argv"] else args["cmd"]
        argv = [str(a) for a in raw] if isinstance(raw, list) else shlex.split(str(raw or ""))
        if not argv:
            raise ArgError("no command given")
        return Command.of(*argv, chdir=args["chdir"])


@register
class Shell(_Runner):
    name = "shell"
    args = {"cmd": Arg(required=True), "executable": Arg("path"), **GUARD_ARGS}

    def build(self, args: dict[str, Any]) -> Command:
        script = args["cmd"]
        if not script.strip():
            raise ArgError("no command given")
        if args["executable"]:
            return Command.of(args["executable"], "-c", script, chdir=args["chdir"])
        return Command.shell(script, chdir=args["chdir"])
