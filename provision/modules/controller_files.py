"""Files on the controller that a module reads: where a ``copy``/``template`` ``src`` is found, as Ansible's
search path looks."""

from __future__ import annotations

from pathlib import Path

from ..data import templates_dir


def find_controller_file(controller_dir: str, src: str, also: str | None = None) -> Path | None:
    """Where a ``copy``/``template`` ``src`` lives on the controller, as Ansible looks: beside the playbook
    (or in the role), in its ``templates/`` or ``files/``; then, for a role's task, the same in the playbook's
    folder (``also``), as Ansible's search path goes on from the role to the playbook; then in the project's
    ``templates/`` next to the playbooks dir; last, the templates shipped with provision
    (:func:`provision.data.templates_dir`: a copy of a shipped playbook still finds them)."""
    base = Path(controller_dir)
    if Path(src).is_absolute():
        candidates = [Path(src)]
    else:
        dirs = [base] + ([Path(also)] if also and Path(also) != base else [])
        candidates = [d / sub / src for d in dirs for sub in ("", "templates", "files")]
        candidates += [base.parent / "templates" / src, templates_dir() / src]
    return next((c for c in candidates if c.is_file()), None)
