"""The engine against real sshd hosts (the lab): idempotence, check/diff, tags, limits, retry files,
serial batches, failure budgets, unreachable hosts, host keys, timeouts, hostile values and secrets."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import CliResult, run, write

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "playbooks" / "examples" / "base.yml"


@pytest.fixture
def inv(lab, lab_env, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    return lab.write_inventory(tmp_path / "inv.yml")


def run_json(*argv: str | Path, cwd: Path | None = None) -> tuple[CliResult, dict]:  # type: ignore[type-arg]
    result = run(*argv, "--json", cwd=cwd)
    return result, json.loads(result.out)


def clean_homes(lab, sub: str) -> None:  # type: ignore[no-untyped-def]
    for i in range(len(lab.hosts)):
        lab.run_as(i, ["rm", "-rf", sub])


# -------------------------------------------------------------------------------------------- idempotence
def test_example_playbook_twice_second_run_changes_nothing(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    clean_homes(lab, "provision-example")
    first, doc1 = run_json("run", EXAMPLE, "-i", inv, cwd=tmp_path)
    assert first.code == 0, first.err
    assert all(s["changed"] > 0 and s["failed"] == 0 for s in doc1["stats"].values())
    second, doc2 = run_json("run", EXAMPLE, "-i", inv, cwd=tmp_path)
    assert second.code == 0, second.err
    assert {h: s["changed"] for h, s in doc2["stats"].items()} == {h.name: 0 for h in lab.hosts}
    motd = lab.run_as(0, ["cat", "provision-example/etc/motd"])
    assert "lab0" in motd.stdout and "Groups: lab" in motd.stdout
    mode = lab.run_as(0, ["stat", "-c", "%a", "provision-example/etc/motd"]).stdout.strip()
    assert mode == "600"
    assert lab.run_as(0, ["cat", "provision-example/handler-ran"]).stdout == "motd changed\n"


def test_check_mode_writes_nothing_and_diff_shows_changes(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    clean_homes(lab, "provision-example")
    result, doc = run_json("run", EXAMPLE, "-i", inv, "--check", "--diff", cwd=tmp_path)
    assert result.code == 0, result.err
    assert all(s["changed"] > 0 for s in doc["stats"].values())
    for i in range(len(lab.hosts)):
        assert lab.run_as(i, ["test", "-e", "provision-example"]).returncode != 0
    assert "+managed by provision" in result.err  # unified diff of the copy task
    # converge, then change one file by hand: --diff shows exactly that change
    assert run("run", EXAMPLE, "-i", inv, cwd=tmp_path).code == 0
    lab.run_as(1, ["sh", "-c", "echo tampered > provision-example/README"])
    result, doc = run_json("run", EXAMPLE, "-i", inv, "-C", "-D", "-l", "lab1", cwd=tmp_path)
    assert "-tampered" in result.err and "+managed by provision" in result.err
    assert lab.run_as(1, ["cat", "provision-example/README"]).stdout == "tampered\n"


# --------------------------------------------------------------------------------------- selecting work
TAGGED = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: a
      copy: {content: "a\\n", dest: "~/tag-a"}
      tags: [alpha]
    - name: b
      copy: {content: "b\\n", dest: "~/tag-b"}
      tags: [beta]
    - name: c
      copy: {content: "c\\n", dest: "~/tag-c"}
"""


def _exists(lab, i: int, path: str) -> bool:  # type: ignore[no-untyped-def]
    return lab.run_as(i, ["test", "-e", path]).returncode == 0


