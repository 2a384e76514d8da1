"""Every script shipped to hosts, and the one way the controller finds them: :func:`path`.

The files here (``*.py``, ``*.sh``) run ON the hosts, with whatever Python or sh is there (stdlib only, old
Pythons too); they never import provision. They travel on stdin (``ModuleContext.run_script``,
``ModuleContext.call_helper``), through the persistent agent (:mod:`provision.transport.agent`), or are copied when they
must outlive the command (the NIXL transfer's target). Each answers with ONE JSON object on its last stdout
line (``CommandResult.last_json``), except ``gather_facts.sh`` (sections, parsed by :mod:`provision.facts`).

This ``__init__`` is controller-side only and imports nothing of provision.
"""

from __future__ import annotations

from pathlib import Path

REMOTE_DIR = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """The controller-side file of the shipped script ``name`` (``"file_state.py"``, ``"gather_facts.sh"``)."""
    if not name or "/" in name or name.startswith(".") or name == "__init__.py":
        raise ValueError(f"not a shipped helper script: {name!r}")
    return REMOTE_DIR / name


def source(name: str) -> bytes:
    """The bytes of the shipped script ``name``, as they travel to a host."""
    return path(name).read_bytes()
