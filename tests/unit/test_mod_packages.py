"""``apt`` and ``package`` against ansible-core's own ``apt``, on this machine (the suite runs as root): the same
steps in the same order on a tiny package from the distribution (``sl``), first under Ansible, then under
provision, each starting with the package absent; the results must match key for key (apt-get's own output text
aside). The package is removed again at the end."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.support.ansible_ref import ansible_results, comparable, provision_result

PKG = "sl"  # 25 kB, no dependency that Debian does not already have; never a package the machine needs


def _steps() -> list[tuple[str, dict[str, Any], bool]]:
    """(module, arguments, check mode) in order."""
    return [
        ("apt", {"name": PKG}, True),  # would install: apt-get --simulate, nothing installed
        ("apt", {"name": PKG, "install_recommends": False}, False),
        ("apt", {"name": PKG}, False),  # converged
        ("apt", {"name": [PKG], "state": "latest"}, False),  # the candidate is installed
        ("package", {"name": PKG, "state": "present"}, False),
        ("package", {"name": PKG}, False),  # no state: the backend's default (present), as Ansible's action does
        ("apt", {"name": PKG, "state": "absent"}, True),
        ("apt", {"name": PKG, "state": "absent", "purge": True}, False),
        ("apt", {"name": PKG, "state": "absent"}, False),  # converged
        ("apt", {"update_cache": True, "cache_valid_time": 10**9}, False),  # fresh enough: not updated
        ("apt", {"name": "provision-no-such-package"}, False),  # no candidate: fails
    ]


def _installed() -> bool:
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", PKG], capture_output=True, text=True)
    return out.stdout.startswith("ii")


def test_apt_and_package_the_same_as_ansible(tmp_path: Path) -> None:
    subprocess.run(["apt-get", "purge", "-y", "-q", PKG], capture_output=True, check=False)
    assert not _installed()
    try:
        tasks = [{module: args, "check_mode": check} for module, args, check in _steps()]
        theirs = ansible_results(tmp_path, tasks)
        assert not _installed()  # Ansible's steps end with the package removed
        for i, ((module, raw, check), ref) in enumerate(zip(_steps(), theirs, strict=True)):
            ours = provision_result(module, raw, check)
            assert comparable(ours) == comparable(ref), (i, module, raw, check)
            if i == 0:
                assert not _installed()  # check mode installed nothing
            if i == 1:
                assert _installed()
            if i == 6:
                assert _installed()  # check mode removed nothing
        assert not _installed()
    finally:
        subprocess.run(["apt-get", "purge", "-y", "-q", PKG], capture_output=True, check=False)
