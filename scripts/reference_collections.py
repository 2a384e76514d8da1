"""Installs the Ansible collections the differential tests' reference needs (``ansible.posix``,
``community.general``: ``sysctl``, ``mount``, ``authorized_key``, ``pam_limits``, ``modprobe``) into
``VENV/collections`` (the harness's ``ANSIBLE_COLLECTIONS_PATH``).

They come from the pinned ``ansible`` package on PyPI (its wheel bundles the collections built for
ansible-core 2.19), downloaded with pip, without its dependencies, and only those two collections are unpacked.
Nothing else is fetched. ``python scripts/reference_collections.py VENV``; a second call finds them and stops.
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


def main(venv: Path) -> int:
    root = venv / "collections"
    if (root / STAMP).is_file():
        return 0
    with tempfile.TemporaryDirectory(prefix="ansible-wheel-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps"]
        subprocess.run([*cmd, "--only-binary", ":all:", "-d", tmp, ANSIBLE], check=True, timeout=900)
        wheel = next(Path(tmp).glob("ansible-*.whl"))
        shutil.rmtree(root, ignore_errors=True)
        with zipfile.ZipFile(wheel) as zf:
            members = [n for n in zf.namelist() if n.startswith(WANTED) and "/tests/" not in n]
            zf.extractall(root, members)
    (root / STAMP).write_text(ANSIBLE + "\n")
    print(f"setup: {', '.join(w.split('/')[1] + '.' + w.split('/')[2] for w in WANTED)} from {ANSIBLE} in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
