"""The shipped playbooks and templates, as package data: a wheel carries them.

``playbooks/`` holds the playbooks (``site.yml``, ``install.yml``, ``pd-up.yml``, ...) with their
``tasks/`` and ``vars/``; ``templates/`` the launch templates they render (beside ``playbooks/``, where
:func:`provision.modules.controller_files.find_controller_file` looks: ``<playbook dir>/../templates``). A
checkout keeps the top-level ``playbooks`` and ``templates`` as links to these folders, so ``provision run
playbooks/site.yml`` runs the same files a wheel installs.

``defaults.yml`` holds the defaults of every well-known var (:func:`defaults`): the CLI applies them to every
run at the lowest precedence, like an Ansible role's ``defaults/main.yml``. ``inventories/`` holds the starter
layouts ``provision init`` writes (:func:`starter_inventory`; the checkout's ``inventory/`` links to them).

This module is the one place that knows where they are. It imports nothing of provision but the errors.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

from ..errors import InputError

DATA_DIR = Path(__file__).resolve().parent
DEFAULTS_FILE = DATA_DIR / "defaults.yml"
DEFAULT_SOURCE = "default"  # how `provision inventory --host` names the origin of a default


def playbooks_dir() -> Path:
    """The shipped playbooks: ``$PROVISION_PLAYBOOKS`` when set, else the package's ``data/playbooks``."""
    return Path(os.environ.get("PROVISION_PLAYBOOKS") or DATA_DIR / "playbooks")


def roles_dir() -> Path:
    """The shipped roles (``provision.bootstrap``, ``provision.stack``, ``provision.nixl_smoke``,
    ``provision.nixl_preflight``, ``provision.sglang_pd``): the shipped playbooks are built from them, and a
    user's playbook can list them beside its own roles. The last place on the roles path."""
    return DATA_DIR / "roles"


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


def find_playbook(name: str) -> tuple[Path, bool]:
    """``provision run NAME``: the file NAME when it exists (relative to the current directory, or absolute),
    else the shipped playbook of that name; (path, shipped). A name that is neither is returned as given
    (the loader then says it cannot read it)."""
    local = Path(name)
    if local.exists() or local.is_absolute() or local.parent != Path("."):
        return local, False
    shipped = playbooks_dir() / name
    if shipped.is_file():
        return shipped, True
    return local, False


def shipped_playbooks() -> list[tuple[str, str]]:
    """(file name, one-line description) of each shipped playbook: the first line of its leading comment, else
    its first play's name."""
    out = []
    for path in sorted(playbooks_dir().glob("*.yml")):
        out.append((path.name, _describe(path)))
    return out


def _describe(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
    paragraph: list[str] = []  # the leading comment's first paragraph, up to its first sentence
    for line in text.splitlines():
        words = line.lstrip("#").strip() if line.startswith("#") else ""
        if not words:
            if paragraph or not line.startswith("#"):
                break
            continue
        paragraph.append(words)
    if paragraph:
        joined = " ".join(paragraph)
        return joined.split(". ", 1)[0].rstrip(".")
    import yaml  # here: `provision --help` parses no YAML

    from .. import yamlsafe

    try:
        data = yamlsafe.load(text)
    except yaml.YAMLError:
        return ""
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return str(data[0].get("name") or "")
    return ""


@functools.cache
def _defaults_text() -> dict[str, Any]:
    import yaml

    from .. import yamlsafe

    try:
        data = yamlsafe.load(DEFAULTS_FILE.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read the shipped defaults: {exc}", file=str(DEFAULTS_FILE)) from None
    if not isinstance(data, dict):
        raise InputError("the shipped defaults must be a mapping", file=str(DEFAULTS_FILE))
    return {str(k): v for k, v in data.items()}


def defaults() -> dict[str, Any]:
    """The defaults of the well-known vars (``defaults.yml``), a fresh copy for each caller."""
    return copy.deepcopy(_defaults_text())


LAYOUTS = ("two-host", "single-host-4p4", "nxm", "local", "multi-host")  # provision init --layout, in data/inventories/


def starter_inventory(layout: str, path: str | None = None) -> str:
    """A starter inventory: the layout's example file, then every well-known var with its default and its
    comment, commented out (uncomment what you change, under the layout's group ``vars:``). With ``path`` (where
    it is written), the example commands name that file instead of the example's own."""
    if layout not in LAYOUTS:
        raise InputError(f"unknown layout {layout!r} (one of {', '.join(LAYOUTS)})")
    text = (DATA_DIR / "inventories" / f"{layout}.yml").read_text(encoding="utf-8").rstrip("\n") + "\n"
    if path is not None:
        text = text.replace(f"-i inventory/{layout}.yml", f"-i {path}")
    lines = DEFAULTS_FILE.read_text(encoding="utf-8").splitlines()
    body = [line for line in lines if line.strip() and line not in _opening_comment()]
    commented = "".join(f"#   {line}\n" for line in body)
    return (
        text + "\n# Every well-known var with its shipped default (applied under everything above: set only what you\n"
        "# change, in a group's `vars:` above, in group_vars/<group>.yml beside this file, or with -e).\n"
        "# `provision inventory -i THIS_FILE --host NAME` shows each var's value and where it came from.\n" + commented
    )


@functools.cache
def _opening_comment() -> frozenset[str]:
    """The lines of defaults.yml's opening comment (before its first section), left out of the starter."""
    out = set()
    for line in DEFAULTS_FILE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#") or line.startswith("# ---"):
            break
        out.add(line)
    return frozenset(out)
