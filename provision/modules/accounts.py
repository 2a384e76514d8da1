"""``group`` and ``user``: local accounts, as Ansible's modules manage them (``groupadd``/``useradd``/... on the
host, through ``become``; ``remote/accounts.py``: one command reads the account and changes it only when it
differs). ``user``'s ``password`` (a hash, as in Ansible) travels on the helper's stdin and is set with
``chpasswd -e`` (Ansible passes it in ``useradd -p``'s argv, which the process list shows)."""

from __future__ import annotations

import json
from typing import Any

from .base import Arg, ArgError, HelperError, Module, ModuleContext, ModuleResult, register


@register
class Group(Module):
    name = "group"
    args = {
        "name": Arg(required=True),
        "state": Arg(default="present", choices=("absent", "present")),
        "gid": Arg("int"),
        "system": Arg("bool", default=False),
        "force": Arg("bool", default=False),
        "local": Arg("bool", default=False),
        "non_unique": Arg("bool", default=False),
        "gid_min": Arg("int"),
        "gid_max": Arg("int"),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        if args.get("local") is True or str(args.get("local")).lower() in ("yes", "true"):
            raise ArgError("group: local (lgroupadd, libuser) is not supported")
        non_unique = args.get("non_unique")
        if (non_unique is True or str(non_unique).lower() in ("yes", "true")) and args.get("gid") is None:
            raise ArgError("group: non_unique is True but all of the following are missing: gid")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        request = {k: args[k] for k in ("name", "state", "gid", "system", "force", "non_unique", "gid_min", "gid_max")}
        request["check"] = ctx.check
        try:
            answer = ctx.call_helper("accounts.py", "group", stdin=json.dumps(request).encode(), what="group",
                                     check_rc=False)  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        return ModuleResult.from_answer(answer)


@register
class User(Module):
    name = "user"
    args = {
        "name": Arg(required=True, aliases=("user",)),
        "state": Arg(default="present", choices=("absent", "present")),
        "uid": Arg("int"),
        "group": Arg(),
        "groups": Arg("list"),
        "append": Arg("bool", default=False),
        "comment": Arg(),
        "home": Arg("path"),
        "shell": Arg(),
        "create_home": Arg("bool", default=True, aliases=("createhome",)),
        "move_home": Arg("bool", default=False),
        "system": Arg("bool", default=False),
        "force": Arg("bool", default=False),
        "remove": Arg("bool", default=False),
        "non_unique": Arg("bool", default=False),
        "password": Arg(secret=True),
        "password_lock": Arg("bool"),
        "update_password": Arg(default="always", choices=("always", "on_create")),
        "uid_min": Arg("int"),
        "uid_max": Arg("int"),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        keys = ("name", "state", "uid", "group", "groups", "append", "comment", "home", "shell", "create_home")
        more = ("move_home", "system", "force", "remove", "non_unique", "password", "password_lock", "update_password")
        request = {k: args[k] for k in (*keys, *more, "uid_min", "uid_max")}
        if request["groups"] is not None:
            request["groups"] = [str(g).strip() for g in request["groups"] if str(g).strip()]
        request["check"] = ctx.check
        try:
            answer = ctx.call_helper(  # on stdin: the request may hold a password hash
                "accounts.py", "user", stdin=json.dumps(request).encode(), what="user", check_rc=False
            )
        except HelperError as exc:
            return exc.as_result()
        return ModuleResult.from_answer(answer)


__all__ = ["Group", "User"]
