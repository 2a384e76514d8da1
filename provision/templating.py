"""Jinja2 templating with Ansible's habits: StrictUndefined, lazy variables, native single expressions.

Trust: only the playbook's and the inventory's own text is a template. Everything a host sent back
(module results, registered values, facts, ``set_fact`` values, loop items) lives in layers marked
:func:`inert`: :class:`Vars` returns those values as they are and never renders them again, so a file on a
host containing ``{{ ... }}`` stays text. The environment is a Jinja2 sandbox (no ``__globals__``/``__class__``
walks, no unsafe callables), for the playbook's own text too. See ``docs/security.md``.

* ``render(value, variables)`` renders strings inside nested dicts/lists. A string that is exactly one
  expression (``"{{ gpus | length }}"``) keeps its native type, as in Ansible.
* ``evaluate(expr, variables)`` evaluates a bare expression (``when``, ``changed_when``, ``assert``).
* Variables are resolved lazily through :class:`Vars`: a var whose value is itself a template
  (``venv_python: "{{ venv_path }}/bin/python"``) is rendered when it is read, with cycle detection.
* ``names_used(value)`` lists the free variable names of a template, for validation before any host is
  contacted.
Jinja2 exceptions never leave this module: they become :class:`provision.errors.TemplateError`.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from functools import lru_cache, wraps
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes
import jinja2.sandbox
import jinja2.visitor
import yaml

from . import jinja_plugins, lookups, yamlsafe
from .commands import quote
from .errors import TemplateError, did_you_mean

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


# ------------------------------------------------------------------------------------ filters and tests
def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("yes", "true", "on", "1", "y")


def _regex_flags(ignorecase: bool, multiline: bool) -> int:
    return (re.IGNORECASE if ignorecase else 0) | (re.MULTILINE if multiline else 0)


def _regex_replace(value: Any, pattern: str, replacement: str = "", ignorecase: bool = False,
                   multiline: bool = False, count: int = 0, mandatory_count: int = 0) -> str:  # fmt: skip
    """Ansible's ``regex_replace``: ``count`` replacements at most (0: all); ``mandatory_count``: exactly that
    many matches, or the task fails."""
    text = "" if value is None else str(value)
    output, subs = re.compile(pattern, _regex_flags(ignorecase, multiline)).subn(replacement, text, count=count)
    if mandatory_count and mandatory_count != subs:
        raise TemplateError(
            f"regex_replace: {pattern!r} should match {mandatory_count} times, but matches {subs} times in {text!r}"
        )
    return output


def _regex_search(value: Any, pattern: str, *groups: str, ignorecase: bool = False,
                  multiline: bool = False) -> Any:  # fmt: skip
    """Ansible's ``regex_search``: the match, or None; with ``'\\1'``/``'\\g<name>'`` arguments, the list of
    those groups."""
    wanted: list[Any] = []
    for group in groups:
        named = re.match(r"\\g<(\S+)>", str(group))
        numbered = re.match(r"\\(\d+)", str(group))
        if named:
            wanted.append(named.group(1))
        elif numbered:
            wanted.append(int(numbered.group(1)))
        else:
            raise TemplateError(f"regex_search: unknown argument {group!r} (a group: '\\1' or '\\g<name>')")
    match = re.search(pattern, str(value), _regex_flags(ignorecase, multiline))
    if match is None:
        return None
    return [match.group(g) for g in wanted] if wanted else match.group(0)


def _dict2items(value: Any, key_name: str = "key", value_name: str = "value") -> list[dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise TemplateError(f"dict2items requires a mapping, got {type(value).__name__}")
    return [{key_name: k, value_name: v} for k, v in value.items()]


def _items2dict(items: Any, key_name: str = "key", value_name: str = "value") -> dict[Any, Any]:
    if not isinstance(items, (list, tuple)):
        raise TemplateError(f"items2dict requires a list, got {type(items).__name__}")
    out = {}
    for item in items:
        if not isinstance(item, Mapping) or key_name not in item or value_name not in item:
            raise TemplateError(f"items2dict: each item needs {key_name!r} and {value_name!r} keys, got {item!r}")
        out[item[key_name]] = item[value_name]
    return out


def _b64encode(value: Any, encoding: str = "utf-8", urlsafe: bool = False) -> str:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    return encode(str(value).encode(encoding, "surrogateescape")).decode()


def _b64decode(value: Any, encoding: str = "utf-8", urlsafe: bool = False) -> str:
    decode = base64.urlsafe_b64decode if urlsafe else base64.b64decode
    return decode(str(value).encode()).decode(encoding, "surrogateescape")


def _result_test(key: str) -> Any:
    def test(value: Any) -> bool:
        return isinstance(value, Mapping) and bool(value.get(key, False))

    return test


def _mandatory(value: Any, msg: str | None = None) -> Any:
    if isinstance(value, jinja2.Undefined):
        raise TemplateError(msg or "mandatory variable is not defined")
    return value


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

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        result = super().call(__context, __obj, *args, **kwargs)
        if isinstance(result, (KeysView, ValuesView, ItemsView)):
            return list(result)
        return result


_LIST_MERGES = ("replace", "keep", "append", "prepend", "append_rp", "prepend_rp")


def _merge_lists(a: list[Any], b: list[Any], how: str) -> list[Any]:
    if how == "keep":
        return a
    if how == "append":
        return a + b
    if how == "prepend":
        return b + a
    if how == "append_rp":
        return [x for x in a if x not in b] + b
    if how == "prepend_rp":
        return b + [x for x in a if x not in b]
    return b


def _combine(*dicts: Any, recursive: bool = False, list_merge: str = "replace") -> dict[str, Any]:
    """Ansible's ``combine``: later mappings win; ``recursive`` merges nested mappings; ``list_merge`` says how
    two lists under one key meet (replace, keep, append, prepend, append_rp, prepend_rp), at any depth."""
    if list_merge not in _LIST_MERGES:
        raise TemplateError(f"combine: list_merge={list_merge!r} is not one of {', '.join(_LIST_MERGES)}")
    items: list[Any] = []
    for d in dicts:
        items += d if isinstance(d, list) else [d]

    def merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(a)
        for k, v in b.items():
            old = out.get(k)
            if k in out and isinstance(old, Mapping) and isinstance(v, Mapping):
                out[k] = merge(old, v) if recursive else v
            elif k in out and isinstance(old, list) and isinstance(v, list):
                out[k] = _merge_lists(old, v, list_merge)
            else:
                out[k] = v
        return out

    result: dict[str, Any] = {}
    for d in items:
        if not isinstance(d, Mapping):
            raise TemplateError(f"combine expects mappings, got {type(d).__name__}")
        result = merge(result, d)
    return result


def _plain(value: Any) -> Any:
    """Plain dicts and lists (the YAML dumper refuses the loader's line-numbered mappings)."""
    if isinstance(value, Unsafe):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _to_yaml(value: Any, **kw: Any) -> str:
    """Ansible's ``to_yaml``: flow style for the innermost collections, keys sorted."""
    kw.setdefault("default_flow_style", None)
    return str(yaml.safe_dump(_plain(value), allow_unicode=True, **kw))


def _to_nice_yaml(value: Any, indent: int = 4, **kw: Any) -> str:
    return str(yaml.safe_dump(_plain(value), indent=indent, allow_unicode=True, default_flow_style=False, **kw))


class _Undefined(jinja2.ChainableUndefined, jinja2.StrictUndefined):
    """Strict (printing, iterating, comparing or testing it for truth fails, naming what is missing), but an
    attribute or item of it is the same undefined, as in ansible-core 2.19: ``d.missing.x | default('v')`` is
    ``v`` and ``d.missing.x is defined`` is false, where plain StrictUndefined failed on ``.x``."""


class _ShownUndefined(jinja2.Undefined):
    """In a task name, an undefined name shows as ansible-core 2.19 shows it."""

    def __str__(self) -> str:
        return f"<< error 1 - {self._undefined_name!r} is undefined >>"


class _ContextVars(Mapping[str, Any]):
    """A template context's variables as a mapping, each one rendered only when a lookup reads it."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def __getitem__(self, key: str) -> Any:
        value = self._ctx.resolve_or_missing(key)
        if value is jinja2.utils.missing:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter({*self._ctx.parent, *self._ctx.vars})

    def __len__(self) -> int:
        return len({*self._ctx.parent, *self._ctx.vars})


def _lookup_env(ctx: Any) -> lookups.LookupEnv:
    return _make_lookup_env(_ContextVars(ctx), ctx.parent)


def _make_lookup_env(variables: Mapping[str, Any], parent: Mapping[str, Any]) -> lookups.LookupEnv:
    dirs = []
    for name in ("role_path", "playbook_dir"):
        value = variables.get(name)
        if isinstance(value, str) and value and value not in dirs:
            dirs.append(value)

    def render_lookup_template(source: str, _: Mapping[str, Any], extra: dict[str, Any]) -> str:
        scope = parent if isinstance(parent, Vars) else Vars(dict(parent))
        return render_file(source, scope.child(**extra) if extra else scope)

    return lookups.LookupEnv(variables, dirs or [os.getcwd()], render_lookup_template)


def run_lookup(name: str, terms: list[Any], variables: Mapping[str, Any], module: str) -> list[Any]:
    """A ``with_<name>`` loop's items: lookup ``name`` on the rendered ``terms``, as ``query()`` runs it, for a
    task of ``module``."""
    env = _make_lookup_env(variables, variables)
    env.loop_module = module
    return list(lookups.run(name, terms, env, wantlist=True))


@jinja2.pass_context
def _render_term(ctx: Any, text: str) -> Any:
    parent = ctx.parent
    scope = parent if isinstance(parent, Vars) else Vars(dict(parent))
    if ctx.vars:
        scope = scope.child(**ctx.vars)
    return render(text, scope, where=f"embedded template {text!r}")


@jinja2.pass_context
def _lookup(ctx: Any, name: str, *terms: Any, wantlist: bool = False, errors: str = "strict", **kw: Any) -> Any:
    """Ansible's ``lookup()``: one value, or the values joined by commas (``wantlist=True``: the list)."""
    return lookups.run(name, list(terms), _lookup_env(ctx), wantlist=bool(wantlist), errors=errors, **kw)


@jinja2.pass_context
def _query(ctx: Any, name: str, *terms: Any, errors: str = "strict", **kw: Any) -> Any:
    """Ansible's ``query()``/``q()``: always the list."""
    kw.pop("wantlist", None)
    return lookups.run(name, list(terms), _lookup_env(ctx), wantlist=True, errors=errors, **kw)


_ITERATORS = (Iterator, KeysView, ValuesView, ItemsView, range)


def _listing(fn: Any) -> Any:
    """A filter whose iterator result goes on as a list, as every filter's does in ansible-core 2.19: ``d |
    dict2items | selectattr(...) | items2dict`` and ``(l | map('string')) + ['x']`` work as they do there."""

    @wraps(fn)  # keeps Jinja's pass_context/pass_environment marks
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        return list(result) if isinstance(result, _ITERATORS) else result

    return wrapper


def _make_env(**options: Any) -> jinja2.Environment:
    # the sandbox refuses attribute walks to internals (``cycler.__init__.__globals__``), unsafe callables and
    # str.format tricks, and bounds range(): a template can read data, never reach Python
    options.setdefault("undefined", _Undefined)
    env = _Sandbox(keep_trailing_newline=True, autoescape=False, finalize=_finalize, **options)
    env.filters.update(
        bool=_bool,
        to_json=lambda v, **kw: json.dumps(v, **kw),
        to_nice_json=lambda v, indent=4: json.dumps(v, indent=indent, sort_keys=True),
        from_json=json.loads,
        to_yaml=_to_yaml,
        to_nice_yaml=_to_nice_yaml,
        combine=_combine,
        from_yaml=yamlsafe.load,  # bounded: host output with an alias bomb is refused
        regex_replace=_regex_replace,
        regex_search=_regex_search,
        basename=os.path.basename,
        dirname=os.path.dirname,
        quote=quote,  # the one quoting function (provision.commands): for launch scripts
        b64encode=_b64encode,
        b64decode=_b64decode,
        mandatory=_mandatory,
        ternary=lambda v, a, b, none_val=None: none_val if v is None and none_val is not None else a if v else b,
        dict2items=_dict2items,
        items2dict=_items2dict,
        from_yaml_all=yamlsafe.load_all,
    )
    env.tests.update(
        succeeded=lambda r: isinstance(r, Mapping) and not r.get("failed", False),
        success=lambda r: isinstance(r, Mapping) and not r.get("failed", False),
        failed=_result_test("failed"),
        changed=_result_test("changed"),
        skipped=_result_test("skipped"),
        match=lambda v, p: re.match(p, str(v)) is not None,
        search=lambda v, p: re.search(p, str(v)) is not None,
        change=_result_test("changed"),
    )
    env.filters.update(jinja_plugins.FILTERS)
    env.filters.update({name: _listing(fn) for name, fn in env.filters.items()})
    env.tests.update(jinja_plugins.TESTS)
    env.globals.update(lookup=_lookup, query=_query, q=_query, **{_EMBEDDED: _render_term})
    for table in (env.filters, env.tests):  # every name also under its FQCN, as ansible-core knows them
        table.update({f"ansible.builtin.{name}": fn for name, fn in list(table.items()) if "." not in name})
    return env


ENV = _make_env()
yaml.SafeDumper.add_representer(Unsafe, yaml.representer.SafeRepresenter.represent_str)  # dumped as text
# the template module's environment: Ansible's template defaults (trim_blocks=True, lstrip_blocks=False)
FILE_ENV = _make_env(trim_blocks=True)
NAME_ENV = _make_env(undefined=_ShownUndefined)  # task names: never fail, show what is undefined


@lru_cache(maxsize=4096)
def _compile(source: str) -> jinja2.Template:
    return ENV.from_string(source)


@lru_cache(maxsize=256)
def _compile_file(source: str) -> jinja2.Template:
    return FILE_ENV.from_string(source)


def truthy(value: Any) -> bool:
    """A rendered flag (``run_once``, ``check_mode``) read as Ansible reads booleans."""
    return _bool(value) if isinstance(value, str) else bool(value)


def drop_omitted(args: dict[str, Any]) -> dict[str, Any]:
    """Arguments without those rendered to ``omit`` (also inside nested mappings and lists)."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if v != OMIT}
        if isinstance(value, list):
            return [clean(v) for v in value if v != OMIT]
        return value

    return {k: clean(v) for k, v in args.items() if v != OMIT}


def escape_backslashes(source: str) -> str:
    """Ansible's rule for playbook text: a backslash inside a string literal of a ``{{ }}`` expression is kept
    as written (``regex_replace('(a)', '\\1')`` in YAML double quotes means the regex backreference ``\1``),
    so it is doubled before Jinja2 reads the literal. Template files are not changed."""
    if "\\" not in source or "{{" not in source:
        return source
    try:
        tokens = list(ENV.lex(ENV.preprocess(source)))
    except jinja2.TemplateSyntaxError:
        return source  # the syntax error is reported when the text is compiled
    out, in_var = [], False
    for _, kind, text in tokens:
        if kind == "variable_begin":
            in_var = True
        elif kind == "variable_end":
            in_var = False
        elif in_var and kind == "string":
            text = text.replace("\\", "\\\\")
        out.append(text)
    return "".join(out)


def _syntax_error(exc: jinja2.TemplateSyntaxError, source: str, where: str) -> TemplateError:
    message = str(exc.message)
    unknown = re.match(r"No (filter|test) named '([^']+)'", message)
    if unknown:  # Jinja2's own check at compile time (check_filters_tests finds most before the run)
        message += did_you_mean(unknown.group(2), ENV.filters if unknown.group(1) == "filter" else ENV.tests)
    return TemplateError(f"template syntax error in {where or source!r}: {message}")


# ------------------------------------------------------------------------------------------ variables
_resolving = threading.local()


class _Inert:
    """A layer of values that are data, never templates (see :func:`inert`)."""

    __slots__ = ("layer",)

    def __init__(self, layer: Mapping[str, Any]) -> None:
        self.layer = layer


def inert(layer: Mapping[str, Any]) -> Any:
    """Mark a :class:`Vars` layer as data: its values are returned as they are, never rendered again.

    Every layer whose values came from a host (registered results, facts, ``set_fact``) or from an earlier
    rendering (loop items) is inert: a host that returns ``{{ ... }}`` gets that text back verbatim."""
    return _Inert(layer)


class Vars(Mapping[str, Any]):
    """Layered variables (lowest precedence first) rendered lazily on read, with cycle detection.

    A layer wrapped in :func:`inert` holds data: a name whose winning value comes from such a layer is never
    rendered. Values added with :meth:`child` are data too (results, loop items)."""

    def __init__(self, *layers: Mapping[str, Any]) -> None:
        self._data: dict[str, Any] = {}
        self._inert: set[str] = set()
        for layer in layers:
            if isinstance(layer, _Inert):
                self._data.update(layer.layer)
                self._inert.update(layer.layer)
            else:
                self._data.update(layer)
                if self._inert:
                    self._inert.difference_update(layer)
        self._cache: dict[str, Any] = {}

    def raw(self) -> dict[str, Any]:
        return self._data

    def is_inert(self, key: str) -> bool:
        """True when ``key``'s value is data (from a host or an earlier rendering), not a template."""
        return key in self._inert

    def __getitem__(self, key: str) -> Any:
        if key in self._cache:
            return self._cache[key]
        if key not in self._data:
            if key in ENV.globals:
                return ENV.globals[key]
            if key == "vars":  # Ansible's magic `vars`: every variable of the host, rendered on read
                return self
            raise KeyError(key)
        value = self._data[key]
        if key not in self._inert and _contains_template(value):
            stack: list[str] = getattr(_resolving, "stack", [])
            _resolving.stack = stack
            if key in stack:
                raise TemplateError(f"variable {key!r} refers to itself: {' -> '.join([*stack, key])}")
            stack.append(key)
            try:
                value = render(value, self, where=f"variable {key!r}")
            finally:
                stack.pop()
        self._cache[key] = value
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._data or key in ENV.globals or key == "vars"

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def child(self, **extra: Any) -> Vars:
        """These vars plus ``extra`` (data: results, loop items), which win."""
        out = Vars()
        out._data = {**self._data, **extra}
        out._inert = self._inert | extra.keys()
        return out


def _contains_template(value: Any) -> bool:
    if isinstance(value, str):
        return is_template(value)
    # plain containers only: mapping views such as `hostvars` are lazy and render themselves on access
    if isinstance(value, dict):
        return any(_contains_template(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_contains_template(v) for v in value)
    return False


# ------------------------------------------------------------------------------------------ rendering
def _as_vars(variables: Mapping[str, Any]) -> Mapping[str, Any]:
    return variables if isinstance(variables, Vars) else Vars(variables)


def _undefined_message(exc: jinja2.UndefinedError, variables: Mapping[str, Any]) -> str:
    """``undefined variable 'sglang_devcie' (did you mean 'sglang_device'?)``: the nearest defined name."""
    match = re.search(r"'([^']+)' is undefined", str(exc))
    if match:
        name = match.group(1)
        return f"undefined variable {name!r}{did_you_mean(name, [*variables, *ENV.globals])}"
    return str(exc)


def render(value: Any, variables: Mapping[str, Any], where: str = "") -> Any:
    """Render every template inside ``value`` (str, dict, list) with ``variables``."""
    if isinstance(value, str):
        if not is_template(value):
            return value
        value = escape_backslashes(value)
        match = _NATIVE_EXPR.match(value)
        if match:
            return evaluate(match.group("expr"), variables, where=where)
        return _render_text(value, variables, where)
    if isinstance(value, dict):
        return {k: render(v, variables, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [render(v, variables, where) for v in value]
    return value


def render_text(source: str, variables: Mapping[str, Any], where: str = "") -> str:
    """Render a whole template text (template module, launch scripts) to a string."""
    return _render_text(source, variables, where)


def render_name(name: str, variables: Mapping[str, Any]) -> str:
    """A task name as Ansible 2.19 shows it: rendered with the host's vars, an undefined name shown inline;
    the name as written when it cannot be rendered at all."""
    if not is_template(name):
        return name
    try:
        template = NAME_ENV.from_string(escape_backslashes(name))
        ctx = template.new_context(_as_vars(variables), shared=True)  # type: ignore[arg-type]
        return str(NAME_ENV.concat(template.root_render_func(ctx)))
    except Exception:  # a name is only shown: whatever goes wrong, show it as written
        return name


def render_file(source: str, variables: Mapping[str, Any], where: str = "") -> str:
    """Render a template file (the ``template`` module) as Ansible does: ``trim_blocks``, and
    ``ansible_managed`` defined."""
    extra = {"ansible_managed": MANAGED}
    scope = variables.child(**extra) if isinstance(variables, Vars) else {**variables, **extra}
    return _render_text(source, scope, where, file=True)


def _render_text(source: str, variables: Mapping[str, Any], where: str, *, file: bool = False) -> str:
    try:
        template = _compile_file(source) if file else _compile(source)
        ctx = template.new_context(_as_vars(variables), shared=True)  # type: ignore[arg-type]
        return str(ENV.concat(template.root_render_func(ctx)))
    except jinja2.TemplateSyntaxError as exc:
        raise _syntax_error(exc, source, where) from None
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"{_undefined_message(exc, variables)} in {where or repr(source)}") from None
    except TemplateError:
        raise
    except Exception as exc:
        raise TemplateError(f"error rendering {where or repr(source)}: {type(exc).__name__}: {exc}") from None


def _raise_undefined(value: Any) -> None:
    """Raise the UndefinedError (naming what is missing) of an undefined value, also one inside the lists and
    dicts an expression built (``[r.missing]``): it must fail the task here, not later wherever it is used."""
    if isinstance(value, jinja2.Undefined):
        str(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _raise_undefined(item)
    elif isinstance(value, dict):
        for item in value.values():
            _raise_undefined(item)


def evaluate(expr: str, variables: Mapping[str, Any], where: str = "", *, conditional: bool = False) -> Any:
    """Evaluate a bare Jinja2 expression and return its native value. ``conditional``: the templates in its
    string constants are rendered first (:class:`_EmbeddedConstants`)."""
    if isinstance(expr, bool):
        return expr
    name = _CONDITION if conditional else _RESULT
    source = f"{{% set {name} = ({expr}) %}}"
    try:
        template = _compile(source)
        module = template.make_module(vars=_as_vars(variables), shared=True)  # type: ignore[arg-type]
        result = getattr(module, name)  # `l | unique`, `d.keys()`: already lists (_listing, _Sandbox.call)
        _raise_undefined(result)
        return result
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(
            f"syntax error in expression {expr.strip()!r} ({where or 'expression'}): {exc.message}"
        ) from None
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"{_undefined_message(exc, variables)} in {where or repr(expr.strip())}") from None
    except TemplateError:
        raise
    except Exception as exc:
        raise TemplateError(f"error evaluating {expr.strip()!r}: {type(exc).__name__}: {exc}") from None


def evaluate_expression(expr: Any, variables: Mapping[str, Any], where: str = "", *, conditional: bool = False) -> Any:
    """A bare expression of the playbook (``assert: that``, ``debug: var``, ``when``), also when written
    wrapped as ``"{{ expr }}"``: evaluated ONCE. Its value is never evaluated again (that would run whatever
    a host put into a registered value)."""
    if not isinstance(expr, str):
        return expr
    match = _SINGLE_EXPR.match(expr)
    return evaluate(match.group("expr") if match else expr, variables, where, conditional=conditional)


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
            refused = jinja_plugins.REFUSED.get(node.name.removeprefix("ansible.builtin."))
            if is_filter and refused:
                raise TemplateError(f"filter {node.name!r}{place}: {refused}", line=node.lineno)
            hint = did_you_mean(node.name, known)
            raise TemplateError(f"unknown Jinja2 {kind} {node.name!r}{hint}{place}", line=node.lineno)
