"""The playbook author's own Jinja2 plugins: Python files in ``filter_plugins/`` and ``test_plugins/`` beside a
playbook or in a role, loaded as ansible-core loads them (each file's ``FilterModule().filters()`` /
``TestModule().tests()``: a mapping of names to callables), before the plays are checked, so a custom filter
or test is known to the planner and works in every template.

The author's code is trusted (like the playbook itself: docs/security.md); it runs on the controller, and its
functions are called from the sandboxed templates like the builtin filters. Each file is loaded once per
process (by its resolved path); its names are registered under the bare name and ``ansible.legacy.NAME``, as
Ansible exposes them. A file that cannot be loaded is one InputError naming it (exit 5, before any host).
Imports only ``templating`` and ``errors``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import templating
from .errors import PlaybookError
from .templating.environment import _listing

KINDS = {"filter_plugins": ("FilterModule", "filters"), "test_plugins": ("TestModule", "tests")}
_lock = threading.Lock()
_loaded: set[str] = set()


def load_beside(directory: str | Path) -> None:
    """Load ``directory/filter_plugins/*.py`` and ``directory/test_plugins/*.py`` (a playbook's folder, a
    role's), once each."""
    base = Path(directory)
    for folder, (class_name, method) in KINDS.items():
        plugin_dir = base / folder
        if not plugin_dir.is_dir():
            continue
        for file in sorted(plugin_dir.glob("*.py")):
            if file.name.startswith("_"):
                continue
            real = str(file.resolve())
            with _lock:
                if real in _loaded:
                    continue
                _loaded.add(real)
            _register(folder, _load(file, class_name, method))


def _load(file: Path, class_name: str, method: str) -> dict[str, Callable[..., Any]]:
    name = f"provision_user_plugin_{hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:16]}"
    try:
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            raise ImportError("not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        holder = getattr(module, class_name, None)
        if holder is None:
            return {}  # as Ansible: a file without the class is not a plugin (a helper module)
        found = getattr(holder(), method)()
    except Exception as exc:  # the author's code: any error is the file's, named in one line
        raise PlaybookError(f"cannot load this {class_name}: {type(exc).__name__}: {exc}", file=str(file)) from None
    if not isinstance(found, dict) or not all(isinstance(k, str) and callable(v) for k, v in found.items()):
        raise PlaybookError(f"{class_name}().{method}() must return a mapping of names to callables", file=str(file))
    return found


def _register(folder: str, found: dict[str, Callable[..., Any]]) -> None:
    if folder == "filter_plugins":  # an iterator result goes on as a list, as every filter's does
        found = {k: _listing(v) for k, v in found.items()}
    named = {**found, **{f"ansible.legacy.{k}": v for k, v in found.items()}}
    for env in (templating.ENV, templating.FILE_ENV, templating.NAME_ENV):
        (env.filters if folder == "filter_plugins" else env.tests).update(named)
