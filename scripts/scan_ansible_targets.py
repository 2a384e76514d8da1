"""How many of ansible-core's own integration-target playbooks and task files provision loads.

    python scripts/scan_ansible_targets.py ANSIBLE_CHECKOUT [--top 25] [--json]

Reads every playbook and task file under ``test/integration/targets`` of an ansible/ansible checkout (the
files of ``tasks/`` and ``handlers/`` folders and the playbooks beside the targets' scripts; not ``vars``,
``defaults``, ``meta``, ``files``, ``templates`` nor collections' plugin docs) and loads each one as provision
would: a list of plays through ``load_playbook``, a list of tasks through ``parse_tasks``. Prints how many load,
and the most frequent reasons the others are refused, so the next missing feature is the one that unblocks
most files. A file that is not a playbook or task list (a vars file under another name) is counted apart.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provision.errors import ProvisionError  # noqa: E402
from provision.playbook import load_playbook, load_yaml, parse_tasks  # noqa: E402

SKIP_DIRS = {"vars", "defaults", "meta", "files", "templates", "collections", "ansible_collections", "library"}


def candidates(checkout: Path) -> list[Path]:
    targets = checkout / "test" / "integration" / "targets"
    out = []
    for path in sorted(targets.rglob("*.y*ml")):
        parts = set(path.relative_to(targets).parts[1:-1])
        if path.suffix in (".yml", ".yaml") and not parts & SKIP_DIRS:
            out.append(path)
    return out


def reason_of(message: str) -> str:
    """A refusal message reduced to its kind: the module or feature it names, without file and values."""
    text = re.sub(r"^.*?:\d+: ", "", message.splitlines()[0])
    m = re.search(r"unknown (?:task key or )?module '([^']+)'", text)
    if m:
        return f"module {m.group(1)}"
    m = re.search(r"^([\w./]+(?:\(\))?(?:/\w+)*):? (?:is|are) not supported", text)
    if m:
        return f"{m.group(1)} not supported"
    m = re.search(r"'(ansible_\w+)'", text)
    if m and "fact" in text:
        return f"fact {m.group(1)}"
    return re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", text)[:90]


def scan(checkout: Path) -> dict[str, Any]:
    loaded, refused, other = 0, collections.Counter[str](), 0
    files = candidates(checkout)
    for path in files:
        try:
            data = load_yaml(path)
        except ProvisionError as exc:
            refused[reason_of(str(exc))] += 1
            continue
        if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
            other += 1
            continue
        try:
            if data and any("hosts" in x or "import_playbook" in x for x in data):
                load_playbook(path)
            else:
                parse_tasks(data, str(path), set())
            loaded += 1
        except ProvisionError as exc:
            refused[reason_of(str(exc))] += 1
        except Exception as exc:  # a crash is a bug to report, not a refusal: count it by its type
            refused[f"CRASH {type(exc).__name__}"] += 1
    considered = len(files) - other
    return {
        "files": len(files),
        "not_playbooks_or_tasks": other,
        "considered": considered,
        "loaded": loaded,
        "loaded_share": round(loaded / considered, 3) if considered else 0.0,
        "refused": dict(refused.most_common()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = scan(args.checkout)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    share = f"{100 * result['loaded_share']:.0f}%"
    print(f"{result['loaded']} of {result['considered']} playbook/task files load ({share});"
          f" {result['not_playbooks_or_tasks']} other YAML files skipped")  # fmt: skip
    for reason, count in list(result["refused"].items())[: args.top]:
        print(f"{count:5d}  {reason}")


if __name__ == "__main__":
    main()
