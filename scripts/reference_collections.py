"""Installs the Ansible collections the differential tests' reference needs (``ansible.posix``,
``community.general``: ``sysctl``, ``mount``, ``authorized_key``, ``pam_limits``, ``modprobe``) into
``VENV/collections`` (the harness's ``ANSIBLE_COLLECTIONS_PATH``).

They come from the pinned ``ansible`` package on PyPI (its wheel bundles the collections built for
ansible-core 2.19), downloaded with pip, without its dependencies, and only those two collections are unpacked.
Also the ``debian`` package of the pinned ``python-debian`` wheel (pure Python), into ``VENV/reference-pylib``:
ansible-core's ``deb822_repository`` imports it on the managed host, and the cases that run it put that folder on
the module's ``PYTHONPATH`` (the harness's inventory var ``reference_pythonpath``) instead of installing
python3-debian into this machine. Nothing else is fetched. ``python scripts/reference_collections.py VENV``; a
second call finds them and stops.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ANSIBLE = "ansible==12.3.0"  # the community package of ansible-core 2.19
WANTED = ("ansible_collections/ansible/posix/", "ansible_collections/community/general/")
STAMP = ".from-" + ANSIBLE.replace("==", "-")
PYTHON_DEBIAN = "python-debian==1.1.1"
PYLIB_STAMP = ".from-" + PYTHON_DEBIAN.replace("==", "-")


def _unpack(spec: str, glob: str, root: Path, wanted: tuple[str, ...], stamp: str) -> None:
    """The members of the wheel of ``spec`` under ``wanted`` (tests left out) unpacked into ``root``."""
    with tempfile.TemporaryDirectory(prefix="reference-wheel-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps"]
        subprocess.run([*cmd, "--only-binary", ":all:", "-d", tmp, spec], check=True, timeout=900)
        wheel = next(Path(tmp).glob(glob))
        shutil.rmtree(root, ignore_errors=True)
        with zipfile.ZipFile(wheel) as zf:
            members = [n for n in zf.namelist() if n.startswith(wanted) and "/tests/" not in n]
            zf.extractall(root, members)
    (root / stamp).write_text(spec + "\n")


def main(venv: Path) -> int:
    root = venv / "collections"
    if not (root / STAMP).is_file():
        _unpack(ANSIBLE, "ansible-*.whl", root, WANTED, STAMP)
        names = ", ".join(w.split("/")[1] + "." + w.split("/")[2] for w in WANTED)
        print(f"setup: {names} from {ANSIBLE} in {root}")
    pylib = venv / "reference-pylib"
    if not (pylib / PYLIB_STAMP).is_file():
        _unpack(PYTHON_DEBIAN, "python_debian-*.whl", pylib, ("debian/",), PYLIB_STAMP)
        print(f"setup: debian (for ansible-core's deb822_repository on the lab hosts) from {PYTHON_DEBIAN} in {pylib}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
