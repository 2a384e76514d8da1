from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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

# Files whose tests start real SGLang servers (~10 GB a CPU pair) or use the session's SGLang venv (one of them,
# test_pd_systemd_sglang.py, writes PD units into the machine's /etc/systemd/system named after the lab's hosts,
# the same in every lab): ONE xdist group, so that one worker runs them one at a time, never two at once. The other
# files with systemd units run in groups of their own, beside it: test_pd_systemd.py's and test_pd_systemd_group.py's
# unit names hold a token of their run, test_lab.py's one unit only test_lab.py writes, and a lab's systemd host
# starts only its own user's units.
SGLANG_FILES = frozenset(
    {"test_wheel.py", "test_sglang_install.py", "test_pd_compat.py", "test_pd_e2e.py", "test_pd_rollout.py",
     "test_pd_systemd_sglang.py", "test_pd_export_slurm.py"}
)  # fmt: skip
# Of those, the files that start no server (they probe the installed stack: its versions, its sources, one Python
# process importing it, a NIXL agent): a group of their own, beside the server group, with a stack of their own
# (from the warm uv cache: seconds). One such process holds ~1-2 GB, not a PD pair's ~10: the server group's
# chain, CI's longest, is shorter by them (test_pd_compat: ~5 of its ~50 minutes).
SGLANG_PROBE_FILES = frozenset({"test_pd_compat.py"})
PROBE_GROUP = "sglang-probes"
# The compat harness runs its cases in chunks (tests/compat/harness.py chunk_of), each chunk on its own lab and
# thread pool in the module fixture of the worker that runs its tests: one xdist group per chunk. Chunk 0 holds
# the sudo cases (they change the machine: packages, accounts, units); the unit tests that install packages
# into this machine's dpkg/rpm database join it (apt and dnf hold one lock per machine).
PACKAGE_DB_FILES = frozenset({"test_mod_packages.py", "test_mod_apt_args.py", "test_mod_dnf.py"})
MACHINE_GROUP = "sglang-and-units"
COMPAT_GROUP = "compat-0"  # the compat chunk of the sudo cases (tests/compat/harness.py chunk_of)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker gets a HOME of its own whose entries are links to the real home's, except
    ``.provision``: a local-connection run holds ``~/.provision/run-<host>.lock`` (inventory names like ``one``
    are in many test files), and two workers' runs of the same name would find the host busy."""
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


def xdist_group_of(nodeid: str) -> str:
    """The group a test runs in under pytest-xdist, from its node id alone (the controller, which schedules,
    collects nothing): its file's (module fixtures and in-order files keep one worker), except the cross-file
    groups above."""
    path = nodeid.split("::", 1)[0]
    name = path.rpartition("/")[2]
    if name in SGLANG_PROBE_FILES:
        return PROBE_GROUP
    if name in SGLANG_FILES:
        return MACHINE_GROUP
    if path.endswith("compat/test_compat.py"):
        case = nodeid.partition("[")[2].rstrip("]")
        return f"compat-{chunk_of(case)}" if case else COMPAT_GROUP
    if name in PACKAGE_DB_FILES:
        return COMPAT_GROUP
    return path


@pytest.hookimpl(optionalhook=True)  # an xdist hook: `pytest -p no:xdist` runs without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``/``loadscope``: whole groups (:func:`xdist_group_of`) to one worker each. xdist's own
    loadgroup reads an ``@group`` suffix it writes into ``item._nodeid``, which pytest 9 no longer uses as the
    node id: with it, every test was dealt out alone (two SGLang suites at once, the compat chunks run on every
    worker). Returns None (xdist's own scheduler) for the other modes."""
    if config.getvalue("dist") not in ("loadgroup", "loadscope"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group_of(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers from where a test lives and what it uses (``sglang``, ``compat``, ``lab``: ``scripts/test --fast``
    deselects them). A test that uses the session's SGLang stack outside :data:`SGLANG_FILES` is refused: the
    scheduler, which sees only node ids, would run it beside another server suite."""
    for item in items:
        path = Path(str(item.path))
        fixtures = set(getattr(item, "fixturenames", ()))
        if "sglang_stack" in fixtures and path.name not in SGLANG_FILES:
            raise pytest.UsageError(
                f"{item.nodeid} uses sglang_stack: add {path.name} to SGLANG_FILES (tests/conftest.py)"
            )
        if path.name in SGLANG_FILES:
            item.add_marker(pytest.mark.sglang)
        if path.parent.name == "compat" or _uses_ansible_reference(item):
            item.add_marker(pytest.mark.compat)  # the harness, or a differential test against ansible-core
        if {"lab", "own_lab", "lab_env", "sglang_stack"} & fixtures:
            item.add_marker(pytest.mark.lab)
    # the longest groups first (the scheduler deals groups out in the order their first test comes): the SGLang
    # files' one group is the critical path, then the compat chunks; files keep their order inside a group
    first = {MACHINE_GROUP: 0, PROBE_GROUP: 1, **{f"compat-{i}": 1 for i in range(8)}}
    items[:] = sorted(items, key=lambda item: first.get(xdist_group_of(item.nodeid), 2))


# lab fixtures


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A started lab of $PROVISION_LAB_HOSTS (default 4) sshd hosts, shared by the whole session."""
    n = int(os.environ.get("PROVISION_LAB_HOSTS", "4"))
    with Lab(n, tmp_path_factory.mktemp("lab")) as started:
        yield started
