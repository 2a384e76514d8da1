"""Fixtures shared by the lab tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.stack import CACHE_ROOT, shared_dir


@pytest.fixture(scope="module")
def lab_env(lab: Any) -> Iterator[Any]:
    """Point provision at the lab's ssh_config (its UserKnownHostsFile holds the lab's host keys); the lab."""
    with lab.pointed_at():
        yield lab


@pytest.fixture(scope="module")
def uv_cache() -> Path:
    """The uv cache every lab user shares (:func:`tests.support.stack.shared_dir`)."""
    return shared_dir("uv")


@pytest.fixture(scope="module")
def wheel_dir() -> Path:
    """Wheels for an offline install, downloaded once per machine (cp311 / manylinux x86_64)."""
    path = CACHE_ROOT / "wheels-nixl-1.5.1"
    if not any(path.glob("numpy-*.whl")):
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(tmp),
                "nixl-cu13==1.5.1", "nixl==1.5.1", "numpy"]  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True, timeout=600)
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
    return path
