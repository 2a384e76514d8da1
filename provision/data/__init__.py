"""The shipped playbooks and templates, as package data: a wheel carries them.

``playbooks/`` holds the playbooks (``site.yml``, ``install.yml``, ``pd-up.yml``, ...) with their
``tasks/`` and ``vars/``; ``templates/`` the launch templates they render (beside ``playbooks/``, where
:func:`provision.modules.base.find_controller_file` looks: ``<playbook dir>/../templates``). A checkout keeps
the top-level ``playbooks`` and ``templates`` as links to these folders, so ``provision run playbooks/site.yml``
runs the same files a wheel installs.

This module is the one place that knows where they are. It imports nothing of provision but the errors.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError

DATA_DIR = Path(__file__).resolve().parent


def playbooks_dir() -> Path:
    """The shipped playbooks: ``$PROVISION_PLAYBOOKS`` when set, else the package's ``data/playbooks``."""
    return Path(os.environ.get("PROVISION_PLAYBOOKS") or DATA_DIR / "playbooks")


def templates_dir() -> Path:
    """The shipped templates (the package's ``data/templates``)."""
    return DATA_DIR / "templates"


def playbook_path(name: str) -> Path:
    """A shipped playbook by file name (``pd-up.yml``); InputError when it is not there."""
    base = playbooks_dir()
    path = base / name
    if not path.is_file():
        raise InputError(f"{name} not found in {base} (set PROVISION_PLAYBOOKS to the playbooks directory)")
    return path
