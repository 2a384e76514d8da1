"""Engine behaviour through ansible_connection: local (fast; the lab tests cover SSH)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli

INVENTORY = "all:\n  vars:\n    ansible_connection: local\n  hosts:\n    one:\n    two:\n"


def test_run_once_registers_its_result_on_every_host(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - command: echo {{ inventory_hostname }}\n      run_once: true\n      register: first\n"
        "    - assert:\n        that: first.stdout == 'one'\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml"), "--json"])
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert list(doc["plays"][0]["tasks"][0]["hosts"]) == ["one"]  # ran once
    assert set(doc["plays"][0]["tasks"][1]["hosts"]) == {"one", "two"}  # both see its result


def test_loop_until_and_failed_when(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    counter = tmp_path / "n"
    (tmp_path / "pb.yml").write_text(
        "- hosts: one\n  gather_facts: false\n  tasks:\n"
        f"    - shell: echo x >> {counter}; wc -l < {counter}\n"
        "      register: r\n      until: r.stdout | int >= 3\n      retries: 5\n      delay: 0\n"
        "    - command: echo {{ item }}\n      loop: [a, b]\n      register: looped\n"
        "    - assert:\n        that: looped.results | map(attribute='stdout') | list == ['a', 'b']\n"
        "    - command: 'false'\n      failed_when: false\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")])
    assert result.code == 0, result.out + result.err
    assert counter.read_text().count("x") == 3


def test_what_a_task_returns_is_applied_before_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """set_fact in a loop: each item sees the facts of the items before it; a registered value wins over a fact
    of the same name; a notify name is rendered with the task's own registered value."""
    monkeypatch.setenv("HOME", str(tmp_path))  # the pending-handler file goes to ~/.provision
    marker = tmp_path / "handled"
    (tmp_path / "inv.yml").write_text(INVENTORY)
    (tmp_path / "pb.yml").write_text(
        "- hosts: one\n  gather_facts: false\n  tasks:\n"
        '    - set_fact:\n        seen: "{{ (seen | default([])) + [item] }}"\n      loop: [a, b, c]\n'
        "    - assert:\n        that: seen == ['a', 'b', 'c']\n"
        "    - set_fact:\n        r: from-a-fact\n      register: r\n"
        "    - assert:\n        that: r is mapping\n"
        "    - command: echo hi\n      register: said\n      changed_when: true\n"
        '      notify: "say {{ said.stdout }}"\n'
        f"  handlers:\n    - name: say hi\n      command: touch {marker}\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")])
    assert result.code == 0, result.out + result.err
    assert marker.exists()


def test_profile_lists_each_task_with_its_time_slowest_first(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: quick one\n      debug: {msg: hi}\n"
        "    - name: slow one\n      command: sleep 0.3\n      changed_when: false\n"
        "    - name: notifying\n      command: 'true'\n      notify: the handler\n"
        "  handlers:\n    - name: the handler\n      debug: {msg: handled}\n"
    )
    argv = ["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")]
    assert "TASKS RECAP" not in run_cli(argv).out  # only when asked for
    result = run_cli([*argv, "--profile"])
    assert result.code == 0, result.err
    recap = result.out.split("TASKS RECAP", 1)[1].split("finished in", 1)[0]
    rows = [m.groups() for m in re.finditer(r"(?m)^(.*?) -{3,} +([0-9.]+)s$", recap)]
    titles = [title for title, _ in rows]
    assert sorted(titles) == sorted(
        ["TASK [quick one]", "TASK [slow one]", "TASK [notifying]", "RUNNING HANDLER [the handler]"]
    )
    seconds = [float(secs) for _, secs in rows]
    assert seconds == sorted(seconds, reverse=True)
    assert dict(zip(titles, seconds, strict=True))["TASK [slow one]"] >= 0.3  # it slept that long at least
    result = run_cli([*argv, "--profile", "--json"])  # the JSON document has each task's duration too
    tasks = json.loads(result.out)["plays"][0]["tasks"]
    durations = {t["task"]["name"]: t["task"]["duration"] for t in tasks}
    assert set(durations) == {"quick one", "slow one", "notifying", "the handler"} and durations["slow one"] >= 0.3
    assert "TASKS RECAP" in result.err


