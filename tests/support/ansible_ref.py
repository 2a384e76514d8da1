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
