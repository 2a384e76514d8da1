from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # `from lab import Lab` in tests

from lab import Lab

# the session's full SGLang venv on lab host 0 (tests/stack_support.py)
from tests.stack_support import sglang_stack  # noqa: F401

# the tools the suite runs by name (ansible-playbook, ansible, provision) are those beside this interpreter: a
# venv's, also when the venv is not activated (`.venv/bin/python -m pytest`)
_BIN = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _BIN:
    os.environ["PATH"] = os.pathsep.join([_BIN, os.environ.get("PATH", "")])


@pytest.fixture(autouse=True)
def _fresh_masker() -> Iterator[None]:
    """Each test starts with the secrets registered before it (the masker is process-wide and in-process CLI
    runs add to it: a fuzzed secret equal to 127.0.0.1 masked the address in a later test's message)."""
    from provision.commands import MASKER

    saved = (set(MASKER._secrets), set(MASKER._values), MASKER._pattern)
    yield
    MASKER._secrets, MASKER._values, MASKER._pattern = set(saved[0]), set(saved[1]), saved[2]


# lab fixtures


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A started lab of $PROVISION_LAB_HOSTS (default 4) sshd hosts, shared by the whole session."""
    n = int(os.environ.get("PROVISION_LAB_HOSTS", "4"))
    with Lab(n, tmp_path_factory.mktemp("lab")) as started:
        yield started