RELATIVE = """\
- hosts: all
  gather_facts: false
  tasks:
    - file: {path: rel-dir, state: directory}
    - copy: {content: "x\\n", dest: rel-dir/copied}
    - lineinfile: {path: rel-lines, line: one, create: true}
    - command: touch rel-touched
    - stat: {path: rel-touched}
      register: seen
    - copy: {content: "{{ seen.stat.exists }}\\n", dest: rel-seen}
"""


def test_relative_paths_of_a_local_connection_start_in_the_playbook_s_directory_as_in_ansible(tmp_path: Path) -> None:
    """Differential (ansible-core as the reference): over a local connection every module takes a relative
    path from the playbook's directory, as ansible-playbook does (provision's scripts took it from HOME: `file`
    made its directory there, while `copy` and `command` used the process's cwd). Each tool runs its own
    playbook directory, from a cwd elsewhere, under a HOME of its own."""
    made: dict[str, set[str]] = {}
    seen: dict[str, str] = {}
    for tool in ("ansible", "provision"):
        play_dir, cwd, home = tmp_path / tool / "play", tmp_path / tool / "cwd", tmp_path / tool / "home"
        for folder in (play_dir, cwd, home):
            folder.mkdir(parents=True)
        (play_dir / "pb.yml").write_text(RELATIVE)
        env = {**os.environ, "HOME": str(home), "ANSIBLE_LOCAL_TEMP": str(tmp_path / tool / "tmp"),
               "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_RETRY_FILES_ENABLED": "False"}  # fmt: skip
        if tool == "ansible":
            argv = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", "localhost,", "-c", "local"]
        else:
            (tmp_path / tool / "inv.yml").write_text("all:\n  hosts:\n    localhost: {ansible_connection: local}\n")
            argv = [sys.executable, "-m", "provision", "run", "-i", str(tmp_path / tool / "inv.yml")]
        proc = subprocess.run([*argv, str(play_dir / "pb.yml")], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        made[tool] = {str(p.relative_to(play_dir)) for p in play_dir.rglob("*")} - {"pb.yml"}
        strays = [str(p) for folder in (cwd, home) for p in folder.glob("rel-*")]
        assert strays == [], (tool, strays)
        seen[tool] = (play_dir / "rel-seen").read_text()
    assert made["provision"] == made["ansible"] == {"rel-dir", "rel-dir/copied", "rel-lines", "rel-touched", "rel-seen"}
    # `stat` found what `command` made (`"{{ ... }}\n"` is the expression's value, True: no newline, in both)
    assert seen["provision"] == seen["ansible"] == "True"


def test_an_unsupported_task_in_a_dynamic_include_is_a_warning_and_fails_only_a_host_that_gets_there(
    tmp_path: Path,
) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    (tmp_path / "bsd.yml").write_text("- pkgng: {name: nginx}\n")
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - include_tasks: bsd.yml\n      when: inventory_hostname == 'two'\n"
        "    - command: 'false'\n      ignore_errors: \"{{ inventory_hostname == 'one' }}\"\n"
        "    - debug: {msg: 'one goes on'}\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")])
    assert result.code == 2, result.out + result.err
    warning = f"[WARNING]: {tmp_path}/bsd.yml:1: unknown module 'pkgng'"
    assert result.out.count(warning) == 1 and result.out.index(warning) < result.out.index("PLAY"), result.out
    assert re.search(r"fatal: \[two\]: FAILED! => .*bsd\.yml:1: unknown module 'pkgng'", result.out), result.out
    assert re.search(r"one\s+: ok=2 .*failed=0 .*ignored=1", result.out), result.out
    assert re.search(r"two\s+: .*failed=1", result.out), result.out
