from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.harness import chunk_of
from tests.support.lab import Lab

# the session's full SGLang venv on lab host 0 (tests/support/stack.py)
from tests.support.stack import sglang_stack  # noqa: F401

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


# markers and xdist groups (scripts/test runs the suite with pytest-xdist, ``--dist loadgroup``)

# Files whose tests start real SGLang servers (~10 GB a CPU pair) or use the session's SGLang venv, and the
# files that write PD units into the machine's /etc/systemd/system (the unit names are the PD's process names,
# the same in every lab): ONE xdist group, so that one worker runs them one at a time, never two at once.
SGLANG_FILES = frozenset(
    {"test_wheel.py", "test_sglang_install.py", "test_pd_compat.py", "test_pd_e2e.py", "test_pd_rollout.py",
     "test_pd_systemd_sglang.py", "test_pd_export_slurm.py"}
)  # fmt: skip
MACHINE_UNIT_FILES = frozenset({"test_pd_systemd.py", "test_lab.py"})
# The compat harness runs its cases in chunks (tests/compat/harness.py chunk_of), each chunk on its own lab and
# thread pool in the module fixture of the worker that runs its tests: one xdist group per chunk. Chunk 0 holds
# the sudo cases (they change the machine: packages, accounts, units); the unit tests that install packages
# into this machine's dpkg/rpm database join it (apt and dnf hold one lock per machine).
PACKAGE_DB_FILES = frozenset({"test_mod_packages.py", "test_mod_dnf.py"})
MACHINE_GROUP = "sglang-and-units"
COMPAT_GROUP = "compat-0"  # the compat chunk of the sudo cases (tests/compat/harness.py chunk_of)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker gets a HOME of its own whose entries are links to the real home's, except
    ``.provision``: a local-connection run holds ``~/.provision/run-<host>.lock`` (inventory names like ``one``
    are in many test files), and two workers' runs of the same name would find the host busy."""
    # the group marker is xdist's: registered here too, so a run without the plugin (-p no:xdist) still collects
    config.addinivalue_line("markers", "xdist_group(name): tests that share one pytest-xdist worker")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    real = os.environ.get("HOME")
    if not worker or not real or os.environ.get("PROVISION_TEST_REAL_HOME") == real:
        return
    home = Path(tempfile.mkdtemp(prefix=f"provision-test-home-{worker}-"))
    for entry in Path(real).iterdir():
        if entry.name != ".provision":
            (home / entry.name).symlink_to(entry)
    os.environ["PROVISION_TEST_REAL_HOME"] = real
    os.environ["HOME"] = str(home)
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))  # the links go, never their targets


def _uses_ansible_reference(item: pytest.Item) -> bool:
    runner = getattr(getattr(item, "module", None), "ansible_results", None)
    return str(getattr(runner, "__module__", "")).rpartition(".")[2] == "ansible_ref"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers from where a test lives and what it uses (``sglang``, ``compat``, ``lab``: ``scripts/test --fast``
    deselects them), and each test's xdist group: its file's (module fixtures and in-order files keep one
    worker), except the two cross-file groups above."""
    for item in items:
        path = Path(str(item.path))
        group = path.relative_to(Path(__file__).parent).as_posix()
        if path.name in SGLANG_FILES or "sglang_stack" in getattr(item, "fixturenames", ()):
            # every test that can start SGLang servers shares ONE worker: never two server suites at once
            item.add_marker(pytest.mark.sglang)
            group = MACHINE_GROUP
        elif path.name in MACHINE_UNIT_FILES and path.parent.name == "integration":
            group = MACHINE_GROUP
        if path.parent.name == "compat":
            item.add_marker(pytest.mark.compat)
            params = getattr(item, "callspec", None)
            name = params.params.get("name") if params is not None else None
            group = f"compat-{chunk_of(name)}" if isinstance(name, str) else COMPAT_GROUP
        elif _uses_ansible_reference(item):
            item.add_marker(
                pytest.mark.compat
            )  # a differential test against ansible-core (tests/support/ansible_ref.py)
        elif path.name in PACKAGE_DB_FILES:
            group = COMPAT_GROUP
        if {"lab", "own_lab", "lab_env", "sglang_stack"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.lab)
        item.add_marker(pytest.mark.xdist_group(group))


# lab fixtures


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A started lab of $PROVISION_LAB_HOSTS (default 4) sshd hosts, shared by the whole session."""
    n = int(os.environ.get("PROVISION_LAB_HOSTS", "4"))
    with Lab(n, tmp_path_factory.mktemp("lab")) as started:
        yield started
