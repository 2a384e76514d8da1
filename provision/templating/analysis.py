"""Static checks of templates before any host is contacted: syntax (:func:`check_syntax`), the free variable
names (:func:`names_used`, for the planner), unknown filters, tests and lookups (:func:`check_filters_tests`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes
import jinja2.sandbox
import jinja2.visitor

from ..errors import TemplateError, did_you_mean
from . import filters, lookups
from .environment import _EMBEDDED, _SINGLE_EXPR, is_template
from .templar import ENV


# ----------------------------------------------------------------------------------------- validation
def check_syntax(source: str, where: str, *, expression: bool = False) -> None:
    """Raise TemplateError (with ``where``) when ``source`` is not valid Jinja2."""
    text = f"{{{{ {source} }}}}" if expression else source
    try:
        ENV.parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"template syntax error in {where}: {exc.message}") from None


def names_used(value: Any, *, expression: bool = False) -> set[str]:
    """Free variable names used by the templates inside ``value`` (syntax errors raise TemplateError)."""
    names: set[str] = set()
    if isinstance(value, str):
        if expression:
            match = _SINGLE_EXPR.match(value)
            text = f"{{{{ {match.group('expr') if match else value} }}}}"
        elif is_template(value):
            text = value
        else:
            return names
        try:
            ast = ENV.parse(text)
            check_filters_tests(ast, repr(value))
            names |= jinja2.meta.find_undeclared_variables(ast)
            if expression:  # a conditional renders the templates of its constants (_EmbeddedConstants)
                for const in ast.find_all(jinja2.nodes.Const):
                    if isinstance(const.value, str) and is_template(const.value):
                        names |= names_used(const.value)
            for call in ast.find_all(jinja2.nodes.Call):  # a template written inside a lookup's terms
                if isinstance(call.node, jinja2.nodes.Name) and call.node.name == _EMBEDDED:
                    term = call.args[0]
                    if isinstance(term, jinja2.nodes.Const):
                        names |= names_used(term.value)
        except jinja2.TemplateSyntaxError as exc:  # also the compiler's TemplateAssertionError
            raise TemplateError(f"template syntax error in {value!r}: {exc.message}") from None
    elif isinstance(value, Mapping):
        for v in value.values():
            names |= names_used(v, expression=expression)
    elif isinstance(value, (list, tuple)):
        for v in value:
            names |= names_used(v, expression=expression)
    elif isinstance(value, bool) or value is None:
        pass
    return names - set(ENV.globals)


def check_filters_tests(source: str | jinja2.nodes.Template, where: str = "", *, expression: bool = False) -> None:
    """Raise TemplateError naming the first filter or test of ``source`` that :data:`ENV` does not define.

    ``source`` is template text (or a bare expression with ``expression=True``) or an already parsed AST.
    The error's ``line`` is the line inside ``source``; ``where`` (a file, a snippet) goes in the message.
    Jinja2 itself only finds an unknown filter when the template is compiled, or inside ``{% if %}`` not
    until that branch runs: this finds every one before any host is contacted.
    """
    if isinstance(source, str):
        text = f"{{{{ {source} }}}}" if expression else source
        try:
            ast = ENV.parse(text)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"template syntax error in {where or repr(source)}: {exc.message}") from None
    else:
        ast = source
    for call in ast.find_all(jinja2.nodes.Call):
        func = call.node
        if isinstance(func, jinja2.nodes.Name) and func.name in ("lookup", "query", "q") and call.args:
            first = call.args[0]
            if isinstance(first, jinja2.nodes.Const) and lookups.plugin_name(first.value) not in lookups.PLUGINS:
                place = f" in {where}" if where else ""
                names = ", ".join(sorted(lookups.PLUGINS))
                raise TemplateError(
                    f"lookup plugin {first.value!r} is not supported{place} (known: {names})", line=call.lineno
                )
    for node in ast.find_all((jinja2.nodes.Filter, jinja2.nodes.Test)):
        is_filter = isinstance(node, jinja2.nodes.Filter)
        known = ENV.filters if is_filter else ENV.tests
        if node.name not in known:
            kind = "filter" if is_filter else "test"
            place = f" in {where}" if where else ""
            refused = filters.REFUSED.get(node.name.removeprefix("ansible.builtin."))
            if is_filter and refused:
                raise TemplateError(f"filter {node.name!r}{place}: {refused}", line=node.lineno)
            hint = did_you_mean(node.name, known)
            raise TemplateError(f"unknown Jinja2 {kind} {node.name!r}{hint}{place}", line=node.lineno)
