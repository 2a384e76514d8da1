"""Templating, Ansible's stage of that name: Jinja2 with Ansible's habits (StrictUndefined, lazy variables, native
single expressions), the builtin filters, tests and lookup plugins, and the static checks of templates.

- ``templar`` — :class:`Vars` (lazy layered variables, :func:`inert` data layers), :func:`render`,
  :func:`evaluate`; the environments ``ENV``/``FILE_ENV``/``NAME_ENV`` and the lookup globals.
- ``conditionals`` — :func:`condition`, :func:`false_condition`: ``when``-style conditions, boolean results only.
- ``tables`` — :func:`make_env` (the builtin filters and tests in a sandboxed environment), :func:`truthy`,
  :func:`drop_omitted`.
- ``environment`` — :class:`Unsafe`, ``OMIT``, the sandbox and the undefined kinds the environments are made of.
- ``analysis`` — :func:`check_syntax`, :func:`names_used`, :func:`check_filters_tests` (before any host).
- ``filters_core``, ``filters`` (its size filters in ``sizes``), ``tests`` — Ansible's builtin filters and tests
  (``FILTERS``, ``TESTS``, ``REFUSED``).
- ``lookups`` (``PLUGINS``, ``run``) over ``lookup_plugins`` (the controller-side file/command/vars lookups).

Imports only ``commands``, ``errors``, ``localfiles``, ``vault`` and ``yamlsafe`` outside the package. The names
below are the package's API (``from provision import templating; templating.render(...)``).
"""

from .analysis import check_filters_tests, check_syntax, names_used
from .conditionals import condition, false_condition, not_boolean, unquoted_kind
from .environment import MANAGED, OMIT, Unsafe, is_template
from .tables import drop_omitted, truthy
from .templar import (
    DELIMITER_OPTIONS,
    ENV,
    FILE_ENV,
    FILE_OPTIONS,
    NAME_ENV,
    Vars,
    escape_backslashes,
    evaluate,
    evaluate_expression,
    inert,
    render,
    render_file,
    render_name,
    render_text,
    run_lookup,
)

__all__ = [
    "DELIMITER_OPTIONS",
    "ENV",
    "FILE_ENV",
    "FILE_OPTIONS",
    "MANAGED",
    "NAME_ENV",
    "OMIT",
    "Unsafe",
    "Vars",
    "check_filters_tests",
    "check_syntax",
    "condition",
    "drop_omitted",
    "escape_backslashes",
    "evaluate",
    "evaluate_expression",
    "false_condition",
    "inert",
    "is_template",
    "names_used",
    "not_boolean",
    "render",
    "render_file",
    "render_name",
    "render_text",
    "run_lookup",
    "truthy",
    "unquoted_kind",
]
