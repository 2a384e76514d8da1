"""Secret masking: what gets registered (nested, numbers, rendered templates), the escaped forms it is masked
in, error messages that must not quote secrets, and controller files that must not follow planted links."""

from __future__ import annotations

import ast
import io
import json
import os
import shlex
import stat
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from provision.cli import app, common
from provision.commands import MASK, MASKER, Masker, masked_forms
from provision.errors import InputError
from provision.executor import register_secrets
from provision.localfiles import append_private, replace_file
from provision.report import Reporter, write_retry_file
from provision.results import HostStats, RunSummary, Status, TaskResult
from provision.templating import Vars, inert

# printable text without surrogates (YAML cannot write those) and without "*" (the mask itself)
SECRET_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="*"), min_size=4, max_size=40
)
NASTY = "p\"a\\ss\nwörd-✓-'q'"


# ------------------------------------------------------------------------------------------ registration
def test_nested_values_under_secret_names_are_masked() -> None:
    m = Masker()
    m.add_vars(
        {
            "creds": {"api_token": "nested-api-token-1", "user": "bob-the-user"},
            "db": {"password": "db-nested-pw-2", "port": 5432},
            "secrets": ["list-secret-a", "list-secret-b"],
            "hf_token": {"value": "hf-dict-token-3", "n": 123456},
            "rows": [{"passwd": "row-passwd-4"}],
            "plain": "not-a-secret",
            "my_secret_pin": 987654,
            "float_token": 3.14159,
            "short_token": "abc",
            "flag_token": True,
        }
    )
    text = m.mask(
        "nested-api-token-1 db-nested-pw-2 list-secret-a list-secret-b hf-dict-token-3 123456 "
        "row-passwd-4 987654 3.14159 abc True bob-the-user 5432 not-a-secret"
    )
    assert (
        text
        == f"{MASK} {MASK} {MASK} {MASK} {MASK} {MASK} {MASK} {MASK} {MASK} abc True bob-the-user 5432 not-a-secret"
    )


def test_no_log_names_and_rendered_templates_are_registered() -> None:
    m = Masker()
    m.add_vars(
        {"listed": "listed-value-1", "api_token": "{{ vault }}", "gone_token": "{{ undefined }}"},
        no_log=["listed"],
        render=lambda text: "rendered-vault-2" if "vault" in str(text) else None,
    )
    assert m.mask("listed-value-1 rendered-vault-2 {{ vault }}") == f"{MASK} {MASK} {{{{ vault }}}}"


def test_template_without_renderer_registers_nothing_not_its_text() -> None:
    m = Masker()
    m.add_vars({"db_password": "{{ vault_db }}"})
    assert m.mask("{{ vault_db }}") == "{{ vault_db }}"


def test_register_secrets_renders_per_host_and_skips_undefined() -> None:
    MASKER.add_vars({})  # the global one: register_secrets registers there
    variables = Vars(
        {
            "vault_db": "vault-db-value-7f3a",
            "db_password": "{{ vault_db }}",
            "api": {"token": "{{ vault_db }}-suffix"},
            "missing_token": "{{ not_defined_here }}",
            "loop_a_secret": "{{ loop_b_secret }}",
            "loop_b_secret": "{{ loop_a_secret }}",
        }
    )
    register_secrets(variables)
    assert MASKER.mask("x vault-db-value-7f3a-suffix y") == f"x {MASK} y"
    assert MASKER.mask("vault-db-value-7f3a") == MASK


def test_a_nested_secret_of_one_container_is_rendered_for_every_host_and_data_is_walked_each_time() -> None:
    """One container of the inventory's in every host's vars: its secret template registers each host's value;
    a host's data (a registered result) registers what it holds at each call, also after a change in place."""
    creds = {"services": [{"name": "db", "api_token": "{{ host_token }}"}]}  # ONE object in both hosts' vars
    for token in ("first-host-token-91c2", "second-host-token-4d7e"):
        register_secrets(Vars({"creds": creds, "host_token": token}))
    assert MASKER.mask("first-host-token-91c2 second-host-token-4d7e db") == f"{MASK} {MASK} db"
    result: dict[str, object] = {"items": [{"password": "registered-data-5b1a"}]}
    register_secrets(Vars(inert({"r": result})))
    result["items"] = [{"password": "changed-in-place-88f0"}]  # the same object, changed: walked again
    register_secrets(Vars(inert({"r": result})))
    assert MASKER.mask("registered-data-5b1a changed-in-place-88f0") == f"{MASK} {MASK}"


