"""Secrets through the whole CLI: rendered secret vars from every source, nested values, escaped forms,
no_log, error lines, the debug log and the retry file. Engine tests use ``ansible_connection: local`` hosts
(fast); the last test goes through a real lab host over SSH."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from provision.cli import common
from provision.commands import MASK, masked_forms
from provision.modules.base import REGISTRY, Arg, Module, ModuleContext, ModuleResult, register
from tests.support.cli import CliResult, run_cli

LOCAL = {"ansible_connection": "local"}


def run(*argv: str | Path, cwd: Path) -> CliResult:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        return run_cli([str(a) for a in argv])
    finally:
        os.chdir(old)


def assert_hidden(text: str, *secrets: str) -> None:
    """No form of any secret (raw, JSON-escaped, repr, YAML, shell-quoted) is in ``text``."""
    for secret in secrets:
        for form in masked_forms(secret):
            assert form not in text, f"{form!r} leaked in:\n{text}"


@pytest.fixture
def debug_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "home" / ".cache" / "provision" / "debug.log"
    monkeypatch.setattr(common, "DEBUG_LOG", path)
    return path


def inventory(tmp_path: Path, all_vars: dict[str, object], hosts: tuple[str, ...] = ("one", "two")) -> Path:
    path = tmp_path / "inv" / "hosts.yml"
    path.parent.mkdir(exist_ok=True)
    doc = {"all": {"vars": {**LOCAL, **all_vars}, "hosts": dict.fromkeys(hosts)}}
    path.write_text(yaml.safe_dump(doc))
    return path


def playbook(tmp_path: Path, tasks: list[dict[str, object]], play_vars: dict[str, object] | None = None) -> Path:
    path = tmp_path / "pb.yml"
    play = {"hosts": "all", "gather_facts": False, "vars": play_vars or {}, "tasks": tasks}
    path.write_text(yaml.safe_dump([play], allow_unicode=True))
    return path


# the secret tasks: print it from a command, a debug msg (raw, to_json, to_yaml, a dict), and an error message
SHOW = [
    {"command": {"argv": ["printf", "%s", "{{ db_password }}"]}},
    {"debug": {"msg": "{{ db_password }} {{ db_password | to_json }} {{ db_password | to_yaml }} {{ [db_password] }}"}},
    {"fail": {"msg": "{{ {}[db_password] }}"}, "when": "inventory_hostname == 'two'"},
]


@pytest.mark.parametrize("source", ["inventory", "group_vars", "play_vars", "task_vars", "extra_k_v", "extra_file"])
def test_rendered_secret_var_is_masked_whatever_defines_it(source: str, tmp_path: Path, debug_log: Path) -> None:
    vault = f'vault-{source}-"q"-\\b\\-wörd-✓'
    template = "{{ vault_db }}"
    inv_vars: dict[str, object] = {"vault_db": vault}
    play_vars: dict[str, object] = {}
    extra: list[str] = []
    tasks = SHOW
    if source == "inventory":
        inv_vars["db_password"] = template
    elif source == "group_vars":
        (tmp_path / "inv" / "group_vars").mkdir(parents=True)
        (tmp_path / "inv" / "group_vars" / "all.yml").write_text(f'db_password: "{template}"\n')
    elif source == "play_vars":
        play_vars["db_password"] = template
    elif source == "task_vars":
        tasks = [{**task, "vars": {"db_password": template}} for task in SHOW]
    elif source == "extra_k_v":
        extra = ["-e", f"db_password='{template}'"]
    else:
        (tmp_path / "extra.yml").write_text(yaml.safe_dump({"db_password": template}))
        extra = ["-e", f"@{tmp_path / 'extra.yml'}"]
    inv = inventory(tmp_path, inv_vars)
    pb = playbook(tmp_path, tasks, play_vars)
    result = run("run", pb, "-i", inv, *extra, "--json", "-vvv", cwd=tmp_path)
    assert result.code == 2, result.err
    doc = json.loads(result.out)
    assert doc["plays"][0]["tasks"][0]["hosts"]["one"]["stdout"] == MASK
    everything = result.out + result.err + debug_log.read_text() + (tmp_path / "pb.retry").read_text()
    assert_hidden(everything, vault)
    assert "'dict object' has no attribute '********'" in result.err


def test_secret_var_undefined_for_one_host_does_not_break_the_others(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"api_token": "{{ only_on_one }}"})
    host_vars = tmp_path / "inv" / "host_vars"
    host_vars.mkdir()
    (host_vars / "one.yml").write_text("only_on_one: only-one-token-value\n")
    pb = playbook(tmp_path, [{"command": {"argv": ["echo", "{{ only_on_one | default('none') }}"]}}])
    result = run("run", pb, "-i", inv, "--json", cwd=tmp_path)
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    hosts = doc["plays"][0]["tasks"][0]["hosts"]
    assert hosts["one"]["stdout"] == MASK and hosts["two"]["stdout"] == "none"


def test_play_no_log_names_set_fact_and_inventory_host_are_masked(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"vault_db": "inv-vault-value-5", "db_password": "{{ vault_db }}"})
    shown = run("inventory", "-i", inv, "--host", "one", cwd=tmp_path)
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["vault_db"] == MASK
    pb = tmp_path / "pb.yml"
    pb.write_text(
        "- hosts: one\n  gather_facts: false\n  no_log: [plain_name]\n"
        "  vars:\n    plain_name: listed-in-no-log-6\n  tasks:\n"
        "    - set_fact:\n        made_token: 'made-by-set-fact-{{ 7 * 6 }}'\n"
        "    - debug:\n        msg: '{{ plain_name }} {{ made_token }}'\n"
    )
    result = run("run", pb, "-i", inv, "--json", cwd=tmp_path)
    assert result.code == 0, result.err
    assert_hidden(result.out + result.err, "listed-in-no-log-6", "made-by-set-fact-42")


@pytest.fixture
def secret_arg_module() -> Iterator[str]:
    """A module with a ``secret=True`` int argument (no shipped module has one yet)."""

    class SecretArg(Module):
        name = "test_secret_arg"
        controller_only = True
        args = {"pin": Arg("int", secret=True)}

        def run(self, ctx: ModuleContext, args: dict[str, object]) -> ModuleResult:
            return ModuleResult(msg=f"pin is {args['pin']}", data={"pin": args["pin"]})

    register(SecretArg)
    yield SecretArg.name
    for key in (SecretArg.name, f"ansible.builtin.{SecretArg.name}"):
        REGISTRY.pop(key, None)


def test_module_args_marked_secret_are_masked_also_in_coerce_errors(tmp_path: Path, secret_arg_module: str) -> None:
    inv = inventory(tmp_path, {"good_pin": 90817263, "bad_pin": "not-an-int-pin-8"})
    pb = playbook(
        tmp_path,
        [{secret_arg_module: {"pin": "{{ good_pin }}"}}, {secret_arg_module: {"pin": "{{ bad_pin }}"}}],
    )
    result = run("run", pb, "-i", inv, "--json", "-v", cwd=tmp_path)
    assert result.code == 2, result.err
    assert_hidden(result.out + result.err, "90817263", "not-an-int-pin-8")
    assert "pin is ********" in result.err


def test_nested_secret_values_are_masked(tmp_path: Path) -> None:
    values = {
        "creds": {"api_token": "nested-api-tok-1", "user": "visible-user"},
        "db": {"password": 73219846},
        "secrets": ["listed-secret-a1", "listed-secret-b2"],
        "hf_token": {"value": "hf-in-a-dict-3", "scale": 2.718281},
    }
    inv = inventory(tmp_path, values)
    pb = playbook(
        tmp_path,
        [
            {"debug": {"msg": "{{ creds }} {{ db | to_json }} {{ secrets }} {{ hf_token | to_yaml }}"}},
            {"command": {"argv": ["echo", "{{ creds.api_token }}", "{{ db.password }}", "{{ hf_token.scale }}"]}},
        ],
    )
    result = run("run", pb, "-i", inv, "--json", "-v", cwd=tmp_path)
    assert result.code == 0, result.err
    assert_hidden(result.out + result.err, "nested-api-tok-1", "73219846", "listed-secret-a1", "listed-secret-b2")
    assert_hidden(result.out + result.err, "hf-in-a-dict-3", "2.718281")
    assert "visible-user" in result.err


def test_no_log_task_shows_nothing_of_its_args_or_results(tmp_path: Path, debug_log: Path) -> None:
    inv = inventory(tmp_path, {"plain_value": "nolog-plain-value-1"}, hosts=("one",))
    pb = playbook(
        tmp_path,
        [
            {
                "name": "hidden loop",
                "command": {"argv": ["echo", "{{ item }}", "{{ plain_value }}"]},
                "loop": ["nolog-item-a1", "nolog-item-b2"],
                "no_log": True,
            },
            {
                "name": "hidden failure",
                "shell": "echo nolog-out-c3; echo nolog-err-d4 >&2; exit 3",
                "loop": ["nolog-item-e5"],
                "no_log": True,
            },
        ],
    )
    result = run("run", pb, "-i", inv, "--json", "-vvv", cwd=tmp_path)
    assert result.code == 2, result.err
    everything = result.out + result.err + debug_log.read_text()
    for value in ("nolog-plain-value-1", "nolog-item-a1", "nolog-item-b2", "nolog-out-c3", "nolog-err-d4"):
        assert value not in everything
    assert "nolog-item-e5" not in everything
    assert "(item=None)" in result.err and "hidden due to no_log" in everything
    doc = json.loads(result.out)
    failed = doc["plays"][0]["tasks"][1]["hosts"]["one"]
    assert failed["failed"] and [r["item_label"] for r in failed["results"]] == ["None"]


def test_bad_extra_vars_file_error_is_one_line_without_its_content(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {})
    pb = playbook(tmp_path, [{"debug": {"msg": "hi"}}])
    bad = tmp_path / "secrets.yml"
    bad.write_text('hf_token: "bad-yaml-secret-77\nnext: {\n')
    result = run("run", pb, "-i", inv, "-e", f"@{bad}", cwd=tmp_path)
    assert result.code == 5
    assert "bad-yaml-secret-77" not in result.out + result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR: ") and "invalid YAML" in lines[0]


def test_retry_file_and_debug_log_never_follow_planted_links(tmp_path: Path, debug_log: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "pb.retry").symlink_to(victim)
    debug_log.parent.mkdir(parents=True)
    log_victim = tmp_path / "log-victim"
    log_victim.write_text("precious too\n")
    debug_log.symlink_to(log_victim)
    inv = inventory(tmp_path, {})
    pb = playbook(tmp_path, [{"command": "false"}])
    result = run("run", pb, "-i", inv, cwd=tmp_path)
    assert result.code == 2
    assert victim.read_text() == "precious\n" and log_victim.read_text() == "precious too\n"
    retry = tmp_path / "pb.retry"
    assert not retry.is_symlink() and retry.read_text() == "one\ntwo\n"
    debug_log.unlink()
    old = os.umask(0)
    try:
        again = run("run", pb, "-i", inv, cwd=tmp_path)
    finally:
        os.umask(old)
    assert again.code == 2
    assert stat.S_IMODE(debug_log.stat().st_mode) == 0o600
    assert "failed hosts: one, two" in debug_log.read_text()


# ------------------------------------------------------------------------------------------ a real lab host
@pytest.fixture
def lab_inv(lab, tmp_path: Path) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    with lab.pointed_at():
        yield lab.write_inventory(
            tmp_path / "inv.yml", names=[0], extra_host_vars={lab.hosts[0].name: {"db_password": "{{ vault_db }}"}}
        )


def test_secret_with_quotes_backslash_unicode_through_ssh(lab, lab_inv: Path, tmp_path: Path, debug_log: Path) -> None:  # type: ignore[no-untyped-def]
    token = 'hf_"lab"\\tok\'en-ünï-✓'
    vault = "vault 'db' \\ \"pw\" ∂"
    extra = tmp_path / "extra.yml"
    extra.write_text(yaml.safe_dump({"hf_token": token, "vault_db": vault}, allow_unicode=True))
    pb = playbook(
        tmp_path,
        [
            {"command": {"argv": ["echo", "{{ hf_token }}", "{{ db_password }}"]}, "register": "echoed"},
            {"shell": "printf '%s\\n' \"$T\" >&2", "environment": {"T": "{{ hf_token }}"}},
            {"debug": {"msg": "{{ echoed | to_json }} {{ {'t': hf_token} }}"}},
            {"fail": {"msg": "giving up with {{ hf_token | to_json }} and {{ db_password }}"}},
        ],
    )
    result = run("run", pb, "-i", lab_inv, "-e", f"@{extra}", "--json", "-vvv", cwd=tmp_path)
    assert result.code == 2, result.err
    json_file = tmp_path / "out.json"
    json_file.write_text(result.out)
    doc = json.loads(json_file.read_text())
    host = lab.hosts[0].name
    tasks = doc["plays"][0]["tasks"]
    assert tasks[0]["hosts"][host]["stdout"] == f"{MASK} {MASK}"
    assert tasks[1]["hosts"][host]["stderr"] == MASK
    everything = result.out + result.err + json_file.read_text() + debug_log.read_text()
    assert "giving up with" in debug_log.read_text()
    assert_hidden(everything, token, vault)
