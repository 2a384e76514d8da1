from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # `from lab import Lab` in tests

from lab import Lab

# lab fixtures


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A started lab of $PROVISION_LAB_HOSTS (default 4) sshd hosts, shared by the whole session."""
    n = int(os.environ.get("PROVISION_LAB_HOSTS", "4"))
    with Lab(n, tmp_path_factory.mktemp("lab")) as started:
        yield started
