"""Conditionals (``when``, ``changed_when``, ``failed_when``, ``until``, ``assert: that``) as ansible-core 2.19
reads them: a bare expression, a list of them (all must hold, evaluated in order and no further) or a bool, whose
result must be a boolean (a non-empty string is an error, not silently false)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import TemplateError
from .templar import evaluate_expression


def condition(expr: Any, variables: Mapping[str, Any], where: str = "") -> bool:
    """``when``-style condition: bare expression, list of expressions (all must hold), or a bool."""
    return false_condition(expr, variables, where) is None


def false_condition(expr: Any, variables: Mapping[str, Any], where: str = "") -> Any:
    """The first part of a ``when``-style condition that is false (Ansible's ``false_condition``), evaluated in
    order and no further; None when the whole condition holds."""
    if isinstance(expr, list):
        for part in expr:
            found = false_condition(part, variables, where)
            if found is not None:
                return found
        return None
    if isinstance(expr, bool):
        return None if expr else expr
    result = evaluate_expression(str(expr), variables, where, conditional=True)
    if not isinstance(result, bool):  # as ansible-core 2.19: a non-empty string was silently false here
        raise TemplateError(not_boolean(result, expr, where))
    return None if result else expr


def not_boolean(result: Any, expr: Any, where: str = "") -> str:
    """ansible-core 2.19's failure for a conditional whose ``result`` is not a boolean."""
    return (
        f"Conditional result ({bool(result)}) was derived from value of type {type(result).__name__!r}"
        f"{f' in {where}' if where else ''}: conditionals must have a boolean result ({str(expr)[:200]!r}; use"
        " '| bool', '| length > 0' or a comparison)"
    )


def unquoted_kind(value: Any) -> str:
    """What a condition that is not an expression is, for the one-line refusal; a mapping is most often an
    unquoted expression holding ``': '`` (``- x.msg == 'a: b'``), which YAML reads as a key and its value."""
    if isinstance(value, dict):
        return "a mapping (YAML reads an unquoted expression holding ': ' as one: quote the whole expression)"
    return "a list" if isinstance(value, list) else f"{type(value).__name__} {value!r}"
