"""debug, set_fact, fail and assert: controller-only modules, evaluated with a real Jinja2 environment."""

from __future__ import annotations

from typing import Any

import pytest

from provision.modules import builtin  # noqa: F401  (registers the modules)
from provision.modules.base import ArgError, ModuleContext, ModuleResult
from provision.testing import module_context, prepare_args


def make_ctx(variables: dict[str, Any]) -> ModuleContext:
    """The context the task runner builds (provision.testing: provision's own evaluator, layered Vars)."""
    return module_context("local", variables)


def run(ctx: ModuleContext, name: str, raw: Any) -> ModuleResult:
    cls, args = prepare_args(name, raw, ctx.variables)
    assert cls.controller_only
    result: ModuleResult = cls().run(ctx, args)
    return result


def test_debug_msg_and_var() -> None:
    ctx = make_ctx({"result": {"stdout": "hi"}, "n": 3})
    assert run(ctx, "debug", {"msg": "hello"}).msg == "hello"
    assert run(ctx, "debug", None).msg == "Hello world!"
    result = run(ctx, "debug", {"var": "result.stdout"})
    assert result.data["result.stdout"] == "hi" and not result.changed and not result.failed
    assert "[" in run(ctx, "debug", {"msg": [1, 2]}).msg
    assert run(ctx, "debug", {"var": "nope"}).data["nope"] == "<< error 1 - 'nope' is undefined >>"  # as 2.19
    assert ctx.conn.commands_run == 0


def test_set_fact_accepts_any_names() -> None:
    ctx = make_ctx({})
    result = run(ctx, "set_fact", {"port": 8000, "peers": ["a", "b"], "cacheable": True})
    assert result.facts == {"port": 8000, "peers": ["a", "b"]} and not result.changed
    with pytest.raises(ArgError):
        run(ctx, "set_fact", {"not-a-name": 1})
    with pytest.raises(ArgError):
        run(ctx, "set_fact", {})


def test_fail() -> None:
    ctx = make_ctx({})
    assert run(ctx, "fail", None).msg == "Failed as requested from task"
    result = run(ctx, "fail", {"msg": "boom"})
    assert result.failed and result.msg == "boom"


def test_assert_names_the_first_failing_expression() -> None:
    ctx = make_ctx({"tp": 2, "gpus": ["0", "1"], "mode": "false"})
    ok = run(ctx, "assert", {"that": ["tp == gpus | length", "tp > 1"], "success_msg": "fine"})
    assert not ok.failed and ok.msg == "fine"
    bad = run(ctx, "assert", {"that": ["tp > 1", "tp > 4", "tp > 8"]})
    assert bad.failed and "tp > 4" in bad.msg and bad.data["assertion"] == "tp > 4"
    custom = run(ctx, "assert", {"that": "tp > 4", "fail_msg": "need more GPUs"})
    assert custom.failed and custom.msg == "need more GPUs" and custom.data["assertion"] == "tp > 4"
    assert run(ctx, "assert", {"that": "mode"}).failed  # the string 'false' is false, as in Ansible
    undefined = run(ctx, "assert", {"that": "missing_var == 1", "msg": "x"})
    assert undefined.failed and "missing_var" in undefined.msg
    assert run(ctx, "assert", {"that": "tp > 1", "quiet": True}).msg == ""
