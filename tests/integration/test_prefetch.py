"""Batched state checks (executor.prefetch) against real sshd hosts: a converged play of probe-able tasks costs
a small constant number of round trips per host, whatever its length, and every result (ok/changed/failed,
handlers, register, changed_when, --check, --diff, a failure at its own task) is the same with batching on and
off (``RunOptions.batch_probes``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from provision.executor import Executor, RunOptions
from provision.inventory import Inventory
from provision.playbook import load_playbook
from provision.results import Status, TaskResult
from provision.transport import ConnectOptions
from tests.support.cli import Collect

N_FILES = 12  # probe-able tasks in the converged segment

PLAY = """\
- hosts: all
  gather_facts: false
  vars:
    base: "{base}"
  tasks:
    - file: {{path: "{{{{ base }}}}", state: directory, mode: "0755"}}
    - file: {{path: "{{{{ base }}}}/etc", state: directory, mode: "0700"}}
{files}
    - copy: {{content: "port = {{{{ port | default(30000) }}}}\\n", dest: "{{{{ base }}}}/etc/app.conf", mode: "0644"}}
      notify: restart app
    - template: {{src: t.j2, dest: "{{{{ base }}}}/motd"}}
    - lineinfile: {{path: "{{{{ base }}}}/etc/extra.conf", line: "debug = false", create: true}}
      register: edited
    - debug: {{msg: "between"}}
    - command: {{cmd: "touch {{{{ base }}}}/marker", creates: "{{{{ base }}}}/marker"}}
      register: marker
      changed_when: "marker.rc is defined and marker.rc == 0 and 'Did not run' not in (marker.msg | default(''))"
    - file: {{path: "{{{{ base }}}}/gone", state: absent}}
    - file: {{path: "{{{{ base }}}}/{{{{ 'broken' if inventory_hostname == 'lab1' else 'etc/app.conf' }}}}",
              state: file}}
      ignore_errors: true
    - copy: {{content: "{{{{ edited.failed }}}} {{{{ marker.rc }}}}\\n", dest: "{{{{ base }}}}/seen"}}
    - shell: "test -d {{{{ base }}}}/etc"
      changed_when: false
  handlers:
    - name: restart app
      command: "touch {{{{ base }}}}/restarted"
"""


def _play(tmp: Path, base: str) -> Path:
    copy = '    - copy: {{content: "file {i} {{{{ inventory_hostname }}}}\\n", dest: "{{{{ base }}}}/f{i}",'
    copy += ' mode: "0600"}}'
    files = "\n".join(copy.format(i=i) for i in range(N_FILES))
    (tmp / "t.j2").write_text("welcome to {{ inventory_hostname }}\n")
    path = tmp / f"{base}.yml"
    path.write_text(PLAY.format(base=base, files=files))
    return path


def _apply(inventory: Inventory, playbook: Path, batch: bool, **opts: Any) -> tuple[Executor, list[TaskResult]]:
    sink = Collect()
    options = RunOptions(forks=10, connect=ConnectOptions(), batch_probes=batch, **opts)
    executor = Executor(inventory, options, sink, str(playbook.parent))
    try:
        executor.run(load_playbook(playbook))
    finally:
        executor.close()
    return executor, sink.results


def _shape(results: list[TaskResult], base: str) -> list[tuple[Any, ...]]:
    """What must not depend on batching: each result's host, task, status, message, data and diff (the base
    directory's name, durations and `delta` aside)."""
    out = []
    for r in results:
        data = {k: v for k, v in r.data.items() if k not in ("delta",)}
        text = re.sub(re.escape(base), "BASE", repr((r.msg, sorted(data.items()), r.diff)))
        out.append((r.host, r.task, r.status, r.ignored, text))
    return sorted(out, key=repr)


@pytest.fixture
def inventory(lab, lab_env, tmp_path: Path) -> Inventory:  # type: ignore[no-untyped-def]
    return Inventory.load([str(lab.write_inventory(tmp_path / "inv.yml"))])


