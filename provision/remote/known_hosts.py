"""Host side of ``known_hosts`` (ansible-core's), stdlib only: the request as JSON on stdin, one JSON answer
with the module's keys (its parameters, ``changed``; ``before``/``after`` for a diff).

As ansible-core's module: the host's lines are found with ``ssh-keygen -F NAME -f PATH`` (hashed names too); a
line of the same key type with another key is replaced, the same key is kept (a hashed name stays hashed);
``absent`` with a key removes that line, without a key every line of the host (``ssh-keygen -R``); the key given
must name the host (``ssh-keygen -F`` on it; ``hash_host`` hashes its name first, HMAC-SHA1 with a random salt);
the file is replaced atomically (a new file: 0666 less the umask).
"""

import base64
import hashlib
import hmac
import os
import re
import sys
import tempfile

import hostlib
from hostlib import Failed


def hash_host_key(host, key):
    salt = os.urandom(20)
    digest = hmac.new(salt, host.encode(), hashlib.sha1).digest()
    parts = key.strip().split()
    i = 1 if parts[0][0] == "@" else 0
    parts[i] = "|1|%s|%s" % (base64.b64encode(salt).decode(), base64.b64encode(digest).decode())
    return " ".join(parts)


def normalize(key):
    k = key.strip().split()
    if k[0][0] == "@":
        return {"options": k[0], "host": k[1], "type": k[2], "key": k[3]}
    return {"host": k[0], "type": k[1], "key": k[2]}


def sanity_check(host, key, keygen):
    if not key:
        return
    if re.search(r"\S+(\s+)?,(\s+)?", host):
        raise Failed("Comma separated list of names is not supported. "
                     "Please pass a single name to lookup in the known_hosts file.")  # fmt: skip
    with tempfile.NamedTemporaryFile(mode="w+") as fh:
        fh.write(key)
        fh.flush()
        _, out, _ = hostlib.run([keygen, "-F", host, "-f", fh.name], timeout=60)
    if out == "":
        raise Failed("Host parameter does not match hashed host field in supplied key")


def search(host, key, path, keygen):
    """(found, replace_or_add, found_line) as the module's ``search_for_host_key``."""
    if not os.path.exists(path):
        return False, False, None
    rc, out, err = hostlib.run([keygen, "-F", host, "-f", path], timeout=60)
    if out == "" and err == "" and rc in (0, 1):
        return False, False, None
    if rc != 0:
        raise Failed("ssh-keygen failed (rc=%d, stdout='%s',stderr='%s')" % (rc, out, err))
    if not key:
        return True, False, None
    new, found_line = normalize(key), None
    for line in out.split("\n"):
        if line == "":
            continue
        if line[0] == "#":
            match = re.search(r"found: line (\d+)", line)
            if match is None:
                raise Failed("failed to parse output of ssh-keygen for line number: '%s'" % line)
            found_line = int(match.group(1))
            continue
        have = normalize(line)
        if have.get("options", "")[:15] == "@cert-authority" or have.get("options", "")[:7] == "@revoke":
            if new == have:
                return True, False, found_line
            continue
        if new["host"][:3] == "|1|" and have["host"][:3] == "|1|":  # a hashed name stays as it is
            new["host"] = have["host"]
        if new == have:
            return True, False, found_line
        if new["type"] == have["type"]:
            return True, True, found_line
    return True, True, None


def known_hosts(req):
    host, key, path, state = req["name"].lower(), req.get("key"), req["path"], req.get("state") or "present"
    keygen = hostlib.find_bin("ssh-keygen")
    if not key and state != "absent":
        raise Failed("No key specified when adding a host")
    if key and req.get("hash_host"):
        key = hash_host_key(host, key)
    if key and not key.endswith("\n"):
        key += "\n"
    sanity_check(host, key, keygen)
    found, replace, found_line = search(host, key, path, keygen)
    before = ""
    if os.path.isfile(path):
        with open(path) as fh:
            before = fh.read()
    lines = before.splitlines(True)
    if (replace or state == "absent") and found_line is not None and 1 <= found_line <= len(lines):
        del lines[found_line - 1]
    if state == "present" and (replace or found_line is None):
        lines.append(key)
    answer = {k: req.get(k) for k in ("name", "key", "path", "hash_host", "state")}
    answer.update(changed=False, before=before, after="".join(lines))
    if state == "absent" and not found_line and key:
        return answer
    if req.get("check"):  # as the module: an early exit, without the parameters
        return {"changed": replace or (state == "present") != found, "before": before, "after": answer["after"]}
    if found and not key and state == "absent":
        rc, out, err = hostlib.run([keygen, "-R", host, "-f", path], timeout=60)
        if rc != 0:
            raise Failed(err or out, rc=rc, stdout=out, stderr=err)
        answer["changed"] = True
    if replace or found != (state == "present"):
        current = ""  # read again: ssh-keygen -R may have rewritten it
        if os.path.isfile(path):
            with open(path) as fh:
                current = fh.read()
        kept = [line for n, line in enumerate(current.splitlines(True), 1)
                if not (found_line == n and (replace or state == "absent"))]  # fmt: skip
        if state == "present":
            kept.append(key)
        hostlib.rewrite(path, "".join(kept).encode())
        answer["changed"] = True
    return answer


ACTIONS = {"known_hosts": known_hosts}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
