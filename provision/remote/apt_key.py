"""Host side of ``apt_key`` (ansible-core's): an OpenPGP key added to or removed from APT's keyring (or the
``keyring`` file given) through ``apt-key`` and ``gpg``, as that module runs them.

``python3 - apply`` with the request as JSON on stdin: ``id``, ``url``, ``data``, ``file``, ``keyring``,
``keyserver``, ``state``, ``validate_certs``, ``check``. One JSON answer with the module's keys (``changed``,
``id``, ``short_id``, ``fp``, ``key_id``, ``before``, ``after`` once a change was made). As the module:

- without ``id`` the key's id is read from the key (``url`` fetched here, on the host; ``gpg --with-colons`` of
  ``file`` or of the data on stdin; the first ``pub``/``sub`` line that has not expired);
- ``id``: 8, 16 or more than 16 hex digits (``0x`` allowed); 8 compares short ids, else the last 16 digits;
- the keys there: ``apt-key [--keyring K] adv --list-public-keys --keyid-format=long``; ``present`` adds the key
  (``apt-key add FILE`` or ``add -`` with the data, ``adv --recv`` from a ``keyserver``) and checks that it is
  there now; ``absent`` deletes it by its short id and checks that it is gone. Check mode changes nothing.
"""

import os
import re
import ssl
import sys
import urllib.error
import urllib.request

import hostlib
from hostlib import Failed

NOT_ADDED = "apt-key did not return an error, but %s (check that the id is correct and *not* a subkey)"
KEY_LIMIT = 16 << 20
LANG = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C", "LANGUAGE": "C"}


def parse_key_id(key_id):
    """(short id, fingerprint to compare, id to use) of ``key_id``; ValueError when it is not one."""
    int(str(key_id), 16)
    key_id = str(key_id).upper()
    if key_id.startswith("0X"):
        key_id = key_id[2:]
    if len(key_id) not in (8, 16) and len(key_id) <= 16:
        raise ValueError("key_id must be 8, 16, or 16+ hexadecimal characters in length")
    return key_id[-8:], key_id[-16:] if len(key_id) > 16 else key_id, key_id


def parse_keys(output, short=False):
    """The key ids of ``apt-key adv --list-public-keys`` or ``gpg --with-colons`` output (expired keys left out)."""
    found = []
    for line in output.split("\n"):
        if not line.startswith(("pub", "sub")) or "expired" in line:
            continue
        tokens = line.split()
        if len(tokens) > 1 and tokens[1].count("/") == 1:
            found.append(tokens[1].split("/")[1])
            continue
        fields = line.split(":")
        if len(fields) > 4:
            found.append(fields[4])
    return [k[-8:] for k in found] if short else found


def _mask(url):
    return re.sub(r"(://)[^/@]*@", r"\1********@", url)


def download(url, validate_certs=True):
    context = None if validate_certs else ssl._create_unverified_context()
    try:
        with urllib.request.urlopen(url, timeout=10, context=context) as resp:
            return resp.read(KEY_LIMIT)
    except urllib.error.HTTPError as exc:
        raise Failed("Failed to download key at %s: HTTP Error %s: %s" % (_mask(url), exc.code, exc.reason)) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise Failed("Failed to download key at %s: Request failed: %s" % (_mask(url), exc)) from None


def _apt_key(keyring):
    found = hostlib.find_bin("apt-key")
    return [found, "--keyring", keyring] if keyring else [found]


def all_keys(keyring, short):
    argv = _apt_key(keyring) + ["adv", "--list-public-keys", "--keyid-format=long"]
    rc, out, err = hostlib.run(argv, timeout=120)
    if rc != 0:
        raise Failed("Unable to list public keys", cmd=" ".join(argv), rc=rc, stdout=out, stderr=err)
    return parse_keys(out, short)


