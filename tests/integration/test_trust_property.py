"""Property: hostile values that come from a host arrive verbatim everywhere and execute nothing.

Hypothesis builds strings from the pieces attackers use (quotes, ``$()``, backticks, newlines, ``{{ }}``,
``{% %}``, ``{# #}``, backslashes, glob and option-looking words, non-ASCII). A lab host (real sshd) serves
them as a JSON file; a playbook reads it (``register`` + ``from_json``: host data) and pushes every value
through command argv, shell ``environment``, a ``quote``d shell word, ``copy`` content, ``template`` output,
a file name, ``set_fact`` and ``debug``. Each value must come back byte for byte; a marker file that any
evaluated or executed fragment would create on the controller or the host never appears. The second run of
each playbook changes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.cli import run

pytestmark = pytest.mark.lab

MARKER = "/tmp/provision-property-ran"
PIECES = [
    "'", '"', "\\", "`touch " + MARKER + "`", "$(touch " + MARKER + ")", "${HOME}", "$0", ";", "&&", "|", "\n",
    "\t", " ", "{{ 7 * 191 }}", "{% for i in range(2) %}X{% endfor %}", "{# c #}", "{{", "}}", "{%", "%}",
    "{{ cycler.__init__.__globals__.os.system('touch " + MARKER + "') }}", "*", "~", "-", "--help", "é", "日本",
    "\u202e", "%s", "%(x)s", "{0}", "#", "!", "=", "a=b",
]  # fmt: skip
safe_chars = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\x00")
value = st.lists(st.one_of(st.sampled_from(PIECES), st.text(safe_chars, max_size=4)), max_size=6).map("".join)


@pytest.fixture(scope="module")
def setup(lab, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("property")
    inv = lab.write_inventory(tmp / "inv.yml", names=[1])
    (tmp / "templates").mkdir()
    (tmp / "templates" / "one.j2").write_text("[{{ item }}]")
    home = lab.host(1).home
    (tmp / "pb.yml").write_text(
        f"""- hosts: all
  gather_facts: false
  vars:
    base: {home}/property
  tasks:
    - command: cat {home}/values.json
      register: served
      changed_when: false
    - set_fact:
        values: "{{{{ served.stdout | from_json }}}}"
    - file:
        path: "{{{{ base }}}}"
        state: directory
    - command:
        argv: [printf, '%s', "{{{{ item }}}}"]
      loop: "{{{{ values }}}}"
      register: by_argv
      changed_when: false
    - shell: printf '%s' "$HOSTILE"
      environment:
        HOSTILE: "{{{{ item }}}}"
      loop: "{{{{ values }}}}"
      register: by_env
      changed_when: false
    - shell: "printf '%s' {{{{ item | quote }}}}"
      loop: "{{{{ values }}}}"
      register: by_quote
      changed_when: false
    - copy:
        content: "{{{{ item }}}}"
        dest: "{{{{ base }}}}/copy-{{{{ i }}}}"
      loop: "{{{{ values }}}}"
      loop_control:
        index_var: i
    - template:
        src: one.j2
        dest: "{{{{ base }}}}/tmpl-{{{{ i }}}}"
      loop: "{{{{ values }}}}"
      loop_control:
        index_var: i
    - file:
        path: "{{{{ base }}}}/name-{{{{ item[:60] | replace('/', '_') }}}}"
        state: directory
      loop: "{{{{ values }}}}"
    - set_fact:
        joined: "{{{{ values | join('|') }}}}"
    - debug:
        msg: "{{{{ joined }}}}"
