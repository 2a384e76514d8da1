"""Ansible's filters, tests, lookups and YAML tags where the differential cases cannot reach: what never runs
(``!unsafe`` text, a refused plugin), what has no ansible-core reference here (``password_hash`` needs passlib
there), the role search path of lookups, and what the planner knows before the run.

The behaviour shared with ansible-core is compared in tests/compat/cases/{filters_sets, filters_paths,
tests_jinja, lookups_core, with_lookups, unsafe_tag}."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from provision import templating
from provision.errors import TemplateError
from provision.playbook import load_playbook
from provision.templating import filters, lookups, templar, tests


def test_every_filter_and_test_is_known_under_its_fqcn_too() -> None:
    for name in [*filters.FILTERS, "combine", "to_json", "regex_replace", "default", "map"]:
        assert f"ansible.builtin.{name}" in templating.ENV.filters, name
        templating.check_filters_tests(f"x | ansible.builtin.{name}", expression=True)
    for name in [*tests.TESTS, "version_compare", "successful", "defined"]:
        assert f"ansible.builtin.{name}" in templating.ENV.tests, name
        templating.check_filters_tests(f"x is ansible.builtin.{name}", expression=True)


def test_the_planner_names_an_unknown_lookup_and_a_refused_filter_before_the_run() -> None:
    templating.check_filters_tests(
        "lookup('ansible.builtin.env', 'HOME') ~ query('sequence', '1-2') | join", expression=True
    )
    with pytest.raises(TemplateError, match=r"lookup plugin 'url' is not supported") as info:
        templating.check_filters_tests("{{ x }}\n{{ lookup('url', 'https://example.com') }}")
    assert info.value.line == 2
    with pytest.raises(TemplateError, match=r"filter 'ansible.builtin.win_basename'.*Windows paths are not supported"):
        templating.check_filters_tests("x | ansible.builtin.win_basename", expression=True)


def test_password_hash_is_libc_crypt_with_the_given_salt_and_rounds() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    value = templating.evaluate("'secret' | password_hash('sha512', 'saltsalt')", {})
    assert value.startswith("$6$saltsalt$") and crypt.crypt("secret", value) == value
    rounds = templating.evaluate("'secret' | password_hash('sha256', 'abc', rounds=6000)", {})
    assert rounds.startswith("$5$rounds=6000$abc$") and crypt.crypt("secret", rounds) == rounds
    drawn = [templating.evaluate("'secret' | password_hash", {}) for _ in range(2)]
    assert drawn[0] != drawn[1] and all(crypt.crypt("secret", h) == h for h in drawn)  # a random salt each time
    with pytest.raises(TemplateError, match=r"password_hash: hash type 'blowfish' is not supported"):
        templating.evaluate("'x' | password_hash('blowfish')", {})


def test_unsafe_text_is_never_rendered_even_when_it_would_run_a_command(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  vars:\n"
        f"    evil: !unsafe \"{{{{ lookup('pipe', 'touch {marker}') }}}}\"\n"
        "    ref: '{{ evil }}'\n"
        "  tasks:\n"
        f"    - debug: {{msg: !unsafe \"{{{{ lookup('pipe', 'touch {marker}') }}}}\"}}\n"
        "    - debug: {msg: '{{ ref }} and {{ evil | upper }}'}\n"
    )
    play = load_playbook(tmp_path / "pb.yml")[0]
    variables = templating.Vars({"playbook_dir": str(tmp_path)}, play.vars)
    direct = templating.render(play.tasks[0].args["msg"], variables)
    through = templating.render(play.tasks[1].args["msg"], variables)
    assert direct == f"{{{{ lookup('pipe', 'touch {marker}') }}}}"
    assert through.startswith(f"{{{{ lookup('pipe', 'touch {marker}') }}}} and {{{{ LOOKUP(")
    assert templating.names_used(play.tasks[0].args) == set()  # the planner does not read it as a template
    assert not marker.exists()
    # the same text, not marked: it is the playbook's own template, and it runs on the controller
    assert templating.render(str(play.tasks[0].args["msg"]), variables) == ""
    assert marker.exists()


def test_a_template_in_a_constant_lookup_term_is_rendered_a_value_never(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    variables = templating.Vars({"playbook_dir": str(tmp_path), "who": "W"}).child(
        host_text=f"{{{{ lookup('pipe', 'touch {marker}') }}}}"
    )
    assert templating.evaluate("lookup('pipe', 'echo {{ who }}')", variables) == "W"  # the playbook's constant
    assert templating.evaluate("query('items', ['{{ who }}', host_text])", variables) == ["W", variables["host_text"]]
    assert templating.evaluate("lookup('pipe', 'echo ' ~ host_text | quote)", variables) == variables["host_text"]
    assert not marker.exists()
    assert templating.names_used("{{ lookup('pipe', 'echo {{ who }} {{ nope }}') }}") == {"who", "nope"}


def test_a_lookup_result_is_data_never_rendered_again(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "t.txt").write_text("{{ secret }}\n")
    variables = templating.Vars({"playbook_dir": str(tmp_path), "secret": "S", "c": "{{ lookup('file', 't.txt') }}"})
    assert templating.render("{{ c }}", variables) == "{{ secret }}"
    assert templating.render("{{ lookup('file', 't.txt') }}!", variables) == "{{ secret }}!"


def test_lookups_search_the_role_before_the_playbook(tmp_path: Path) -> None:
    role = tmp_path / "roles" / "r"
    for base, text in ((tmp_path, "play"), (role, "role")):
        (base / "files").mkdir(parents=True)
        (base / "templates").mkdir()
        (base / "files" / "f.txt").write_text(text)
        (base / "templates" / "t.j2").write_text(text + " {{ n }}")
    (tmp_path / "files" / "only_play.txt").write_text("p")
    in_role = {"playbook_dir": str(tmp_path), "role_path": str(role), "n": 1}
    in_play = {"playbook_dir": str(tmp_path), "n": 2}
    assert templating.evaluate("lookup('file', 'f.txt')", in_role) == "role"
    assert templating.evaluate("lookup('file', 'f.txt')", in_play) == "play"
    assert templating.evaluate("lookup('file', 'only_play.txt')", in_role) == "p"
    assert templating.evaluate("lookup('template', 't.j2')", in_role) == "role 1"
    assert templating.evaluate("lookup('template', 't.j2', template_vars={'n': 9})", in_play) == "play 9"
    assert templating.run_lookup("first_found", ["nope", "t.j2"], in_role, "template") == [
        str(role / "templates" / "t.j2")
    ]


def test_lookup_result_shapes_and_errors(tmp_path: Path) -> None:
    v = {"playbook_dir": str(tmp_path)}
    assert templating.evaluate("lookup('items', ['a', 'b'])", v) == "a,b"  # strings joined, as lookup() does
    assert templating.evaluate("lookup('items', [1, 2])", v) == [1, 2]
    assert templating.evaluate("lookup('items', ['a'])", v) == "a"
    assert templating.evaluate("lookup('items', [], wantlist=True)", v) == []
    assert templating.evaluate("lookup('file', 'nope', errors='ignore')", v) is None
    assert templating.evaluate("q('file', 'nope', errors='warn')", v) == []
    with pytest.raises(TemplateError, match=r"lookup 'file': could not find or access 'nope'"):
        templating.evaluate("lookup('file', 'nope')", v)
    with pytest.raises(TemplateError, match=r"lookup 'pipe': the command 'exit 3' failed \(rc=3\)"):
        templating.evaluate("lookup('pipe', 'exit 3')", v)
    with pytest.raises(TemplateError, match=r"errors='loud' is not one of strict, warn, ignore"):
        templating.evaluate("lookup('env', 'HOME', errors='loud')", v)
    with pytest.raises(
        TemplateError,
        match=r"lookup 'template': option 'convert_data' is not supported \(options: comment_end_string, .*trim_blocks",
    ):
        templating.evaluate("lookup('template', 't.j2', convert_data=False)", v)
    with pytest.raises(TemplateError, match=r"with_dict\) expects a mapping"):
        templating.run_lookup("dict", [[1]], v, "debug")
    with pytest.raises(TemplateError, match=r"count and end"):
        lookups.run("sequence", ["count=2 end=3"], templar._make_lookup_env(v, v), wantlist=True)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("{'a': [1], 'b': {'x': [1]}} | combine({'a': [2], 'b': {'x': [2]}}, list_merge='append')",
         {"a": [1, 2], "b": {"x": [2]}}),
        ("{'b': {'x': [1, 2]}} | combine({'b': {'x': [2, 3]}}, recursive=true, list_merge='append_rp')",
         {"b": {"x": [1, 2, 3]}}),
        ("{'a': [1]} | combine({'a': [2]}, list_merge='keep')", {"a": [1]}),
        ("[1, [2, [3]]] | flatten(levels=1)", [1, 2, [3]]),
        ("'a1b22' | regex_findall('(\\\\w)(\\\\d)')", [["a", "1"], ["b", "2"]]),
        ("[1, 2] | zip(['a', 'b']) | list", [[1, "a"], [2, "b"]]),
        ("'x.tar.gz' | splitext", ["x.tar", ".gz"]),
    ],
)  # fmt: skip
def test_filter_shapes(expr: str, expected: object) -> None:
    assert templating.evaluate(expr, {}) == expected


def test_random_and_controller_state_are_read_each_time_never_folded_into_the_compiled_template(tmp_path: Path) -> None:
    draws = {templating.render("{{ 1000000 | random }}", {}) for _ in range(5)}
    assert len(draws) > 1
    path = tmp_path / "later"
    expr = f"'{path}' is exists"
    assert templating.evaluate(expr, {}) is False
    path.write_text("")
    assert templating.evaluate(expr, {}) is True  # the same (cached) template sees the file now
    assert templating.evaluate(f"'{tmp_path}/*' | fileglob", {}) == [str(path)]


def test_combine_refuses_an_unknown_list_merge() -> None:
    with pytest.raises(TemplateError, match=r"list_merge='merge' is not one of replace, keep, append"):
        templating.evaluate("{} | combine({}, list_merge='merge')", {})


def test_unsafe_in_an_inventory_and_its_group_vars_is_never_rendered(tmp_path: Path) -> None:
    from provision.inventory import Inventory

    marker = tmp_path / "ran"
    evil = f"{{{{ lookup('pipe', 'touch {marker}') }}}}"
    (tmp_path / "inv.yml").write_text(
        f'all:\n  hosts:\n    h1:\n      direct: !unsafe "{evil}"\n      mixed: !unsafe ["{evil}", 1]\n'
    )
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(f'from_file: !unsafe "{evil}"\n')
    host = Inventory.load([str(tmp_path / "inv.yml")]).hosts["h1"]
    variables = templating.Vars({"playbook_dir": str(tmp_path)}, host.vars)
    for name in ("direct", "from_file"):
        assert templating.render("{{ " + name + " }}", variables) == evil
    assert templating.render("{{ mixed }}", variables) == [evil, 1]
    assert not marker.exists()


def test_password_lookup_keeps_one_password_per_file_private_and_agreed_by_concurrent_hosts(tmp_path: Path) -> None:
    import os
    import stat
    from concurrent.futures import ThreadPoolExecutor

    v = {"playbook_dir": str(tmp_path)}
    with ThreadPoolExecutor(8) as pool:
        drawn = set(
            pool.map(lambda _: templating.evaluate("lookup('password', 'creds/db chars=digits')", v), range(16))
        )
    assert len(drawn) == 1 and (password := drawn.pop()).isdigit() and len(password) == 20
    assert (tmp_path / "creds" / "db").read_text() == password + "\n"
    assert stat.S_IMODE(os.stat(tmp_path / "creds" / "db").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "creds").st_mode) == 0o700
    assert templating.evaluate("lookup('password', '/dev/null')", v) != templating.evaluate(
        "lookup('password', '/dev/null')", v
    )  # nothing kept
    with pytest.raises(TemplateError, match=r"lookup 'password': encrypt= is not supported"):
        templating.evaluate("lookup('password', '/dev/null encrypt=sha512_crypt')", v)
    with pytest.raises(TemplateError, match=r"lookup 'password': unrecognized parameter 'size'"):
        templating.evaluate("lookup('password', '/dev/null size=3')", v)
