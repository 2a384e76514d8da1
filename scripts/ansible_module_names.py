#!/usr/bin/env python3
"""Write provision/data/ansible_modules.txt from the installed ansible-core: the short names of its builtin
modules and action plugins, and of those its runtime routes elsewhere (``timezone`` -> community.general.timezone,
``yum`` -> ansible.builtin.dnf).

provision refuses before the run a task naming a module it does not have, unless the task may never run (it has
a ``when``) and the name is one ansible-core resolves: such a task is a warning and fails only a host that runs
it (a role's RedHat branch on Debian hosts). ``--check`` fails when the file is not what this ansible-core gives.
"""

from __future__ import annotations

import sys
from pathlib import Path

import ansible
import yaml

OUT = Path(__file__).resolve().parents[1] / "provision" / "data" / "ansible_modules.txt"


def names() -> list[str]:
    root = Path(ansible.__file__).parent
    builtin = {p.stem for p in (root / "modules").glob("*.py") if not p.stem.startswith("_")}
    routing = yaml.safe_load((root / "config" / "ansible_builtin_runtime.yml").read_text())["plugin_routing"]
    actions = {p.stem for p in (root / "plugins" / "action").glob("*.py") if not p.stem.startswith("_")}
    return sorted(builtin | actions | set(routing.get("modules", {})) | set(routing.get("action", {})))


def main() -> int:
    text = f"# ansible-core {ansible.__version__}: scripts/ansible_module_names.py\n" + "\n".join(names()) + "\n"
    if "--check" in sys.argv:
        current = OUT.read_text() if OUT.exists() else ""
        if current.splitlines()[1:] != text.splitlines()[1:]:
            print(f"{OUT} is stale: run scripts/ansible_module_names.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
