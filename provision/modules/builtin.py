"""Controller-only modules: ``debug``, ``set_fact``, ``fail`` and ``assert``. They touch no host: they
read and set variables through the context (``ctx.evaluate``: a Jinja2 expression with the host's vars)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import jinja2

from ..errors import ProvisionError, TemplateError
from ..templating import not_boolean, unquoted_kind
from .arg_types import BOOL_FALSE
from .args import parse_kv
from .base import Arg, ArgError, Module, ModuleContext, ModuleResult, register

UNDEFINED = "VARIABLE IS NOT DEFINED!"


def _evaluate(ctx: ModuleContext, expr: str, *, conditional: bool = False) -> Any:
    if ctx.evaluate is None:
        raise ProvisionError("no expression evaluator in this context")
    if conditional and ctx.condition is not None:
        return ctx.condition(expr)
    return ctx.evaluate(expr)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=4, sort_keys=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def truthy(value: Any) -> bool:
    """Jinja2 truth, with Ansible's reading of strings: 'false', 'no', 'off', '0' and '' are false."""
    if isinstance(value, str):
        return value.strip().lower() not in BOOL_FALSE | {"", "none"}
    return bool(value)


def _undefined(var: str) -> str:
    """What ansible-core 2.19 shows for ``debug: var=NAME`` of an undefined name."""
    return f"<< error 1 - {var.strip()!r} is undefined >>" if var.strip().isidentifier() else UNDEFINED


@register
class Debug(Module):
    name = "debug"
    show_msg = True
    expression_args = ("var",)
    controller_only = True
    args = {"msg": Arg("raw"), "var": Arg(), "verbosity": Arg("int", default=0)}

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        if "msg" in args and "var" in args:
            raise ArgError("debug: msg and var are mutually exclusive")

    @classmethod
    def coerce(cls, args: Mapping[str, Any]) -> dict[str, Any]:
        return {**super().coerce(args), "_msg_given": "msg" in args}  # `msg: "{{ None }}"` is not absent

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if args["verbosity"] > ctx.verbosity:  # as Ansible: skipped below its -v threshold
            return ModuleResult(skipped=True, msg="Verbosity threshold not met.")
        var = args["var"]
        if var is None:
            msg = args["msg"] if args.get("_msg_given") else "Hello world!"
            # the message keeps its type in the result (a list stays a list), as in Ansible
            return ModuleResult(msg=_text(msg), data={"msg": msg, "verbosity": args["verbosity"]})
        try:
            value = _evaluate(ctx, var)
            if isinstance(value, jinja2.Undefined):  # a bare undefined name evaluates lazily
                value = _undefined(var)
        except TemplateError as exc:
            value = _undefined(var) if "undefined" in str(exc).lower() else f"{UNDEFINED} ({exc})"
        except Exception as exc:  # the evaluator is the executor's: keep its failures inside the task
            return ModuleResult(failed=True, msg=f"debug: cannot evaluate {var!r}: {exc}")
        return ModuleResult(msg=f"{var}: {_text(value)}", data={var: value, "verbosity": args["verbosity"]})


@register
class SetFact(Module):
    name = "set_fact"
    controller_only = True
    args = {"cacheable": Arg("bool", default=False)}

    @classmethod
    def validate_static(cls, args: Mapping[str, Any], is_template: Callable[[Any], bool]) -> dict[str, Any]:
        names = [k for k in args if k != "cacheable"]
        if not names:
            raise ArgError("set_fact: give at least one name: value")
        for key in names:  # a templated name is rendered, and checked, when the task runs
            if not isinstance(key, str) or not (key.isidentifier() or is_template(key)):
                raise ArgError(f"set_fact: {key!r} is not a valid variable name")
        return dict(args)

    @classmethod
    def coerce(cls, args: Mapping[str, Any]) -> dict[str, Any]:
        return dict(args)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        facts = {}
        for key, value in args.items():
            if key == "cacheable":
                continue
            templated = "{{" in key or "{%" in key  # the playbook's text: a template
            name = str(ctx.render(key)) if templated and ctx.render is not None else key
            if not name.isidentifier():
                return ModuleResult(failed=True, msg=f"set_fact: {name!r} is not a valid variable name")
            facts[name] = value
        return ModuleResult(facts=facts, data={"ansible_facts": facts})


@register
class Fail(Module):
    name = "fail"
    controller_only = True
    args = {"msg": Arg("raw", default="Failed as requested from task")}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        return ModuleResult(failed=True, msg=_text(args["msg"]))


