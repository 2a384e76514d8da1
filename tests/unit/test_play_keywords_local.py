"""Play keywords that act at run time, through ansible_connection: local (and one host nothing listens for)."""

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

INVENTORY = (
    "all:\n  hosts:\n    one: {ansible_connection: local}\n"
    "    gone: {ansible_host: 127.0.0.1, ansible_port: 1, ansible_user: nobody}\n"
)
PLAYBOOK = (
    "- hosts: all\n  gather_facts: false\n  tasks:\n"
    "    - name: reach\n      ping:\n      ignore_unreachable: true\n"
    "    - name: still in the play\n      debug: {msg: here}\n"
)


def _ansible_playbook(tmp_path: Path) -> str:
    """ansible-playbook's output for tmp_path's pb.yml and inv.yml."""
    env = {**os.environ, "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_RETRY_FILES_ENABLED": "False",
           "ANSIBLE_HOST_KEY_CHECKING": "False"}  # fmt: skip
    command = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(tmp_path / "inv.yml"),
               str(tmp_path / "pb.yml")]  # fmt: skip
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False).stdout


def _ansible_recap(tmp_path: Path) -> dict[str, dict[str, int]]:
    stdout = _ansible_playbook(tmp_path)
    recap = stdout[stdout.index("PLAY RECAP") :]
    out = {}
    for host, counts in re.findall(r"^(\w+)\s*:\s*(.*)$", recap, re.MULTILINE):
        out[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return out


def test_ignore_unreachable_counts_and_keeps_the_host_as_ansible(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml"), "--json"])
    stats = json.loads(result.out)["stats"]
    reference = _ansible_recap(tmp_path)
    for host in ("one", "gone"):
        for key in ("ok", "unreachable", "ignored", "failed"):
            assert stats[host][key] == reference[host][key], (host, key, stats, reference)
    assert stats["gone"]["ignored"] == 1 and stats["gone"]["unreachable"] == 0 and result.code == 0


def test_vars_prompt_without_default_or_extra_var_exits_5_before_any_host(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    (tmp_path / "pb.yml").write_text(
        "- hosts: one\n  gather_facts: false\n  vars_prompt:\n    - {name: color, prompt: which color}\n"
        "  tasks:\n    - copy: {dest: '" + str(tmp_path / "out") + "', content: '{{ color }}'}\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")])
    assert result.code == 5 and "vars_prompt 'color' has no default and provision never prompts" in result.err
    assert not (tmp_path / "out").exists()
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml"), "-e", "color=blue"])
    assert result.code == 0, result.err
    assert (tmp_path / "out").read_text() == "blue"


@pytest.mark.parametrize(
    ("order", "first"),
    [("inventory", "b"), ("sorted", "a"), ("reverse_sorted", "c"), ("\"{{ o | default('sorted') }}\"", "a")],
)
def test_order_is_the_order_hosts_run_in(tmp_path: Path, order: str, first: str) -> None:
    (tmp_path / "inv.yml").write_text("all:\n  vars: {ansible_connection: local}\n  hosts:\n    b:\n    c:\n    a:\n")
    (tmp_path / "pb.yml").write_text(
        f"- hosts: all\n  gather_facts: false\n  order: {order}\n  tasks:\n"
        "    - command: echo {{ inventory_hostname }}\n      run_once: true\n      register: first\n"
        "    - debug: {msg: \"{{ first.stdout }},{{ ansible_play_hosts_all | join(',') }}\"}\n      run_once: true\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml"), "--json"])
    doc = json.loads(result.out)
    shown = next(iter(doc["plays"][0]["tasks"][1]["hosts"].values()))
    assert shown["msg"].split(",", 1) == [first, "b,c,a"]  # runs in that order; the play's host list is kept


