"""The shipped defaults sit under everything (issue 10), `provision inventory --host` names each var's source,
and `provision run NAME` finds a shipped playbook when no local file has that name."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision import data
from provision.pd.spec import DEFAULTS as PD_DEFAULTS
from tests.support.cli import run_cli

SHIPPED = data.defaults()


@pytest.fixture
def here(tmp_path: Path) -> Iterator[Path]:
    """A working directory outside the checkout, with nothing in it."""
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def two_roles(directory: Path, all_vars: dict[str, Any] | None = None) -> Path:
    """A new user's inventory: two local hosts in prefill and decode, no router, no group_vars."""
    doc = {
        "all": {
            "vars": {"ansible_connection": "local", **(all_vars or {})},
            "children": {  # two machines (ansible_connection local runs both here; the PD plan sees two hosts)
                "prefill": {"hosts": {"p1": {"ansible_host": "10.0.0.1"}}},
                "decode": {"hosts": {"d1": {"ansible_host": "10.0.0.2"}}},
            },
        }
    }
    return write(directory / "gpu.yml", yaml.safe_dump(doc))


def host_view(inv: Path, host: str, *args: str) -> tuple[dict[str, Any], dict[str, str]]:
    result = run_cli(["inventory", "-i", str(inv), "--host", host, *args])
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    return doc, doc.pop("_sources")


def test_the_defaults_are_the_old_group_vars_and_agree_with_the_pd_plan() -> None:
    assert SHIPPED["venv_path"] == "~/.provision/venv" and SHIPPED["nixl_backends"] == ["UCX"]
    assert SHIPPED["sglang_device"] == "cuda" and SHIPPED["hf_token"] == ""
    for name, value in PD_DEFAULTS.items():
        if name in SHIPPED:
            assert SHIPPED[name] == value, name
    assert data.defaults() is not data.defaults()  # a fresh copy each time: nobody changes the shipped one
    # the example group_vars/all.yml beside the repo's inventories sets nothing any more
    assert yaml.safe_load((Path(__file__).parents[2] / "inventory" / "group_vars" / "all.yml").read_text()) is None


@pytest.mark.parametrize(
    ("layer", "source"),
    [
        ("inventory_all", "inventory {inv} (group all)"),
        ("group_vars_all", "group_vars {dir}/group_vars/all.yml"),
        ("group_vars_group", "group_vars {dir}/group_vars/prefill.yml"),
        ("inventory_host", "inventory {inv} (host p1)"),
        ("host_vars", "host_vars {dir}/host_vars/p1.yml"),
        ("extra", "-e"),
    ],
)
def test_every_inventory_layer_beats_a_default_and_is_named(here: Path, layer: str, source: str) -> None:
    inv_dir = here / "fleet"
    inv = two_roles(inv_dir, {"sglang_device": "cpu"} if layer == "inventory_all" else None)
    args: list[str] = []
    if layer == "group_vars_all":
        write(inv_dir / "group_vars" / "all.yml", "sglang_device: cpu\n")
    elif layer == "group_vars_group":
        write(inv_dir / "group_vars" / "prefill.yml", "sglang_device: cpu\n")
    elif layer == "inventory_host":
        doc = yaml.safe_load(inv.read_text())
        doc["all"]["children"]["prefill"]["hosts"]["p1"]["sglang_device"] = "cpu"
        inv.write_text(yaml.safe_dump(doc))
    elif layer == "host_vars":
        write(inv_dir / "host_vars" / "p1.yml", "sglang_device: cpu\n")
    elif layer == "extra":
        args = ["-e", "sglang_device=cpu"]
    shown, sources = host_view(inv, "p1", *args)
    assert shown["sglang_device"] == "cpu"
    assert sources["sglang_device"] == source.format(inv=inv, dir=inv_dir)
    assert shown["venv_path"] == "~/.provision/venv" and sources["venv_path"] == data.DEFAULT_SOURCE
    assert sources["ansible_connection"] == f"inventory {inv} (group all)"


def test_the_inventory_all_vars_are_no_longer_beaten_by_a_copied_defaults_file(here: Path) -> None:
    """The issue's trap: the defaults used to be a group_vars/all.yml, which beats `all: vars:`."""
    inv = two_roles(here, {"sglang_device": "cpu", "venv_path": "/opt/v"})
    shown, sources = host_view(inv, "d1")
    assert (shown["sglang_device"], shown["venv_path"]) == ("cpu", "/opt/v")
    assert sources["venv_path"].startswith("inventory ")


def test_host_view_masks_secrets_from_defaults_and_inventory(here: Path) -> None:
    inv = two_roles(here, {"hf_token": "hf-secret-value-123"})
    result = run_cli(["inventory", "-i", str(inv), "--host", "p1"])
    assert result.code == 0 and "hf-secret-value-123" not in result.out
    assert json.loads(result.out)["hf_token"] == "********"


