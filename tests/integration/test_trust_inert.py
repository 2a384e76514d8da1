"""What a host sends back is data, never code (docs/security.md), against real sshd hosts.

A user on a managed host controls file contents, command output and even what ``python3 --version`` says on
that host. Each payload below reaches the output and the files verbatim and runs nothing on the controller:
the marker file each payload would create on the controller never appears."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run, write

pytestmark = pytest.mark.lab


def payloads(marker: Path) -> list[str]:
    m = str(marker)
    return [
        f"{{{{ cycler.__init__.__globals__.os.system('touch {m}-1') }}}}",
        f"{{{{ lipsum.__globals__['os'].popen('touch {m}-2').read() }}}}",
        "{{ 7 * 191 }}",
        "{% for i in range(3) %}X{% endfor %}",
        "plain $(touch " + m + "-3) `touch " + m + "-4` 'q' \"dq\" \\ ; | &",
    ]


@pytest.fixture
def one(lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(*next(iter(lab.ssh_env().items())))
    return lab.write_inventory(tmp_path / "inv.yml", names=[0])


def _no_marker(marker: Path) -> None:
    ran = sorted(p.name for p in marker.parent.glob(marker.name + "*"))
    assert not ran, f"host data was executed on the controller: {ran}"


def test_registered_output_file_contents_and_dict_keys_stay_data(lab, one: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "ran"
    texts = payloads(marker)
    home = lab.host(0).home
    lab.run_as(0, ["sh", "-c", 'cat > "$HOME/payload.txt"'], input="\n".join(texts) + "\n")
    lab.run_as(0, ["sh", "-c", 'cat > "$HOME/payload.json"'], input=json.dumps({t: t for t in texts}))
    out_file = f"{home}/copied.txt"
    pb = write(
        tmp_path / "pb.yml",
        f"""- hosts: all
  gather_facts: false
  tasks:
    - command: cat {home}/payload.txt
      register: r
      changed_when: r.stdout != ''
      failed_when: r.stdout_lines | length == 0
    - command: cat {home}/payload.json
      register: j
    - set_fact:
        built: "prefix {{{{ r.stdout }}}}"
        keyed: "{{{{ j.stdout | from_json }}}}"
    - debug:
        msg: "{{{{ r.stdout }}}}"
      when: r.stdout is search('cycler')
    - debug:
        var: r.stdout_lines
    - debug:
        msg: "{{{{ item.key }}}}={{{{ item.value }}}}"
      loop: "{{{{ keyed | dict2items }}}}"
    - debug:
        msg: "{{{{ item }}}}"
      loop: "{{{{ r.stdout_lines }}}}"
    - assert:
        that:
          - "{{{{ r.stdout | length > 0 }}}}"  # trusted text embedding host data; a boolean, as 2.19 wants
          - built == 'prefix ' ~ r.stdout
          - keyed | length == {len(texts)}
    - copy:
        content: "{{{{ built }}}}"
        dest: {out_file}
    - command: cat {out_file}
      register: back
      until: back.stdout == built
      retries: 2
      delay: 0
""",
    )
    result = run("run", pb, "-i", one, "--json")
    assert result.code == 0, result.out + result.err
    doc = json.loads(result.out)
    everything = result.out + result.err
    _no_marker(marker)
    assert "XXX" not in everything  # the {% for %} a host sent never ran ({{ 7 * 191 }}: the messages below)
    tasks = doc["plays"][0]["tasks"]
    (host_doc,) = tasks[0]["hosts"].values()
    assert host_doc["stdout_lines"] == texts
    loop_msgs = [r["msg"] for r in next(iter(tasks[5]["hosts"].values()))["results"]]
    assert loop_msgs == [f"{t}={t}" for t in texts]
    item_msgs = [r["msg"] for r in next(iter(tasks[6]["hosts"].values()))["results"]]
    assert item_msgs == texts
    copied = lab.run_as(0, ["cat", out_file]).stdout
    assert copied == "prefix " + "\n".join(texts)


def test_a_host_that_lies_about_its_python_gets_its_lie_printed_not_run(lab, one: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "ran"
    lie = f"Python 3.11.{{{{cycler.__init__.__globals__.os.mkdir('{marker}-fact')}}}}{{{{7*191}}}}"
    home = lab.host(0).home
    fake = f"""#!/bin/sh
if [ "$1" = --version ]; then
cat <<'LIE'
{lie}
LIE
exit 0
fi
exec /usr/bin/python3 "$@"
"""
    lab.run_as(0, ["mkdir", "-p", f"{home}/evil"])
    lab.run_as(0, ["sh", "-c", f"cat > {home}/evil/python3 && chmod 755 {home}/evil/python3"], input=fake)
    # bash sources ~/.bashrc for commands run by sshd: the host's user controls PATH
    bashrc = f'cp -a {home}/.bashrc {home}/.bashrc.orig 2>/dev/null; echo "PATH={home}/evil:$PATH" > {home}/.bashrc'
    lab.run_as(0, ["sh", "-c", bashrc])
    try:
        pb = write(
            tmp_path / "pb.yml",
            """- hosts: all
  gather_facts: true
  tasks:
    - debug:
        msg: "{{ ansible_facts.pythons | map(attribute='version') | list }}"
    - debug:
        var: ansible_facts.pythons
      when: ansible_facts.pythons[0].version is search('cycler')
    - set_fact:
        pyver: "{{ ansible_facts.pythons[0].version }}"
    - debug:
        msg: "{{ pyver }}"
""",
        )
        result = run("run", pb, "-i", one, "--json")
    finally:
        lab.run_as(0, ["sh", "-c", f"rm -f {home}/.bashrc; mv {home}/.bashrc.orig {home}/.bashrc 2>/dev/null; true"])
    assert result.code == 0, result.out + result.err
    _no_marker(marker)
    version = lie.removeprefix("Python ")
    doc = json.loads(result.out)
    tasks = doc["plays"][0]["tasks"]
    assert version in next(iter(tasks[1]["hosts"].values()))["msg"]  # the lie reached the facts ...
    assert next(iter(tasks[2]["hosts"].values())).get("skipped") is not True  # ... and a `when` read it
    assert next(iter(tasks[4]["hosts"].values()))["msg"] == version  # set_fact from a fact: still verbatim


def test_playbook_text_cannot_reach_python_either(lab, one: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "ran"
    pb = write(
        tmp_path / "pb.yml",
        f"""- hosts: all
  gather_facts: false
  tasks:
    - debug:
        msg: "{{{{ cycler.__init__.__globals__.os.system('touch {marker}-pb') }}}}"
""",
    )
    result = run("run", pb, "-i", one)
    assert result.code == 2, result.out + result.err
    assert "unsafe" in result.out + result.err
    _no_marker(marker)