def test_become_may_be_a_template_rendered_per_item(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    one: {ansible_connection: local}\n")
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - command: echo {{ item }}\n      become: '{{ item }}'\n      loop: [false, 'no']\n      register: r\n"
        '    - block:\n        - command: echo in block\n      become: "{{ 1 == 2 }}"\n'
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml"), "--json"])
    assert result.code == 0, result.out + result.err
    from provision.playbook import load_playbook

    tasks = load_playbook(tmp_path / "pb.yml")[0].tasks
    assert tasks[0].become == "{{ item }}" and tasks[1].become == "{{ 1 == 2 }}"


def test_become_user_may_be_a_template_rendered_per_item(tmp_path: Path) -> None:
    """sudo runs as the rendered user (the template text reached sudo before); needs sudo (scripts/test)."""
    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    one: {ansible_connection: local, runner: nobody}\n")
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  become: true\n  become_user: '{{ runner }}'\n  tasks:\n"
        "    - command: id -un\n      register: play_level\n"
        "    - command: id -un\n      become_user: '{{ item }}'\n      loop: [root, '{{ runner }}']\n"
        "      register: r\n"
        "    - assert:\n        that:\n          - play_level.stdout == 'nobody'\n"
        "          - r.results | map(attribute='stdout') | list == ['root', 'nobody']\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml"), "--json"])
    assert result.code == 0, result.out + result.err


def test_retries_and_delay_may_be_templates(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    one: {ansible_connection: local, n: 2}\n")
    counter = tmp_path / "n"
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - shell: echo x >> {counter}; exit 1\n"
        "      register: r\n      until: r.rc == 0\n      retries: '{{ n + 1 }}'\n      delay: '{{ 0 }}'\n"
        "      ignore_errors: true\n"
        "    - assert: {that: r.attempts == 3}\n"
        "    - command: 'true'\n      retries: '{{ \"many\" }}'\n      until: true\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")])
    assert counter.read_text().count("x") == 4  # the first run and 3 retries
    assert result.code == 2 and "retries must be a whole number >= 0, got 'many'" in result.out + result.err


def test_no_log_may_be_a_template_rendered_per_host(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(
        "all:\n  vars: {ansible_connection: local}\n  hosts:\n    quiet: {hide: true}\n    loud: {hide: false}\n"
    )
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - debug: {msg: 'said by {{ inventory_hostname }}'}\n      no_log: '{{ hide }}'\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml"), "--json"])
    assert result.code == 0, result.err
    hosts = json.loads(result.out)["plays"][0]["tasks"][0]["hosts"]
    assert hosts["loud"]["msg"] == "said by loud"
    assert "said by quiet" not in result.out and "hidden due to no_log" in hosts["quiet"]["msg"]


def _ansible_plays(tmp_path: Path) -> list[str]:
    return re.findall(r"^PLAY \[(.*?)\]", _ansible_playbook(tmp_path), re.MULTILINE)


def test_a_batch_that_all_fails_stops_the_run_with_one_banner_as_ansible(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    plays = "".join(f"- name: p{n}\n  hosts: gone\n  gather_facts: false\n  tasks:\n    - ping:\n" for n in (1, 2, 3))
    (tmp_path / "pb.yml").write_text(plays)
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")])
    assert result.code == 4
    shown = re.findall(r"^PLAY \[(.*?)\]", result.out, re.MULTILINE)
    assert shown == _ansible_plays(tmp_path) == ["p1"]
    assert result.out.count("NO MORE HOSTS LEFT") == 1


def test_a_play_of_hosts_that_failed_before_runs_nothing_says_nothing_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    (tmp_path / "pb.yml").write_text(
        "- {name: p1, hosts: all, gather_facts: false, tasks: [{ping: {}}]}\n"
        "- {name: p2, hosts: gone, gather_facts: false, tasks: [{ping: {}}]}\n"
        "- {name: p3, hosts: all, gather_facts: false, tasks: [{debug: {msg: on}}]}\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")])
    shown = re.findall(r"^PLAY \[(.*?)\]", result.out, re.MULTILINE)
    assert shown == _ansible_plays(tmp_path) == ["p1", "p2", "p3"]
    assert "NO MORE HOSTS LEFT" not in result.out
    assert "ok: [one]" in result.out.split("PLAY [p3]")[1]
