from __future__ import annotations

import pytest

from provision import templating
from provision.errors import TemplateError
from provision.templating import Vars, condition, evaluate, names_used, render


def test_lazy_vars_render_references_and_keep_native_types() -> None:
    v = Vars({"venv": "/opt/v", "py": "{{ venv }}/bin/python", "n": "{{ 2 + 1 }}", "l": [1, 2]})
    assert render("{{ py }} -V", v) == "/opt/v/bin/python -V"
    assert render("{{ n }}", v) == 3
    assert render({"a": ["{{ l | length }}"]}, v) == {"a": [2]}


def test_later_layers_win() -> None:
    v = Vars({"x": 1}, {"x": 2}, {"y": 3})
    assert v["x"] == 2 and v["y"] == 3


def test_self_reference_is_an_error() -> None:
    with pytest.raises(TemplateError, match="refers to itself"):
        render("{{ a }}", Vars({"a": "{{ b }}", "b": "{{ a }}"}))


@pytest.mark.parametrize("text", ["{{ nope }}", "x {{ nope }} y", "{{ nope | upper }}"])
def test_undefined_names_the_variable(text: str) -> None:
    with pytest.raises(TemplateError, match="nope"):
        render(text, {})


def test_syntax_error_is_template_error() -> None:
    with pytest.raises(TemplateError, match="syntax"):
        render("{{ 1 + }}", {})


def test_conditions_and_tests() -> None:
    v = {"r": {"rc": 0, "failed": False, "changed": True}, "ver": "3.11.2"}
    assert condition("r.rc == 0", v)
    assert condition(["r is succeeded", "r is changed"], v)
    assert not condition("r is failed", v)
    assert condition("ver is version('3.10', '>=')", v)
    assert condition("{{ ver is version('4', '<') }}", v)
    with pytest.raises(TemplateError, match="boolean result"):  # ansible-core 2.19: no truthy strings
        condition("'yes'", v)
    assert evaluate("[1, 2] | map('string') | join(',')", v) == "1,2"


def test_names_used_ignores_locals_and_globals() -> None:
    names = names_used({"a": "{% for i in range(n) %}{{ i }}{% endfor %}", "b": ["{{ x.y }}"], "c": 3})
    assert names == {"n", "x"}
    assert names_used("a == b", expression=True) == {"a", "b"}


def test_filters_from_ansible() -> None:
    v = {"p": "/a/b/c.txt", "s": "a'b"}
    assert render("{{ p | basename }} {{ p | dirname }}", v) == "c.txt /a/b"
    assert render("{{ s | quote }}", v) == "'a'\"'\"'b'"
    assert render("{{ 'x' | regex_replace('x', 'y') }}", v) == "y"
    assert templating.is_template("{{ a }}") and not templating.is_template("a")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("{'a': 1, 'b': 2} | dict2items | selectattr('key', 'in', ['a']) | items2dict", {"a": 1}),
        ("([1, 2, 3] | map('string')) + ['x']", ["1", "2", "3", "x"]),
        ("([3, 1] | reverse) + [0]", [1, 3, 0]),
        ("([1, 2, 3] | select('odd') | list | length, [1, 2, 3] | select('odd') | length)", (2, 2)),
        ("({'k': 1}.items() | list)", [("k", 1)]),
    ],
)
def test_a_filters_iterator_result_goes_on_as_a_list_as_in_ansible(expr: str, expected: object) -> None:
    # ansible-core 2.19 turns every filter's iterator result into a list before the next step uses it; plain
    # Jinja hands on a generator (`generator + list` fails, items2dict refused it)
    assert evaluate(expr, {}) == expected


def test_an_attribute_of_an_undefined_value_is_the_same_undefined_as_in_ansible() -> None:
    # ansible-core 2.19: `d.missing.x | default(v)` is v and `d.missing.x is defined` is false; using it still fails
    data = {"d": {"a": 1}}
    assert evaluate("d.b.c | default('v')", data) == "v"
    assert evaluate("d.b['c'].e is defined", data) is False
    assert evaluate("nope.x.y | default(2)", {}) == 2
    with pytest.raises(TemplateError, match="has no attribute 'b'"):
        render("{{ d.b.c }}", data)
    with pytest.raises(TemplateError, match="has no attribute 'b'"):
        condition("d.b.c == 1", data)


def test_an_undefined_value_inside_a_built_list_or_dict_fails_the_expression() -> None:
    # before, `[r.missing]` evaluated to a list holding an Undefined, which failed later, outside the task
    with pytest.raises(TemplateError, match="has no attribute 'x'"):
        evaluate("[d.x]", {"d": {}})
    with pytest.raises(TemplateError, match="has no attribute 'x'"):
        render("{{ {'k': [1, d.x.y]} }}", {"d": {}})


def test_a_mapping_read_from_yaml_shows_its_own_keys_not_where_it_came_from(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Playbook and inventory mappings remember their file and line (``LineDict``): ``item.line`` in a lineinfile
    loop rendered the YAML line number, ``item.file`` the file's path. Templates see only the keys."""
    from provision.yamlfile import read as load_yaml

    path = tmp_path / "vars.yml"
    path.write_text("lines:\n  - {line: 'b=2', file: /etc/x}\n  - {regexp: '^a'}\n")
    lines = load_yaml(path)["lines"]
    assert render("{{ item.line }} {{ item.file }}", {"item": lines[0]}) == "b=2 /etc/x"
    assert render("{{ item.line is defined }} {{ item.file | default('none') }}", {"item": lines[1]}) == "False none"
    assert render("{{ item.key_lines is defined }}", {"item": lines[1]}) is False  # one expression: its value
    assert condition("item.line == 'b=2'", {"item": lines[0]})
    assert render("{{ lines | map(attribute='line') | list }}", {"lines": lines[:1]}) == ["b=2"]
