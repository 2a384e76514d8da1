"""CPU mode's forked children (``remote/cpu_compat/provision_cpu_compat.py``, :func:`fork_children`): with the
shipped files on ``PYTHONPATH`` and ``PROVISION_CPU_COMPAT=1``, ``set_start_method("spawn")`` (SGLang's) sets
``fork``, says so once, and the children still run; without ``PROVISION_CPU_COMPAT``, or with
``PROVISION_CPU_SPAWN=1``, nothing changes. The installed SGLang's side (it still asks for ``spawn``; a server's
children are forked) is in ``tests/integration/test_pd_compat.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from provision.sglang import cpu_compat

PROBE = """
import json, multiprocessing as mp, os

def child(q):
    q.put(os.getppid())

if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    q = mp.Queue()
    p = mp.Process(target=child, args=(q,))
    p.start()
    parent = q.get(timeout=30)
    p.join(30)
    explicit = mp.get_context("spawn").get_start_method()
    print(json.dumps({"method": mp.get_start_method(), "exit": p.exitcode, "parent_ok": parent == os.getpid(),
                      "explicit": explicit}))
"""


def probe(tmp_path: object, compat: str | None, spawn: str | None = None) -> tuple[dict[str, object], str]:
    script = os.path.join(str(tmp_path), "probe.py")
    with open(script, "w") as fh:
        fh.write(PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PROVISION_CPU_COMPAT")}
    env["PYTHONPATH"] = str(cpu_compat.SHIPPED_DIR)
    if compat is not None:
        env["PROVISION_CPU_COMPAT"] = compat
    if spawn is not None:
        env["PROVISION_CPU_SPAWN"] = spawn
    out = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    report: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return report, out.stderr


def test_spawn_becomes_fork_with_the_compat_on(tmp_path: object) -> None:
    report, err = probe(tmp_path, "1")
    assert report == {"method": "fork", "exit": 0, "parent_ok": True, "explicit": "spawn"}
    assert err.count("the server's children are forked, not spawned") == 1


def test_spawn_stays_spawn_without_it_or_when_asked(tmp_path: object) -> None:
    for compat, spawn in ((None, None), ("0", None), ("1", "1")):
        report, err = probe(tmp_path, compat, spawn)
        assert report["method"] == "spawn" and report["exit"] == 0 and report["parent_ok"], report
        assert "forked" not in err
