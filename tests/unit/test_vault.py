"""Ansible Vault (provision/vault.py, `provision vault ...`, the --vault-* options), differential with the real
``ansible-vault`` of ansible-core (the test extra): what it writes provision reads, what provision writes it
reads. Plays run through ``ansible_connection: local`` (the lab case is tests/compat/cases/vault_files)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision import vault
from tests.support.cli import run_cli_in

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_VAULT = shutil.which("ansible-vault") or str(Path(sys.executable).parent / "ansible-vault")


@pytest.fixture(autouse=True)
def _no_vault_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    vault.use([])


def ansible_vault(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(cwd / ".ansible-tmp")}
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    proc = subprocess.run(
        [ANSIBLE_VAULT, *args], cwd=cwd, env=env, input=stdin, capture_output=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return proc


def provision_proc(
    *args: str, cwd: Path, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The CLI in a new session (no terminal: a prompt reads stdin, as ansible-core's does)."""
    full = {k: v for k, v in os.environ.items() if k != "ANSIBLE_VAULT_PASSWORD_FILE"}
    full.update({"PYTHONPATH": str(ROOT), "PROVISION_DEBUG_LOG": str(cwd / "debug.log"), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "provision", *args], cwd=cwd, env=full, input=stdin, capture_output=True,
        timeout=60, check=False, start_new_session=True,
    )  # fmt: skip


