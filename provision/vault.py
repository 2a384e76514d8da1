"""Ansible Vault: reading and writing what ``ansible-vault`` reads and writes, byte for byte in format.

The format (ansible-core's ``parsing/vault``): a header line ``$ANSIBLE_VAULT;1.1;AES256`` (``1.2;AES256;LABEL``
when the vault id is not ``default``), then the payload in lines of 80 hex digits. The payload is the hex of
``hex(salt) \\n hex(hmac) \\n hex(ciphertext)``: a 32-byte random salt, PBKDF2-HMAC-SHA256 (10000 iterations)
of the password and salt giving 80 bytes (the AES-256 key, the HMAC-SHA256 key, the 16-byte CTR counter), the
plaintext PKCS#7-padded and encrypted with AES-256-CTR, the HMAC over the ciphertext (checked first, in
constant time). The crypto is ``cryptography``'s.

Secrets (:class:`VaultSecret`: a vault id and its password) are set once per run with :func:`use` (the CLI's
``--vault-id``, ``--vault-password-file``, ``--ask-vault-pass``, ``ANSIBLE_VAULT_PASSWORD_FILE``:
:func:`secrets_from_options`); decryption tries the secret whose vault id the envelope names first, then the
others, as ansible-core does. Everything is decrypted on the controller, when it is loaded — before any host is
touched — and every decrypted value is registered with :data:`provision.commands.MASKER` (every value of a
vaulted file, every inline ``!vault`` value): masked in every printer, like any secret. A wrong or missing
password is one :class:`VaultError` line (exit 5) naming the file (and line) and the vault id.

The hooks: :func:`construct` is the ``!vault`` YAML constructor (registered on every loader), :func:`reveal`
turns a file's bytes into its plaintext when they are vaulted (``yamlsafe.read_text`` for every YAML file,
``files.read_controller_file`` for ``copy``/``template``/``script`` sources). Imports only ``errors`` and
``commands`` (the masker).
"""

from __future__ import annotations

import getpass
import os
import subprocess
import threading
import warnings
from binascii import Error as HexError
from binascii import hexlify, unhexlify
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .commands import MASKER
from .errors import InputError

HEADER = "$ANSIBLE_VAULT"
DEFAULT_ID = "default"
ITERATIONS = 10000
SCRIPT_TIMEOUT = 60.0  # seconds a vault password script may take


class VaultError(InputError):
    """A vaulted value or file that cannot be decrypted (no password, a wrong one, a damaged envelope), or a
    password source that cannot be read: exit 5, before any host is touched."""

    def at(self, file: str) -> VaultError:
        """The same error naming ``file`` when it named none (a loader that does not know its file)."""
        return self if self.file else VaultError(self.msg, file=file, line=self.line)


@dataclass(frozen=True)
class VaultSecret:
    """One vault id and its password (never shown: ``repr`` names the id and where it came from)."""

    vault_id: str
    password: bytes = field(repr=False)
    source: str = ""


_lock = threading.Lock()
_secrets: list[VaultSecret] = []


def use(secrets: Iterable[VaultSecret]) -> None:
    """The secrets of this run (replacing any earlier ones); their passwords are registered as secrets."""
    chosen = list(secrets)
    for secret in chosen:
        MASKER.add(secret.password.decode("utf-8", "replace"))
    with _lock:
        _secrets[:] = chosen


def current() -> list[VaultSecret]:
    with _lock:
        return list(_secrets)


# ------------------------------------------------------------------------------------------- the format
def is_vaulted(data: bytes | str) -> bool:
    """True for a vault envelope (as ansible-core: the text starts with the header)."""
    return (data.encode("utf-8", "replace") if isinstance(data, str) else data).startswith(HEADER.encode())


@dataclass(frozen=True)
class Envelope:
    version: str
    cipher: str
    vault_id: str | None
    payload: bytes  # the hex text after the header, lines joined


def parse(data: bytes | str) -> Envelope:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    lines = raw.strip().splitlines()
    header = lines[0].strip().split(b";") if lines else []
    if len(header) < 3 or header[0] != HEADER.encode():
        raise ValueError("not a vault envelope (its first line must be $ANSIBLE_VAULT;VERSION;CIPHER)")
    vault_id = header[3].strip().decode("utf-8", "replace") if len(header) >= 4 else None
    return Envelope(
        header[1].strip().decode("ascii", "replace"),
        header[2].strip().decode("ascii", "replace"),
        vault_id,
        b"".join(line.strip() for line in lines[1:]),
    )


def _keys(password: bytes, salt: bytes) -> tuple[bytes, bytes, bytes]:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

    derived = PBKDF2HMAC(algorithm=hashes.SHA256(), length=80, salt=salt, iterations=ITERATIONS).derive(password)
    return derived[:32], derived[32:64], derived[64:80]


