"""Every task module provision offers, in one explicit list.

The generic, Ansible-compatible modules live in :mod:`provision.modules`; the GPU domain's modules live in
their packages (:mod:`provision.stack`, :mod:`provision.nixl`, :mod:`provision.sglang`, :mod:`provision.pd`).
Each module class registers itself with :func:`provision.modules.base.register` when its file is imported;
:func:`load_all` imports exactly the files listed here (a module file not listed is not offered, and
``tests/unit/test_imports.py`` fails on a file that registers modules without being listed). Imported lazily by
the playbook loader and ``provision task``, so ``provision --help`` loads no module.
"""

from __future__ import annotations

from .modules.base import REGISTRY, lookup

# the files whose import registers modules (what tests/unit/test_imports.py checks against)
FILES = (
    "provision.modules.builtin",
    "provision.modules.commands_mod",
    "provision.modules.files",
    "provision.modules.net",
    "provision.modules.pip_mod",
    "provision.stack.host",
    "provision.stack.modules",
    "provision.nixl.modules",
    "provision.sglang.modules",
    "provision.pd.process",
    "provision.pd.modules",
    "provision.pd.rollout_modules",
)


def load_all() -> None:
    """Import every file in :data:`FILES` (idempotent)."""
    from .modules import builtin, commands_mod, files, net, pip_mod  # noqa: F401
    from .nixl import modules as nixl_modules  # noqa: F401
    from .pd import modules as pd_modules  # noqa: F401
    from .pd import process, rollout_modules  # noqa: F401
    from .sglang import modules as sglang_modules  # noqa: F401
    from .stack import host  # noqa: F401
    from .stack import modules as stack_modules  # noqa: F401


__all__ = ["FILES", "REGISTRY", "load_all", "lookup"]
