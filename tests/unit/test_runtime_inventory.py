"""add_host / group_by: what they change in the in-memory inventory, and what is refused before the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import InventoryError, PlaybookError
from provision.inventory import Inventory
from provision.plan import check_plan
from provision.playbook import load_playbook


def _inventory(tmp_path: Path) -> Inventory:
    (tmp_path / "inv.yml").write_text(
        "all:\n  vars: {level: all, only_all: 1}\n  hosts:\n    h1: {level: host}\n"
        "  children:\n    web:\n      vars: {level: web, web_var: w}\n      hosts: {h2: {}}\n"
    )
    return Inventory.load([str(tmp_path / "inv.yml")])


def test_add_host_gives_a_new_host_its_groups_vars_and_keeps_its_own_apart(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    assert inv.add_dynamic_host("new", ["web", "fresh"], {"ansible_host": "10.0.0.9"})
    new = inv.hosts["new"]
    assert new.vars["level"] == "web" and new.vars["only_all"] == 1  # the group's over all's
    assert set(new.groups) == {"all", "web", "fresh"} and inv.group_members("fresh") == ["new"]
    assert inv.runtime_vars["new"] == {"ansible_host": "10.0.0.9"} and "ansible_host" not in new.vars
    assert inv.connection_vars("new")["ansible_host"] == "10.0.0.9"
    assert not inv.add_dynamic_host("new", ["web"], {"ansible_host": "10.0.0.9"})  # nothing new: not changed
    assert inv.add_dynamic_host("lonely", [], {})
    assert inv.group_members("ungrouped")[-1] == "lonely"


def test_group_by_joins_a_known_host_without_losing_its_own_values(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    inv.groups["web"].vars["extra"] = "x"
    assert inv.add_dynamic_group("h1", "web", ["all"])
    assert inv.hosts["h1"].vars["level"] == "host" and inv.hosts["h1"].vars["extra"] == "x"
    assert inv.add_dynamic_group("h1", "os-linux", ["labs"])
    assert inv.group_members("labs") == ["h1"] and "os-linux" in inv.groups["labs"].children
    assert not inv.add_dynamic_group("h1", "os-linux", ["labs"])
    assert [h.name for h in inv.select("labs")] == ["h1"]


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("add_host: {groups: g}", "add_host: missing required argument 'name'"),
        ("add_host: {name: n, 9lives: x}", "host variable '9lives' is not a valid variable name"),
        ("group_by: {parents: [a]}", "group_by: missing required argument 'key'"),
        ("group_by: {key: k, colour: red}", "group_by: unknown argument 'colour'"),
    ],
)
def test_add_host_and_group_by_mistakes_are_refused(tmp_path: Path, task: str, message: str) -> None:
    (tmp_path / "pb.yml").write_text(f"- hosts: all\n  tasks:\n    - {task}\n")
    with pytest.raises(PlaybookError, match=message):
        load_playbook(tmp_path / "pb.yml")


def test_add_host_runs_once_and_a_later_play_may_name_a_group_it_makes(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  tasks: [{add_host: {name: n, groups: made}}]\n- hosts: made\n  tasks: [{ping: }]\n"
    )
    plays = load_playbook(tmp_path / "pb.yml")
    assert plays[0].tasks[0].run_once is True
    check_plan(plays, inv, {}, None, None, str(tmp_path))
    (tmp_path / "pb.yml").write_text("- hosts: made\n  tasks: [{ping: }]\n")  # no add_host before: a typo
    with pytest.raises(InventoryError, match="matches no host or group"):
        check_plan(load_playbook(tmp_path / "pb.yml"), inv, {}, None, None, str(tmp_path))


def _tool_recap(tmp_path: Path, tool: str) -> str:
    """Run the refresh playbook under ``tool`` in a copy of its folder; the lines the playbook wrote."""
    import os
    import shutil
    import subprocess
    import sys

    work = tmp_path / tool
    work.mkdir()
    inventory = "all:\n  vars: {ansible_connection: local, ansible_python_interpreter: " + sys.executable + "}\n"
    (work / "inv.yml").write_text(inventory + "  hosts: {one: {}, two: {}}\n")
    (work / "new.yml").write_text(inventory + "  hosts: {two: {}, three: {}}\n")
    out = work / "seen"
    (work / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - add_host: {name: added, groups: extra, ansible_connection: local}\n"
        "    - group_by: {key: 'by_{{ inventory_hostname }}'}\n"
        f"    - command: cp {work / 'new.yml'} {work / 'inv.yml'}\n      run_once: true\n"
        "    - meta: refresh_inventory\n"
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - shell: echo '{{{{ inventory_hostname }}}} {{{{ group_names | join(\",\") }}}}' >> {out}\n"
    )
    if tool == "ansible":
        env = {**os.environ, "ANSIBLE_LOCAL_TEMP": str(work / "tmp"), "ANSIBLE_RETRY_FILES_ENABLED": "False"}
        argv = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", "inv.yml", "pb.yml", "-f", "1"]
    else:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        argv = [sys.executable, "-m", "provision", "run", "pb.yml", "-i", "inv.yml", "-f", "1"]
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return "\n".join(sorted(out.read_text().splitlines()))


def test_refresh_inventory_reads_the_sources_again_and_keeps_the_runs_changes_as_ansible(tmp_path: Path) -> None:
    ours = _tool_recap(tmp_path, "provision")
    assert ours == _tool_recap(tmp_path, "ansible")
    assert "one" not in ours and "three " in ours and "added extra" in ours and "two by_two" in ours
