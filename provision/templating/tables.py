"""The template environments' tables: Ansible's builtin filters and tests (also under their FQCN) in a sandboxed
Jinja2 environment (:func:`make_env`), and the small value rules rendering applies (:func:`truthy`,
:func:`drop_omitted`). :mod:`provision.templating.templar` makes its environments with it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import jinja2

from .. import yamlsafe
from ..commands import quote
from . import filters, tests
from .environment import OMIT, _finalize, _listing, _Sandbox, _Undefined
from .filters_core import (
    _b64decode,
    _b64encode,
    _bool,
    _combine,
    _dict2items,
    _items2dict,
    _mandatory,
    _regex_replace,
    _regex_search,
    _result_test,
    _to_nice_yaml,
    _to_yaml,
)


def make_env(globals_: Mapping[str, Any], **options: Any) -> jinja2.Environment:
    """A template environment with Ansible's builtin filters and tests (also under their FQCN) and ``globals_``
    (the templar's lookup(), query() and embedded-term renderer): ENV (FILE_ENV is the same one) and NAME_ENV."""
    # the sandbox refuses attribute walks to internals (``cycler.__init__.__globals__``), unsafe callables and
    # str.format tricks, and bounds range(): a template can read data, never reach Python
    options.setdefault("undefined", _Undefined)
    # no trailing newline kept, as ansible-core's environments: the templar gives the source's back (_trailing_newlines)
    env = _Sandbox(keep_trailing_newline=False, autoescape=False, finalize=_finalize, **options)
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
    env.filters.update(filters.FILTERS)
    env.filters.update({name: _listing(fn) for name, fn in env.filters.items()})
    env.tests.update(tests.TESTS)
    env.globals.update(globals_)
    for table in (env.filters, env.tests):  # every name also under its FQCN, as ansible-core knows them
        table.update({f"ansible.builtin.{name}": fn for name, fn in list(table.items()) if "." not in name})
    return env


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
