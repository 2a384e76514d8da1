"""Playbook loading: import_playbook, import_tasks, tags inheritance."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import PlaybookError
from provision.playbook import load_playbook
from tests.support.cli import run_cli


def test_import_tasks_expands_in_place_with_tags_when_and_vars(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "two.yml").write_text(
        "- name: inner one\n  debug: {msg: a}\n- name: inner two\n  debug: {msg: b}\n  when: y\n  tags: [own]\n"
    )
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  tags: [play]\n  tasks:\n    - name: first\n      debug: {msg: x}\n"
        "    - import_tasks: tasks/two.yml\n      tags: [imported]\n      when: x\n      vars: {v: 1}\n"
        "    - name: last\n      debug: {msg: z}\n"
    )
    tasks = load_playbook(tmp_path / "pb.yml")[0].tasks
    assert [t.name for t in tasks] == ["first", "inner one", "inner two", "last"]
    assert tasks[1].tags == {"play", "imported"} and tasks[2].tags == {"play", "imported", "own"}
    assert tasks[1].when == ["x"] and tasks[2].when == ["x", "y"]
    assert tasks[1].vars == {"v": 1}
    assert tasks[2].file.endswith("tasks/two.yml") and tasks[2].line == 3


def test_import_tasks_errors_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text("- hosts: all\n  tasks:\n    - import_tasks: missing.yml\n")
    with pytest.raises(PlaybookError, match=r"pb\.yml:3: import_tasks: .*missing\.yml does not exist"):
        load_playbook(tmp_path / "pb.yml")
    (tmp_path / "loop.yml").write_text("- import_tasks: loop.yml\n")
    (tmp_path / "pb.yml").write_text("- hosts: all\n  tasks:\n    - import_tasks: loop.yml\n")
    with pytest.raises(PlaybookError, match="loop"):
        load_playbook(tmp_path / "pb.yml")
    (tmp_path / "bad.yml").write_text("- name: x\n  nosuchmodule: {}\n")
    (tmp_path / "pb.yml").write_text("- hosts: all\n  tasks:\n    - import_tasks: bad.yml\n")
    with pytest.raises(PlaybookError, match=r"bad\.yml:1: unknown module"):
        load_playbook(tmp_path / "pb.yml")


def test_import_playbook_chain(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text("- hosts: all\n  tasks:\n    - debug: {msg: a}\n")
    (tmp_path / "site.yml").write_text("- import_playbook: a.yml\n- hosts: all\n  tasks:\n    - debug: {msg: b}\n")
    assert len(load_playbook(tmp_path / "site.yml")) == 2


BLOCKS = """\
- hosts: all
  tasks:
    - name: outer
      block:
        - {name: one, command: "true", become: false}
        - block:
            - {name: two, command: "true"}
          rescue:
            - {name: three, debug: {msg: "{{ ansible_failed_task.name }}"}}
      rescue:
        - {name: four, debug: {msg: x}, vars: {v: task}}
      always:
        - {name: five, debug: {msg: y}}
      when: go
      vars: {v: block, w: block}
      tags: [t]
      become: true
      ignore_errors: true
    - {name: six, debug: {msg: z}}