def play_debug(here: Path, play_vars: dict[str, Any] | None, *args: str, inv_vars: dict[str, Any] | None = None) -> Any:
    """What a task sees of `sglang_device` and `venv_path`, through a real run of a user's playbook."""
    inv = two_roles(here / "inv", inv_vars)
    play: dict[str, Any] = {"hosts": "p1", "gather_facts": False, "tasks": [
        {"name": "show", "debug": {"msg": "{{ sglang_device }} {{ venv_path }} {{ sglang_server_cmd }}"}},
    ]}  # fmt: skip
    if play_vars:
        play["vars"] = play_vars
    pb = write(here / "mine.yml", yaml.safe_dump([play]))
    result = run_cli(["run", str(pb), "-i", str(inv), "--json", *args])
    assert result.code == 0, result.err
    return json.loads(result.out)["plays"][0]["tasks"][0]["hosts"]["p1"]["msg"]


def test_a_users_playbook_sees_the_defaults_rendered(here: Path) -> None:
    venv = "~/.provision/venv"
    assert play_debug(here, None) == f"cuda {venv} {venv}/bin/python -m sglang.launch_server"


def test_play_vars_and_extra_vars_beat_the_defaults(here: Path) -> None:
    assert play_debug(here, {"sglang_device": "cpu", "venv_path": "/p"}).startswith("cpu /p /p/bin/python")
    assert play_debug(here, {"venv_path": "/p"}, "-e", "venv_path=/e").startswith("cuda /e /e/bin/python")
    # an inventory value is rendered into the default's template
    assert play_debug(here, None, inv_vars={"venv_path": "/i"}).startswith("cuda /i /i/bin/python")


def test_the_plan_check_sees_the_defaults_and_still_finds_undefined_names(here: Path) -> None:
    inv = two_roles(here)
    ok = write(
        here / "ok.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: {msg: '{{ nixl_backends }}'}\n"
    )
    assert run_cli(["run", str(ok), "-i", str(inv), "--list-tasks"]).code == 0
    bad = write(here / "bad.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: {msg: '{{ nope }}'}\n")
    result = run_cli(["run", str(bad), "-i", str(inv), "--list-tasks"])
    assert result.code == 5 and "undefined variable 'nope'" in result.err


def test_a_ring_through_a_default_is_caught_before_any_host(here: Path) -> None:
    inv = two_roles(here, {"venv_path": "{{ sglang_server_cmd }}"})
    result = run_cli(["run", "smoke.yml", "-i", str(inv), "--list-tasks"])
    assert result.code == 5 and "refers to itself" in result.err, result.err


# ------------------------------------------------------------------------------------- shipped by name
@pytest.mark.parametrize("name", ["site.yml", "install.yml", "smoke.yml", "pd-up.yml", "rollout.yml"])
def test_shipped_playbooks_validate_against_an_outside_two_role_inventory(here: Path, name: str) -> None:
    inv = two_roles(here / "elsewhere", {"sglang_device": "cpu"})
    result = run_cli(["run", name, "-i", str(inv), "--list-tasks", "--list-hosts"])
    assert result.code == 0, result.err
    assert (
        result.out.splitlines()[0]
        == f"playbook: the shipped {name} ({data.playbooks_dir() / name}): no file {name} here"
    )


def test_the_router_defaults_to_the_first_prefill_host(here: Path) -> None:
    inv = two_roles(here)
    result = run_cli(["inventory", "-i", str(inv), "--graph"])
    assert "@router:\n  |  |--p1" in result.out, result.out
    assert "router" in run_cli(["inventory", "-i", str(inv), "--list"]).out
    listed = run_cli(["run", "pd-down.yml", "-i", str(inv), "--list-hosts"])
    assert listed.code == 0, listed.err
    assert "play: PD — stop the router" in listed.out
    router_play = listed.out.split("play: PD — stop the router")[1].split("play:")[0]
    assert "hosts (1):\n    p1" in router_play
    # a router group of its own is left alone, even an empty one
    write(here / "r.yml", "all:\n  children:\n    prefill: {hosts: {p1: {ansible_connection: local}}}\n    router:\n")
    assert "p1" not in run_cli(["inventory", "-i", str(here / "r.yml"), "--graph"]).out.split("@router:")[1]


def test_a_local_file_of_the_same_name_wins_and_says_so(here: Path) -> None:
    inv = two_roles(here)
    write(
        here / "site.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: mine\n      debug: {msg: hi}\n"
    )
    result = run_cli(["run", "site.yml", "-i", str(inv), "--list-tasks"])
    assert result.code == 0, result.err
    assert result.out.splitlines()[0] == "playbook: ./site.yml, a local file (not the shipped site.yml)"
    assert "    mine" in result.out and "pd-up" not in result.out
    # with --json the line goes to stderr: stdout stays one JSON document
    result = run_cli(["run", "smoke.yml", "-i", str(inv), "--json", "--list-tasks"])
    assert "playbook: the shipped smoke.yml" in result.err and "playbook:" not in result.out