def encrypt(plaintext: bytes | str, secret: VaultSecret, *, salt: bytes | None = None) -> str:
    """The vault envelope of ``plaintext`` (ending with a newline), under ``secret``'s vault id: format 1.1
    for ``default``, else 1.2 naming it (as ``ansible-vault encrypt --vault-id LABEL@...``)."""
    from cryptography.hazmat.primitives import hashes, padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.hmac import HMAC

    data = plaintext.encode("utf-8") if isinstance(plaintext, str) else plaintext
    if is_vaulted(data):
        raise ValueError("input is already encrypted")
    salt = salt or os.urandom(32)
    key1, key2, iv = _keys(secret.password, salt)
    padder = padding.PKCS7(128).padder()
    encryptor = Cipher(algorithms.AES(key1), modes.CTR(iv)).encryptor()
    ciphertext = encryptor.update(padder.update(data) + padder.finalize()) + encryptor.finalize()
    mac = HMAC(key2, hashes.SHA256())
    mac.update(ciphertext)
    payload = hexlify(b"\n".join([hexlify(salt), hexlify(mac.finalize()), hexlify(ciphertext)])).decode()
    label = secret.vault_id
    header = f"{HEADER};1.2;AES256;{label}" if label and label != DEFAULT_ID else f"{HEADER};1.1;AES256"
    return "\n".join([header, *(payload[i : i + 80] for i in range(0, len(payload), 80))]) + "\n"


class _WrongPassword(Exception):
    pass


def _decrypt_with(payload: bytes, password: bytes) -> bytes:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.hmac import HMAC

    try:
        salt_hex, mac_hex, cipher_hex = unhexlify(payload).split(b"\n", 2)
        salt, mac_given, ciphertext = unhexlify(salt_hex), unhexlify(mac_hex), unhexlify(cipher_hex)
    except (HexError, ValueError):
        raise ValueError("the vault payload is damaged (not the hex Ansible writes)") from None
    key1, key2, iv = _keys(password, salt)
    mac = HMAC(key2, hashes.SHA256())
    mac.update(ciphertext)
    try:
        mac.verify(mac_given)
    except InvalidSignature:
        raise _WrongPassword from None
    decryptor = Cipher(algorithms.AES(key1), modes.CTR(iv)).decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        return unpadder.update(decryptor.update(ciphertext) + decryptor.finalize()) + unpadder.finalize()
    except ValueError:
        raise ValueError("the vault payload is damaged (bad padding)") from None


def decrypt(
    data: bytes | str, *, file: str | None = None, line: int | None = None, secrets: Sequence[VaultSecret] | None = None
) -> tuple[bytes, str]:
    """``(plaintext, vault id used)``; VaultError naming ``file``:``line`` and the envelope's vault id when no
    secret opens it. The secret of the envelope's vault id is tried first, then every other (ansible-core)."""
    try:
        envelope = parse(data)
    except ValueError as exc:
        raise VaultError(str(exc), file=file, line=line) from None
    label = envelope.vault_id or DEFAULT_ID
    if envelope.cipher != "AES256":
        raise VaultError(f"vault cipher {envelope.cipher!r} is not supported (only AES256)", file=file, line=line)
    if envelope.version not in ("1.1", "1.2"):
        raise VaultError(f"vault format {envelope.version!r} is not supported (1.1, 1.2)", file=file, line=line)
    chosen = current() if secrets is None else list(secrets)
    if not chosen:
        raise VaultError(
            f"vault-encrypted (vault id {label!r}) but no vault password was given: use --vault-id, "
            "--vault-password-file, --ask-vault-pass or ANSIBLE_VAULT_PASSWORD_FILE",
            file=file,
            line=line,
        )
    ordered = [s for s in chosen if s.vault_id == envelope.vault_id] + [
        s for s in chosen if s.vault_id != envelope.vault_id
    ]
    for secret in ordered:
        try:
            plaintext = _decrypt_with(envelope.payload, secret.password)
        except ValueError as exc:
            raise VaultError(str(exc), file=file, line=line) from None
        except _WrongPassword:
            continue
        return plaintext, secret.vault_id
    tried = ", ".join(dict.fromkeys(s.vault_id for s in chosen))
    raise VaultError(
        f"cannot decrypt (vault id {label!r}): no vault password given opens it (tried vault ids: {tried})",
        file=file,
        line=line,
    )


# ------------------------------------------------------------------------------------------- the hooks
def _register_text(text: str) -> None:
    """The values of a decrypted file become secrets: its YAML strings (not its keys; not its booleans, nulls
    and numbers, which would mask ``true`` or a port everywhere: a secret-named var's number is masked as any
    secret var is), else, when it is not YAML, its lines."""
    MASKER.add(text)
    strings = _yaml_strings(text)
    MASKER.add(strings if strings is not None else [part.strip() for part in text.splitlines()])


def _yaml_strings(text: str) -> list[str] | None:
    """The string values of a YAML text (None when it is not a YAML mapping or list), read from its node graph:
    composed, never constructed, each node visited once (an alias bomb costs what it is written as)."""
    import yaml

    try:
        roots = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return None
    if not any(isinstance(root, (yaml.MappingNode, yaml.SequenceNode)) for root in roots):
        return None
    out: list[str] = []
    seen: set[int] = set()
    stack: list[yaml.Node] = list(roots)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack += [value for _, value in node.value]
        elif isinstance(node, yaml.SequenceNode):
            stack += list(node.value)
        elif isinstance(node, yaml.ScalarNode) and node.tag in ("tag:yaml.org,2002:str", "!unsafe"):
            out.append(str(node.value))
    return out