"""


def test_a_block_is_flattened_with_its_place_and_what_it_passes_down(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(BLOCKS)
    tasks = load_playbook(tmp_path / "pb.yml")[0].tasks
    assert [t.name for t in tasks] == ["one", "two", "three", "four", "five", "six"]
    outer = tasks[0].blocks[0]
    assert [[(r.id == outer.id, r.section) for r in t.blocks] for t in tasks] == [
        [(True, "block")],
        [(True, "block"), (False, "block")],
        [(True, "block"), (False, "rescue")],
        [(True, "rescue")],
        [(True, "always")],
        [],
    ]
    assert outer.has_rescue and outer.has_always and not tasks[1].blocks[1].has_always
    assert tasks[2].ends_blocks == (tasks[1].blocks[1].id,) and tasks[4].ends_blocks == (outer.id,)
    assert all(t.when == ["go"] for t in tasks[:5]) and tasks[5].when is None
    assert tasks[3].vars == {"v": "task", "w": "block"} and tasks[0].vars == {"v": "block", "w": "block"}
    assert all("t" in t.tags for t in tasks[:5]) and "t" not in tasks[5].tags
    assert tasks[0].become is False and tasks[1].become is True  # a task's own setting wins
    assert all(t.ignore_errors for t in tasks[:5]) and not tasks[5].ignore_errors


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("- block: [{debug: {msg: x}}]\n      loop: [1]", "'loop' is not supported on a block"),
        ("- {debug: {msg: x}, rescue: [{debug: {msg: y}}]}", "rescue is a key of a block"),
        ("- block: {debug: {msg: x}}", "block must be a list of tasks"),
        ("- include_tasks: other.yml", "include_tasks: other.yml does not exist"),
    ],
)
def test_what_a_block_cannot_carry_is_refused_with_its_line(tmp_path: Path, task: str, message: str) -> None:
    (tmp_path / "pb.yml").write_text(f"- hosts: all\n  tasks:\n    {task}\n")
    with pytest.raises(PlaybookError, match=message) as err:
        load_playbook(tmp_path / "pb.yml")
    assert err.value.line == 3


def _role(root: Path, name: str, tasks: str, meta: str = "") -> None:
    (root / "roles" / name / "tasks").mkdir(parents=True)
    (root / "roles" / name / "tasks" / "main.yml").write_text(tasks)
    if meta:
        (root / "roles" / name / "meta").mkdir()
        (root / "roles" / name / "meta" / "main.yml").write_text(meta)


def test_roles_come_before_tasks_with_their_dependencies_once_and_their_defaults_apart(tmp_path: Path) -> None:
    _role(tmp_path, "base", "- {name: b, debug: {msg: b}}\n")
    _role(tmp_path, "a", "- {name: a, debug: {msg: '{{ x }}'}}\n", "dependencies: [base]\n")
    (tmp_path / "roles" / "a" / "defaults").mkdir()
    (tmp_path / "roles" / "a" / "defaults" / "main.yml").write_text("x: 1\n")
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  roles: [a, {role: base, tags: [t]}]\n  pre_tasks: [{name: p, debug: {msg: p}}]\n"
        "  tasks: [{name: t, debug: {msg: t}}, {import_role: {name: base}}]\n"
    )
    play = load_playbook(tmp_path / "pb.yml")[0]
    # base once among roles: (a dependency and an entry); an import_role runs it again, as ansible-core 2.19 does
    assert [t.name for t in play.tasks] == ["p", "b", "a", "t", "b"]
    assert play.flush_points == {1, 5}  # handlers flush after pre_tasks, and after roles + tasks
    a = play.tasks[2]
    assert a.role_defaults == {"x": 1} and "x" not in a.vars and a.vars["role_name"] == "a"
    assert a.role_path == str((tmp_path / "roles" / "a").resolve())
    assert play.role_defaults == {"x": 1}  # a static role's defaults and vars reach the whole play


@pytest.mark.parametrize(
    ("roles", "message"),
    [
        ("[nope]", "role 'nope' not found \\(looked in "),
        ("[{role: a, 9port: 1}]", "'9port' is not a role keyword nor a valid parameter name"),
        ("[loop]", "role 'loop' depends on itself"),
        ("[{include_role: {name: a}}]", "a role must be a name"),
    ],
)
def test_role_mistakes_are_refused_before_the_run(tmp_path: Path, roles: str, message: str) -> None:
    _role(tmp_path, "a", "- {debug: {msg: a}}\n")
    _role(tmp_path, "loop", "- {debug: {msg: l}}\n", "dependencies: [loop]\n")
    (tmp_path / "pb.yml").write_text(f"- hosts: all\n  roles: {roles}\n")
    with pytest.raises(PlaybookError, match=message):
        load_playbook(tmp_path / "pb.yml")


def _play(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    (tmp_path / "pb.yml").write_text(text)
    return load_playbook(tmp_path / "pb.yml")[0]


def test_play_keywords_reach_the_tasks_and_the_play(tmp_path: Path) -> None:
    play = _play(
        tmp_path,
        "- hosts: all\n  order: sorted\n  remote_user: deploy\n  force_handlers: true\n  collections: [x.y]\n"
        "  check_mode: true\n  run_once: true\n  ignore_errors: true\n  ignore_unreachable: true\n"
        "  gather_subset: [min]\n  debugger: never\n"
        "  vars: {v: 1}\n  vars_prompt: [{name: v, prompt: give v, default: 2}, {name: w, prompt: give w}]\n"
        "  tasks:\n    - {name: a, debug: {msg: a}}\n"
        "    - {name: b, debug: {msg: b}, check_mode: false, run_once: false}\n",
    )
    assert (play.order, play.remote_user, play.force_handlers) == ("sorted", "deploy", True)
    assert play.vars["v"] == 2 and list(play.prompts) == ["w"]  # the prompt's default wins over vars
    a, b = play.tasks
    assert (a.check_mode, a.run_once, a.ignore_errors, a.ignore_unreachable) == (True, True, True, True)
    assert (b.check_mode, b.run_once) == (False, True)  # run_once: false is not told apart from unset


def test_module_defaults_nearest_level_wins_and_action_forms(tmp_path: Path) -> None:
    play = _play(
        tmp_path,
        "- hosts: all\n  module_defaults: {copy: {mode: '0600', content: p}, ansible.builtin.debug: {msg: d}}\n"
        "  tasks:\n    - {name: a, copy: {dest: /a}}\n    - {name: b, debug: }\n"
        "    - block:\n        - {name: c, copy: {dest: /c, content: c},\n"
        "           module_defaults: {ansible.legacy.copy: {mode: '0640'}}}\n"
        "        - {name: d, action: copy dest=/d content=d}\n"
        "      module_defaults: {copy: {mode: '0644'}}\n      delegate_to: h1\n      notify: x\n"
        "    - {name: e, local_action: {module: copy, dest: /e, content: e}}\n"
        "  handlers: [{name: x, debug: {msg: x}}]\n",
    )
    a, b, c, d, e = play.tasks
    assert a.args == {"mode": "0600", "content": "p", "dest": "/a"} and b.args == {"msg": "d"}
    assert c.args == {"mode": "0640", "dest": "/c", "content": "c"} and c.delegate_to == "h1" and c.notify == ["x"]
    assert (
        d.args == {"mode": "0644", "dest": "/d", "content": "d"} and d.module == "copy"
    )  # a level replaces the outer's
    assert e.delegate_to == "localhost" and e.args == {"mode": "0600", "content": "e", "dest": "/e"}


@pytest.mark.parametrize(
    ("play", "message"),
    [
        ("  order: random\n", "order must be one of inventory, reverse_inventory"),
        ("  strategy: mitogen\n", "strategy 'mitogen' is not supported"),
        ("  strategy: free\n  any_errors_fatal: true\n", "any_errors_fatal is not supported with strategy free"),
        ("  module_defaults: {nope: {a: 1}}\n", "module_defaults: unknown module 'nope'"),
        ("  module_defaults: {copy: '{{ d }}'}\n", "a template is not supported here"),
        ("  module_defaults: {copy: {colour: red}}\n", "copy: unknown argument 'colour'"),
        ("  vars_prompt: [{name: p, encrypt: sha512_crypt, default: x}]\n", "encrypt is not supported"),
        ("  vars_prompt: [{prompt: p}]\n", "each entry needs name"),
        ("  tasks: [{action: {dest: /x}}]\n", "action needs a module name"),
        ("  tasks: [{local_action: ping, delegate_to: h}]\n", "local_action and delegate_to are mutually exclusive"),
        ("  tasks: [{meta: end_role}]\n", "meta: end_role is only allowed in a role's tasks"),
        ("  connection: winrm\n", "play connection 'winrm' is not supported"),
    ],
)
def test_play_keyword_mistakes_are_refused_before_the_run(tmp_path: Path, play: str, message: str) -> None:
    text = f"- hosts: all\n{play}" + ("  tasks: [{copy: {dest: /x, content: x}}]\n" if "tasks" not in play else "")
    with pytest.raises(PlaybookError, match=message):
        _play(tmp_path, text)


def test_vars_prompt_without_default_needs_extra_vars_before_any_host(tmp_path: Path) -> None:
    from provision.errors import InputError
    from provision.inventory import Inventory
    from provision.plan import check_plan

    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    h1: {}\n")
    play = _play(
        tmp_path,
        "- hosts: all\n  strategy: \"{{ s | default('linear') }}\"\n  vars_prompt:\n    - name: p\n"
        "      prompt: give p\n  tasks: [{debug: {msg: '{{ p }}'}}]\n",
    )
    inventory = Inventory.load([str(tmp_path / "inv.yml")])
    with pytest.raises(InputError, match="vars_prompt 'p' has no default and provision never prompts") as err:
        check_plan([play], inventory, {}, None, None, str(tmp_path))
    assert err.value.exit_code == 5 and err.value.line == 4
    check_plan([play], inventory, {"p": 1}, None, None, str(tmp_path))
    with pytest.raises(InputError, match="strategy 'debug' is not supported"):
        check_plan([play], inventory, {"p": 1, "s": "debug"}, None, None, str(tmp_path))


def test_include_role_is_a_dynamic_task_checked_before_the_run(tmp_path: Path) -> None:
    _role(
        tmp_path, "svc", "- {name: s, debug: {msg: s}}\n- include_role: {name: svc, tasks_from: main}\n  when: false\n"
    )
    (tmp_path / "roles" / "svc" / "tasks" / "extra.yml").write_text("- {name: e, debug: {msg: e}}\n")
    play = _play(
        tmp_path,
        "- hosts: all\n  tasks:\n    - include_role: {name: svc, tasks_from: extra, apply: {tags: [x], become: true}}\n"
        "      loop: [1, 2]\n    - ansible.builtin.include_role: {name: '{{ r }}'}\n",
    )
    first, second = play.tasks  # read at run time: the include stays one task
    assert (first.module, first.loop, first.args["apply"]) == ("include_role", [1, 2], {"tags": ["x"], "become": True})
    assert second.module == "include_role" and second.args == {"name": "{{ r }}"}


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("include_role: {name: nope}", "role 'nope' not found"),
        ("include_role: {name: svc, tasks_from: missing}", "role 'svc': tasks_from: no tasks/missing"),
        ("import_role: {name: svc, vars_from: missing}", "role 'svc': vars_from: no vars/missing"),
        ("include_role: {name: svc, apply: {loop: [1]}}", "include_role: apply: 'loop' is not supported"),
        ("include_role: {name: svc, public: maybe}", "public"),
        ("include_role: {name: svc, colour: red}", "include_role: unknown argument 'colour'"),
        ("include_tasks: {file: t.yml, apply: {until: x}}", "include_tasks: apply: 'until' is not supported"),
        ("include_role: {name: bad}", "unknown task key or module 'colour'"),
        ("include_tasks: bad.yml", "bad.yml:1: unknown task key or module 'colour'"),
    ],
)
def test_include_role_mistakes_are_refused_before_the_run(tmp_path: Path, task: str, message: str) -> None:
    _role(tmp_path, "svc", "- {debug: {msg: s}}\n")
    _role(tmp_path, "bad", "- {debug: {msg: s}, colour: red}\n")
    (tmp_path / "bad.yml").write_text("- {debug: {msg: s}, colour: red}\n")
    (tmp_path / "t.yml").write_text("- {debug: {msg: t}}\n")
    with pytest.raises(PlaybookError, match=message):
        _play(tmp_path, f"- hosts: all\n  tasks:\n    - {task}\n")


def test_what_a_dynamic_include_reads_may_hold_tasks_provision_cannot_run_as_warnings(tmp_path: Path) -> None:
    """A role's file for another system (a module provision lacks, arguments a module refuses): ansible-core reads
    it only when a host includes it, so it is a warning of the play, not a refusal; imported, it is refused."""
    (tmp_path / "setup-FreeBSD.yml").write_text(
        "- pkgng: {name: nginx}\n- debug: {msg: ok}\n- block:\n    - copy: {dest: /x}\n"
    )
    _role(tmp_path, "bsd", "- name: t\n  portinstall: {name: x}\n")
    play = _play(
        tmp_path,
        "- hosts: all\n  tasks:\n    - include_tasks: setup-FreeBSD.yml\n      when: false\n"
        "    - include_role: {name: bsd}\n      when: false\n",
    )
    assert [t.module for t in play.tasks] == ["include_tasks", "include_role"]
    assert len(play.warnings) == 3, play.warnings
    first, second, third = play.warnings
    assert first == (
        f"{tmp_path}/setup-FreeBSD.yml:1: unknown module 'pkgng' (did you mean 'ping'?) (put off: it fails only a"
        " host that runs this task)"
    )
    assert second.startswith(f"{tmp_path}/setup-FreeBSD.yml:4: copy: give exactly one of content or src")
    assert third.startswith(f"{tmp_path}/roles/bsd/tasks/main.yml:1: unknown module 'portinstall'")
    # what the include reads: each such task a `fail` task with its message, where it was
    preview = play.tasks[0].preview
    assert preview is not None and [t.module for t in preview] == ["fail", "debug", "fail"]
    assert (preview[0].name, preview[0].line) == ("pkgng", 1)
    assert (
        preview[0].args["msg"]
        == "{% raw %}" + first.removesuffix(" (put off: it fails only a host that runs this task)") + "{% endraw %}"
    )


def test_a_task_provision_cannot_run_under_a_when_is_put_off_when_ansible_knows_its_module(tmp_path: Path) -> None:
    """A static import (nodejs's `import_tasks: setup-RedHat.yml` under `when: os_family == 'RedHat'`) of a
    module provision lacks and ansible-core has (`rpm_key`): a warning and a failing task; a name ansible-core
    does not know either (a typo) is refused, as ansible-core refuses it; so is one that always runs."""
    (tmp_path / "setup-RedHat.yml").write_text("- rpm_key: {key: k}\n- debug: {msg: ok}\n")
    (tmp_path / "typo.yml").write_text("- rpmkey: {key: k}\n")
    play = _play(
        tmp_path,
        "- hosts: all\n  tasks:\n    - import_tasks: setup-RedHat.yml\n      when: os == 'RedHat'\n"
        "    - block:\n        - community.general.timezone: {name: UTC}\n      when: false\n"
        "    - systemd_service: {name: docker}\n      when: false\n",
    )
    assert [t.module for t in play.tasks] == ["fail", "debug", "fail", "fail"]
    wanted = ["unknown module 'rpm_key'", "unknown module 'community.general.timezone'", "systemd_service: one of"]
    assert [w.split(": ", 1)[1][: len(x)] for w, x in zip(play.warnings, wanted, strict=True)] == wanted
    assert play.tasks[0].when == ["os == 'RedHat'"] and play.tasks[2].when == [False]
    kept = _play(
        tmp_path,
        "- hosts: all\n  tasks:\n    - rpm_key: {key: k}\n      when: x\n      failed_when: false\n"
        "      register: r\n      retries: 3\n      until: r is success\n  handlers:\n    - name: h\n"
        "      rpm_key: {key: k}\n",
    )
    task, handler = kept.tasks[0], kept.handlers[0]  # it fails wherever it runs: nothing turns that to success
    assert (task.module, task.failed_when, task.until, task.retries, task.register) == ("fail", None, None, None, "r")
    assert (handler.module, handler.name) == ("fail", "h")  # a handler runs only when notified
    with pytest.raises(PlaybookError, match=r"typo\.yml:1: unknown module 'rpmkey'"):
        _play(tmp_path, "- hosts: all\n  tasks:\n    - import_tasks: typo.yml\n      when: false\n")
    with pytest.raises(PlaybookError, match=r"setup-RedHat\.yml:1: unknown module 'rpm_key'"):
        _play(tmp_path, "- hosts: all\n  tasks:\n    - import_tasks: setup-RedHat.yml\n")
    with pytest.raises(PlaybookError, match=r"pb\.yml:3: unknown module 'pkgng'"):
        _play(tmp_path, "- hosts: all\n  tasks:\n    - pkgng: {name: x}\n")


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("include_vars: {file: a.yml, dir: d}", "give exactly one of file"),
        ("include_vars: {name: x}", "give exactly one of file"),
        ("include_vars: {file: a.yml, name: 1x}", "name '1x' is not a valid variable name"),
        ("include_vars: {file: a.yml, hash_behaviour: deep}", "hash_behaviour='deep' is not one of"),
    ],
)
def test_include_vars_mistakes_are_refused_before_the_run(tmp_path: Path, task: str, message: str) -> None:
    with pytest.raises(PlaybookError, match=message):
        _play(tmp_path, f"- hosts: all\n  tasks:\n    - {task}\n")


def test_the_planner_knows_the_names_a_dynamic_include_registers(tmp_path: Path) -> None:
    """A role's `install-ubuntu.yml` registers `install_driver`, which its main.yml tests later (NVIDIA's
    driver role): the planner reads what a literal include_tasks/include_role holds; a templated one may define
    anything, so names are not refused up front then."""
    from provision.errors import TemplateError
    from provision.inventory import Inventory
    from provision.plan import check_plan

    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    h1: {}\n")
    inventory = Inventory.load([str(tmp_path / "inv.yml")])
    (tmp_path / "install.yml").write_text("- command: 'true'\n  register: install_driver\n- include_tasks: more.yml\n")
    (tmp_path / "more.yml").write_text("- set_fact: {deeper: 1}\n")
    _role(tmp_path, "drv", "- shell: 'true'\n  register: from_role\n")
    uses = "    - debug: {msg: '{{ install_driver.rc }} {{ deeper }} {{ from_role.rc }}'}\n"
    known = _play(
        tmp_path,
        "- hosts: all\n  tasks:\n    - include_tasks: install.yml\n      when: false\n"
        "    - include_role: {name: drv}\n" + uses,
    )
    check_plan([known], inventory, {}, None, None, str(tmp_path))
    typo = _play(tmp_path, "- hosts: all\n  tasks:\n    - include_tasks: install.yml\n"
                           "    - debug: {msg: '{{ install_drivr }}'}\n")  # fmt: skip
    with pytest.raises(TemplateError, match="undefined variable 'install_drivr'"):
        check_plan([typo], inventory, {}, None, None, str(tmp_path))
    templated = _play(tmp_path, "- hosts: all\n  tasks:\n    - include_tasks: '{{ which }}.yml'\n"
                                "    - debug: {msg: '{{ anything }}'}\n")  # fmt: skip
    check_plan([templated], inventory, {"which": "install"}, None, None, str(tmp_path))


def test_a_mutual_exclusion_an_omit_may_undo_is_checked_when_it_renders(tmp_path: Path) -> None:
    """geerlingguy's pip role: `virtualenv: "{{ item.virtualenv | default(omit) }}"` beside `executable:
    "{{ ... | ternary(omit, pip_executable) }}"`: only one is given once rendered. Checked then, not before."""
    from provision.catalog import lookup

    pip = lookup("pip")
    assert pip is not None
    omits = {"name": "x", "virtualenv": "{{ v | default(omit) }}", "executable": "{{ v | ternary(omit, 'pip3') }}"}
    pip.validate_static(omits, lambda v: "{{" in str(v))
    with pytest.raises(ValueError, match="executable and virtualenv are mutually exclusive"):
        pip.validate_static({"name": "x", "virtualenv": "/v", "executable": "pip3"}, lambda v: False)
    with pytest.raises(ValueError, match="mutually exclusive"):  # a template that cannot omit: refused now
        pip.validate_static({"name": "x", "virtualenv": "{{ v }}", "executable": "pip3"}, lambda v: "{{" in str(v))
    (tmp_path / "inv.yml").write_text("all:\n  vars:\n    ansible_connection: local\n  hosts:\n    h1: {}\n")
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - pip: {name: x, virtualenv: '{{ v | default(omit) }}', executable: '{{ e | default(omit) }}'}\n"
        "      vars: {v: /tmp/venv, e: pip3}\n"
    )
    result = run_cli(["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inv.yml")])
    assert result.code == 2, result.out + result.err
    assert "pip: executable and virtualenv are mutually exclusive" in result.out, result.out


def test_the_planner_knows_the_names_include_vars_reads(tmp_path: Path) -> None:
    from provision.errors import TemplateError
    from provision.inventory import Inventory
    from provision.plan import check_plan

    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    h1: {}\n")
    (tmp_path / "vars").mkdir()
    (tmp_path / "vars" / "a.yml").write_text("from_file: 1\n")
    inventory = Inventory.load([str(tmp_path / "inv.yml")])
    known = _play(
        tmp_path, "- hosts: all\n  tasks:\n    - include_vars: a.yml\n    - debug: {msg: '{{ from_file }}'}\n"
    )
    check_plan([known], inventory, {}, None, None, str(tmp_path))
    typo = _play(tmp_path, "- hosts: all\n  tasks:\n    - include_vars: a.yml\n    - debug: {msg: '{{ from_fil }}'}\n")
    with pytest.raises(TemplateError, match="undefined variable 'from_fil'"):
        check_plan([typo], inventory, {}, None, None, str(tmp_path))
    named = _play(tmp_path, "- hosts: all\n  tasks:\n    - include_vars: {dir: vars, name: bag}\n"
                            "    - debug: {msg: '{{ bag }}'}\n")  # fmt: skip
    check_plan([named], inventory, {}, None, None, str(tmp_path))


def test_the_names_ansible_core_knows_are_this_ansible_core_s() -> None:
    """provision/data/ansible_modules.txt is what scripts/ansible_module_names.py makes of the ansible-core the
    compat tests use (run it after an upgrade)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "scripts/ansible_module_names.py", "--check"], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    from provision.catalog import known_to_ansible

    assert known_to_ansible("rpm_key") and known_to_ansible("ansible.builtin.yum") and known_to_ansible("timezone")
    assert known_to_ansible("community.general.npm") and not known_to_ansible("rpmkey")