def test_a_path_runs_as_before_and_a_missing_name_is_an_input_error(here: Path) -> None:
    inv = two_roles(here)
    path = str(data.playbooks_dir() / "smoke.yml")
    result = run_cli(["run", path, "-i", str(inv), "--list-tasks"])
    assert result.code == 0 and "playbook:" not in result.out
    missing = run_cli(["run", "nosuch.yml", "-i", str(inv)])
    assert missing.code == 5 and "nosuch.yml" in missing.err


def test_provision_playbooks_lists_each_with_a_description() -> None:
    result = run_cli(["playbooks"])
    assert result.code == 0, result.err
    lines = dict(line.split(None, 1) for line in result.out.splitlines() if not line.startswith("(in "))
    shipped = sorted(p.name for p in data.playbooks_dir().glob("*.yml"))
    assert sorted(lines) == shipped
    assert lines["site.yml"].startswith("Everything, in order")
    assert all(lines[name].strip() for name in shipped)


def test_site_yml_reports_a_missing_model_path_once_before_any_host(here: Path) -> None:
    """A GPU inventory (the default sglang_device) without model_path: one line, both hosts, what to add; no
    host is contacted (10.255.255.x would hang for the connect timeout)."""
    write(here / "gpu.yml", "all:\n  children:\n    prefill: {hosts: {p1: {ansible_host: 10.255.255.1}}}\n"
          "    decode: {hosts: {d1: {ansible_host: 10.255.255.2}}}\n")  # fmt: skip
    for argv in (["run", "site.yml"], ["run", "pd-up.yml", "--list-tasks"], ["pd", "up"]):
        result = run_cli([*argv, "-i", str(here / "gpu.yml"), "--connect-timeout", "30"])
        assert result.code == 5, result.err
        problems = result.err.split("the PD deployment is not valid:\n", 1)[1].splitlines()
        assert problems == [
            "  - model_path is not set for p1, d1: add `model_path: /path/to/model` (a model directory on the "
            "hosts, or a hub id) to the inventory's vars (or -e model_path=...), or `sglang_device: cpu` for CPU mode"
        ]
        assert "PLAY" not in result.out
    write(here / "gpu.yml", "all:\n  vars: {model_path: Qwen/Qwen3-8B}\n  children:\n    prefill: {hosts: {p1: {}}}\n"
          "    decode: {hosts: {d1: {}}}\n")  # fmt: skip
    assert run_cli(["run", "site.yml", "-i", str(here / "gpu.yml"), "--list-tasks"]).code == 0
    # pd-down.yml (no pd_validate) still runs against an invalid layout: stopping must always be possible
    assert run_cli(["run", "pd-down.yml", "-i", str(here / "gpu.yml"), "--list-tasks", "-e", "model_path="]).code == 0


@pytest.mark.parametrize("layout", data.LAYOUTS)
def test_init_writes_a_starter_inventory_that_site_yml_accepts(here: Path, layout: str) -> None:
    result = run_cli(["init", "new", "--layout", layout])
    assert result.code == 0, result.err
    written = here / "new" / "inventory.yml"
    assert f"wrote {Path('new') / 'inventory.yml'} ({layout})" in result.out
    text = written.read_text()
    example = (data.DATA_DIR / "inventories" / f"{layout}.yml").read_text()
    assert yaml.safe_load(text) == yaml.safe_load(example)  # the vars block is all comments
    for name in [*SHIPPED, *PD_DEFAULTS]:
        assert f"\n#   {name}: " in text, name
    # its example commands name the file it wrote, not the example's own; site.yml is not followed by pd up
    commands = [line for line in text.splitlines() if line.startswith("#   provision ")]
    assert commands and all(f"-i {Path('new') / 'inventory.yml'}" in line for line in commands), commands
    assert "inventory/" not in "".join(commands)
    assert not any("site.yml" in a and "pd up" in b for a, b in itertools.pairwise(commands)), commands
    listed = run_cli(["run", "site.yml", "-i", str(written), "--list-tasks"])
    assert listed.code == 0, listed.err
    again = run_cli(["init", "new", "--layout", layout])
    assert again.code == 5 and "exists (--force replaces it)" in again.err
    assert run_cli(["init", "new", "--layout", layout, "--force"]).code == 0


def test_the_checkout_examples_are_the_starter_layouts() -> None:
    repo = Path(__file__).parents[2]
    for layout in data.LAYOUTS:
        link = repo / "inventory" / f"{layout}.yml"
        assert link.is_symlink() and link.resolve() == (data.DATA_DIR / "inventories" / f"{layout}.yml").resolve()