# ------------------------------------------------------------------------------------------ escaped forms
@settings(max_examples=300, deadline=None)
@given(SECRET_TEXT)
def test_secret_is_masked_in_every_escaped_form(secret: str) -> None:
    m = Masker()
    m.add(secret)
    wrappers = {
        "json": json.dumps({"key": secret}),
        "json-unicode": json.dumps({"key": secret}, ensure_ascii=False),
        "repr": repr({"key": secret}),
        "yaml-double": yaml.safe_dump({"key": secret}, default_style='"', width=2**31),
        "yaml-double-unicode": yaml.safe_dump({"key": secret}, default_style='"', width=2**31, allow_unicode=True),
        "shell": f"echo {shlex.quote(secret)}",
        "raw": f"[{secret}]",
    }
    for name, text in wrappers.items():
        masked = m.mask(text)
        for form in masked_forms(secret):
            # a form that is part of the wrapper's own text cannot be told apart from it
            assume(form not in text.replace(form, ""))
            assert form not in masked, (name, form, masked)


def _fits_one_yaml_line(text: str) -> bool:
    # YAML folds a scalar longer than its line width (80): folded forms are not registered
    return "\n" not in text and len(yaml.safe_dump(text, default_style='"', width=2**31)) < 70


@settings(max_examples=200, deadline=None)
@given(SECRET_TEXT.filter(_fits_one_yaml_line))
def test_secret_is_masked_in_default_yaml(secret: str) -> None:
    m = Masker()
    m.add(secret)
    text = yaml.safe_dump({"key": secret})
    masked = m.mask(text)
    for form in masked_forms(secret):
        assume(form not in text.replace(form, ""))
        assert form not in masked, (form, masked)
    assert MASK in masked


def test_masked_json_and_repr_stay_valid() -> None:
    m = Masker()
    m.add(NASTY)
    assert json.loads(m.mask(json.dumps({"k": NASTY}))) == {"k": MASK}
    assert json.loads(m.mask(json.dumps({"k": NASTY}, ensure_ascii=False))) == {"k": MASK}
    assert ast.literal_eval(m.mask(repr({"k": NASTY}))) == {"k": MASK}
    assert yaml.safe_load(m.mask(yaml.safe_dump({"k": NASTY}, default_style='"', width=2**31))) == {"k": MASK}


def test_reporter_masks_escaped_secret_in_verbose_dump_and_json_document() -> None:
    MASKER.add_vars({"nasty_token": NASTY})
    reporter = Reporter(verbosity=1, stream=io.StringIO())
    reporter.play_start("p", ["h"])
    reporter.task_start("t")
    escaped = json.dumps(NASTY)[1:-1]
    result = TaskResult("h", "t", Status.OK, f"msg {escaped}", {"stdout": NASTY, "cmd": repr(NASTY)})
    shown = reporter.format_result(result)
    assert NASTY not in MASKER.mask(shown)
    assert escaped not in MASKER.mask(shown)
    reporter.task_result(result)
    summary = RunSummary({"h": HostStats(ok=1)})
    out = io.StringIO()
    reporter.emit_json(summary, out)
    text = out.getvalue()
    assert escaped not in text and NASTY not in text and repr(NASTY)[1:-1] not in text
    doc = json.loads(text)
    assert doc["plays"][0]["tasks"][0]["hosts"]["h"]["stdout"] == MASK


def test_the_json_document_masks_a_secret_registered_after_the_result_that_holds_it() -> None:
    """emit_json masks the document as text: a secret a later task registered (a no_log var, a vault value
    read late) is hidden in an earlier result too, in its JSON-escaped form, in keys as in values."""
    late = 'late-"secret"-\u00e9-value'
    reporter = Reporter(verbosity=0, stream=io.StringIO())
    reporter.play_start("p", ["h"])
    reporter.task_start("t")
    reporter.task_result(TaskResult("h", "t", Status.OK, "", {"stdout": late, late: 1, "n": [late]}))
    MASKER.add_vars({"late_password": late})
    out = io.StringIO()
    reporter.emit_json(RunSummary({"h": HostStats(ok=1)}), out)
    text = out.getvalue()
    assert json.dumps(late)[1:-1] not in text and late not in text
    result = json.loads(text)["plays"][0]["tasks"][0]["hosts"]["h"]
    assert result["stdout"] == MASK and result["n"] == [MASK] and MASK in result


