"""A module imported on first use: Fabric and paramiko (with cryptography, ~0.1 s of a command line's start) are
needed only when a run makes an SSH connection of its own; a run whose hosts are all reached through the keeper
(``--persist``) never makes one.

    if TYPE_CHECKING:
        import paramiko
    else:
        paramiko = lazy("paramiko")    # ``paramiko.SSHException`` imports it, when an exception is matched
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _Lazy:
    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


def lazy(name: str) -> Any:
    """``name``, imported when an attribute of it is first read."""
    return _Lazy(name)
