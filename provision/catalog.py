"""Every task module provision offers, in one explicit list: module name -> the file that defines it.

The generic, Ansible-compatible modules live in :mod:`provision.modules`; the GPU domain's modules live in
their packages (:mod:`provision.stack`, :mod:`provision.nixl`, :mod:`provision.sglang`, :mod:`provision.pd`,
:mod:`provision.model`).
Each module class registers itself with :func:`provision.modules.base.register` when its file is imported.
:func:`lookup` imports only the file of the module asked for, so a run loads the modules its playbook uses and
no other (a play of ``file``/``copy`` never imports the GPU domain); :func:`load_all` imports every file
(listing them all). ``tests/unit/test_imports.py`` checks that the list and the registrations agree.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path

from .errors import did_you_mean
from .modules.base import REGISTRY, Module

MODULES: dict[str, str] = {
    "assert": "provision.modules.builtin",
    "debug": "provision.modules.builtin",
    "fail": "provision.modules.builtin",
    "set_fact": "provision.modules.builtin",
    "meta": "provision.modules.builtin",
    "include_tasks": "provision.modules.builtin",
    "include_role": "provision.modules.builtin",
    "include_vars": "provision.modules.varsfiles",
    "add_host": "provision.modules.runtime_inventory",
    "group_by": "provision.modules.runtime_inventory",
    "command": "provision.modules.commands_mod",
    "shell": "provision.modules.commands_mod",
    "async_status": "provision.modules.async_mod",
    "copy": "provision.modules.files",
    "file": "provision.modules.files",
    "template": "provision.modules.files",
    "uri": "provision.modules.net",
    "wait_for": "provision.modules.net",
    "pip": "provision.modules.pip_mod",
    "git": "provision.modules.git_mod",
    "apt": "provision.modules.packages",
    "apt_key": "provision.modules.apt_sources",
    "apt_repository": "provision.modules.apt_sources",
    "deb822_repository": "provision.modules.apt_sources",
    "package": "provision.modules.packages",
    "dnf": "provision.modules.packages",
    "find": "provision.modules.info",
    "ping": "provision.modules.info",
    "wait_for_connection": "provision.modules.info",
    "reboot": "provision.modules.reboot",
    "raw": "provision.modules.info",
    "slurp": "provision.modules.info",
    "stat": "provision.modules.info",
    "getent": "provision.modules.info",
    "lineinfile": "provision.modules.lines",
    "blockinfile": "provision.modules.lines",
    "replace": "provision.modules.lines",
    "fetch": "provision.modules.transfer",
    "get_url": "provision.modules.transfer",
    "unarchive": "provision.modules.transfer",
    "script": "provision.modules.transfer",
    "setup": "provision.modules.system",
    "tempfile": "provision.modules.system",
    "pause": "provision.modules.system",
    "service": "provision.modules.system",
    "systemd_service": "provision.modules.system",
    "systemd": "provision.modules.system",
    "group": "provision.modules.accounts",
    "user": "provision.modules.accounts",
    "pam_limits": "provision.modules.sysconf",
    "community.general.pam_limits": "provision.modules.sysconf",
    "modprobe": "provision.modules.sysconf",
    "community.general.modprobe": "provision.modules.sysconf",
    "sysctl": "provision.modules.sysconf",
    "ansible.posix.sysctl": "provision.modules.sysconf",
    "mount": "provision.modules.sysconf",
    "ansible.posix.mount": "provision.modules.sysconf",
    "authorized_key": "provision.modules.sysconf",
    "ansible.posix.authorized_key": "provision.modules.sysconf",
    "known_hosts": "provision.modules.sysconf",
    "cron": "provision.modules.sysconf",
    "hostname": "provision.modules.sysconf",
    "python_check": "provision.stack.host",
    "wheel_sync": "provision.stack.host",
    "nixl_variant": "provision.stack.modules",
    "sglang_release": "provision.stack.modules",
    "venv_stack": "provision.stack.modules",
    "nixl_smoke": "provision.nixl.modules",
    "nixl_transfer": "provision.nixl.modules",
    "sglang_args": "provision.sglang.modules",
    "sglang_cpu_compat": "provision.sglang.modules",
    "sglang_tiny_model": "provision.sglang.modules",
    "model_sync": "provision.model.modules",
    "model_manifest": "provision.model.modules",
    "model_same": "provision.model.modules",
    "process": "provision.pd.process",
    "pd_bench": "provision.pd.bench",
    "pd_metrics": "provision.pd.bench",
    "pd_serving_path": "provision.pd.bench",
    "pd_config": "provision.pd.modules",
    "pd_logs": "provision.pd.modules",
    "pd_status": "provision.pd.modules",
    "pd_validate": "provision.pd.modules",
    "pd_verify": "provision.pd.modules",
    "pd_wait": "provision.pd.modules",
    "pd_router_workers": "provision.pd.modules",
    "pd_start_gate": "provision.pd.modules",
    "pd_rollout_step": "provision.pd.rollout_modules",
}
FILES = tuple(dict.fromkeys(MODULES.values()))
BUILTIN_PREFIX = "ansible.builtin."


def lookup(name: str) -> type[Module] | None:
    """The module class of ``name`` (``copy`` or ``ansible.builtin.copy``), importing its file on first use;
    None for a name provision does not offer."""
    found = REGISTRY.get(name)
    if found is None:
        file = MODULES.get(name.removeprefix(BUILTIN_PREFIX))
        if file is not None:
            importlib.import_module(file)
            found = REGISTRY.get(name)
    return found


def nearest(name: str) -> str:
    """``" (did you mean 'debug'?)"`` for a module name provision does not offer (``ansible.builtin.debgu``
    gets ``ansible.builtin.debug``)."""
    return did_you_mean(name, [*MODULES, *(BUILTIN_PREFIX + m for m in MODULES)])


@functools.cache
def _ansible_names() -> frozenset[str]:
    text = (Path(__file__).parent / "data" / "ansible_modules.txt").read_text()
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


def known_to_ansible(name: str) -> bool:
    """Whether ansible-core resolves ``name`` to a module (``data/ansible_modules.txt``: its builtin modules and
    the short names it routes to collections, ``scripts/ansible_module_names.py``), or it names one in a
    collection (a dotted name): a task of it that may never run is a warning, not a refusal."""
    for prefix in ("ansible.builtin.", "ansible.legacy."):
        name = name.removeprefix(prefix)
    return name in _ansible_names() or "." in name


def load_all() -> None:
    """Import every module file (idempotent)."""
    for file in FILES:
        importlib.import_module(file)


__all__ = ["FILES", "MODULES", "REGISTRY", "load_all", "lookup", "nearest"]