def passwords(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("correct horse\n")
    (tmp_path / "prod-pw").write_text("  prod battery staple  \n")  # stripped, as ansible-core strips it


BINARY = "naïve ✓ line\n\x00\x01 no newline at the end".encode()


def test_provision_reads_what_ansible_vault_writes(tmp_path: Path) -> None:
    passwords(tmp_path)
    (tmp_path / "plain.txt").write_bytes(BINARY)
    (tmp_path / "prod.yml").write_text("db_password: 'p@ss: \"w\"'\nport: 5432\n")
    ansible_vault("encrypt", "--vault-password-file", "pw", "plain.txt", cwd=tmp_path)
    ansible_vault("encrypt", "--vault-id", "prod@prod-pw", "prod.yml", cwd=tmp_path)
    snippet = ansible_vault(
        "encrypt_string", "--vault-id", "prod@prod-pw", "-n", "api_token", "t0k3n with spaces", cwd=tmp_path
    ).stdout.decode()
    assert (tmp_path / "plain.txt").read_text().startswith("$ANSIBLE_VAULT;1.1;AES256\n")
    assert (tmp_path / "prod.yml").read_text().startswith("$ANSIBLE_VAULT;1.2;AES256;prod\n")

    shown = run_cli_in(tmp_path, ["vault", "view", "--vault-id", "prod@prod-pw", "--vault-password-file", "pw",
                                  "plain.txt", "prod.yml"])  # fmt: skip
    assert shown.code == 0, shown.err
    assert shown.out.encode("utf-8", "surrogateescape").startswith(b"na\xc3\xafve")
    secrets = vault.secrets_from_options([f"prod@{tmp_path}/prod-pw"], [f"{tmp_path}/pw"])
    assert vault.decrypt((tmp_path / "plain.txt").read_bytes(), secrets=secrets) == (BINARY, "default")
    # the envelope's vault id is tried first, the others after it (ansible-core's order)
    assert vault.decrypt((tmp_path / "prod.yml").read_bytes(), secrets=secrets)[1] == "prod"
    vault.use(secrets)
    (tmp_path / "vars.yml").write_text(snippet)
    from provision.modules.varsfiles import read_vars_file

    assert read_vars_file(tmp_path / "vars.yml") == {"api_token": "t0k3n with spaces"}
    assert read_vars_file(tmp_path / "prod.yml") == {"db_password": 'p@ss: "w"', "port": 5432}


def test_ansible_vault_reads_what_provision_writes(tmp_path: Path) -> None:
    passwords(tmp_path)
    (tmp_path / "a.txt").write_bytes(BINARY)
    (tmp_path / "b.yml").write_text("key: value-b\n")
    (tmp_path / "c.yml").write_text("key: value-c\n")
    os.chmod(tmp_path / "c.yml", 0o644)
    steps = [
        ["vault", "encrypt", "--vault-password-file", "pw", "a.txt"],
        ["vault", "encrypt", "--vault-id", "prod@prod-pw", "b.yml"],
        ["vault", "encrypt", "--vault-password-file", "pw", "c.yml"],
        ["vault", "rekey", "--vault-password-file", "pw", "--new-vault-id", "prod@prod-pw", "c.yml"],
    ]
    for argv in steps:
        result = run_cli_in(tmp_path, argv)
        assert result.code == 0 and result.err.strip().endswith("successful"), result.err
    assert (tmp_path / "b.yml").read_text().startswith("$ANSIBLE_VAULT;1.2;AES256;prod\n")
    assert (tmp_path / "c.yml").read_text().startswith("$ANSIBLE_VAULT;1.2;AES256;prod\n")
    assert stat.S_IMODE((tmp_path / "c.yml").stat().st_mode) == 0o600
    assert all(len(line) <= 80 for line in (tmp_path / "a.txt").read_text().splitlines())
    snippet = run_cli_in(tmp_path, ["vault", "encrypt_string", "--vault-id", "prod@prod-pw", "-n", "tok", "s3 cr3t"])
    assert snippet.code == 0 and snippet.out.startswith("tok: !vault |\n          $ANSIBLE_VAULT;1.2;AES256;prod\n")
    envelope = "".join(line.strip() + "\n" for line in snippet.out.splitlines()[1:])
    (tmp_path / "string.vault").write_text(envelope)

    both = ("--vault-id", "prod@prod-pw", "--vault-password-file", "pw")
    viewed = ansible_vault("view", *both, "a.txt", cwd=tmp_path).stdout
    assert viewed.rstrip(b"\n") == BINARY  # (view ends its output with a newline)
    viewed = ansible_vault("view", *both, "b.yml", "c.yml", "string.vault", cwd=tmp_path).stdout
    assert viewed.rstrip(b"\n") == b"key: value-b\nkey: value-c\ns3 cr3t"
    result = run_cli_in(tmp_path, ["vault", "decrypt", "--vault-id", "prod@prod-pw", "b.yml"])
    assert result.code == 0 and (tmp_path / "b.yml").read_text() == "key: value-b\n"


def test_password_sources_as_ansible_reads_them(tmp_path: Path) -> None:
    passwords(tmp_path)
    (tmp_path / "secret.txt").write_text("the plaintext\n")
    ansible_vault("encrypt", "--vault-id", "prod@prod-pw", "secret.txt", cwd=tmp_path)
    script = tmp_path / "pass.sh"
    script.write_text("#!/bin/sh\nprintf 'prod battery staple\\r\\n'\n")
    client = tmp_path / "keys-client.py"  # a -client script is asked for the vault id it serves
    client.write_text("#!/bin/sh\n[ \"$1 $2\" = '--vault-id prod' ] && echo 'prod battery staple' || exit 3\n")
    failing = tmp_path / "broken.sh"
    failing.write_text("#!/bin/sh\nexit 7\n")
    for path in (script, client, failing):
        path.chmod(0o755)
    view = ["vault", "view", "secret.txt"]
    for source in ("prod@pass.sh", "prod@keys-client.py", "prod@prod-pw", "prod-pw"):
        shown = run_cli_in(tmp_path, [*view, "--vault-id", source])
        assert (shown.code, shown.out) == (0, "the plaintext\n"), (source, shown.err)
    env = provision_proc(*view, cwd=tmp_path, env={"ANSIBLE_VAULT_PASSWORD_FILE": str(tmp_path / "prod-pw")})
    assert (env.returncode, env.stdout) == (0, b"the plaintext\n"), env.stderr
    asked = provision_proc(*view, "--ask-vault-pass", cwd=tmp_path, stdin=b"prod battery staple\n")
    assert (asked.returncode, asked.stdout) == (0, b"the plaintext\n"), asked.stderr
    assert b"Vault password: " in asked.stderr
    prompted = provision_proc(*view, "--vault-id", "prod@prompt", cwd=tmp_path, stdin=b"prod battery staple\n")
    assert prompted.returncode == 0 and b"Vault password (prod): " in prompted.stderr
    for source, why in [("broken.sh", "vault password script exited 7 (vault id 'default')"),
                        ("nope", "vault password file not found (vault id 'default')"),
                        ("pw", "cannot decrypt (vault id 'prod'): no vault password given opens it")]:  # fmt: skip
        bad = run_cli_in(tmp_path, [*view, "--vault-id", source])
        assert bad.code == 5 and why in bad.err and len(bad.err.strip().splitlines()) == 1, bad.err


SECRET_VALUES = ["gv-s3cret-1", "hv-s3cret-2", "vf-s3cret-3", "iv-s3cret-4", "ev-s3cret-5", "inl-s3cret-6",
                 "file-s3cret-7", "hvdir-s3cret-8"]  # fmt: skip


def vaulted_project(tmp_path: Path) -> Path:
    """A local-connection project with a vaulted value in every place a play reads one."""
    passwords(tmp_path)
    proj = tmp_path / "proj"
    for sub in ("inv/group_vars/all", "inv/host_vars/h1", "files", "templates", "out"):
        (proj / sub).mkdir(parents=True)
    (proj / "inv" / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"h1": {"ansible_connection": "local", "out": str(proj / "out")}}}})
    )
    plain = {
        "inv/group_vars/all/vault.yml": f"gv_value: {SECRET_VALUES[0]}\nflag: true\n",
        "inv/host_vars/h1/vault.yml": f"hv_value: {SECRET_VALUES[1]}\n",
        "vf.yml": f"vf_value: {SECRET_VALUES[2]}\n",
        "iv.yml": f"iv_value: {SECRET_VALUES[3]}\n",
        "ev.yml": f"ev_value: {SECRET_VALUES[4]}\n",
        "files/secret.conf": f"password={SECRET_VALUES[6]}\n",
        "templates/app.j2": "{{ vf_value }}:{{ hv_value }}\n",
    }
    for name, text in plain.items():
        (proj / name).write_text(text)
    secrets = vault.secrets_from_options([f"prod@{tmp_path}/prod-pw"], [f"{tmp_path}/pw"])
    for i, name in enumerate(plain):
        (proj / name).write_text(vault.encrypt((proj / name).read_bytes(), secrets[i % 2]))
    inline = vault.encrypt(SECRET_VALUES[5], secrets[0])
    hvdir = vault.encrypt(SECRET_VALUES[7], secrets[1])
    (proj / "inv" / "host_vars" / "h1" / "plain.yml").write_text(
        "hvdir_value: !vault |\n" + "".join(f"  {line}\n" for line in hvdir.splitlines())
    )
    (proj / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  vars_files: [vf.yml]\n  vars:\n    inl: !vault |\n"
        + "".join(f"      {line}\n" for line in inline.splitlines())
        + """  tasks:
    - include_vars: iv.yml
    - name: show
      debug: {msg: "{{ gv_value }} {{ hv_value }} {{ vf_value }} {{ iv_value }} {{ ev_value }} {{ inl }}"}
    - debug: {msg: "{{ hvdir_value }} {{ flag }} {{ gv_value | length }}"}
    - copy: {src: files/secret.conf, dest: "{{ out }}/secret.conf", mode: "0640"}
    - copy: {src: files/secret.conf, dest: "{{ out }}/still-vaulted", decrypt: false, mode: "0600"}
    - template: {src: templates/app.j2, dest: "{{ out }}/app.conf", mode: "0600"}
"""
    )
    return proj


