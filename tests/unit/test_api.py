"""provision.api, provision.events and provision.fabric without the lab: loading, options, events (the CLI's
output is built from them), the Fabric hosts → inventory mapping, and the layering (no click below the CLI)."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from fabric import Config, Connection

from provision import api
from provision.events import EventStream, Message, PlayStarted, Progress, RunFinished, TaskFinished, TaskStarted
from provision.fabric import fleet_for
from provision.report import Reporter
from provision.results import HostStats, RunSummary, Status, TaskResult

LOCAL = "all:\n  hosts:\n    here:\n      ansible_connection: local\n    there:\n      ansible_connection: local\n"


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(LOCAL)
    return path


def test_load_checks_the_limit_and_needs_an_inventory(inv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert api.load(inv).hosts == ["here", "there"]
    assert api.load([str(inv)], limit="there").hosts == ["there"]
    with pytest.raises(api.InventoryError):
        api.load(inv, limit="nowhere")
    monkeypatch.delenv("PROVISION_INVENTORY", raising=False)
    with pytest.raises(api.UsageError, match="no inventory given"):
        api.load([])
    monkeypatch.setenv("PROVISION_INVENTORY", str(inv))
    assert api.load().hosts == ["here", "there"]


@pytest.mark.parametrize(
    ("options", "message"),
    [({"forks": 0}, "forks"), ({"timeout": float("nan")}, "timeout"), ({"connect_timeout": float("inf")}, "connect")],
)
def test_bad_options_are_usage_errors(inv: Path, options: dict[str, float], message: str) -> None:
    with pytest.raises(api.UsageError, match=message) as info:
        api.run_module("command", "true", inv, **options)  # type: ignore[arg-type]
    assert info.value.exit_code == 3


def test_run_module_on_local_hosts_gives_results_events_and_the_limit(inv: Path, tmp_path: Path) -> None:
    events: list[api.Event] = []
    fleet = api.load(inv, limit="there", extra_vars={"word": "hello"})
    result = api.run_module("command", "echo {{ word }}", fleet, on_event=events.append)
    assert result.ok and [r.host for r in result.results] == ["there"]
    assert result.results[0].data["stdout"] == "hello"
    assert [type(e).__name__ for e in events] == ["PlayStarted", "TaskStarted", "TaskFinished", "RunFinished"]
    both = api.run_module("command", "false", fleet, limit="all")
    assert both.exit_code == 2 and both.failed_hosts == ["here", "there"] and both.reason == "failed hosts: here, there"


def test_plan_playbook_validates_without_running_and_selects_tags(inv: Path, tmp_path: Path) -> None:
    pb = tmp_path / "pb.yml"
    marker = tmp_path / "ran"
    pb.write_text(
        "- hosts: here\n  gather_facts: false\n  tasks:\n"
        f"    - {{name: one, file: {{path: {marker}, state: touch}}, tags: [a]}}\n"
        "    - {name: two, debug: {msg: hi}, tags: [b]}\n"
    )
    planned = api.plan_playbook(pb, inv, tags="b")
    assert [t.name for t in planned.tasks(planned.plays[0])] == ["two"]
    assert planned.hosts(planned.plays[0]) == ["here"] and not marker.exists()
    assert planned.run().ok and not marker.exists()  # tag b only
    assert api.run_playbook(pb, inv, tags=["a"]).changed == 1 and marker.exists()
    with pytest.raises(api.PlaybookError):
        api.plan_playbook(tmp_path / "missing.yml", inv)


def test_the_reporter_prints_the_recap_on_the_run_finished_event() -> None:
    """The front ends (the CLI, Fabric) only parse and print: the recap is the reporter's answer to the run's
    last event, once; a query's quiet run (``recap=False``) prints none."""
    summary = RunSummary(stats={"h1": HostStats(ok=2, changed=1)})
    out, quiet = io.StringIO(), io.StringIO()
    loud, silent = Reporter(stream=out), Reporter(stream=quiet, recap=False)
    stream = EventStream(loud.handle, silent.handle)
    stream.play_start("p", ["h1"])
    assert "PLAY RECAP" not in out.getvalue() and not loud.recapped
    stream.emit(RunFinished(summary))
    assert out.getvalue().count("PLAY RECAP") == 1 and "h1" in out.getvalue().split("PLAY RECAP")[1]
    assert "ok=2" in out.getvalue() and "changed=1" in out.getvalue() and loud.recapped
    assert "PLAY RECAP" not in quiet.getvalue() and not silent.recapped


def test_reporter_output_is_the_same_from_events() -> None:
    """The CLI's human output and --json are a listener of the event stream: same text, same document."""
    result = TaskResult("h1", "t", Status.CHANGED, "done", data={"x": 1})
    direct, evented = io.StringIO(), io.StringIO()
    a = Reporter(stream=direct, verbosity=1)
    a.play_start("p", ["h1"])
    a.task_start("t")
    a.progress("h1", "50%")
    a.task_result(result)
    a.line("note")
    b = Reporter(stream=evented, verbosity=1)
    stream = EventStream(b.handle)
    stream.play_start("p", ["h1"])
    stream.task_start("t")
    stream.progress("h1", "50%")
    stream.task_result(result)
    stream.line("note")
    assert direct.getvalue() == evented.getvalue() and "changed: [h1]" in evented.getvalue()
    summary = api.RunSummary()
    summary.stat("h1").count(result)
    assert json.dumps(a.json_document(summary)) == json.dumps(b.json_document(summary))