"""
    )
    return inv, tmp, home


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(values=st.lists(value, min_size=1, max_size=4))
@example(values=[p for p in PIECES if "\n" not in p][:12])
def test_hostile_values_from_a_host_arrive_verbatim_and_run_nothing(lab, setup, values, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    inv, tmp, home = setup
    monkeypatch.setenv(*next(iter(lab.ssh_env().items())))
    shutil.rmtree(f"{home}/property", ignore_errors=True)
    lab.run_as(1, ["sh", "-c", 'cat > "$HOME/values.json"'], input=json.dumps(values))
    first = run("run", tmp / "pb.yml", "-i", inv, "--json")
    assert first.code == 0, first.out + first.err
    doc = json.loads(first.out)
    tasks = [next(iter(t["hosts"].values())) for t in doc["plays"][0]["tasks"]]

    def outs(index: int) -> list[str]:
        return [r["stdout"] for r in tasks[index]["results"]]

    expected = [v.rstrip("\r\n") for v in values]  # the command module strips trailing newlines, as Ansible's
    # `command` expands ~ and $VARS in its arguments on the host (Ansible's expand_argument_vars), nothing more:
    # the same expansion, done by the host's python as the lab user, is what must come back
    expand = (
        "import json,os,sys\n"
        "print(json.dumps([os.path.expanduser(os.path.expandvars(v)) for v in json.load(sys.stdin)]))"
    )
    expanded = json.loads(lab.run_as(1, ["python3", "-c", expand], input=json.dumps(expected)).stdout)
    assert outs(3) == expanded  # command argv
    assert outs(4) == expected  # shell, the value in `environment`
    assert outs(5) == expected  # shell, the value as a `quote`d word
    base = Path(home) / "property"
    for i, v in enumerate(values):  # files named by index: a value's bytes may be longer than a file name
        assert (base / f"copy-{i}").read_bytes().decode() == v
        assert (base / f"tmpl-{i}").read_bytes().decode() == f"[{v}]"
        assert (base / f"name-{v[:60].replace('/', '_')}").is_dir()  # 60 characters: at most 240 bytes
    assert tasks[10]["msg"] == "|".join(values)
    assert not Path(MARKER).exists() and not (Path(home) / "property" / MARKER.lstrip("/")).exists()

    second = run("run", tmp / "pb.yml", "-i", inv, "--json")
    assert second.code == 0, second.out + second.err
    stats = json.loads(second.out)["stats"]
    assert all(s["changed"] == 0 for s in stats.values()), stats


def test_nul_and_non_utf8_from_a_host_fail_cleanly_or_arrive_replaced(lab, setup, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A host's output that is not UTF-8 is decoded with replacement characters; a NUL it sends cannot travel
    in argv, the environment, shell text or a path: each such task fails with one line and runs nothing."""
    inv, _, home = setup
    monkeypatch.setenv(*next(iter(lab.ssh_env().items())))
    lab.run_as(1, ["sh", "-c", "printf 'a\\000b{{ 7 * 191 }}\\377\\376z' > \"$HOME/raw.bin\""])
    pb = tmp_path / "nul.yml"
    pb.write_text(
        f"""- hosts: all
  gather_facts: false
  tasks:
    - command: cat {home}/raw.bin
      register: raw
      changed_when: false
    - debug:
        var: raw.stdout
    - command:
        argv: [printf, '%s', "{{{{ raw.stdout }}}}"]
      ignore_errors: true
    - shell: printf '%s' "$V"
      environment:
        V: "{{{{ raw.stdout }}}}"
      ignore_errors: true
    - shell: "printf '%s' {{{{ raw.stdout | quote }}}}"
      ignore_errors: true
    - copy:
        content: x
        dest: "{home}/{{{{ raw.stdout }}}}"
      ignore_errors: true
    - copy:
        content: "{{{{ raw.stdout }}}}"
        dest: "{home}/nul-copy"
"""
    )
    result = run("run", pb, "-i", inv, "--json")
    assert result.code == 0, result.out + result.err
    assert "Traceback" not in result.err
    tasks = [next(iter(t["hosts"].values())) for t in json.loads(result.out)["plays"][0]["tasks"]]
    assert tasks[0]["stdout"] == "a\x00b{{ 7 * 191 }}\ufffd\ufffdz"
    for failed in tasks[2:6]:
        assert failed["failed"] and ("NUL byte" in failed["msg"] or "null byte" in failed["msg"]), failed
    assert (Path(home) / "nul-copy").read_bytes() == "a\x00b{{ 7 * 191 }}\ufffd\ufffdz".encode()
    assert not (Path(home) / "a").exists()  # a path cut at the NUL was never written