def test_a_play_reads_vaulted_values_everywhere_masked_and_converges(tmp_path: Path) -> None:
    proj = vaulted_project(tmp_path)
    argv = ["run", "pb.yml", "-i", "inv/hosts.yml", "--vault-id", "prod@../prod-pw", "--vault-password-file",
            "../pw", "-e", "@ev.yml", "--json", "-vv"]  # fmt: skip
    first = run_cli_in(proj, argv)
    assert first.code == 0, first.err
    for value in SECRET_VALUES:
        assert value not in first.out + first.err
    doc = json.loads(first.out)
    tasks = doc["plays"][0]["tasks"]
    shown = [
        host["msg"] for task in tasks if task["task"]["name"] in ("show", "debug") for host in task["hosts"].values()
    ]
    assert shown == [" ".join(["********"] * 6), "******** True 11"]  # a boolean or a number is no secret
    out = proj / "out"
    assert (out / "secret.conf").read_text() == f"password={SECRET_VALUES[6]}\n"
    assert stat.S_IMODE((out / "secret.conf").stat().st_mode) == 0o640
    assert vault.is_vaulted((out / "still-vaulted").read_bytes())
    assert (out / "app.conf").read_text() == f"{SECRET_VALUES[2]}:{SECRET_VALUES[1]}\n"
    assert stat.S_IMODE((out / "app.conf").stat().st_mode) == 0o600
    again = run_cli_in(proj, argv)
    assert again.code == 0 and json.loads(again.out)["stats"]["h1"]["changed"] == 0, again.err
    listed = run_cli_in(proj, ["inventory", "-i", "inv/hosts.yml", "--vault-password-file", "../pw",
                               "--vault-id", "prod@../prod-pw", "--host", "h1"])  # fmt: skip
    assert listed.code == 0 and json.loads(listed.out)["gv_value"] == "********", listed.err


