"""``pip``: Python packages, optionally in a virtualenv.

The installed versions are read FIRST, in one command (``remote/pip_state.py`` run by the target
interpreter, or ``pip list --format=json`` for an explicit ``executable``), and pip only runs for what is
missing or at a wrong version: a converged rerun costs one command. The virtualenv is created when its
interpreter is missing. ``changed`` comes from what pip reports it did ("Successfully installed ...").
"""

from __future__ import annotations

import json
import posixpath
import shlex
from typing import Any

from ..commands import Command
from ..errors import ModuleError
from ..remote.pip_state import canonical, evaluate
from ..transport import CommandResult
from .base import Arg, ArgError, Module, ModuleContext, ModuleResult, helper_answer, register

VENV_MISSING_RC = (126, 127)  # the virtualenv's interpreter is not there (or not executable)


@register
class Pip(Module):
    name = "pip"
    args = {
        "name": Arg("list"),
        "version": Arg(),
        "requirements": Arg("path"),
        "virtualenv": Arg("path"),
        "virtualenv_command": Arg(default="python3 -m venv"),
        "virtualenv_python": Arg(),
        "virtualenv_site_packages": Arg("bool", default=False),
        "extra_args": Arg(),
        "state": Arg(default="present", choices=("present", "absent", "latest", "forcereinstall")),
        "executable": Arg("path"),
        "chdir": Arg("path"),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        if not args.get("name") and not args.get("requirements"):
            raise ArgError("pip: give name or requirements")
        if args.get("executable") and args.get("virtualenv"):
            raise ArgError("pip: executable and virtualenv are mutually exclusive")

    # ------------------------------------------------------------------------------------ planning
    @staticmethod
    def wanted(args: dict[str, Any]) -> list[str]:
        names: list[str] = []
        for item in args["name"] or []:
            text = str(item).strip()
            if names and text[:1] in "<>=!~" and text:  # `foo>=1,<2` was split at its comma: rejoin
                names[-1] += f",{text}"
            elif text:
                names.append(text)
        if args["version"]:
            if len(names) != 1 or any(c in names[0] for c in "<>=!~"):
                raise ArgError("pip: version needs exactly one name without a version specifier")
            names = [f"{names[0]}=={args['version']}"]
        return names

    def read_state(
        self, ctx: ModuleContext, args: dict[str, Any], names: list[str], python: str | None
    ) -> dict[str, Any] | None:
        """Installed state of the requirements (one command); None when the virtualenv is missing."""
        reqs_file = args["requirements"]
        if reqs_file and args["chdir"] and not reqs_file.startswith(("/", "~")):
            reqs_file = posixpath.join(args["chdir"], reqs_file)
        if args["executable"]:
            res = ctx.run(Command.of(args["executable"], "list", "--format=json", "--disable-pip-version-check"))
            self._check(ctx, res, "pip list")
            installed = {canonical(p["name"]): p["version"] for p in json.loads(res.stdout or "[]")}
            results = evaluate(names, installed)
            if reqs_file:  # a file on the host that this path cannot read: pip decides
                results.append({"req": f"-r {reqs_file}", "name": None, "installed": None, "satisfied": None})
            return {"results": results, "file_ok": False}
        request = {"requirements": names, "file": reqs_file}
        res = ctx.run_script("pip_state.py", "state", python=python, stdin=json.dumps(request).encode())
        if res.rc in VENV_MISSING_RC and args["virtualenv"]:
            return None
        return helper_answer(res, ctx.host, "pip_state.py", python or ctx.python(), what="reading installed packages")

    @staticmethod
    def _check(ctx: ModuleContext, res: CommandResult, what: str) -> None:
        if res.rc != 0:
            raise ModuleError(ctx.host, f"{what} failed (rc={res.rc}): {res.tail()}", rc=res.rc)

    # ------------------------------------------------------------------------------------ commands
    @staticmethod
    def venv_command(args: dict[str, Any], venv: str) -> Command:
        words = shlex.split(args["virtualenv_command"])
        if args["virtualenv_python"]:
            if "venv" in words[1:] and "-m" in words[1:]:
                words[0] = args["virtualenv_python"]  # `python3 -m venv`: the interpreter picks the Python
            else:
                words += ["-p", args["virtualenv_python"]]
        if args["virtualenv_site_packages"]:
            words.append("--system-site-packages")
        return Command.of(*words, venv, chdir=args["chdir"])

    @staticmethod
    def pip_words(args: dict[str, Any], python: str) -> list[str]:
        if args["executable"]:
            return [args["executable"]]
        return [python, "-m", "pip"]

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        try:
            names = self.wanted(args)
        except ArgError as exc:
            return ModuleResult(failed=True, msg=str(exc))
        venv = args["virtualenv"]
        if venv and venv.startswith("~"):
            venv = ctx.expand(venv)
        default_python = str(ctx.variables.get("ansible_python_interpreter") or "python3")
        python = posixpath.join(venv, "bin", "python") if venv else default_python
        state = self.read_state(ctx, args, names, python)
        venv_missing = state is None
        results = [] if state is None else state["results"]
        plan = self.plan(args, names, results, venv_missing, bool(state and state.get("file_ok")))
        data: dict[str, Any] = {
            "name": names,
            "requirements": args["requirements"],
            "virtualenv": venv,
            "state": args["state"],
            "installed": {r["name"]: r["installed"] for r in results if r["name"]},
        }
        if not plan and not venv_missing:
            return ModuleResult(msg="all requirements already satisfied", data=data)
        extra = shlex.split(args["extra_args"] or "") if plan and plan[0] == "install" else []
        pip = [*self.pip_words(args, python), *plan[:1], *extra, *plan[1:]]
        if ctx.check:
            return self.predict(ctx, args, pip, results, venv_missing, data)
        changed = False
        if venv_missing:
            res = ctx.run(self.venv_command(args, venv))
            if res.rc != 0:
                return ModuleResult(failed=True, msg=f"creating virtualenv {venv} failed (rc={res.rc}): {res.tail()}")
            changed = True
        if plan:
            res = ctx.run(Command.of(*pip, chdir=args["chdir"]))
            data.update(cmd=res.command, stdout=res.stdout, stderr=res.stderr, rc=res.rc)
            if res.rc != 0:
                msg = f"pip failed (rc={res.rc}): {res.tail()}"
                return ModuleResult(changed=changed, failed=True, msg=msg, data=data)
            did = any(w in res.stdout for w in ("Successfully installed", "Successfully uninstalled"))
            changed = changed or did or args["state"] == "forcereinstall"
        return ModuleResult(changed=changed, data=data)

    @staticmethod
    def predict(
        ctx: ModuleContext,
        args: dict[str, Any],
        pip: list[str],
        results: list[dict[str, Any]],
        venv_missing: bool,
        data: dict[str, Any],
    ) -> ModuleResult:
        """Check mode: changed unless pip's own dry run (for `latest` and for requirements that could not
        be judged here) says everything is already in place."""
        changed = True
        uncertain = not any(r["satisfied"] is False for r in results)
        ask_pip = args["state"] == "latest" or (args["state"] == "present" and uncertain)
        if not venv_missing and "install" in pip and ask_pip:
            where = pip.index("install") + 1
            res = ctx.run(Command.of(*pip[:where], "--dry-run", *pip[where:], chdir=args["chdir"]))
            if res.rc == 0:
                changed = "Would install" in res.stdout
        what = "create the virtualenv and install" if venv_missing else " ".join(pip)
        return ModuleResult(changed=changed, msg=f"check mode: would run {what}" if changed else "", data=data)

    @staticmethod
    def plan(
        args: dict[str, Any],
        names: list[str],
        results: list[dict[str, Any]],
        venv_missing: bool,
        file_ok: bool,
    ) -> list[str]:
        """The pip arguments to run (``install ...`` / ``uninstall -y ...``), or [] when nothing is to do."""
        state, reqs_file = args["state"], args["requirements"]
        flags = ["--disable-pip-version-check"]
        file_args = ["-r", reqs_file] if reqs_file else []
        if state == "absent":
            if venv_missing:
                return []
            gone = [r["name"] for r in results if r["name"] and r["installed"]]
            return ["uninstall", "-y", *flags, *gone] if gone else []
        if state in ("latest", "forcereinstall"):
            mode = "-U" if state == "latest" else "--force-reinstall"
            return ["install", *flags, mode, *names, *file_args]
        if venv_missing:
            return ["install", *flags, *names, *file_args]
        todo = [r["req"] for r in results[: len(names)] if r["satisfied"] is not True]
        from_file = [r for r in results[len(names) :] if r["satisfied"] is not True]
        if reqs_file and (from_file or not file_ok):
            todo += file_args
        return ["install", *flags, *todo] if todo else []
