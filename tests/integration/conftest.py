"""Fixtures shared by the lab tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def lab_env(lab) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Point provision at the lab's ssh_config (its UserKnownHostsFile holds the lab's host keys)."""
    with lab.pointed_at():
        yield