@register
class Assert(Module):
    name = "assert"
    expression_args = ("that",)
    controller_only = True
    args = {
        "that": Arg("raw", required=True),
        "fail_msg": Arg("raw", aliases=("msg",)),
        "success_msg": Arg("raw", default="All assertions passed"),
        "quiet": Arg("bool", default=False),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        """As ansible-core 2.19, each check is an expression or true/false; refused here, before the run, where
        ansible-core fails the task ("Conditional expressions must be strings.")."""
        that = args.get("that")
        for expr in that if isinstance(that, list) else [that]:
            if expr is None:
                raise ArgError("assert: that: empty conditional expressions are not allowed")
            if not isinstance(expr, (str, bool)):
                raise ArgError(f"assert: that: conditional expressions must be strings, got {unquoted_kind(expr)}")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        that = args["that"]
        checks = that if isinstance(that, list) else [that]
        for expr in checks:
            if isinstance(expr, str):
                try:
                    value = _evaluate(ctx, expr, conditional=True)
                    if not isinstance(value, bool):  # as ansible-core 2.19 (case conditional_non_boolean)
                        return ModuleResult(failed=True, msg=not_boolean(value, expr), data={"assertion": expr})
                    ok = value
                except Exception as exc:  # undefined vars, syntax errors: the assertion fails with why
                    return ModuleResult(
                        failed=True,
                        msg=f"assertion {expr!r} could not be evaluated: {exc}",
                        data={"assertion": expr, "evaluated_to": None},
                    )
            elif isinstance(expr, bool):
                ok = expr
            else:  # checked before the run (check_combination)
                return ModuleResult(failed=True, msg="Conditional expressions must be strings.")
            if not ok:
                fail_msg = args["fail_msg"]
                msg = _text(fail_msg) if fail_msg is not None else f"Assertion failed: {expr}"
                return ModuleResult(failed=True, msg=msg, data={"assertion": expr, "evaluated_to": False})
        msg = "" if args["quiet"] else _text(args["success_msg"])
        return ModuleResult(msg=msg, data={"evaluated_to": True})


META_ACTIONS = (
    "flush_handlers", "noop", "end_play", "end_host", "end_batch", "clear_facts", "clear_host_errors", "end_role",
    "reset_connection", "refresh_inventory",
)  # fmt: skip


@register
class Meta(Module):
    """``meta: ACTION``: the executor acts on it (:meth:`provision.executor.Executor._run_meta`); nothing runs on a
    host. ``refresh_inventory`` and ``reset_connection`` are outside the subset (refused by the choices)."""

    name = "meta"
    free_form = "_raw_params"
    controller_only = True
    args = {"_raw_params": Arg("str", required=True, choices=META_ACTIONS)}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        return ModuleResult()


@register
class IncludeTasks(Module):
    """``include_tasks: FILE`` (dynamic): the executor reads FILE when the task runs, per host and loop item
    (:meth:`provision.executor.Executor._run_include`); ``apply``: block keywords given to every included task."""

    name = "include_tasks"
    free_form = "file"
    controller_only = True
    args = {"file": Arg("str", required=True), "apply": Arg("dict")}

    @classmethod
    def normalize(cls, raw: Any) -> dict[str, Any]:
        return parse_kv(raw) if _is_kv(raw) else super().normalize(raw)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        return ModuleResult()


def _is_kv(raw: Any) -> bool:
    """``include_tasks: file=X`` / ``include_role: name=R tasks_from=T``: the ``k=v`` form of an include."""
    return isinstance(raw, str) and re.match(r"^\s*\w+=", raw) is not None


@register
class IncludeRole(Module):
    """``include_role: {name: ROLE, ...}`` (dynamic): the executor reads the role when the task runs, per host
    and loop item, as ``include_tasks`` (:meth:`provision.executor.Executor._run_include`)."""

    name = "include_role"
    free_form = "name"
    controller_only = True
    args = {
        "name": Arg("str", required=True), "tasks_from": Arg("str"), "vars_from": Arg("str"),
        "defaults_from": Arg("str"), "handlers_from": Arg("str"), "apply": Arg("dict"), "public": Arg("bool"),
        "allow_duplicates": Arg("bool"), "rolespec_validate": Arg("bool"),
    }  # fmt: skip

    @classmethod
    def normalize(cls, raw: Any) -> dict[str, Any]:
        return parse_kv(raw) if _is_kv(raw) else super().normalize(raw)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        return ModuleResult()