def test_tags_skip_tags_and_start_at_task(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pb = write(tmp_path / "tags.yml", TAGGED)
    clean_homes(lab, "tag-a tag-b tag-c")
    for f in ("tag-a", "tag-b", "tag-c"):
        clean_homes(lab, f)
    assert run("run", pb, "-i", inv, "-t", "alpha", "-l", "lab0", cwd=tmp_path).code == 0
    assert [_exists(lab, 0, f) for f in ("tag-a", "tag-b", "tag-c")] == [True, False, False]
    assert run("run", pb, "-i", inv, "--skip-tags", "alpha", "-l", "lab1", cwd=tmp_path).code == 0
    assert [_exists(lab, 1, f) for f in ("tag-a", "tag-b", "tag-c")] == [False, True, True]
    assert run("run", pb, "-i", inv, "--start-at-task", "b", "-l", "lab2", cwd=tmp_path).code == 0
    assert [_exists(lab, 2, f) for f in ("tag-a", "tag-b", "tag-c")] == [False, True, True]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("lab0", {"lab0"}),
        ("lab0,lab2", {"lab0", "lab2"}),
        ("lab*", {"lab0", "lab1", "lab2", "lab3"}),
        ("lab:!lab1", {"lab0", "lab2", "lab3"}),
        ("all:&lab3", {"lab3"}),
    ],
)
def test_limit_patterns(lab, inv: Path, tmp_path: Path, pattern: str, expected: set[str]) -> None:  # type: ignore[no-untyped-def]
    pb = write(tmp_path / "ping.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - command: id -un\n")
    result, doc = run_json("run", pb, "-i", inv, "-l", pattern, cwd=tmp_path)
    assert result.code == 0, result.err
    assert set(doc["stats"]) == expected
    # each host really ran as its own Unix user
    for host, res in doc["plays"][0]["tasks"][0]["hosts"].items():
        assert res["stdout"] == lab.hosts[int(host[3:])].user


# ---------------------------------------------------------------------------------- failures and retries
FAIL_ON = """\
- hosts: all
  gather_facts: false
  serial: {serial}
  max_fail_percentage: {mfp}
  tasks:
    - name: maybe fail
      command: "false"
      when: inventory_hostname in {bad}
    - name: after
      command: "true"
"""