# ------------------------------------------------------------------------------------------ error messages
def test_extra_vars_file_with_yaml_error_does_not_quote_its_content(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text('hf_token: "yaml-err-secret-1\nother: [unclosed\n')
    with pytest.raises(InputError) as info:
        common.parse_extra_vars((f"@{bad}",))
    assert "yaml-err-secret-1" not in str(info.value) and "invalid YAML" in str(info.value)
    bad.write_text("hf_token: {a: yaml-err-secret-2\n  b: [\n")
    with pytest.raises(InputError) as info:
        common.parse_extra_vars((f"@{bad}",))
    assert "yaml-err-secret-2" not in str(info.value)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"- list-secret-value-9\n", "must hold a mapping, not a list"),
        (b"plain-scalar-secret-9\n", "must hold a mapping, not a str"),
        (b"hf_token: bin-secret-9\xff\n", "not UTF-8"),
    ],
)
def test_extra_vars_file_errors_name_the_problem_not_the_content(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "vars.yml"
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        common.parse_extra_vars((f"@{path}",))
    assert expected in str(info.value) and "secret-9" not in str(info.value)


def test_extra_vars_unreadable_and_bad_words(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        common.parse_extra_vars((f"@{tmp_path / 'missing.yml'}",))
    with pytest.raises(InputError) as info:
        common.parse_extra_vars(("hf_token= word-secret-5",))
    assert "word-secret-5" not in str(info.value)
    with pytest.raises(InputError) as info:
        common.parse_extra_vars(('{"hf_token": "json-secret-6",}',))
    assert "json-secret-6" not in str(info.value)


def test_extra_vars_secrets_are_registered_when_parsed() -> None:
    common.parse_extra_vars(("db_password=parsed-early-secret-8",))
    assert MASKER.mask("parsed-early-secret-8") == MASK


def test_unexpected_exception_text_is_masked(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:  # fmt: skip
    MASKER.add("internal-err-secret-3")
    monkeypatch.setattr(common, "DEBUG_LOG", tmp_path / "debug.log")

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("oops internal-err-secret-3")

    monkeypatch.setattr(app, "parse_extra_vars", boom)
    with pytest.raises(SystemExit) as info:
        app.main(["run", "x.yml", "-i", "inv", "-vvv", "-e", "internal-err-secret-3"])
    assert info.value.code == 2  # an internal error: one line, exit 2
    err = capsys.readouterr().err
    assert "internal error: RuntimeError" in err and "internal-err-secret-3" not in err
    log = (tmp_path / "debug.log").read_text()
    assert "RuntimeError" in log and "internal-err-secret-3" not in log


def test_usage_error_text_is_masked(capsys: pytest.CaptureFixture[str]) -> None:
    MASKER.add("usage-err-secret-4")
    with pytest.raises(SystemExit):
        app.main(["run", "x.yml", "--forks", "usage-err-secret-4"])
    err = capsys.readouterr().err
    assert "--forks" in err and "usage-err-secret-4" not in err


# ------------------------------------------------------------------------------------------ controller files
def test_replace_file_replaces_a_planted_symlink_and_leaves_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "site.retry"
    link.symlink_to(victim)
    replace_file(link, "lab1\n")
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_text() == "lab1\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_retry_file_is_not_written_through_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "site.retry").symlink_to(victim)
    summary = RunSummary({"lab1": HostStats(failed=1), "lab0": HostStats(ok=1)})
    written = write_retry_file("site.yml", summary, str(tmp_path))
    assert written == str(tmp_path / "site.retry")
    assert victim.read_text() == "precious\n"
    assert (tmp_path / "site.retry").read_text() == "lab1\n"


def test_debug_log_is_created_0600_and_refuses_a_symlink(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        log = tmp_path / "cache" / "debug.log"
        append_private(log, "one\n")
        append_private(log, "two\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    assert log.read_text() == "one\ntwo\n"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    planted = tmp_path / "planted.log"
    planted.symlink_to(victim)
    with pytest.raises(OSError):
        append_private(planted, "secret\n")
    assert victim.read_text() == "precious\n"


def test_debug_log_record_is_masked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    MASKER.add(NASTY)
    monkeypatch.setattr(common, "DEBUG_LOG", tmp_path / "debug.log")
    common.debug_log(f"failed with {json.dumps(NASTY)} and {NASTY!r}")
    text = (tmp_path / "debug.log").read_text()
    assert "failed with" in text and NASTY not in text and json.dumps(NASTY)[1:-1] not in text
    assert repr(NASTY)[1:-1] not in text


def test_host_and_group_names_are_not_secrets_even_in_a_group_named_like_one() -> None:
    """The magic variables of host and group names are not walked for secrets (on every task of every host
    that walk cost O(hosts²)): a group named like a secret does not hide its hosts' names."""
    groups = {"all": ["hostname-kept-visible"], "db_passwords": ["hostname-kept-visible"]}
    variables = Vars({"api_token": "token-value-is-masked"}, {"groups": groups, "ansible_play_hosts": groups["all"]})
    register_secrets(variables)
    assert MASKER.mask("token-value-is-masked") == MASK
    assert MASKER.mask("hostname-kept-visible") == "hostname-kept-visible"
