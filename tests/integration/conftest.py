"""Fixtures shared by the lab tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def lab_env(lab) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Point provision at the lab's ssh_config (its UserKnownHostsFile holds the lab's host keys)."""
    old = os.environ.get("PROVISION_SSH_CONFIG")
    os.environ["PROVISION_SSH_CONFIG"] = str(lab.ssh_config_path)
    yield
    if old is None:
        os.environ.pop("PROVISION_SSH_CONFIG", None)
    else:
        os.environ["PROVISION_SSH_CONFIG"] = old
