"""``git``: a checkout on the host at a branch, tag, commit or the remote's HEAD, with Ansible's arguments,
return values (``before``, ``after``, ``remote_url_changed``) and check mode (``ls-remote``, nothing written).

The host does the work (``remote/git_repo.py``, one round trip); the request travels on stdin, never in an
argv of provision's own. A URL with a token in it still reaches ``git``'s argv on the host, as under Ansible:
use ``key_file`` or a credential helper instead. Refused by name: ``archive``, ``separate_git_dir``,
``bare``, ``refspec``, ``reference``, ``verify_commit``/``gpg_allowlist``, ``track_submodules``.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..commands import quote
from .base import Arg, ArgError, HelperError, Module, ModuleContext, ModuleResult, register

HELPER = "git_repo.py"
UNSUPPORTED = ("archive", "archive_prefix", "separate_git_dir", "bare", "refspec", "reference", "verify_commit",
               "gpg_allowlist", "gpg_whitelist", "track_submodules")  # fmt: skip


@register
class Git(Module):
    name = "git"
    args = {
        "repo": Arg(required=True, aliases=("name",)),
        "dest": Arg("path"),
        "version": Arg(default="HEAD"),
        "remote": Arg(default="origin"),
        "force": Arg("bool", default=False),
        "depth": Arg("int"),
        "clone": Arg("bool", default=True),
        "update": Arg("bool", default=True),
        "single_branch": Arg("bool", default=False),
        "recursive": Arg("bool", default=True),
        "accept_hostkey": Arg("bool", default=False),
        "accept_newhostkey": Arg("bool", default=False),
        "key_file": Arg("path"),
        "ssh_opts": Arg(),
        "executable": Arg("path"),
        "umask": Arg("raw"),
        **{name: Arg("raw") for name in UNSUPPORTED},
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        for name in UNSUPPORTED:
            if name in args:
                raise ArgError(f"git: {name!r} is not supported by provision")
        if args.get("accept_hostkey") and args.get("accept_newhostkey"):
            raise ArgError("git: parameters are mutually exclusive: accept_hostkey|accept_newhostkey")
        if "dest" not in args and args.get("clone", True) not in (False, "no", "false", "False"):
            raise ArgError("git: the destination directory must be specified unless clone=no")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        umask = args["umask"]
        if umask is not None:
            try:
                int(str(umask), 8)
            except ValueError:
                return ModuleResult(failed=True, msg="umask must be an octal integer")
        request = {
            "repo": args["repo"],
            "dest": ctx.expand(args["dest"]) if args["dest"] else "",
            "version": str(args["version"]),
            "remote": args["remote"],
            "force": args["force"],
            "depth": args["depth"],
            "clone": args["clone"],
            "update": args["update"],
            "single_branch": args["single_branch"],
            "recursive": args["recursive"],
            "executable": args["executable"],
            "umask": None if umask is None else str(umask),
            "ssh_command": _ssh_command(args),
            "check": ctx.check,
        }
        try:
            answer = ctx.call_helper(HELPER, "apply", stdin=json.dumps(request).encode(), what="git", check_rc=False)
        except HelperError as exc:
            return exc.as_result()
        return ModuleResult.from_answer(answer)  # before, after, remote_url_changed


def _ssh_command(args: dict[str, Any]) -> str | None:
    """``GIT_SSH_COMMAND`` for key_file/ssh_opts/accept_hostkey, as Ansible builds its ssh wrapper."""
    words: list[str] = []
    if args["key_file"]:
        words += ["-i", args["key_file"], "-o", "IdentitiesOnly=yes"]
    if args["ssh_opts"]:
        words += shlex.split(str(args["ssh_opts"]))
    if args["accept_hostkey"] or args["accept_newhostkey"]:
        # Ansible's accept_hostkey turns host key checking off; provision never does: an unknown server key
        # is learned, a CHANGED one is still refused (the same as accept_newhostkey)
        words += ["-o", "StrictHostKeyChecking=accept-new"]
    return " ".join(quote(w) for w in ["ssh", *words]) if words else None  # git runs it with sh
