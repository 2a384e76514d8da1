"""A template file's includes and imports (the search path ansible-core's template module and lookup use), and
the end of a rendered text (ansible-core's trailing-newline rule, trim_blocks for all text). The differential
cases tests/compat/cases/template_include_import and template_trailing_newlines run both tools on them."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from provision.errors import TemplateError
from provision.templating import render, render_file
from tests.support.cli import run_cli
from tests.support.pd import render_launch_template


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_an_include_is_found_in_the_role_then_the_playbook_then_beside_the_template(tmp_path: Path) -> None:
    root = tree(tmp_path, {"book/templates/a.j2": "book-templates", "book/b.j2": "book", "role/templates/a.j2": "role",
                           "elsewhere/c.j2": "beside", "elsewhere/main.j2": "x"})  # fmt: skip
    main = "{% include 'a.j2' %} {% include 'b.j2' %} {% include 'c.j2' %}\n"
    where = {"playbook_dir": str(root / "book"), "template_path": str(root / "elsewhere/main.j2")}
    assert render_file(main, where) == "book-templates book beside\n"
    assert render_file(main, {**where, "role_path": str(root / "role")}) == "role book beside\n"


def test_a_name_that_leaves_the_folders_or_is_nowhere_fails_with_the_folders_searched(tmp_path: Path) -> None:
    root = tree(tmp_path, {"book/ok.j2": "ok", "secret.j2": "outside"})
    where = {"playbook_dir": str(root / "book")}
    assert render_file("{% include 'ok.j2' %}", where) == "ok"
    for name in ("../secret.j2", "missing.j2"):
        with pytest.raises(TemplateError, match=rf"template '\.*/?\w+\.j2' not found \(searched {root}/book/templates"):
            render_file(f"{{% include '{name}' %}}", where)
    assert render_file("{% include 'missing.j2' ignore missing %}-", where) == "-"
    with pytest.raises(TemplateError, match=r"not found \(searched no folder: playbook text"):
        render("{% include 'ok.j2' %}", where)  # playbook text has no search path


def test_a_compiled_include_is_used_again_only_while_its_name_finds_the_same_unchanged_file(tmp_path: Path) -> None:
    """Hosts render in parallel threads, each with its role's search path: the same name in two roles is two
    files, and an edited file is read again."""
    root = tree(tmp_path, {f"r{i}/templates/part.j2": f"role {i}" for i in range(2)})
    main = "{% include 'part.j2' %}"
    seen: dict[int, set[str]] = {0: set(), 1: set()}

    def host(i: int) -> None:
        for _ in range(50):
            seen[i].add(render_file(main, {"role_path": str(root / f"r{i}")}))

    threads = [threading.Thread(target=host, args=(i % 2,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {0: {"role 0"}, 1: {"role 1"}}
    part = root / "r0/templates/part.j2"
    part.write_text("edited")
    stat = part.stat()
    os.utime(part, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert render_file(main, {"role_path": str(root / "r0")}) == "edited"


def test_includes_keep_the_context_and_imports_bring_macros(tmp_path: Path) -> None:
    root = tree(tmp_path, {
        "t/user.j2": "[{{ user }}@{{ site }}]\n",
        "t/m.j2": "{% macro kv(k, v) %}{{ k }}={{ v }}{% endmacro %}",
        "t/base.j2": "<{% block b %}base{% endblock %}>\n",
        "t/child.j2": "{% extends 'base.j2' %}{% block b %}child{% endblock %}",
    })  # fmt: skip
    where = {"template_path": str(root / "t/main.j2"), "site": "s", "users": ["a", "b"]}
    text = "{% for user in users %}{% include 'user.j2' %}{% endfor %}\n{% import 'm.j2' as m %}{{ m.kv('k', 1) }}\n"
    assert render_file(text, where) == "[a@s][b@s]k=1\n"  # an include loses its trailing newline, as in Ansible
    assert (
        render_file((root / "t/child.j2").read_text(), {**where, "template_path": str(root / "t/child.j2")})
        == "<child>"
    )


@pytest.mark.parametrize(
    ("source", "values", "out"),
    [
        ("a\n{% if flag %}x{% endif %}\n", {"flag": True}, "a\nx\n"),  # trim_blocks ate the newline: given back
        ("{{ v }}\n", {"v": "x\n"}, "x\n"),  # the value's own newline: none added
        ("{{ v }}\n\n", {"v": "x"}, "x\n\n"),
        ("{% for u in us %}\n{{ u }}\n{% endfor %}\n", {"us": ["a", "b"]}, "a\nb\n"),  # trim_blocks in playbook text
        ("{{ v }}\n", {"v": "x\n\n"}, "x\n\n"),
        ("no template\n", {}, "no template\n"),
    ],
)
def test_the_end_of_a_rendered_text_is_ansible_cores(source: str, values: dict[str, object], out: str) -> None:
    assert render(source, values) == out
    assert render_file(source, values) == out


def test_the_launch_scripts_render_as_before_the_newline_rule(tmp_path: Path) -> None:
    """The shipped launch script templates end without a newline, so their scripts stay byte for byte what they
    were (a changed script restarts its server at the next ``pd up``)."""
    hosts = {"p1": {"group_names": ["prefill", "router"]}, "d1": {"group_names": ["decode"]}}
    hosts["s1"] = {"group_names": ["serve"]}
    for name, host in (("prefill.sh.j2", "p1"), ("decode.sh.j2", "d1"), ("serve.sh.j2", "s1"), ("router.sh.j2", "p1")):
        script = render_launch_template(name, host, hosts, str(tmp_path))
        assert script.endswith("--enable-metrics") or script.endswith("--health-check-interval-secs 5"), script[-80:]


def test_a_tasks_environment_options_change_how_its_file_renders() -> None:
    """The template module's (and lookup's) lstrip_blocks, trim_blocks, delimiters and newline_sequence, as
    ansible-core applies them (case template_options compares the files)."""
    source = "{% for u in us %}\n  {% if u %}\n[{{ u }}]\n  {% endif %}\n{% endfor %}\nend\n"
    values = {"us": ["a"]}
    assert render_file(source, values) == "  [a]\n  end\n"
    assert render_file(source, values, options={"lstrip_blocks": True}) == "[a]\nend\n"
    assert render_file(source, values, options={"trim_blocks": False}) == "\n  \n[a]\n  \n\nend\n"
    assert render_file(source, values, options={"newline_sequence": "\r\n"}) == "  [a]\r\n  end\r\n"
    other = {"variable_start_string": "[[", "variable_end_string": "]]"}
    assert render_file("[[ u ]] {{ u }}\n", {"u": 1}, options=other) == "1 {{ u }}\n"
    assert render_file("[[ u ]]\n", {"u": True}, options=other) == "True\n"  # no native value: other delimiters


def test_other_delimiters_keep_a_files_braces_from_the_up_front_check(tmp_path: Path) -> None:
    """A file read with other delimiters is not checked for undefined names with the default ones (its
    ``{{ }}`` is another tool's text); an unknown environment argument is still refused before the run."""
    (tmp_path / "t.j2").write_text("[[ known ]] {{ not_a_var }}\n")
    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    h: {ansible_connection: local}\n")
    play = ("- hosts: all\n  gather_facts: false\n  vars: {{known: 1}}\n  tasks:\n    - template:\n"
            "        src: t.j2\n        dest: " + str(tmp_path / "out") + "\n{extra}")  # fmt: skip
    delimiters = "        variable_start_string: '[['\n        variable_end_string: ']]'\n"
    for extra, code, says in (("", 5, "undefined variable 'not_a_var'"), (delimiters, 0, ""),
                              ("        lstrip: true\n", 5, "unknown argument 'lstrip'")):  # fmt: skip
        (tmp_path / "pb.yml").write_text(play.format(extra=extra))
        result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")])
        assert result.code == code and says in result.err, (extra, result.out[-500:], result.err)
    assert (tmp_path / "out").read_text() == "1 {{ not_a_var }}\n"
