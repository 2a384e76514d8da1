"""The pieces of the template environments: :class:`Unsafe` (``!unsafe`` text), ``OMIT``, the Jinja2 sandbox
(:class:`_Sandbox`: Ansible's embedded templates in conditionals and lookup terms), the undefined kinds
(strict, chainable; shown in task names). :mod:`provision.templating.templar` assembles the environments.
"""

from __future__ import annotations

import re
from collections.abc import ItemsView, Iterator, KeysView, ValuesView
from functools import wraps
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes
import jinja2.sandbox
import jinja2.visitor

_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}\s*$", re.DOTALL)
# a template that is exactly one expression keeps its type: text around it (even a newline) makes it a string
_NATIVE_EXPR = re.compile(r"\A\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}\Z", re.DOTALL)
_RESULT = "provision_result_"
OMIT = "__omit_place_holder__provision"  # the value of `omit`: an argument rendered to it is left out
MANAGED = "Ansible managed"  # `ansible_managed` in template files, as ansible-core 2.19 defines it


class Unsafe(str):
    """Text the playbook marked ``!unsafe``: data, never a template (``{{ x }}`` in it stays text), wherever
    it goes (a var, a module argument, a loop item). The same trust a host's values get, on the author's word."""

    __slots__ = ()


def is_template(value: Any) -> bool:
    return isinstance(value, str) and not isinstance(value, Unsafe) and ("{{" in value or "{%" in value)


def _finalize(value: Any) -> Any:
    """Ansible renders None as an empty string inside text."""
    return "" if value is None else value


_EMBEDDED = "provision_lookup_term_"  # the global that renders a template written inside a lookup's term


def _embedded_terms(node: jinja2.nodes.Expr) -> jinja2.nodes.Expr:
    """A constant term of a lookup call that holds a template, wrapped so it is rendered when the call runs."""
    if isinstance(node, jinja2.nodes.Const) and is_template(node.value):
        return jinja2.nodes.Call(jinja2.nodes.Name(_EMBEDDED, "load"), [node], [], None, None, lineno=node.lineno)
    if isinstance(node, (jinja2.nodes.List, jinja2.nodes.Tuple)):
        node.items = [_embedded_terms(item) for item in node.items]
    return node


_CONDITION = "provision_condition_"  # the result of a conditional: its constants' templates are rendered
_CONDITION_SOURCE = f"{{% set {_CONDITION} = ("


class _EmbeddedConstants(jinja2.visitor.NodeTransformer):
    """In a conditional (``when``, ``assert: that``, ``changed_when``, ``failed_when``, ``until``), every string
    constant that holds a template (``'{{ name }}' == 'web'``) is rendered when the expression runs, then
    compared: ansible-core 2.19 still does so for the playbook's own text (with a deprecation warning). Only
    constants of the expression's source are touched: a value (a host's output) is never rendered."""

    def visit_Const(self, node: jinja2.nodes.Const) -> jinja2.nodes.Node:
        if isinstance(node.value, str) and is_template(node.value):
            return jinja2.nodes.Call(jinja2.nodes.Name(_EMBEDDED, "load"), [node], [], None, None, lineno=node.lineno)
        return node

    def visit_Call(self, node: jinja2.nodes.Call) -> jinja2.nodes.Node:
        if isinstance(node.node, jinja2.nodes.Name) and node.node.name == _EMBEDDED:
            return node  # already wrapped (a lookup's term)
        return self.generic_visit(node)


_WHERE_ATTRS = frozenset({"file", "line", "key_lines"})  # yamlfile.LineDict's attributes


class _Sandbox(jinja2.sandbox.SandboxedEnvironment):
    """The sandbox, where ``d.keys()``/``values()``/``items()`` give lists, as in Ansible (``d.values() + [x]``),
    and a template written as a constant inside a lookup's terms (``lookup('file', '{{ playbook_dir }}/x')``)
    is rendered first, as ansible-core 2.19 still does for the playbook's own constants (never for values)."""

    def _parse(self, source: str, name: str | None, filename: str | None) -> jinja2.nodes.Template:
        ast = super()._parse(source, name, filename)
        for call in ast.find_all(jinja2.nodes.Call):
            if isinstance(call.node, jinja2.nodes.Name) and call.node.name in ("lookup", "query", "q"):
                call.args = call.args[:1] + [_embedded_terms(arg) for arg in call.args[1:]]
        if source.startswith(_CONDITION_SOURCE):
            _EmbeddedConstants().visit(ast)
        return ast

    def getattr(self, obj: Any, attribute: str) -> Any:
        """``x.line``: a mapping loaded from YAML (``yamlfile.LineDict``) carries where it came from as the
        attributes ``file``, ``line`` and ``key_lines``, which templates never see: ``x.line`` is its key ``line``,
        or undefined, as for a plain dict (``item.line`` in a lineinfile loop was the YAML line number)."""
        if attribute in _WHERE_ATTRS and isinstance(obj, dict):
            return obj[attribute] if attribute in obj else self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        result = super().call(__context, __obj, *args, **kwargs)
        if isinstance(result, (KeysView, ValuesView, ItemsView)):
            return list(result)
        return result


class _Undefined(jinja2.ChainableUndefined, jinja2.StrictUndefined):
    """Strict (printing, iterating, comparing or testing it for truth fails, naming what is missing), but an
    attribute or item of it is the same undefined, as in ansible-core 2.19: ``d.missing.x | default('v')`` is
    ``v`` and ``d.missing.x is defined`` is false, where plain StrictUndefined failed on ``.x``."""


class _ShownUndefined(jinja2.Undefined):
    """In a task name, an undefined name shows as ansible-core 2.19 shows it."""

    def __str__(self) -> str:
        return f"<< error 1 - {self._undefined_name!r} is undefined >>"


_ITERATORS = (Iterator, KeysView, ValuesView, ItemsView, range)


def _listing(fn: Any) -> Any:
    """A filter whose iterator result goes on as a list, as every filter's does in ansible-core 2.19: ``d |
    dict2items | selectattr(...) | items2dict`` and ``(l | map('string')) + ['x']`` work as they do there."""

    @wraps(fn)  # keeps Jinja's pass_context/pass_environment marks
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        return list(result) if isinstance(result, _ITERATORS) else result

    return wrapper
