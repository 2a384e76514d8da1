"""A venv with the REAL NIXL wheels, built once and cached, for the integration tests.

``nixl_python()`` returns the venv's python. The venv is made from ``/usr/bin/python3`` (the Python a host
has, not the test runner's) under ``$PROVISION_CACHE/nixl-venv`` (default ``<repo>/.cache``, git-ignored)
with uv and the lab's shared uv cache (the one the SGLang stack installs from: the same wheels)::

    uv pip install --no-deps nixl-cu13==1.5.1 nixl==1.5.1 numpy

``--no-deps`` on purpose: both wheels declare ``torch`` (and the ``nixl`` meta package declares
``nixl-cu12`` too), but ``import nixl``, the plugin list and DRAM↔DRAM transfers need neither — torch is
only imported for VRAM buffers. With its deps the install would pull a ~6 GB CUDA torch.

A file lock (``nixl-venv.lock``) serialises concurrent test sessions; a marker file written last holds the
pinned spec, so a half-built or outdated venv is rebuilt.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from uv import find_uv_bin

from tests.support.stack import REPO, shared_dir

BASE_PYTHON = "/usr/bin/python3"
PACKAGES = ("nixl-cu13==1.5.1", "nixl==1.5.1", "numpy")
MARKER = ".provision-nixl-venv"


def cache_dir() -> Path:
    return Path(os.environ.get("PROVISION_CACHE") or REPO / ".cache")


def venv_dir() -> Path:
    return cache_dir() / "nixl-venv"


def nixl_python() -> str:
    """Build the venv if needed (under a lock) and return its python's path."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    spec = " ".join(PACKAGES)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / "nixl-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = venv / MARKER
        if python.exists() and marker.exists() and marker.read_text() == spec:
            return str(python)
        shutil.rmtree(venv, ignore_errors=True)
        uv = find_uv_bin()
        env = {**os.environ, "UV_CACHE_DIR": str(shared_dir("uv"))}
        _run([uv, "venv", "-q", "--python", BASE_PYTHON, str(venv)], env)
        _run([uv, "pip", "install", "-q", "--no-deps", "--python", str(python), *PACKAGES], env)
        _run([str(python), "-c", "import nixl._api"])
        marker.write_text(spec)
    return str(python)


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"building the NIXL test venv failed (rc={proc.returncode}): {' '.join(argv)}\n{tail}")


if __name__ == "__main__":
    print(nixl_python())
