"""ansible-core itself as the reference for one-machine differential tests: run a list of tasks with
``ansible-playbook -c local`` against localhost and get each task's registered result back, in order."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from provision.catalog import lookup
from provision.modules.base import ModuleContext
from provision.transport import LocalConnection

# the result keys whose values are text of the commands (apt-get's output, the message's wording): only that
# they are there is compared
TEXT = {"stdout", "stderr", "stdout_lines", "stderr_lines", "msg", "invocation", "warnings", "diff", "rc"}


def ansible_results(root: Path, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each task runs with ``ignore_errors`` and is registered; a last task writes every result as JSON."""
    play = [{**task, "register": f"r{i}", "ignore_errors": True} for i, task in enumerate(tasks)]
    keys = ", ".join(f"r{i}" for i in range(len(tasks)))
    play.append({"copy": {"content": "{{ [" + keys + "] | to_json }}", "dest": str(root / "results.json")}})
    playbook = root / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": play}]))
    env = {
        **os.environ,
        "ANSIBLE_LOCAL_TEMP": str(root / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
    }
    command = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", "localhost,", "-c", "local", str(playbook)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert (root / "results.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads((root / "results.json").read_text())
    return results


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """What must match between Ansible's result and provision's: the keys, and every value but :data:`TEXT`'s
    (an empty ``msg`` is no key: Ansible leaves it out)."""
    skip = ("invocation", "warnings", "exception")  # exception: ansible-core's own "(traceback unavailable)"
    return {
        k: (v if k not in TEXT else "<text>") for k, v in result.items() if k not in skip and not (k == "msg" and not v)
    }


def provision_result(module: str, raw: dict[str, Any], check: bool) -> dict[str, Any]:
    """One task of ``module`` with the arguments ``raw`` run by provision on this machine, as Ansible's result
    (``changed``, ``failed``, ``msg`` when there is one, the module's keys)."""
    cls = lookup(module)
    assert cls is not None
    args = cls.coerce(cls.validate_static(raw, lambda v: False))
    ctx = ModuleContext(host="h", conn=LocalConnection("h"), variables={}, check=check)
    res = cls().run(ctx, args)
    ours = {**res.data, "changed": res.changed, "failed": res.failed}
    if res.msg:
        ours["msg"] = res.msg
    return ours