def key_id_of(path, data=None):
    """The id of the first key of the file ``path`` or of ``data`` (bytes) read by ``gpg --with-colons``."""
    env = dict(os.environ)
    env.update(LANG)
    gpg = hostlib.find_bin("gpg")
    rc, out, err = hostlib.run([gpg, "--with-colons", path if data is None else "-"], timeout=120, stdin=data, env=env)
    if rc != 0:
        what = "inline data" if data is not None else path
        raise Failed("Unable to extract key from '%s'" % what, stdout=out, stderr=err)
    keys = parse_keys(out)
    return keys[0] if keys else None


def _add(req, keyring, key_id, data):
    if req.get("file"):
        argv, stdin = _apt_key(keyring) + ["add", req["file"]], None
        msg = "Unable to add a key from file %s" % req["file"]
    elif req.get("keyserver"):
        return _recv(keyring, req["keyserver"], key_id)
    else:
        if data is None:
            data = download(req["url"], req.get("validate_certs", True))
        argv, stdin, msg = _apt_key(keyring) + ["add", "-"], data, "Unable to add a key from binary data"
    rc, out, err = hostlib.run(argv, timeout=120, stdin=stdin)
    if rc != 0:
        raise Failed(msg, cmd=" ".join(argv), rc=rc, stdout=out, stderr=err)


def _recv(keyring, keyserver, key_id):
    argv = _apt_key(keyring) + ["adv", "--no-tty", "--keyserver", keyserver]
    proxies = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
    proxy = next((os.environ[v] for v in proxies if os.environ.get(v)), None)
    argv += ["--keyserver-options", "http-proxy=%s" % proxy] if proxy else []
    argv += ["--recv", key_id]
    env = dict(os.environ)
    env.update(LANG)
    for _ in range(5):
        rc, out, err = hostlib.run(argv, timeout=300, env=env)
        if rc == 0:
            return
    if rc == 2 and "not found on keyserver" in out:
        raise Failed("Key %s not found on keyserver %s" % (key_id, keyserver), cmd=" ".join(argv))
    raise Failed("Error fetching key %s from keyserver: %s" % (key_id, keyserver), cmd=" ".join(argv), rc=rc,
                 stdout=out, stderr=err)  # fmt: skip


def apply(req):
    key_id, keyring, state, check = req.get("id"), req.get("keyring"), req.get("state"), req.get("check")
    hostlib.find_bin("apt-key")
    hostlib.find_bin("gpg")
    data = None if req.get("data") is None else req["data"].encode("utf-8", "surrogateescape")
    if not key_id:
        if req.get("keyserver"):
            raise Failed("Missing key_id, required with keyserver.")
        if req.get("url"):
            data = download(req["url"], req.get("validate_certs", True))
        if req.get("file"):
            key_id = key_id_of(req["file"])
        elif data:
            key_id = key_id_of("-", data)
    out = {"changed": False, "id": key_id}
    try:
        short_id, fingerprint, key_id = parse_key_id(key_id)
    except ValueError:
        raise Failed("Invalid key_id", **out) from None
    out.update(short_id=short_id, fp=fingerprint, key_id=key_id)
    short = len(key_id) == 8
    want = short_id if short else fingerprint
    out["before"] = keys = all_keys(keyring, short)
    if state == "present" and want not in keys:
        out["changed"] = True
        if not check:
            _add(req, keyring, key_id, data)
            out["after"] = all_keys(keyring, short)
            if want not in out["after"]:
                raise Failed(NOT_ADDED % "failed to add the key", **out)
    elif state == "absent" and fingerprint in keys:
        out["changed"] = True
        if not check:
            argv = _apt_key(keyring) + ["del", short_id]
            rc, stdout, err = hostlib.run(argv, timeout=120)
            if rc != 0:
                raise Failed("Unable to remove a key with id %s" % short_id, cmd=" ".join(argv), rc=rc,
                             key_id=short_id, stdout=stdout, stderr=err)  # fmt: skip
            out["after"] = all_keys(keyring, short)
            if fingerprint in out["after"]:
                raise Failed(NOT_ADDED % "the key was not removed", **out)
    return out


ACTIONS = {"apply": apply}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