def _clean(lab, *names: str) -> None:  # type: ignore[no-untyped-def]
    for i in range(len(lab.hosts)):
        lab.run_as(i, ["rm", "-rf", *names])


def test_converged_play_costs_a_constant_number_of_round_trips(lab, inventory: Inventory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _clean(lab, "pf-rt")
    playbook = _play(tmp_path, "pf-rt")
    _apply(inventory, playbook, True)
    batched, results = _apply(inventory, playbook, True)
    assert not [(r.host, r.task) for r in results if r.changed]
    plain, _ = _apply(inventory, playbook, False)
    on, off = batched.commands_run(), plain.commands_run()
    reads = N_FILES + 8  # the tasks up to the `seen` copy that read their state (not debug)
    # off: the run lock (the pending handlers' read goes with it), one read per task (`seen` too), the shell
    assert set(off.values()) == {1 + reads + 2}, off
    # on: the run lock (and the pending handlers), ONE batch for every read up to `seen` (lab1's failing `file`
    # task included), then `seen` (it reads what the tasks before it registered: a segment of its own), the shell
    assert set(on.values()) == {4}, on
    assert batched.prefetch.batches == 1 and batched.prefetch.hits == len(lab.hosts) * reads
    # serial batches: each batch reads ahead for its own hosts
    playbook.write_text(playbook.read_text().replace("  gather_facts: false\n", "  gather_facts: false\n  serial: 2\n"))
    serial, results = _apply(inventory, playbook, True)
    assert not [(r.host, r.task) for r in results if r.changed]
    assert set(serial.commands_run().values()) == {4} and serial.prefetch.batches == len(lab.hosts) // 2


@pytest.mark.parametrize("mode", ["run", "check", "diff"])
def test_results_are_the_same_with_and_without_batching(lab, inventory: Inventory, tmp_path: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    """The same three runs with batching on and off (in two directories): the first converges the hosts (it
    changes everything), the second finds them converged, the third finds one file changed by hand; the
    second and third run in check mode, or with --diff, by ``mode``."""
    opts = {"check": mode == "check", "diff": mode != "run"}
    runs: dict[bool, list[list[tuple[Any, ...]]]] = {}
    for batch in (True, False):
        base = f"pf-{mode}-{'on' if batch else 'off'}"
        _clean(lab, base)
        playbook = _play(tmp_path, base)
        shapes = []
        for step in range(3):
            if step == 2:
                lab.run_as(0, ["sh", "-c", f"echo tampered > {base}/f3"])
            _, results = _apply(inventory, playbook, batch, **(opts if step else {}))
            shapes.append(_shape(results, base))
        runs[batch] = shapes
        assert lab.run_as(0, ["cat", f"{base}/seen"]).stdout == "False 0\n"  # what the tasks before it registered
        tampered = lab.run_as(0, ["cat", f"{base}/f3"]).stdout
        assert tampered == ("tampered\n" if mode == "check" else "file 3 lab0\n")
    assert runs[True] == runs[False]
    first, second, third = runs[True]
    assert {(s[0], s[1]) for s in first if s[2] is Status.CHANGED} >= {(h.name, "restart app") for h in lab.hosts}
    assert [(s[0], s[1]) for s in second if s[2] is Status.CHANGED] == []
    assert [(s[0], s[1]) for s in third if s[2] is Status.CHANGED] == [("lab0", "copy")]  # f3, no handler
    if mode != "run":
        assert any("tampered" in s[4] for s in third)  # the diff of f3
    for shapes in (first, second, third):
        failed = [(s[0], s[2], s[3]) for s in shapes if s[2] is Status.FAILED]
        assert failed == [("lab1", Status.FAILED, True)], failed  # lab1's file task, ignored, at its own task


def test_batching_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from provision.executor.prefetch import enabled

    monkeypatch.setenv("PROVISION_BATCH_PROBES", "0")
    assert not enabled(True)
    monkeypatch.delenv("PROVISION_BATCH_PROBES")
    assert enabled(True) and not enabled(False)
    assert os.environ.get("PROVISION_BATCH_PROBES") is None
