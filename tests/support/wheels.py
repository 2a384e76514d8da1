"""Small but valid wheels for offline installs: ``wheel`` (any name, version and tag: pip selects by the file
name's tag), ``links`` (a module-scoped fixture: a find-links directory of sglang 0.5.17 as published, its pinned
companions, sglang-router and NIXL) and ``H200`` (a ``wheelhouse_target`` of a GPU host)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from provision.stack.releases import BY_VERSION

H200 = {"python": "3.12", "machine": "x86_64", "glibc": "2.39", "torch": "2.11.0+cu130", "cuda": "13.0"}


def wheel(directory: Path, name: str, version: str, tag: str = "py3-none-any", *, requires: tuple[str, ...] = (),
          purelib: bool = False) -> Path:  # fmt: skip
    """A minimal, valid wheel of ``name`` with the given tag (pip selects by the file name's tag): ``import <name>``
    gives ``VERSION``; ``requires``: its Requires-Dist lines."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    root = "true" if purelib else "false"
    files = {
        f"{dist}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": meta,
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {root}\nTag: {tag}\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    out = directory / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return out


@pytest.fixture(scope="module")
def links(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sglang 0.5.17 (as published: cp3X manylinux_2_34, x86_64 and aarch64) with its pinned companions,
    sglang 0.5.23, the router and NIXL."""
    d = tmp_path_factory.mktemp("links")
    for py in ("cp311", "cp312"):
        for machine in ("x86_64", "aarch64"):
            wheel(d, "sglang", "0.5.17", f"{py}-{py}-manylinux_2_34_{machine}")
            wheel(d, "nixl-cu13", "1.5.1", f"{py}-{py}-manylinux_2_28_{machine}")
            wheel(d, "nixl-cu12", "1.5.1", f"{py}-{py}-manylinux_2_28_{machine}")
    for name, version in BY_VERSION["0.5.17"].pins().items():
        if name != "sglang":
            wheel(d, name, version)
    for name in ("sglang-router==0.3.2", "nixl==1.5.1", "numpy==2.2.0"):
        wheel(d, *name.split("=="))
    return d
