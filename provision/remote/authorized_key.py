"""Host side of ``authorized_key`` (ansible.posix's), stdlib only: the request as JSON on stdin, one JSON answer
with the module's keys (its parameters, ``keyfile``, ``changed``; ``before``/``after`` for a diff).

As the collection's module: the keys file is ``~USER/.ssh/authorized_keys`` or ``path``; a line is parsed with
shlex (no quotes) into options, type, blob and comment and identified by its blob; ``present`` adds the keys
missing (after the existing ones, in the order given) and replaces a key whose type, options or comment
differ, ``exclusive`` drops every other key, ``absent`` removes them; a key written back is
``[options ]type blob comment`` (a space even without a comment); lines that are not keys stay as they are.
``manage_dir`` creates the file's folder (0700) and the file (0600) owned by the user; the file is replaced
atomically (``follow``: the link's target instead of the link). A ``file://`` key is read on the host; a URL key
is refused (no fetch from the host).
"""

import os
import pwd
import re
import shlex
import sys
from urllib.parse import urlparse

import hostlib
from hostlib import Failed

KEY_TYPES = (
    "sk-ecdsa-sha2-nistp256@openssh.com", "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com",
    "webauthn-sk-ecdsa-sha2-nistp256@openssh.com", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256-cert-v01@openssh.com",
    "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp384-cert-v01@openssh.com", "ecdsa-sha2-nistp521",
    "ecdsa-sha2-nistp521-cert-v01@openssh.com", "sk-ssh-ed25519@openssh.com", "sk-ssh-ed25519-cert-v01@openssh.com",
    "ssh-ed25519", "ssh-ed25519-cert-v01@openssh.com", "ssh-dss", "ssh-rsa", "ssh-xmss@openssh.com",
    "ssh-xmss-cert-v01@openssh.com", "rsa-sha2-256", "rsa-sha2-512", "ssh-rsa-cert-v01@openssh.com",
    "rsa-sha2-256-cert-v01@openssh.com", "rsa-sha2-512-cert-v01@openssh.com", "ssh-dss-cert-v01@openssh.com",
)  # fmt: skip
OPTION = re.compile(r"""((?:[^,"']|"[^"]*"|'[^']*')+)""")


def parse_options(text):
    """``[(name, value or None)]`` of an options string (commas inside quotes kept)."""
    out = []
    for part in OPTION.split(text or "")[1:-1]:
        if "=" in part:
            out.append(tuple(part.split("=", 1)))
        elif part != ",":
            out.append((part, None))
    return out


def parse_key(raw, rank):
    """``(blob, type, options, comment, rank)``; ``(line, 'skipped', ...)`` for a comment; None for no key."""
    raw = raw.replace(r"\#", "#")
    lex = shlex.shlex(raw)
    lex.quotes, lex.commenters, lex.whitespace_split = "", "", True  # the module's empty quotes list
    parts = list(lex)
    if parts and parts[0] == "#":
        return (raw, "skipped", None, None, rank)
    index = next((i for i, part in enumerate(parts) if part in KEY_TYPES), None)
    if index is None:
        return None
    options = parse_options(" ".join(parts[:index]) if index else None)
    if index + 1 >= len(parts):
        raise Failed("invalid key specified: %s" % raw)
    return (parts[index + 1], parts[index], options, " ".join(parts[index + 2 :]), rank)


def parse_file(text):
    keys = {}
    for rank, line in enumerate(text.splitlines(True)):
        key = parse_key(line, rank)
        keys[key[0] if key else line] = key or (line, "skipped", None, None, rank)
    return keys


def serialize(keys):
    lines = []
    for blob, kind, options, comment, _ in sorted(keys.values(), key=lambda k: k[4]):
        if kind == "skipped":
            lines.append(blob)
            continue
        prefix = ",".join(k if v is None else "%s=%s" % (k, v) for k, v in options or []) + (" " if options else "")
        lines.append("%s%s %s %s\n" % (prefix, kind, blob, comment))
    return "".join(lines)


