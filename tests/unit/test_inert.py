"""Host data is inert and the template environment is a sandbox (docs/security.md).

A value that came from a host (registered result, fact, set_fact, loop item) is data: reading it returns the
text as it is, whatever ``{{ }}``/``{% %}`` it holds. Playbook text is rendered in a Jinja2 sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision import templating
from provision.errors import TemplateError
from provision.templating import Vars, condition, evaluate_expression, inert, render

PAYLOADS = [
    "{{ 7 * 191 }}",
    "{% for i in range(3) %}X{% endfor %}",
    "{{ cycler.__init__.__globals__.os.system('touch MARKER') }}",
    "{{ lipsum.__globals__['os'].popen('touch MARKER').read() }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{# comment #}{{ x }}",
]


def _payload(text: str, marker: Path) -> str:
    return text.replace("MARKER", str(marker))


@pytest.mark.parametrize("text", PAYLOADS)
def test_registered_values_and_facts_are_returned_verbatim(text: str, tmp_path: Path) -> None:
    payload = _payload(text, tmp_path / "ran")
    registered = {"stdout": payload, "stdout_lines": [payload], "json": {payload: payload}}
    v = Vars(
        {"inv": "{{ r.stdout }}"},
        inert({"r": registered, "fact": payload}),
        inert({"ansible_facts": {"pythons": [{"version": payload}]}}),
    )
    assert v["r"] == registered
    assert v["fact"] == payload
    assert render("{{ r.stdout }}", v) == payload
    assert render("got: {{ r.stdout }}!", v) == f"got: {payload}!"
    assert render("{{ inv }}", v) == payload  # a template that reads host data: rendered once, not twice
    assert render("{{ ansible_facts.pythons[0].version }}", v) == payload
    assert render("{{ r.json | dict2items | map(attribute='key') | first }}", v) == payload
    assert condition("r.stdout == fact", v)
    assert evaluate_expression("{{ r.stdout }}", v) == payload  # `that: "{{ r.stdout }}"`: evaluated once
    assert v.child(item=payload)["item"] == payload
    assert not (tmp_path / "ran").exists()


def test_a_template_layer_above_data_is_a_template_again() -> None:
    v = Vars(inert({"x": "{{ 1 + 1 }}"}), {"x": "{{ 2 + 2 }}"})
    assert v["x"] == 4
    assert not v.is_inert("x")
    v = Vars({"x": "{{ 2 + 2 }}"}, inert({"x": "{{ 1 + 1 }}"}))
    assert v["x"] == "{{ 1 + 1 }}" and v.is_inert("x")


@pytest.mark.parametrize(
    "text",
    [
        "{{ cycler.__init__.__globals__.os.system('touch MARKER') }}",
        "{{ joiner.__init__.__globals__['os'].system('touch MARKER') }}",
        "{{ namespace.__init__.__globals__.os.system('touch MARKER') }}",
        "{{ lipsum.__globals__['os'].system('touch MARKER') }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ '{0.__class__.__init__.__globals__}'.format(cycler) }}",
        "{{ (range(10**9) | list) | length }}",
    ],
)
def test_playbook_text_runs_in_a_sandbox(text: str, tmp_path: Path) -> None:
    with pytest.raises(TemplateError):
        render(_payload(text, tmp_path / "ran"), Vars({}))
    assert not (tmp_path / "ran").exists()


def test_the_sandbox_keeps_what_playbooks_use() -> None:
    v = Vars({"l": [3, 1, 2], "d": {"a": 1}, "s": "a-b"})
    assert render("{{ l | sort | join(',') }} {{ d.items() | list }} {{ s.split('-') }} {{ s.upper() }}", v) == (
        "1,2,3 [('a', 1)] ['a', 'b'] A-B"
    )
    loop = "{% set ns = namespace(n=0) %}{% for i in l %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"
    assert render(loop, v) == "6"
    assert render("{{ '%s-%d' | format('x', 3) }} {{ 'x' ~ 1 }}", v) == "x-3 x1"
    assert templating.ENV.is_safe_attribute("", "upper", None)


def test_a_secret_that_came_from_a_host_is_masked_as_it_is_never_rendered(tmp_path: Path) -> None:
    from provision.commands import MASKER
    from provision.executor import register_secrets

    payload = _payload("{{ cycler.__init__.__globals__.os.system('touch MARKER') }}", tmp_path / "ran")
    register_secrets(Vars({"db_password": "{{ 'inventory-' ~ 'secret' }}"}, inert({"api_token": payload})))
    assert not (tmp_path / "ran").exists()
    assert MASKER.mask(f"a {payload} b inventory-secret") == "a ******** b ********"


def test_host_text_cannot_drive_the_controller_terminal() -> None:
    import io

    from provision.report import Reporter
    from provision.results import Status, TaskResult

    hostile = "done\r\x1b[2K\x1b[32mok: [other]\x1b[0m\x1b]52;c;ZXZpbA==\x07 \u202eevil\x00"
    out = io.StringIO()
    reporter = Reporter(stream=out, verbosity=1)
    item = TaskResult("h", "t", Status.FAILED, hostile, {"item_label": hostile})
    reporter.task_result(TaskResult("h", "t", Status.FAILED, hostile, item_results=[item], diff=hostile))
    reporter.progress("h", hostile)
    text = out.getvalue()
    assert not any(c in text for c in "\r\x1b\x07\x00\u202e")
    assert "\\x1b[32mok: [other]" in text and "\\u202eevil" in text
