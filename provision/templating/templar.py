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
* ansible-core's one environment: ``trim_blocks`` for all text, and its trailing-newline rule (rendering keeps
  none, the text gets back what it lost); a template file's includes and imports read the controller's files
  from ansible-core's search path (:func:`render_file`).
Jinja2 exceptions never leave this module: they become :class:`provision.errors.TemplateError`.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes
import jinja2.sandbox
import jinja2.visitor
import yaml

from ..errors import TemplateError, did_you_mean
from . import lookups
from .environment import (
    _CONDITION,
    _EMBEDDED,
    _NATIVE_EXPR,
    _RESULT,
    _SINGLE_EXPR,
    MANAGED,
    Unsafe,
    _ShownUndefined,
    is_template,
)
from .tables import make_env


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

    def render_lookup_template(
        source: str, _: Mapping[str, Any], extra: dict[str, Any], options: dict[str, Any]
    ) -> str:
        scope = parent if isinstance(parent, Vars) else Vars(dict(parent))
        return render_file(source, scope.child(**extra) if extra else scope, options=options)

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


_searching = threading.local()  # .path: the search path of the template file this thread renders (render_file)


def _template_search_path(variables: Mapping[str, Any]) -> tuple[str, ...]:
    """Where a template file's ``{% include %}``, ``{% import %}``, ``{% from %}`` and ``{% extends %}`` names are
    looked up, as Ansible's template module and lookup search: the role (``role_path``), the playbook's folder,
    then the template's own folder (``template_path``), each one's ``templates/`` before itself."""
    dirs: list[str] = []
    source = variables.get("template_path")
    for base in (variables.get("role_path"), variables.get("playbook_dir"),
                 os.path.dirname(source) if isinstance(source, str) else None):  # fmt: skip
        if isinstance(base, str) and base:
            for d in (os.path.join(base, "templates"), base):
                if d not in dirs:
                    dirs.append(d)
    return tuple(dirs)


def _find_template(name: str) -> str | None:
    dirs = getattr(_searching, "path", ())
    try:
        pieces = jinja2.loaders.split_template_path(name)
    except jinja2.TemplateNotFound:  # a ".." piece: never outside the folders
        return None
    return next((path for d in dirs if os.path.isfile(path := os.path.join(d, *pieces))), None)


class _SearchPathLoader(jinja2.BaseLoader):
    """Reads what a template file includes or imports from the search path of the file being rendered
    (:func:`_template_search_path`, per thread): the controller's files, as the template itself (a vaulted one
    decrypted). A compiled include is reused while its name still finds the same, unchanged file."""

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Any]:
        path = _find_template(template)
        if path is None:
            searched = ", ".join(getattr(_searching, "path", ())) or "no folder: playbook text, not a template file"
            raise jinja2.TemplateNotFound(template, f"template {template!r} not found (searched {searched})")
        from .. import vault

        stamp = os.stat(path).st_mtime_ns
        try:
            source = vault.reveal(Path(path).read_bytes(), path).decode("utf-8")
        except (OSError, UnicodeDecodeError, vault.VaultError) as exc:
            raise TemplateError(f"template {template!r} ({path}) cannot be read: {exc}") from None

        def uptodate() -> bool:
            try:
                return _find_template(template) == path and os.stat(path).st_mtime_ns == stamp
            except (OSError, jinja2.TemplateNotFound):
                return False

        return source, path, uptodate


_GLOBALS = {"lookup": _lookup, "query": _query, "q": _query, _EMBEDDED: _render_term}
# ansible-core's environment for all text: trim_blocks (lstrip_blocks off); what a template file includes or
# imports is read from its search path (render_file)
ENV = make_env(_GLOBALS, trim_blocks=True, loader=_SearchPathLoader())
yaml.SafeDumper.add_representer(Unsafe, yaml.representer.SafeRepresenter.represent_str)  # dumped as text
# the template module's environment is the same one, as in ansible-core (whose environment has trim_blocks for
# playbook text too)
FILE_ENV = ENV
NAME_ENV = make_env(_GLOBALS, trim_blocks=True, undefined=_ShownUndefined)  # task names: never fail


@lru_cache(maxsize=4096)
def _compile(source: str) -> jinja2.Template:
    return ENV.from_string(source)


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
    return _trailing_newlines(source, "".join(out))  # the lexer keeps no trailing newline


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