def test_event_stream_fans_out_in_order_and_masks_progress() -> None:
    from provision.commands import MASKER

    MASKER.add("stream-secret-77")
    seen: list[object] = []
    stream = EventStream(seen.append, None, lambda e: seen.append(("second", e)))
    stream.play_start("p", ["a"])
    stream.progress("a", "token stream-secret-77 used")
    assert seen[0] == PlayStarted("p", ("a",)) and seen[1] == ("second", PlayStarted("p", ("a",)))
    progress = seen[2]
    assert isinstance(progress, Progress) and "stream-secret-77" not in progress.message
    stream.task_start("t", handler=True)
    stream.task_result(TaskResult("a", "t", Status.OK))
    stream.line("x")
    assert isinstance(seen[4], TaskStarted) and seen[4].handler
    assert isinstance(seen[6], TaskFinished) and seen[6].host == "a" and seen[8] == Message("x")


def test_pd_rollout_checks_the_layout_first(tmp_path: Path) -> None:
    """The rollout verb (its engine: provision.pd.rollout, tested in test_pd_rollout_plan.py and on the lab)."""
    bad = tmp_path / "pd.yml"
    bad.write_text("all:\n  children:\n    prefill:\n      hosts:\n        p1: {ansible_connection: local}\n")
    with pytest.raises(api.InputError, match="the PD deployment is not valid"):
        api.pd_rollout(bad)


def test_the_api_and_the_fabric_tasks_do_not_load_click() -> None:
    code = "import sys, provision.api, provision.fabric; print(sorted(m for m in sys.modules if m == 'click'))"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------------ Fabric
def connection(config: Config, host: str = "gpu1") -> Connection:
    return Connection(host, config=config)


def test_fabric_hosts_become_an_inventory_with_roles_and_key(tmp_path: Path) -> None:
    config = Config(overrides={"connect_kwargs": {"key_filename": ["/keys/id"], "timeout": 7}})
    config.set_runtime_ssh_path(str(tmp_path / "ssh_config"))
    fleet, opts = fleet_for(connection(config), ["gpu1", "ops@gpu2:2200", "gpu3"], tmp_path)
    inventory = fleet.inventory
    assert inventory.group_members("prefill") == ["gpu1"] and inventory.group_members("router") == ["gpu1"]
    assert inventory.group_members("decode") == ["gpu2", "gpu3"]
    gpu2 = inventory.hosts["gpu2"].vars
    assert (gpu2["ansible_host"], gpu2["ansible_user"], gpu2["ansible_port"]) == ("gpu2", "ops", 2200)
    assert gpu2["ansible_ssh_private_key_file"] == "/keys/id" and "ansible_user" not in inventory.hosts["gpu1"].vars
    assert opts == {"ssh_config": str(tmp_path / "ssh_config"), "connect_timeout": 7.0}
    assert stat.S_IMODE((tmp_path / "fabric-hosts.yml").stat().st_mode) == 0o600


def test_fabric_config_names_roles_or_an_inventory(tmp_path: Path, inv: Path) -> None:
    config = Config(overrides={"provision": {"prefill": ["b"], "decode": ["a"], "extra_vars": {"x": 1}}})
    fleet, _ = fleet_for(connection(config, "a"), ["a", "b"], tmp_path)
    assert fleet.inventory.group_members("prefill") == ["b"] and fleet.extra_vars == {"x": 1}
    wrong = Config(overrides={"provision": {"prefill": ["zzz"]}})
    with pytest.raises(api.UsageError, match="zzz"):
        fleet_for(connection(wrong, "a"), ["a"], tmp_path / "w")
    own = Config(overrides={"provision": {"inventory": str(inv)}})
    fleet, _ = fleet_for(connection(own, "here"), ["here"], tmp_path)
    assert fleet.hosts == ["here"] and fleet.limit == "here"


def test_fabric_refuses_a_key_passphrase(tmp_path: Path) -> None:
    config = Config(overrides={"connect_kwargs": {"passphrase": "pass-secret-91"}})
    with pytest.raises(api.UsageError, match="ssh-agent") as info:
        fleet_for(connection(config), ["gpu1"], tmp_path)
    assert "pass-secret-91" not in str(info.value)


def test_every_public_name_resolves_and_the_pd_verbs_load_on_first_use() -> None:
    """``api.__all__``, the names imported on first use and the type checker's imports are three lists of the
    same names: each public name resolves to its module's object, and a playbook run's import of the API loads
    none of the PD, bench, export or model modules."""
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    lazy = set(api._LAZY)
    assert lazy <= set(api.__all__), lazy - set(api.__all__)
    for name, module in api._LAZY.items():
        assert getattr(api, name) is getattr(sys.modules[f"provision.api.{module}"], name), name
    probe = (
        "import json, sys, provision.api; print(json.dumps(sorted(m for m in sys.modules if 'provision.api.' in m)))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    first_use = {"provision.api.bench", "provision.api.export", "provision.api.model", "provision.api.pd"}
    assert not first_use & set(json.loads(loaded.stdout)), loaded.stdout
