"""Batched state checks (executor.prefetch) through ``ansible_connection: local`` (fast; the lab test covers SSH):
which tasks a segment takes, and that a change on one host drops what was read ahead for every host."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from provision.executor import Executor, RunOptions
from provision.executor.prefetch import probeable, segment
from provision.inventory import Inventory
from provision.playbook import load_playbook
from provision.results import Status
from tests.support.cli import Collect


def _executor(tmp: Path, play: str, batch: bool, sink: Collect) -> Executor:
    """An executor for two local hosts, ``one`` and ``two``, and ``play`` written to ``tmp/pb.yml``."""
    (tmp / "inv.yml").write_text(
        f"all:\n  vars:\n    ansible_connection: local\n    base: {tmp}\n  hosts:\n    one:\n    two:\n"
    )
    (tmp / "pb.yml").write_text(play)
    return Executor(Inventory.load([str(tmp / "inv.yml")]), RunOptions(batch_probes=batch), sink, str(tmp))


def _run(tmp: Path, play: str, batch: bool) -> tuple[Executor, list[tuple[str, str, Status]]]:
    sink = Collect()
    executor = _executor(tmp, play, batch, sink)
    try:
        executor.run(load_playbook(tmp / "pb.yml"))
    finally:
        executor.close()
    return executor, [(r.host, r.task, r.status) for r in sink.results]


PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - file: {path: "{{ base }}/{{ inventory_hostname }}", state: directory}
    - copy: {content: "a\\n", dest: "{{ base }}/{{ inventory_hostname }}/a"}
    - debug: {msg: between}
    - copy: {content: "b\\n", dest: "{{ base }}/{{ inventory_hostname }}/b"}
      register: b
    - copy: {content: "{{ b.failed }}\\n", dest: "{{ base }}/{{ inventory_hostname }}/c"}
    - command: {cmd: "touch {{ base }}/{{ inventory_hostname }}/d", creates: "{{ base }}/{{ inventory_hostname }}/d"}
"""


def test_segments_end_where_a_task_reads_what_the_segment_set(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAY)
    tasks = load_playbook(tmp_path / "pb.yml")[0].tasks
    assert [probeable(t) for t in tasks] == [True, True, False, True, True, True]
    assert segment(tasks, 0, set(), lambda t: True) == 4  # `c` reads `b`, registered inside the segment
    assert segment(tasks, 4, set(), lambda t: True) == 6
    assert segment(tasks, 0, {2}, lambda t: True) == 2  # handlers flush after the second task


def test_a_change_drops_every_host_s_answers_and_results_match(tmp_path: Path) -> None:
    first_on, first = _run(tmp_path, PLAY, True)  # converges: the first change drops what was read ahead
    assert first_on.prefetch.batches == 2 and first_on.prefetch.hits <= 4  # at most each segment's first reads
    assert {s for _, _, s in first if s is not Status.OK} == {Status.CHANGED}
    converged, results = _run(tmp_path, PLAY, True)
    # the first task connects (a read ahead never opens a connection); then [copy a, debug, copy b] and
    # [copy c, command]: every other read of both hosts is answered from the two batches
    assert converged.prefetch.batches == 2 and converged.prefetch.hits == 2 * 4
    assert all(s is Status.OK for _, _, s in results)
    (tmp_path / "two" / "b").write_text("changed by hand\n")
    _, on = _run(tmp_path, PLAY, True)
    (tmp_path / "two" / "b").write_text("changed by hand\n")
    _, off = _run(tmp_path, PLAY, False)
    assert sorted(on) == sorted(off)
    assert [(h, t) for h, t, s in on if s is Status.CHANGED] == [("two", "copy")]


HANDLED = "\n".join(PLAY.splitlines()[:5]) + "\n      notify: h\n  handlers:\n    - {name: h, debug: {msg: h}}\n"


def test_a_host_reads_ahead_right_behind_its_first_contact_not_after_the_slowest(tmp_path: Path) -> None:
    """The first contact (the pending handlers' read: where a fresh run connects) and the read-ahead go host by
    host: host one's batch is read while host two's contact is still held (until one has read ahead, or 10 s).
    Waiting for every host's contact first (the slowest handshake of the batch) fails this."""
    _run(tmp_path, HANDLED, True)  # converge
    executor = _executor(tmp_path, HANDLED, True, Collect())
    one_read = threading.Event()
    read, contact = executor.prefetch._read, executor._pending._connection
    order: list[str] = []

    def reading(host: str, *args: Any) -> None:
        read(host, *args)
        order.append(f"read {host}")
        if host == "one":
            one_read.set()

    def contacting(host: str) -> Any:
        if host == "two":
            order.append("two waits" if one_read.wait(10) else "two timed out")
        return contact(host)

    executor.prefetch._read = reading  # type: ignore[method-assign]
    executor._pending._connection = contacting
    try:
        executor.run(load_playbook(tmp_path / "pb.yml"))
    finally:
        executor.close()
    assert order[:2] == ["read one", "two waits"] and "read two" in order
    assert executor.prefetch.batches == 1 and executor.prefetch.hits == 2 * 2