def test_failed_host_stops_others_go_on_and_retry_file_reruns_them(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pb = write(tmp_path / "failing.yml", FAIL_ON.format(serial=0, mfp=100, bad=["lab1"]).replace("  serial: 0\n", ""))
    result, doc = run_json("run", pb, "-i", inv, cwd=tmp_path)
    assert result.code == 2
    assert doc["stats"]["lab1"]["failed"] == 1
    assert doc["stats"]["lab0"]["changed"] == 1 and doc["stats"]["lab0"]["failed"] == 0
    after = doc["plays"][0]["tasks"][1]["hosts"]
    assert "lab1" not in after and {"lab0", "lab2", "lab3"} <= set(after)
    retry = tmp_path / "failing.retry"
    assert retry.read_text() == "lab1\n"
    _again, doc2 = run_json("run", pb, "-i", inv, "-l", f"@{retry}", cwd=tmp_path)
    assert set(doc2["stats"]) == {"lab1"}


def test_serial_batches_and_max_fail_percentage(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pb = write(tmp_path / "serial.yml", FAIL_ON.format(serial=2, mfp=0, bad=["lab0"]))
    result, doc = run_json("run", pb, "-i", inv, cwd=tmp_path)
    # first batch (lab0, lab1) has a failure above 0%: the run stops before the second batch
    assert result.code == 2
    assert "max_fail_percentage" in result.err
    assert doc["stats"].get("lab2", {}).get("ok", 0) == 0 and doc["stats"].get("lab3", {}).get("ok", 0) == 0
    pb_ok = write(tmp_path / "serial_ok.yml", FAIL_ON.format(serial='["1", "50%"]', mfp=50, bad=[]))
    result, doc = run_json("run", pb_ok, "-i", inv, cwd=tmp_path)
    assert result.code == 0
    plays = doc["plays"][0]["tasks"]
    batches = [sorted(t["hosts"]) for t in plays if t["task"]["name"] == "after"]
    assert batches == [["lab0"], ["lab1", "lab2"], ["lab3"]]


def test_unreachable_host_among_reachable_ones(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pb = write(tmp_path / "ping.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - command: 'true'\n")
    lab.stop_host(2)
    try:
        result, doc = run_json("run", pb, "-i", inv, cwd=tmp_path)
    finally:
        lab.start_host(2)
    assert result.code == 4, result.err
    assert doc["stats"]["lab2"]["unreachable"] == 1 and doc["stats"]["lab2"]["failed"] == 0
    assert all(doc["stats"][h]["ok"] == 1 for h in ("lab0", "lab1", "lab3"))
    assert "UNREACHABLE" in result.err


def test_changed_host_key_is_refused(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pb = write(tmp_path / "ping.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - command: 'true'\n")
    lab.rotate_host_key(3)
    try:
        result, doc = run_json("run", pb, "-i", inv, "-l", "lab3", "--accept-new-host-keys", cwd=tmp_path)
    finally:
        lab.restore_host_key(3)
    assert result.code == 4
    assert "HAS CHANGED" in result.err
    assert doc["stats"]["lab3"]["unreachable"] == 1


def test_unknown_host_key_refused_then_accepted_when_asked(lab, lab_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  UserKnownHostsFile {known}\n")
    inv = lab.write_inventory(tmp_path / "inv.yml", names=["lab0"])
    pb = write(tmp_path / "ping.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - command: 'true'\n")
    os.environ["PROVISION_SSH_CONFIG"] = str(config)
    try:
        refused = run("run", pb, "-i", inv, cwd=tmp_path)
        assert refused.code == 4 and "not in known_hosts" in refused.out
        assert known.read_text() == ""
        accepted = run("run", pb, "-i", inv, "--accept-new-host-keys", cwd=tmp_path)
        assert accepted.code == 0, accepted.err
        assert f"[{lab.hosts[0].address}]:{lab.hosts[0].port} ssh-ed25519 " in known.read_text()
        assert run("run", pb, "-i", inv, cwd=tmp_path).code == 0  # now known
    finally:
        os.environ["PROVISION_SSH_CONFIG"] = str(lab.ssh_config_path)


def test_command_timeout_fails_task_and_kills_remote_process(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pb = write(
        tmp_path / "slow.yml",
        "- hosts: lab0\n  gather_facts: false\n  tasks:\n    - shell: sleep 300; echo never\n      timeout: 1\n",
    )
    result, doc = run_json("run", pb, "-i", inv, cwd=tmp_path)
    assert result.code == 2
    res = doc["plays"][0]["tasks"][0]["hosts"]["lab0"]
    assert res["failed"] and "timed out after 1s" in res["msg"]
    left = lab.run_as(0, ["pgrep", "-u", lab.hosts[0].user, "-f", "sleep 300"])
    assert left.stdout.strip() == "", "the timed-out command is still running on the host"


# --------------------------------------------------------------------------------- values and secrets
HOSTILE = "a'b\"c $(touch /tmp/provision-pwned) `touch /tmp/provision-pwned` ; rm -rf ~ \\ \n second line"


def test_hostile_values_reach_files_and_arguments_verbatim(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    Path("/tmp/provision-pwned").unlink(missing_ok=True)
    pb = write(
        tmp_path / "hostile.yml",
        "- hosts: lab0\n  gather_facts: false\n  tasks:\n"
        "    - copy:\n        content: '{{ evil }}'\n        dest: ~/hostile.txt\n"
        "    - command:\n        argv: [printf, '%s', '{{ evil }}']\n      register: out\n"
        "    - assert:\n        that: out.stdout == evil\n"
        '    - file:\n        path: \'~/{{ evil | regex_replace("[/\\n]", "_") }}\'\n        state: touch\n',
    )
    extra = tmp_path / "extra.yml"
    extra.write_text(json.dumps({"evil": HOSTILE}))
    result = run("run", pb, "-i", inv, "-e", f"@{extra}", cwd=tmp_path)
    assert result.code == 0, result.err + result.out
    assert lab.run_as(0, ["cat", "hostile.txt"]).stdout == HOSTILE
    assert not Path("/tmp/provision-pwned").exists()
    assert lab.run_as(0, ["test", "-d", "."]).returncode == 0  # home still there


def test_secrets_never_appear_in_output_json_or_retry_file(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    secret = "hf_s3cr3t_value_42"
    pb = write(
        tmp_path / "secret.yml",
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - command: echo {{ hf_token }}\n"
        "    - debug:\n        msg: 'token is {{ hf_token }}'\n"
        "    - fail:\n        msg: 'failing with {{ hf_token }}'\n      when: inventory_hostname == 'lab1'\n",
    )
    result = run("run", pb, "-i", inv, "-e", f"hf_token={secret}", "--json", "-vv", cwd=tmp_path)
    assert result.code == 2
    everything = result.out + result.err + (tmp_path / "secret.retry").read_text()
    assert secret not in everything
    assert "********" in everything
    log = Path(os.environ.get("PROVISION_DEBUG_LOG", "~/.cache/provision/debug.log")).expanduser()
    if log.exists():
        assert secret not in log.read_text()


# ----------------------------------------------------------------------------------- handlers and misc
HANDLED = """\
- hosts: lab0
  gather_facts: false
  tasks:
    - copy:
        content: "{{ version }}\\n"
        dest: ~/handled.conf
      notify: restart
    - command: "{{ 'false' if break_it | bool else 'true' }}"
  handlers:
    - name: restart
      shell: echo restarted >> ~/handler.log
"""


def test_handler_notified_by_a_failed_run_runs_on_the_next_run(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    clean_homes(lab, "handled.conf")
    clean_homes(lab, "handler.log")
    clean_homes(lab, ".provision/pending_handlers.json")
    pb = write(tmp_path / "handled.yml", HANDLED)
    failed = run("run", pb, "-i", inv, "-e", "version=2", "-e", "break_it=yes", cwd=tmp_path)
    assert failed.code == 2
    assert lab.run_as(0, ["cat", "handler.log"]).returncode != 0  # did not run: the host failed
    ok = run("run", pb, "-i", inv, "-e", "version=2", "-e", "break_it=no", cwd=tmp_path)
    assert ok.code == 0, ok.err
    assert lab.run_as(0, ["cat", "handler.log"]).stdout == "restarted\n"  # the copy was ok, the handler ran
    again = run("run", pb, "-i", inv, "-e", "version=2", "-e", "break_it=no", cwd=tmp_path)
    assert again.code == 0
    assert lab.run_as(0, ["cat", "handler.log"]).stdout == "restarted\n"  # ran once, not again


def test_adhoc_task_and_inventory_commands(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result, doc = run_json("task", "command", "-a", "id -un", "-i", inv, "-l", "lab1:lab2", cwd=tmp_path)
    assert result.code == 0, result.err
    hosts = doc["plays"][0]["tasks"][0]["hosts"]
    assert {h: r["stdout"] for h, r in hosts.items()} == {
        "lab1": lab.hosts[1].user,
        "lab2": lab.hosts[2].user,
    }
    copied = run("task", "copy", "-a", "content=hi dest=~/adhoc.txt mode=0600", "-i", inv, "-l", "lab1")
    assert copied.code == 0
    assert lab.run_as(1, ["cat", "adhoc.txt"]).stdout == "hi"
    listing = run("inventory", "-i", inv, "--graph")
    assert "@lab:" in listing.out and "lab3" in listing.out


def test_one_connection_per_host_for_a_whole_playbook(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from provision.transport import COUNTERS

    before = COUNTERS.connections_opened
    assert run("run", EXAMPLE, "-i", inv, cwd=tmp_path).code == 0
    assert COUNTERS.connections_opened - before == len(lab.hosts)


def test_facts_on_lab_hosts(lab, inv: Path) -> None:  # type: ignore[no-untyped-def]
    result = run("facts", "-i", inv, "-l", "lab0", "--json")
    assert result.code == 0, result.err
    facts = json.loads(result.out)["lab0"]
    assert facts["gpus"] == []
    assert any(p["version"].startswith("3.") for p in facts["pythons"])


def test_proxyjump_through_another_lab_host(lab, lab_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if not shutil.which("ssh"):
        pytest.fail("ssh client missing: scripts/test installs openssh-client")
    jump, target = lab.hosts[0], lab.hosts[1]
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host jumpbox\n  HostName {jump.address}\n  Port {jump.port}\n  User {jump.user}\n"
        f"Host behind\n  HostName {target.address}\n  Port {target.port}\n  User {target.user}\n"
        "  ProxyJump jumpbox\n"
        f"Host *\n  UserKnownHostsFile {lab.known_hosts_path}\n  IdentityFile {lab.client_key}\n"
    )
    inv = write(tmp_path / "inv.yml", "all:\n  hosts:\n    behind:\n")
    pb = write(tmp_path / "ping.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - command: id -un\n")
    os.environ["PROVISION_SSH_CONFIG"] = str(config)
    try:
        result, doc = run_json("run", pb, "-i", inv, cwd=tmp_path)
    finally:
        os.environ["PROVISION_SSH_CONFIG"] = str(lab.ssh_config_path)
    assert result.code == 0, result.err
    assert doc["plays"][0]["tasks"][0]["hosts"]["behind"]["stdout"] == target.user


def test_any_errors_fatal_stops_every_host(lab, inv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pb = write(
        tmp_path / "fatal.yml",
        "- hosts: all\n  gather_facts: false\n  any_errors_fatal: true\n  tasks:\n"
        "    - command: \"{{ 'false' if inventory_hostname == 'lab2' else 'true' }}\"\n"
        "    - name: after\n      command: 'true'\n",
    )
    result, doc = run_json("run", pb, "-i", inv, cwd=tmp_path)
    assert result.code == 2 and "any_errors_fatal" in result.err
    assert [t["task"]["name"] for t in doc["plays"][0]["tasks"]] == ["command"]  # nobody ran "after"
