"""Bad input, run through the real ``provision`` command in a subprocess: exit 5 (3 for a bad flag value),
ONE line naming file:line (or the var / host / flag), no traceback, and no host touched.

The only host is 127.0.0.1 port 1, where nothing listens: had provision contacted it, the run would end
with "unreachable" (exit 4) instead of the validation error these tests expect.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import bad_input
from tests.support.bad_input import INVENTORY, OK_PLAYBOOK, PLAY, assert_one_line, provision, task

inv = bad_input.inv  # the fixture: an inventory of the ghost host

PLAYBOOK_CASES = {
    "retries_word": (task("retries: abc\nuntil: true"), r"pb\.yml:4: retries must be a whole number >= 0, got 'abc'"),
    "retries_negative": (task("retries: -1\nuntil: true"), r"pb\.yml:4: retries must be a whole number"),
    "retries_fraction": (task("retries: 1.5\nuntil: true"), r"pb\.yml:4: retries must be a whole number"),
    "retries_template": (task("retries: '{{ n }}'\nuntil: true"), r"pb\.yml:4: undefined variable 'n'"),
    "delay_word": (task("delay: soon"), r"pb\.yml:4: delay must be a number of seconds >= 0, got 'soon'"),
    "delay_nan": (task("delay: .nan"), r"pb\.yml:4: delay must be a number of seconds >= 0, got nan"),
    "delay_inf": (task("delay: .inf"), r"pb\.yml:4: delay .* got inf"),
    "timeout_list": (task("timeout: [1]"), r"pb\.yml:4: timeout must be a number of seconds > 0, got a list"),
    "timeout_zero": (task("timeout: 0"), r"pb\.yml:4: timeout must be a number of seconds > 0"),
    "timeout_negative": (task("timeout: -5"), r"pb\.yml:4: timeout must be"),
    "mfp_word": (PLAY + "  max_fail_percentage: lots\n  tasks: []\n",
                 r"pb\.yml:1: max_fail_percentage must be a percentage from 0 to 100, got 'lots'"),
    "mfp_nan": (PLAY + "  max_fail_percentage: .nan\n  tasks: []\n", r"pb\.yml:1: max_fail_percentage .* nan"),
    "mfp_over": (PLAY + "  max_fail_percentage: 150\n  tasks: []\n", r"pb\.yml:1: max_fail_percentage"),
    "play_env_space": (PLAY + "  environment: {'A B': x}\n  tasks: []\n",
                       r"pb\.yml:1: environment: 'A B' is not a valid variable name"),
    "task_env_digit": (task("environment: {1X: x}"), r"pb\.yml:4: environment: '1X' is not a valid variable name"),
    "task_env_equals": (task("environment: {'X=Y': x}"), r"pb\.yml:4: environment: 'X=Y' is not"),
    "task_env_value_dict": (task("environment: {X: {a: 1}}"), r"pb\.yml:4: environment: X must be a string"),
    "loop_string": (task("loop: abc"), r"pb\.yml:4: loop must be a list or a template giving one, got 'abc'"),
    "loop_number": (task("loop: 3"), r"pb\.yml:4: loop must be a list .* got 3"),
    "loop_dict": (task("loop: {a: 1}"), r"pb\.yml:4: loop must be a list .* got a mapping"),
    "with_items_mapping": (task("with_items: {a: 1}"), r"pb\.yml:4: with_items must be a list"),
    "lookup_unknown": (task("", "debug: {msg: \"{{ lookup('nosuch', 'x') }}\"}"),
                       r"pb\.yml:4: lookup plugin 'nosuch' is not supported .*\(known: csvfile, dict, env, file, "),
    "query_unknown_in_when": (task("when: query('ansible.builtin.nosuch') | length > 0"),
                              r"pb\.yml:4: lookup plugin 'ansible\.builtin\.nosuch' is not supported"),
    "with_unknown": (task("with_nosuch: [1]"), r"pb\.yml:4: with_nosuch: lookup plugin 'nosuch' is not supported"),
    "loop_and_with": (task("loop: [1]\nwith_dict: {a: 1}"), r"pb\.yml:4: loop and with_dict are mutually exclusive"),
    "vault_in_vars": (PLAY + "  vars:\n    ok: 1\n    pw: !vault |\n      $ANSIBLE_VAULT;1.1;AES256\n      6162\n"
                      "  tasks:\n    - debug: {msg: hi}\n",
                      r"pb\.yml:5: vault-encrypted \(vault id 'default'\) but no vault password was given"),
    "vault_in_args": (task("", "debug: {msg: !vault '$ANSIBLE_VAULT;1.1;AES256'}"),
                      r"pb\.yml:5: vault-encrypted \(vault id 'default'\) but no vault password was given"),
    "when_dict": (task("when: {a: 1}"), r"pb\.yml:4: when must be an expression, true/false, or a list of them"),
    "when_list_of_dict": (task("when: [true, {a: 1}]"), r"pb\.yml:4: when must be an expression"),
    # an unquoted expression holding ': ' is a mapping to YAML; ansible-core fails the task at run time
    "when_unquoted_colon": (task("when:\n  - r.msg == 'a: b'"), r"pb\.yml:4: when .* got a mapping \(YAML reads"),
    "assert_unquoted_colon": (task("", "assert: {that: [x == 'a: b']}"),
                              r"pb\.yml:4: assert: that: conditional expressions must be strings, got a mapping"),
    "assert_number": (task("", "assert: {that: [1]}"), r"pb\.yml:4: .* must be strings, got int 1"),
    "assert_null": (task("", "assert: {that: [null]}"), r"pb\.yml:4: assert: that: empty conditional expressions"),
    "import_tasks_when_dict": (PLAY + "  tasks:\n    - import_tasks: other.yml\n      when: {a: 1}\n",
                               r"pb\.yml:4: when must be an expression"),
    "failed_when_number": (task("failed_when: 3"), r"pb\.yml:4: failed_when must be an expression"),
    "unknown_filter": (task("", "debug: {msg: '{{ 1 | nosuch }}'}"),
                       r"pb\.yml:4: unknown Jinja2 filter 'nosuch' in '\{\{ 1 \| nosuch \}\}'"),
    "unknown_filter_in_if": (task("", "debug: {msg: '{% if false %}{{ 1 | nosuch }}{% endif %}'}"),
                             r"pb\.yml:4: unknown Jinja2 filter 'nosuch'"),
    "unknown_filter_in_when": (task("when: x | nosuch"), r"pb\.yml:4: unknown Jinja2 filter 'nosuch'"),
    "unknown_test": (task("when: x is nosuchtest"), r"pb\.yml:4: unknown Jinja2 test 'nosuchtest'"),
    "unknown_filter_play_vars": (PLAY + "  vars:\n    a: '{{ 1 | nosuch }}'\n  tasks: []\n",
                                 r"pb\.yml:4: vars: unknown Jinja2 filter 'nosuch'"),
    "unknown_filter_assert": (task("", "assert: {that: ['x | nosuch']}"), r"pb\.yml:4: unknown Jinja2 filter"),
    "empty_file": ("", r"pb\.yml:1: the playbook is empty"),
    "empty_list": ("[]\n", r"pb\.yml:1: the playbook is empty"),
    "only_comments": ("# nothing here\n# at all\n", r"pb\.yml:1: the playbook is empty"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(PLAYBOOK_CASES))
def test_bad_playbook_value_exits_5_before_any_host(tmp_path: Path, inv: Path, case: str) -> None:
    text, pattern = PLAYBOOK_CASES[case]
    (tmp_path / "pb.yml").write_text(text)
    assert_one_line(provision("run", "pb.yml", "-i", str(inv), cwd=tmp_path), 5, pattern)


def test_good_values_still_load(tmp_path: Path, inv: Path) -> None:
    (tmp_path / "pb.yml").write_text(
        task("retries: '2'\ndelay: 0\nuntil: true\ntimeout: 1.5\nloop: '{{ [1, 2] }}'\nwhen: [true, 'x is defined']\n"
             "environment: {_A1: x, B: 2}")
    )  # fmt: skip
    run = provision("run", "pb.yml", "-i", str(inv), "--list-tasks", cwd=tmp_path)
    assert run.code == 0, run.err


FLAG_CASES = {
    "forks_word": (["-f", "abc"], r"'-f' / '--forks': 'abc' is not a valid integer"),
    "forks_negative": (["-f", "-1"], r"'-f' / '--forks': -1 is not in the range"),
    "forks_zero": (["--forks", "0"], r"'-f' / '--forks': 0 is not in the range"),
    "timeout_nan": (["-T", "nan"], r"'-T' / '--timeout': 'nan' is not a number of seconds > 0"),
    "timeout_inf": (["--timeout", "inf"], r"'-T' / '--timeout': 'inf' is not a number of seconds > 0"),
    "timeout_negative": (["-T", "-5"], r"'-T' / '--timeout': '-5' is not"),
    "timeout_word": (["-T", "soon"], r"'-T' / '--timeout': 'soon' is not"),
    "connect_timeout_inf": (["--connect-timeout", "inf"], r"'--connect-timeout': 'inf' is not a number of seconds"),
    "connect_timeout_nan": (["--connect-timeout", "nan"], r"'--connect-timeout': 'nan' is not"),
    "connect_timeout_zero": (["--connect-timeout", "0"], r"'--connect-timeout': '0' is not"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(FLAG_CASES))
def test_bad_flag_value_is_one_usage_line(tmp_path: Path, inv: Path, case: str) -> None:
    """A bad flag value is a usage error: exit 3 (interface.md: "3 usage error (bad flag)"), one line."""
    args, pattern = FLAG_CASES[case]
    (tmp_path / "pb.yml").write_text(OK_PLAYBOOK)
    assert_one_line(
        provision("run", "pb.yml", "-i", str(inv), *args, cwd=tmp_path), 3, r"^ERROR: Invalid value for " + pattern
    )


def test_bad_flag_value_of_facts_is_one_usage_line(tmp_path: Path, inv: Path) -> None:
    run = provision("facts", "-i", str(inv), "-T", "nan", cwd=tmp_path)
    assert_one_line(run, 3, r"'-T' / '--timeout': 'nan' is not .*provision facts --help")


def test_extra_vars_with_unbalanced_quote(tmp_path: Path, inv: Path) -> None:
    (tmp_path / "pb.yml").write_text(OK_PLAYBOOK)
    run = provision("run", "pb.yml", "-i", str(inv), "-e", "a='b", cwd=tmp_path)
    assert_one_line(run, 5, r"^ERROR: -e: cannot split key=value words: No closing quotation")
    assert "'b" not in run.err  # the value is not echoed: it may be a secret


@pytest.mark.parametrize("module,args", [("copy", "dest='x"), ("command", "echo 'x"), ("debug", 'msg="hi')])
def test_adhoc_args_with_unbalanced_quote(tmp_path: Path, inv: Path, module: str, args: str) -> None:
    run = provision("task", module, "-a", args, "-i", str(inv), cwd=tmp_path)
    assert_one_line(run, 5, r"^ERROR: -a .*: No closing quotation")


def test_playbook_that_is_a_directory(tmp_path: Path, inv: Path) -> None:
    (tmp_path / "pb.yml").mkdir()
    assert_one_line(provision("run", "pb.yml", "-i", str(inv), cwd=tmp_path), 3, r"'PLAYBOOK': .* is a directory")


INVENTORY_CASES = {
    "port_word": ("inv.yml", "all:\n  hosts:\n    ghost:\n      ansible_host: 127.0.0.1\n      ansible_port: ssh\n",
                  r"^ERROR: host ghost: ansible_port 'ssh' is not a port number \(1-65535\)$"),
    "port_too_big": ("inv.ini", "ghost ansible_host=127.0.0.1 ansible_port=70000\n",
                     r"host ghost: ansible_port 70000 is not a port number"),
    "port_in_group_vars": ("inv.ini", "[gpu]\nghost ansible_host=127.0.0.1\n[gpu:vars]\nansible_port=-1\n",
                           r"host ghost: ansible_port -1 is not a port number"),
    "connection_unknown": ("inv.ini", "ghost ansible_host=127.0.0.1 ansible_port=1 ansible_connection=telnet\n",
                           r"^ERROR: host ghost: ansible_connection 'telnet' is not one of ssh, paramiko, smart"),
    "host_is_a_list": ("inv.yml", "all:\n  hosts:\n    ghost:\n      ansible_host: [127.0.0.1]\n",
                       r"^ERROR: host ghost: ansible_host must be a string, got \['127\.0\.0\.1'\]$"),
    "huge_range": ("inv.ini", "[gpu]\nnode[0:99999999] ansible_host=127.0.0.1 ansible_port=1\n",
                   r"inv\.ini:2: host pattern 'node\[0:99999999\]' expands to 100000000 hosts, more than the "
                   r"limit of 100000 per pattern"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(INVENTORY_CASES))
def test_bad_inventory_exits_5_before_any_host(tmp_path: Path, case: str) -> None:
    name, text, pattern = INVENTORY_CASES[case]
    (tmp_path / name).write_text(text)
    (tmp_path / "pb.yml").write_text(OK_PLAYBOOK)
    assert_one_line(provision("run", "pb.yml", "-i", name, cwd=tmp_path), 5, pattern)


def test_empty_inventory_directory(tmp_path: Path) -> None:
    (tmp_path / "inv").mkdir()
    (tmp_path / "pb.yml").write_text(OK_PLAYBOOK)
    run = provision("run", "pb.yml", "-i", "inv", cwd=tmp_path)
    assert_one_line(run, 5, r"^ERROR: inv: inventory directory holds no inventory file$")
    assert_one_line(provision("inventory", "-i", "inv", "--list", cwd=tmp_path), 5, r"inventory directory holds")


def test_recursive_play_vars(tmp_path: Path, inv: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAY + "  vars:\n    a: '{{ b }}'\n    b: '{{ a }}'\n  tasks: []\n")
    run = provision("run", "pb.yml", "-i", str(inv), cwd=tmp_path)
    assert_one_line(run, 5, r"^ERROR: pb\.yml:1: play vars: variable 'a' refers to itself: a -> b -> a$")


def test_recursive_inventory_vars(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text(INVENTORY + "  vars:\n    venv: '{{ root }}/venv'\n    root: '{{ venv }}/..'\n")
    (tmp_path / "pb.yml").write_text(OK_PLAYBOOK)
    run = provision("run", "pb.yml", "-i", "inv.yml", cwd=tmp_path)
    assert_one_line(run, 5, r"^ERROR: host ghost: inventory variable 'root' refers to itself: root -> venv -> root$")
    # a plain -e value breaks the ring: nothing to report, the run goes on (debug needs no connection)
    assert provision("run", "pb.yml", "-i", "inv.yml", "-e", "root=/opt", cwd=tmp_path).code == 0


def test_recursive_vars_hidden_behind_hostvars_fail_the_task_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text("all:\n  hosts:\n    local1:\n      ansible_connection: local\n")
    (tmp_path / "pb.yml").write_text(
        PLAY + "  vars:\n    a: \"{{ hostvars[inventory_hostname]['b'] }}\"\n    b: '{{ a }}'\n"
        "  tasks:\n    - name: use a\n      debug: {msg: '{{ a }}'}\n"
    )
    run = provision("run", "pb.yml", "-i", "inv.yml", cwd=tmp_path)
    assert run.code == 2, run.err
    assert "Traceback" not in run.out + run.err
    fatal = [line for line in run.out.splitlines() if line.startswith("fatal:")]
    assert fatal == ["fatal: [local1]: FAILED! => variable 'a' refers to itself: a -> b -> a (pb.yml:7)"]


# ---------------------------------------------------------------- other paths that used to end in a traceback

MORE_PLAYBOOK_CASES = {
    "playbook_is_a_dict": ("hosts: all\ntasks: []\n", r"pb\.yml:1: a playbook must be a list of plays"),
    "play_is_a_string": ("- just a string\n", r"pb\.yml: a play must be a mapping"),
    "hosts_is_a_dict": ("- hosts: {a: 1}\n  tasks: []\n", r"pb\.yml:1: hosts must be a host pattern"),
    "two_modules": (task("command: 'true'"), r"pb\.yml:4: task names more than one module: debug, command"),
    "vars_files_missing": (PLAY + "  vars_files: [nothere.yml]\n  tasks: []\n",
                           r"nothere\.yml: cannot read: No such file or directory"),
    "play_vars_int_key": (PLAY + "  vars:\n    1: x\n  tasks: []\n", r"pb\.yml:4: vars: key 1 is not a string"),
    "task_vars_null_key": (task("vars: {null: x}"), r"pb\.yml:\d+: vars: key None is not a string"),
    "serial_bool": (PLAY + "  serial: true\n  tasks: []\n", r"pb\.yml:1: serial: True must be a positive integer"),
    "register_bool": (task("register: true"), r"pb\.yml:4: register name True is not a valid variable name"),
    "diff_number": (task("diff: 3"), r"pb\.yml:4: diff must be true or false, got 3"),
    "delegate_to_list": (task("delegate_to: [a]"), r"pb\.yml:4: delegate_to must be a host name"),
    "loop_var_number": (task("loop: [1]\nloop_control: {loop_var: 3}"), r"pb\.yml:4: loop_control: loop_var 3 is not"),
    "module_arg_wrong_type": (task("", "file: {path: /x, mode: abc}"), r"pb\.yml:4: mode 'abc' must be octal"),
    "module_arg_not_int": (task("", "wait_for: {port: lots}"), r"pb\.yml:4: wait_for: port: 'lots' is not a valid int"),
    "template_file_unknown_filter": (task("", "template: {src: t.j2, dest: /x}"),
                                     r"t\.j2:2: unknown Jinja2 filter 'nosuch'"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(MORE_PLAYBOOK_CASES))
def test_more_bad_playbooks_exit_5(tmp_path: Path, inv: Path, case: str) -> None:
    text, pattern = MORE_PLAYBOOK_CASES[case]
    (tmp_path / "pb.yml").write_text(text)
    (tmp_path / "t.j2").write_text("line one\n{{ inventory_hostname | nosuch }}\n")
    assert_one_line(provision("run", "pb.yml", "-i", str(inv), cwd=tmp_path), 5, pattern)


def test_non_utf8_files(tmp_path: Path, inv: Path) -> None:
    (tmp_path / "pb.yml").write_bytes(b"- hosts: all\n  tasks:\n    - debug: {msg: \xff}\n")
    assert_one_line(
        provision("run", "pb.yml", "-i", str(inv), cwd=tmp_path), 5, r"pb\.yml:3: not UTF-8 text \(byte 0xff\)"
    )
    (tmp_path / "vars.yml").write_bytes(b"a: \xfe\n")
    (tmp_path / "ok.yml").write_text(OK_PLAYBOOK)
    run = provision("run", "ok.yml", "-i", str(inv), "-e", "@vars.yml", cwd=tmp_path)
    assert_one_line(run, 5, r"vars\.yml: -e @file: not UTF-8 text")
    (tmp_path / "inv.ini").write_bytes(b"gh\xffost\n")
    assert_one_line(provision("run", "ok.yml", "-i", "inv.ini", cwd=tmp_path), 5, r"inv\.ini: cannot read: .*utf-8")
    (tmp_path / "t.j2").write_bytes(b"\xff")
    (tmp_path / "pb2.yml").write_text(task("", "template: {src: t.j2, dest: /x}"))
    run = provision("run", "pb2.yml", "-i", str(inv), cwd=tmp_path)
    assert_one_line(run, 5, r"pb2\.yml:4: template source 't\.j2' cannot be read: .*utf-8")


@pytest.mark.parametrize(
    "args,pattern",
    [
        (["-l", "~["], r"bad regular expression in host pattern '~\['"),
        (["-l", "@nothere"], r"nothere: limit file not found"),
        (["-e", "=x"], r"-e: word 1: '' is not a valid variable name"),
        (["-e", "1x=3"], r"-e: word 1: '1x' is not a valid variable name"),
        (["-e", "{bad"], r"-e: invalid JSON"),
    ],
)
def test_bad_limit_and_extra_vars(tmp_path: Path, inv: Path, args: list[str], pattern: str) -> None:
    (tmp_path / "pb.yml").write_text(OK_PLAYBOOK)
    assert_one_line(provision("run", "pb.yml", "-i", str(inv), *args, cwd=tmp_path), 5, pattern)


def test_extra_vars_file_with_non_string_names(tmp_path: Path, inv: Path) -> None:
    (tmp_path / "pb.yml").write_text(OK_PLAYBOOK)
    (tmp_path / "vars.yml").write_text("1: x\n")
    run = provision("run", "pb.yml", "-i", str(inv), "-e", "@vars.yml", cwd=tmp_path)
    assert_one_line(run, 5, r"vars\.yml: -e @file must hold a mapping of variable names")


@pytest.mark.parametrize(
    "text,pattern",
    [
        (
            "all:\n  vars: {1: 2}\n  hosts: {ghost: }\n",
            r"inv\.yml:2: group 'all': vars: variable name 1 is not a string",
        ),
        ("all:\n  hosts:\n    ghost: {null: 1}\n", r"inv\.yml:3: host 'ghost': variable name None is not a string"),
    ],
)
def test_inventory_var_names_must_be_strings(tmp_path: Path, text: str, pattern: str) -> None:
    (tmp_path / "inv.yml").write_text(text)
    (tmp_path / "pb.yml").write_text(OK_PLAYBOOK)
    assert_one_line(provision("run", "pb.yml", "-i", "inv.yml", cwd=tmp_path), 5, pattern)
    assert_one_line(provision("inventory", "-i", "inv.yml", "--list", cwd=tmp_path), 5, pattern)


def test_adhoc_module_arg_of_the_wrong_type(tmp_path: Path, inv: Path) -> None:
    run = provision("task", "file", "-a", "path=/x mode=abc", "-i", str(inv), cwd=tmp_path)
    assert_one_line(run, 5, r"mode 'abc' must be octal")


def test_pd_status_without_pd_hosts(tmp_path: Path, inv: Path) -> None:
    run = provision("pd", "status", "-i", str(inv), cwd=tmp_path)
    assert_one_line(
        run, 5, r"^ERROR: no PD process in the inventory: put hosts in the groups prefill, decode and router$"
    )


def test_deeply_nested_yaml_and_json(tmp_path: Path, inv: Path) -> None:
    deep = "[" * 5000 + "]" * 5000
    (tmp_path / "pb.yml").write_text(PLAY + f"  vars:\n    a: {deep}\n  tasks: []\n")
    assert_one_line(provision("run", "pb.yml", "-i", str(inv), cwd=tmp_path), 5, r"pb\.yml: YAML nested too deeply")
    (tmp_path / "inv.yml").write_text(f"all:\n  vars:\n    a: {deep}\n  hosts: {{ghost: }}\n")
    (tmp_path / "ok.yml").write_text(OK_PLAYBOOK)
    run = provision("run", "ok.yml", "-i", "inv.yml", cwd=tmp_path)
    # provision's own depth check, or PyYAML's (6.0.4 has one, which stops first): either way one line, the file
    assert_one_line(run, 5, r"inv\.yml(:\d+)?: invalid YAML: .*nest")
    run = provision("run", "ok.yml", "-i", str(inv), "-e", '{"a": ' + "[" * 900 + "]" * 900 + "}", cwd=tmp_path)
    assert_one_line(run, 5, r"-e: values nested deeper than 200 levels")


# ---------------------------------------------------------------- check_filters_tests, unit


def test_check_filters_tests_names_the_first_unknown_and_its_line() -> None:
    from provision.errors import TemplateError
    from provision.templating import check_filters_tests

    check_filters_tests("{{ x | default('a') | regex_replace('a', 'b') }}{% if y is version('1', '>=') %}{% endif %}")
    check_filters_tests("x | bool and y is defined", expression=True)
    with pytest.raises(TemplateError, match=r"^unknown Jinja2 filter 'nosuch' in t\.j2$") as info:
        check_filters_tests("one\n{% if false %}\n{{ x | nosuch }}\n{% endif %}\n", "t.j2")
    assert info.value.line == 3
    with pytest.raises(TemplateError, match=r"unknown Jinja2 test 'oddish'"):
        check_filters_tests("x is oddish", expression=True)
    with pytest.raises(TemplateError, match=r"unknown Jinja2 filter 'shout'"):
        check_filters_tests("{% filter shout %}hi{% endfilter %}")
    with pytest.raises(TemplateError, match=r"template syntax error"):
        check_filters_tests("{{ x | }}")


def test_pd_verify_options_are_distinct_and_checked(tmp_path: Path, inv: Path) -> None:
    """pd verify had its own --timeout next to the common -T/--timeout: click warned on every call (stderr
    noise) and a NaN went through. Now --verify-timeout, checked like the others."""
    run = provision("pd", "verify", "-i", str(inv), "--verify-timeout", "nan", cwd=tmp_path)
    assert_one_line(run, 3, r"'--verify-timeout': 'nan' is not a number of seconds > 0")
    run = provision("pd", "verify", "-i", str(inv), cwd=tmp_path)
    assert_one_line(run, 5, r"^ERROR: no router host to verify through")


def test_cut_short_fact_output_fails_the_host_not_the_run() -> None:
    """What a host returns is untrusted input: output without the end marker is a HostError for that host
    (unit: a stand-in connection that answers like a host whose session died half-way)."""
    from provision.errors import HostError
    from provision.facts import gather
    from provision.transport import CommandResult

    class CutShort:
        name = "gpu1"

        def run(self, command: object, timeout: float, stdin: str | None = None) -> CommandResult:
            return CommandResult(command="gather", rc=0, stdout="==uname==\nLinux\n", stderr="")

    with pytest.raises(HostError, match=r"^gpu1: fact gathering: facts output is incomplete"):
        gather(CutShort(), "/opt/venv")  # type: ignore[arg-type]


def test_vvv_shows_the_traceback_of_an_input_error(tmp_path: Path, inv: Path) -> None:
    (tmp_path / "pb.yml").write_text("hosts: all\n")
    run = provision("run", "pb.yml", "-i", str(inv), "-vvv", cwd=tmp_path)
    assert run.code == 5
    assert "Traceback (most recent call last)" in run.err
    assert run.lines[-1] == "ERROR: pb.yml:1: a playbook must be a list of plays"