def _key_text(key):
    if key.startswith("http"):
        raise Failed("authorized_key: a key from a URL is not supported by provision (%s)" % key)
    if not key.startswith("file"):
        return key
    path = urlparse(key).path
    if not os.path.exists(path):
        raise Failed("Path to a key file not found: %s" % path)
    if not os.path.isfile(path):
        raise Failed("Path to a key is a directory and must be a file: %s" % path)
    with open(path) as fh:
        return fh.read()


def _account(req):
    try:
        return pwd.getpwnam(req["user"])
    except KeyError as exc:
        if req.get("check") and req.get("path") is None:
            raise Failed("Either user must exist or you must provide full path to key file in check mode") from None
        raise Failed("Failed to lookup user %s: %s" % (req["user"], exc)) from None


def _keyfile(req, account):
    path = req.get("path")
    if path is None:
        path = os.path.join(account.pw_dir, ".ssh", "authorized_keys")
    return os.path.realpath(path) if req.get("follow") else path


def _prepare(req, account, path):
    """The folder and the file, owned by the user, as the module makes them before it writes."""
    folder = os.path.dirname(req.get("path") or path)
    if req.get("manage_dir", True):
        if not os.path.exists(folder):
            os.mkdir(folder, 0o700)
        os.chown(folder, account.pw_uid, account.pw_gid)
        os.chmod(folder, 0o700)
    if not os.path.exists(path):
        if not os.path.exists(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path))
        open(path, "w").close()
    try:
        os.chown(path, account.pw_uid, account.pw_gid)
        os.chmod(path, 0o600)
    except OSError:
        pass


def authorized_key(req):
    state, options, comment = req.get("state") or "present", req.get("key_options"), req.get("comment")
    check = req.get("check")
    new_keys = [line for line in _key_text(req["key"]).splitlines() if line and not line.startswith("#")]
    account = None if check and req.get("path") is not None else _account(req)
    path = _keyfile(req, account)
    before = ""
    if os.path.isfile(path):
        with open(path) as fh:
            before = fh.read()
    keys, wanted, write, top = parse_file(before), [], False, len(parse_file(before))
    for rank, line in enumerate(new_keys):
        key = parse_key(line, rank)
        if not key:
            raise Failed("invalid key specified: %s" % line)
        if options is not None:
            key = key[:2] + (parse_options(options),) + key[3:]
        if comment is not None:
            key = key[:3] + (comment, key[4])
        have = keys.get(key[0])
        matched = have is not None and (state != "present" or _same(have, key))
        if state == "present":
            wanted.append(key[0])
            if have is not None and not matched:
                del keys[key[0]]
                write = True
            if not matched:
                keys[key[0]] = key[:4] + (top + key[4],)
                write = True
        elif matched:
            del keys[key[0]]
            write = True
    if state == "present" and req.get("exclusive"):
        for blob in [b for b in keys if b not in wanted]:
            del keys[blob]
            write = True
    after = serialize(keys) if write else before
    if write and not check:
        account = account or _account(req)
        _prepare(req, account, path)
        st = os.stat(path)
        hostlib.atomic_write(path, after.encode(), mode=st.st_mode & 0o7777, owner=_owner(st))
    answer = {k: req.get(k) for k in PARAMS}
    answer.update(keyfile=path, changed=write, before=before, after=after)
    return answer


def _same(have, key):
    """The first four fields equal, options compared as the module's dict of lists (order of names aside)."""
    return have[:2] == key[:2] and have[3] == key[3] and _options_dict(have[2]) == _options_dict(key[2])


def _options_dict(options):
    out = {}  # type: dict
    for name, value in options or []:
        out.setdefault(name, []).append(value)
    return out


def _owner(st):
    return (st.st_uid, st.st_gid) if os.geteuid() == 0 else None


PARAMS = (
    "user",
    "key",
    "path",
    "manage_dir",
    "state",
    "key_options",
    "exclusive",
    "comment",
    "validate_certs",
    "follow",
)

ACTIONS = {"authorized_key": authorized_key}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