def reveal(data: bytes, path: str) -> bytes:
    """A file's bytes as the controller uses them: the plaintext when they are a vault envelope (every value
    registered as a secret), else unchanged."""
    if not is_vaulted(data):
        return data
    plaintext, _ = decrypt(data, file=str(path))
    _register_text(plaintext.decode("utf-8", "replace"))
    return plaintext


def construct(loader: Any, node: Any) -> str:
    """The ``!vault`` tag: the value decrypted now (a trusted string, as the file it is in), registered as
    a secret. VaultError names the file and line of the value."""
    import yaml

    file = str(getattr(loader, "name", "") or "") or None
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.ScalarNode):
        raise VaultError("!vault: expected a string (the vault envelope)", file=file, line=line)
    plaintext, _ = decrypt(loader.construct_scalar(node), file=file, line=line)
    text = plaintext.decode("utf-8", "surrogateescape")
    MASKER.add(text)
    return text


# ------------------------------------------------------------------------------------------- the secrets
def _read_password_file(path: str, vault_id: str, known: Sequence[VaultSecret]) -> bytes:
    """A password file's content stripped, or an executable's stdout (``-client`` scripts get
    ``--vault-id LABEL``), as ansible-core reads them."""
    where = os.path.expanduser(path)
    if not os.path.exists(where):
        raise VaultError(f"vault password file not found (vault id {vault_id!r})", file=path)
    if os.path.isdir(where):
        raise VaultError(f"vault password file is a directory (vault id {vault_id!r})", file=path)
    if os.access(where, os.X_OK):
        command = [os.path.abspath(where)]
        if os.path.splitext(where)[0].endswith("-client"):
            command += ["--vault-id", vault_id]
        try:
            proc = subprocess.run(command, stdout=subprocess.PIPE, timeout=SCRIPT_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise VaultError(f"vault password script failed (vault id {vault_id!r}): {exc}", file=path) from None
        if proc.returncode != 0:
            raise VaultError(f"vault password script exited {proc.returncode} (vault id {vault_id!r})", file=path)
        password = proc.stdout.strip(b"\r\n")
    else:
        try:
            with open(where, "rb") as fh:
                password = fh.read(1 << 20).strip()
        except OSError as exc:
            why = f"cannot read vault password file: {exc.strerror} (vault id {vault_id!r})"
            raise VaultError(why, file=path) from None
        if is_vaulted(password):  # a vaulted password file, opened by a secret given before it
            password, _ = decrypt(password, file=path, secrets=known)
            password = password.strip(b"\r\n")
    if not password:
        raise VaultError(f"empty vault password (vault id {vault_id!r})", file=path)
    return password


def _prompt(vault_id: str, ask_format: bool) -> bytes:
    prompt = "Vault password: " if ask_format else f"Vault password ({vault_id}): "
    try:
        with warnings.catch_warnings():  # no terminal (a pipe): getpass reads stdin, as ansible-core's prompt does
            warnings.simplefilter("ignore", getpass.GetPassWarning)
            password = getpass.getpass(prompt).encode("utf-8").strip()
    except EOFError:
        password = b""
    if not password:
        raise VaultError(f"empty vault password from the prompt (vault id {vault_id!r})")
    return password


def secrets_from_options(
    vault_ids: Sequence[str] = (),
    password_files: Sequence[str] = (),
    ask_vault_pass: bool = False,
    env: dict[str, str] | None = None,
) -> list[VaultSecret]:
    """The secrets the command line names, in ansible-core's order: each ``--vault-id [LABEL@]SOURCE``
    (SOURCE a file, an executable, or ``prompt``), then each ``--vault-password-file`` and
    ``ANSIBLE_VAULT_PASSWORD_FILE`` (vault id ``default``), then ``--ask-vault-pass``."""
    environ = os.environ if env is None else env
    files = list(password_files)
    if environ.get("ANSIBLE_VAULT_PASSWORD_FILE"):
        files.append(environ["ANSIBLE_VAULT_PASSWORD_FILE"])
    slugs = list(vault_ids) + [f"{DEFAULT_ID}@{f}" for f in files]
    if ask_vault_pass:
        slugs.append(f"{DEFAULT_ID}@prompt_ask_vault_pass")
    out: list[VaultSecret] = []
    for slug in slugs:
        label, _, source = slug.partition("@") if "@" in slug else ("", "", slug)
        label = label or DEFAULT_ID
        if not source:
            raise VaultError(f"--vault-id {slug!r}: no password source after '@'")
        if source in ("prompt", "prompt_ask_vault_pass"):
            password = _prompt(label, source == "prompt_ask_vault_pass")
        else:
            password = _read_password_file(source, label, out)
        out.append(VaultSecret(label, password, source))
    return out