def _one_expression(source: str) -> re.Match[str] | None:
    """A text that is one expression, also before one newline (which rendering drops, as ansible-core's lexer
    does): its value is the expression's native value; a text value gets the source's newlines back
    (:func:`_trailing_newlines`), another type does not (``"{{ ok }}\\n"`` is True)."""
    return _NATIVE_EXPR.match(source) or _NATIVE_EXPR.match(re.sub(r"(\r\n|\r|\n)\Z", "", source))


def render(value: Any, variables: Mapping[str, Any], where: str = "") -> Any:
    """Render every template inside ``value`` (str, dict, list) with ``variables``."""
    if isinstance(value, str):
        if not is_template(value):
            return value
        value = escape_backslashes(value)
        match = _one_expression(value)
        if match:
            result = evaluate(match.group("expr"), variables, where=where)
            return _trailing_newlines(value, result) if isinstance(result, str) else result
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


# the template module's and lookup's environment settings a task may change (ansible-core's names and types)
FILE_OPTIONS = {"trim_blocks": bool, "lstrip_blocks": bool, "newline_sequence": str, "block_start_string": str,
                "block_end_string": str, "variable_start_string": str, "variable_end_string": str,
                "comment_start_string": str, "comment_end_string": str}  # fmt: skip
DELIMITER_OPTIONS = frozenset(name for name in FILE_OPTIONS if name.endswith("_string"))  # the six delimiters


@lru_cache(maxsize=64)
def _overlay(options: tuple[tuple[str, Any], ...]) -> jinja2.Environment:
    return ENV.overlay(**dict(options))


@lru_cache(maxsize=256)
def _compile_with(options: tuple[tuple[str, Any], ...], source: str) -> jinja2.Template:
    return _overlay(options).from_string(source)


def render_file(source: str, variables: Mapping[str, Any], where: str = "",
                options: Mapping[str, Any] | None = None) -> str:  # fmt: skip
    """Render a template file (the ``template`` module, the template lookup) as Ansible does: ``ansible_managed``
    defined, its includes found on its search path, and the task's environment ``options`` (:data:`FILE_OPTIONS`:
    ``lstrip_blocks: true``, ``trim_blocks: false``, other delimiters, ``newline_sequence``; validated by the
    module)."""
    extra = {"ansible_managed": MANAGED}
    scope = variables.child(**extra) if isinstance(variables, Vars) else {**variables, **extra}
    chosen = tuple(sorted((options or {}).items()))
    newline = dict(chosen).get("newline_sequence", "\n")
    match = None if DELIMITER_OPTIONS & dict(chosen).keys() else _one_expression(source)
    if match:  # as ansible-core: the value as text, a None as nothing, the newlines back on a text only
        result = evaluate(match.group("expr"), scope, where=where)
        if isinstance(result, str):
            return _trailing_newlines(source, result, newline)
        return "" if result is None else str(result)
    outer = getattr(_searching, "path", ())  # a template lookup inside a template: restored after it
    _searching.path = _template_search_path(scope)
    try:
        return _render_text(source, scope, where, chosen, newline)
    finally:
        _searching.path = outer


def _render_text(source: str, variables: Mapping[str, Any], where: str,
                 options: tuple[tuple[str, Any], ...] = (), newline: str = "\n") -> str:  # fmt: skip
    try:
        template = _compile_with(options, source) if options else _compile(source)
        ctx = template.new_context(_as_vars(variables), shared=True)  # type: ignore[arg-type]
        return _trailing_newlines(source, str(ENV.concat(template.root_render_func(ctx))), newline)
    except jinja2.TemplateSyntaxError as exc:
        raise _syntax_error(exc, source, where) from None
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"{_undefined_message(exc, variables)} in {where or repr(source)}") from None
    except jinja2.TemplateNotFound as exc:  # an include/import (only a template file has a search path)
        raise TemplateError(f"{exc.message} in {where or repr(source)}") from None
    except TemplateError:
        raise
    except Exception as exc:
        raise TemplateError(f"error rendering {where or repr(source)}: {type(exc).__name__}: {exc}") from None


def _newlines_at_end(text: str) -> int:
    return len(text) - len(text.rstrip("\n"))


def _trailing_newlines(source: str, text: str, newline: str = "\n") -> str:
    """ansible-core's rule for the end of a rendered text: its environments keep no trailing newline (an
    included template loses its own), and the text gets back as many of the source's trailing newlines as
    rendering lost (a source that ends with a block tag and a newline ends with that newline; a value that
    ends with newlines of its own gets none added)."""
    missing = _newlines_at_end(source) - _newlines_at_end(text)
    return text + newline * missing if missing > 0 else text


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