def small_project(tmp_path: Path, place: str) -> Path:
    """One vaulted place (encrypted with vault id ``prod``) after a first task that would write a file."""
    passwords(tmp_path)
    prod = vault.secrets_from_options([f"prod@{tmp_path}/prod-pw"])[0]
    proj = tmp_path / "proj"
    (proj / "inv").mkdir(parents=True)
    (proj / "inv" / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"h1": {"ansible_connection": "local", "out": str(tmp_path)}}}})
    )
    envelope = vault.encrypt("v: 1\n", prod)
    inline = "!vault |\n" + "".join(f"        {line}\n" for line in vault.encrypt("x", prod).splitlines())
    vars_line, task = "", "    - debug: {msg: hi}\n"
    if place == "group_vars":
        (proj / "inv" / "group_vars" / "all").mkdir(parents=True)
        (proj / "inv" / "group_vars" / "all" / "vault.yml").write_text(envelope)
    elif place == "host_vars":
        (proj / "inv" / "host_vars").mkdir(parents=True)
        (proj / "inv" / "host_vars" / "h1.yml").write_text("ok: 1\nsecret: " + inline.replace("        ", "  "))
    elif place == "inline":
        vars_line = "  vars:\n    pw: " + inline
    elif place == "vars_files":
        (proj / "vf.yml").write_text(envelope)
        vars_line = "  vars_files: [vf.yml]\n"
    elif place in ("include_vars", "extra"):
        (proj / "vf.yml").write_text(envelope)
        task = "    - include_vars: vf.yml\n" if place == "include_vars" else task
    else:  # copy, template
        (proj / "f.txt").write_text(envelope)
        task = f'    - {place}: {{src: f.txt, dest: "{{{{ out }}}}/f"}}\n'
    (proj / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n" + vars_line + "  tasks:\n"
        '    - copy: {content: touched, dest: "{{ out }}/touched"}\n' + task
    )
    return proj


@pytest.mark.parametrize(
    ("place", "where"),
    [
        ("group_vars", r"inv/group_vars/all/vault\.yml: "),
        ("host_vars", r"inv/host_vars/h1\.yml:2: "),
        ("inline", r"pb\.yml:4: "),
        ("vars_files", r"vf\.yml: "),
        ("include_vars", r"vf\.yml: "),
        ("extra", r"vf\.yml: "),
        ("copy", r"f\.txt: "),
        ("template", r"f\.txt: "),
    ],
)
def test_a_wrong_or_missing_password_is_one_line_before_any_host(tmp_path: Path, place: str, where: str) -> None:
    """The line names the file (and the line of an inline value) and the vault id; the first task, which
    would write a file, never ran; the same without any password."""
    import re

    proj = small_project(tmp_path, place)
    extra = ["-e", "@vf.yml"] if place == "extra" else []
    for argv, why in [
        (["--vault-password-file", "../pw", "--vault-id", "dev@../pw"],
         r"cannot decrypt \(vault id 'prod'\): no vault password given opens it \(tried vault ids: dev, default\)"),
        ([], r"vault-encrypted \(vault id 'prod'\) but no vault password was given"),
    ]:  # fmt: skip
        result = run_cli_in(proj, ["run", "pb.yml", "-i", "inv/hosts.yml", *argv, *extra])
        lines = [line for line in result.err.splitlines() if line.strip()]
        assert result.code == 5, result.err
        assert len(lines) == 1 and re.search(f"^ERROR: ({re.escape(str(proj))}/)?{where}{why}", lines[0]), result.err
        assert not (tmp_path / "touched").exists()
    ok = run_cli_in(proj, ["run", "pb.yml", "-i", "inv/hosts.yml", "--vault-id", "prod@../prod-pw", *extra])
    assert ok.code == 0, ok.err


def test_host_output_gets_no_vault_tag() -> None:
    """``from_yaml`` over a host's text (``yamlsafe.load``) knows no ``!vault``: a host cannot make the controller
    decrypt (or even try) an envelope it returns; only the trusted files' reader (``yamlfile``) has the tag."""
    import yaml

    from provision import yamlfile, yamlsafe

    text = "a: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  3030\n"
    with pytest.raises(yaml.constructor.ConstructorError, match="!vault"):
        yamlsafe.load(text)
    assert "!vault" in yamlfile.TAGS
