"""The magic variables come from one place (provision.magic), as an inert layer."""

from __future__ import annotations

from pathlib import Path

from provision import plan, templating
from provision.inventory import Inventory
from provision.magic import HOST_NAMES, NAMES, PLAY_NAMES, PlayMagic, magic_vars, run_magic


def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "hosts.yml"
    path.write_text("all:\n  children:\n    gpu:\n      hosts:\n        a.example.org:\n        b:\n", encoding="utf-8")
    return Inventory.load([str(path)])


def test_host_and_play_layers(tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    host = dict(templating.Vars(magic_vars(inv, "a.example.org")))
    assert set(host) == set(HOST_NAMES)
    assert host["inventory_hostname_short"] == "a" and host["group_names"] == ["gpu"]
    assert sorted(host["groups"]["gpu"]) == ["a.example.org", "b"]
    assert templating.Vars(magic_vars(inv, "localhost"))["group_names"] == []  # the implicit localhost of delegate_to
    assert host["inventory_file"] == str(tmp_path / "hosts.yml") and host["inventory_dir"] == str(tmp_path)
    run = run_magic(
        play_name="p", tags={"b", "a"}, skip_tags=set(), forks=5, limit=None, verbosity=1, sources=inv.sources
    )
    play = PlayMagic({}, True, False, "/pb", ["a.example.org", "b"], ["b"], ["b"], {"os": "{{ 7 * 7 }}"}, run)
    full = dict(templating.Vars(magic_vars(inv, "b", play=play)))
    assert set(full) == set(HOST_NAMES + PLAY_NAMES) <= NAMES
    assert full["ansible_run_tags"] == ["a", "b"] and full["ansible_skip_tags"] == [] and full["ansible_forks"] == 5
    assert full["ansible_version"]["major"] == 2 and full["ansible_inventory_sources"] == [str(tmp_path / "hosts.yml")]
    assert "ansible_limit" not in full  # undefined without --limit, as in Ansible
    assert run_magic(play_name="p", tags=set(), skip_tags=set(), forks=5, limit="b", verbosity=0, sources=[])[
        "ansible_run_tags"
    ] == ["all"]
    # as Ansible: play_hosts is the batch's hosts that have not failed (ansible_play_batch), the play's all in
    # ansible_play_hosts_all
    assert full["ansible_play_hosts"] == ["b"] and full["play_hosts"] == ["b"] == full["ansible_play_batch"]
    assert full["ansible_play_hosts_all"] == ["a.example.org", "b"]
    assert full["ansible_check_mode"] is True and full["playbook_dir"] == "/pb"


def test_the_layer_is_inert(tmp_path: Path) -> None:
    play = PlayMagic({}, False, False, "/pb", [], [], [], {"os": "{{ 7 * 7 }}"}, {})
    variables = templating.Vars({}, magic_vars(inventory(tmp_path), "b", play=play))
    assert variables["ansible_facts"] == {"os": "{{ 7 * 7 }}"}


def test_the_planner_accepts_exactly_these_names() -> None:
    assert plan.MAGIC_VARS is NAMES
