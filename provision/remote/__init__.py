"""Every script shipped to hosts, and the one way the controller finds them: :func:`path`.

The files here (``*.py``, ``*.sh``) run ON the hosts, with whatever Python or sh is there (stdlib only, old
Pythons too); they never import provision. They travel on stdin (``ModuleContext.run_script``,
``ModuleContext.call_helper``), through the persistent agent (:mod:`provision.transport.agent`), or are copied when they
must outlive the command (the NIXL transfer's target). Each answers with ONE JSON object on its last stdout
line (``CommandResult.last_json``), except ``gather_facts.sh`` (sections, parsed by :mod:`provision.facts`).

The host library (``hostlib.py``: the envelope, ``Failed``, the atomic write, ...) is imported by the scripts
by its plain name; :func:`source` ships it with each script that imports it, whichever way the script travels:
the bytes it returns are the script bundled with its libraries (:func:`bundle`), a self-contained program.

This ``__init__`` is controller-side only and imports nothing of provision.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

REMOTE_DIR = Path(__file__).resolve().parent
LIBRARIES = ("hostlib",)  # the modules of this directory that scripts import (shipped with them)
_IMPORTS = re.compile(r"^\s*(?:import|from)\s+(%s)\b" % "|".join(LIBRARIES), re.M)
_BUNDLE = """\
# {name}, bundled by provision (provision/remote/__init__.py) with the host libraries it imports
import sys as _provision_sys


def _provision_run(libraries, name, text):
    import types
    for lib, lib_text in libraries:
        module = types.ModuleType(lib)
        module.__file__ = "<provision:%s>" % lib
        exec(compile(lib_text, module.__file__, "exec"), module.__dict__)
        _provision_sys.modules[lib] = module
    exec(compile(text, name, "exec"), {{"__name__": "__main__", "__file__": name, "__builtins__": __builtins__}})


_provision_run({libraries}, {name!r}, {text})
"""


def path(name: str) -> Path:
    """The controller-side file of the shipped script ``name`` (``"file_state.py"``, ``"gather_facts.sh"``)."""
    if not name or "/" in name or name.startswith(".") or name == "__init__.py":
        raise ValueError(f"not a shipped helper script: {name!r}")
    return REMOTE_DIR / name


def request(req: dict[str, Any], data: bytes | None = None) -> bytes:
    """The stdin of one helper call in the host library's envelope (``hostlib.serve``): the request as a JSON
    object on one line, then, for an action that takes data (``hostlib.takes_data``), the data's bytes."""
    line = json.dumps(req).encode("utf-8")
    return line if data is None else line + b"\n" + data


def libraries_of(text: str) -> list[str]:
    """The host libraries (:data:`LIBRARIES`) a script's text imports, in the order of :data:`LIBRARIES`."""
    found = set(_IMPORTS.findall(text))
    return [lib for lib in LIBRARIES if lib in found]


def bundle(name: str, text: str) -> str:
    """``text`` (the script ``name``) as a self-contained program: each library it imports is built as a module
    of ``sys.modules`` first, then the script runs as ``__main__`` with its own file name and line numbers."""
    libs = libraries_of(text)
    if not libs:
        return text
    pairs = "[%s]" % ", ".join("(%r, %r)" % (lib, path(lib + ".py").read_text(encoding="utf-8")) for lib in libs)
    return _BUNDLE.format(name=name, libraries=pairs, text=repr(text))


def source(name: str) -> bytes:
    """The bytes of the shipped script ``name``, as they travel to a host: bundled with the host libraries it
    imports (:func:`bundle`), whichever way it travels."""
    raw = path(name).read_bytes()
    if not name.endswith(".py"):
        return raw
    return bundle(name, raw.decode("utf-8")).encode("utf-8")
