"""``provision vault encrypt|decrypt|view|rekey|encrypt_string``: ``ansible-vault``'s verbs, same files both
ways (:mod:`provision.vault` holds the format). Files are rewritten atomically, 0600, never through a link;
``-`` (or no FILE) is stdin/stdout. The status line (``Encryption successful``) goes to stderr, as ansible-vault's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from ..errors import InputError, UsageError
from .common import Group, vault_options

if TYPE_CHECKING:
    from ..vault import VaultSecret


@click.group("vault", cls=Group)
def vault_cmd() -> None:
    """Ansible Vault files and values (as ansible-vault): encrypt, decrypt, view, rekey, encrypt_string."""


def _encrypt_secret(encrypt_vault_id: str | None) -> VaultSecret:
    from .. import vault

    secrets = vault.current()
    if encrypt_vault_id:
        chosen = [s for s in secrets if s.vault_id == encrypt_vault_id]
        if not chosen:
            raise UsageError(f"--encrypt-vault-id {encrypt_vault_id!r}: no --vault-id gives that vault id")
        return chosen[0]
    if not secrets:
        raise UsageError("no vault password given: use --vault-id, --vault-password-file or --ask-vault-pass")
    if len({s.vault_id for s in secrets}) > 1:
        ids = ",".join(dict.fromkeys(s.vault_id for s in secrets))
        raise UsageError(f"the vault ids {ids} are available to encrypt: choose one with --encrypt-vault-id")
    return secrets[0]


def _read(name: str) -> bytes:
    if name == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        return stdin.read() if stdin is not None else sys.stdin.read().encode("utf-8", "surrogateescape")
    try:
        with open(name, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=name) from None


def _write(name: str, data: bytes) -> None:
    from ..localfiles import replace_file

    if name == "-":
        out = getattr(sys.stdout, "buffer", None)  # a text-only stdout (captured) gets the text
        out.write(data) if out is not None else sys.stdout.write(data.decode("utf-8", "surrogateescape"))
        sys.stdout.flush()
        return
    try:
        replace_file(name, data, mode=0o600)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", file=name) from None


def _files(files: Sequence[str]) -> list[str]:
    return list(files) or ["-"]


@vault_cmd.command()
@click.argument("files", nargs=-1)
@click.option("--encrypt-vault-id", help="the vault id to encrypt with (when several are given)")
@click.option("--output", help="write here instead of in place ('-': stdout)")
@vault_options
def encrypt(files: tuple[str, ...], encrypt_vault_id: str | None, output: str | None) -> int:
    """Encrypt FILES in place (or stdin to stdout)."""
    from .. import vault

    secret = _encrypt_secret(encrypt_vault_id)
    names = _files(files)
    for name in names:
        data = _read(name)
        if vault.is_vaulted(data):
            raise InputError("input is already encrypted", file=name)
        _write(output or name, vault.encrypt(data, secret).encode())
    click.echo("Encryption successful", err=True)
    return 0


@vault_cmd.command()
@click.argument("files", nargs=-1)
@click.option("--output", help="write here instead of in place ('-': stdout)")
@vault_options
def decrypt(files: tuple[str, ...], output: str | None) -> int:
    """Decrypt FILES in place (or stdin to stdout)."""
    for name in _files(files):
        _write(output or name, _plaintext(name))
    click.echo("Decryption successful", err=True)
    return 0


def _plaintext(name: str) -> bytes:
    from .. import vault

    data = _read(name)
    if not vault.is_vaulted(data):
        raise InputError("input is not vault encrypted data", file=name)
    plaintext, _ = vault.decrypt(data, file=name)
    return plaintext


@vault_cmd.command()
@click.argument("files", nargs=-1, required=True)
@vault_options
def view(files: tuple[str, ...]) -> int:
    """Print the plaintext of FILES (no pager)."""
    for name in files:
        _write("-", _plaintext(name))
    return 0


@vault_cmd.command()
@click.argument("files", nargs=-1, required=True)
@click.option("--new-vault-id", help="[LABEL@]SOURCE of the new password")
@click.option("--new-vault-password-file", help="the new password's file or script (vault id default)")
@vault_options
def rekey(files: tuple[str, ...], new_vault_id: str | None, new_vault_password_file: str | None) -> int:
    """Encrypt FILES again under a new password (and vault id)."""
    from .. import vault

    if bool(new_vault_id) == bool(new_vault_password_file):
        raise UsageError("rekey: give exactly one of --new-vault-id or --new-vault-password-file")
    new = vault.secrets_from_options(
        [new_vault_id] if new_vault_id else [], [new_vault_password_file] if new_vault_password_file else [], env={}
    )[0]
    texts = [(name, _plaintext(name)) for name in files]  # every file opens before any is rewritten
    for name, plaintext in texts:
        _write(name, vault.encrypt(plaintext, new).encode())
    click.echo("Rekey successful", err=True)
    return 0


def _yaml_block(envelope: str, name: str | None) -> str:
    lines = [f"{name}: !vault |" if name else "!vault |"]
    lines += [" " * 10 + line for line in envelope.splitlines()]
    return "\n".join(lines)


@vault_cmd.command("encrypt_string")
@click.argument("strings", nargs=-1)
@click.option("-n", "--name", "names", multiple=True, help="the variable name of each STRING, in order")
@click.option("--stdin-name", help="the variable name of the value read from stdin")
@click.option("--encrypt-vault-id", help="the vault id to encrypt with (when several are given)")
@vault_options
def encrypt_string(strings: tuple[str, ...], names: tuple[str, ...], stdin_name: str | None,
                   encrypt_vault_id: str | None) -> int:  # fmt: skip
    """Encrypt STRINGS (or stdin) as YAML '!vault |' values, for a vars file or a playbook."""
    from .. import vault

    secret = _encrypt_secret(encrypt_vault_id)
    values: list[tuple[str | None, bytes]] = []
    if not strings or strings == ("-",):
        values.append((stdin_name, _read("-")))
    else:
        values += [(names[i] if i < len(names) else None, s.encode()) for i, s in enumerate(strings)]
    for value_name, value in values:
        if not value:
            raise InputError("encrypt_string: the value to encrypt is empty")
        click.echo(_yaml_block(vault.encrypt(value, secret), value_name))
    click.echo("Encryption successful", err=True)
    return 0
