"""Host side of ``deb822_repository`` (ansible-core's): an APT source in the deb822 format,
``/etc/apt/sources.list.d/SLUG.sources``, written or removed as that module does it, stdlib only (ansible-core's
needs python3-debian on the host; this renders the same text itself).

``python3 - apply`` with the request as JSON on stdin: ``name``, ``state``, ``mode`` (octal), ``check`` and
``fields``, the deb822 arguments that were given (None left out). One JSON answer with the module's keys
(``changed``, ``repo``, ``dest``, ``key_filename``). As ansible-core's module:

- the slug is ``name`` lowercased, runs of ``_`` and whitespace made ``-``, anything but ``a-z0-9-`` dropped;
- the fields in the order of their argument names, sorted: booleans ``yes``/``no``, lists joined by spaces,
  ``name`` as ``X-Repolib-Name``, ``uris`` as ``URIs``, the others Title-Cased with ``-``; a value of several
  lines is continued on indented lines (an empty one is ``.``);
- ``signed_by``: the path of a file that exists is kept; a URL is fetched and written to
  ``/etc/apt/keyrings/SLUG.asc`` (armored) or ``.gpg`` (0644, the folder made 0755), the field then names that
  file; anything else (a key's text) is written inline;
- ``absent`` removes the sources file and ``SLUG.asc``/``SLUG.gpg`` of the keyrings folder;
- a file is rewritten only when its bytes differ (atomically, with its final mode), else only its mode is set.
"""

import os
import re
import sys
import urllib.error
import urllib.request

import hostlib
from hostlib import Failed

SOURCES_DIR = "/etc/apt/sources.list.d"
KEYRINGS_DIR = "/etc/apt/keyrings"
KEY_LIMIT = 16 << 20


def slug_of(name):
    return re.sub(r"[^a-z0-9-]+", "", re.sub(r"[_\s]+", "-", name.lower()))


def field_name(key):
    if key == "name":
        return "X-Repolib-Name"
    if key == "uris":
        return "URIs"
    return key.replace("_", "-").title()


def field_value(value):
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return value


def multiline(value):
    lines = [line.strip() or "." for line in value.strip().splitlines()]
    return "\n" + "\n".join("    " + line for line in lines)


def render(fields):
    """The deb822 paragraph of ``fields`` (``[(name, value), ...]`` in order), as python-debian dumps it."""
    out = []
    for name, value in fields:
        if value.count("\n") > 0:
            value = multiline(value)
        out.append("%s:%s\n" % (name, value) if not value or value[0] == "\n" else "%s: %s\n" % (name, value))
    return "".join(out)


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def _put(path, data, mode, check):
    """``path`` holding ``data`` with ``mode``: True when that is a change (check mode: nothing written)."""
    old = _read(path) if not os.path.islink(path) else None
    if old == data:
        if os.stat(path).st_mode & 0o7777 == mode:
            return False
        if not check:
            os.chmod(path, mode)
        return True
    if not check:
        hostlib.atomic_write(path, data, mode=mode)
    return True


def _fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.read(KEY_LIMIT)
    except urllib.error.HTTPError as exc:
        raise Failed("Could not fetch signed_by key: HTTP Error %s: %s" % (exc.code, exc.reason)) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise Failed("Could not fetch signed_by key: %s" % (getattr(exc, "reason", None) or exc)) from None


def signed_by(value, slug, check):
    """(changed, the field's value, the key file written or None) of ``signed_by``."""
    if os.path.isfile(value):
        return False, value, None
    if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", value):
        return False, value, None  # not a URL: the key's text, inline
    data = _fetch(value)
    if not data:
        return False, value, None
    ext = "asc" if b"-----BEGIN PGP PUBLIC KEY BLOCK-----" in data else "gpg"
    path = os.path.join(KEYRINGS_DIR, "%s.%s" % (slug, ext))
    changed = False
    if not os.path.isdir(KEYRINGS_DIR):
        changed = True
        if not check:
            os.mkdir(KEYRINGS_DIR, 0o755)
    if os.path.isdir(KEYRINGS_DIR) and not check and os.stat(KEYRINGS_DIR).st_mode & 0o7777 != 0o755:
        os.chmod(KEYRINGS_DIR, 0o755)
        changed = True
    changed |= _put(path, data, 0o644, check)
    return changed, path, path


def apply(req):
    name, check = req["name"], bool(req.get("check"))
    slug = slug_of(name)
    dest = os.path.join(SOURCES_DIR, "%s.sources" % slug)
    if req.get("state") == "absent":
        changed = False
        keys = [os.path.join(KEYRINGS_DIR, "%s.%s" % (slug, ext)) for ext in ("asc", "gpg")]
        for path in [dest] + keys:
            if os.path.exists(path):
                changed = True
                if not check:
                    os.unlink(path)
        return {"changed": changed, "repo": None, "dest": dest, "key_filename": keys[-1]}
    changed, key_file, fields = False, None, []
    for key, value in sorted(req["fields"].items()):
        if value is None:
            continue
        if key == "signed_by" and isinstance(value, str):
            key_changed, value, key_file = signed_by(value, slug, check)
            changed |= key_changed
        fields.append((field_name(key), field_value(value)))
    repo = render(fields)
    mode = int(req.get("mode", 0o644))
    changed |= _put(dest, repo.encode("utf-8"), mode, check)
    return {"changed": changed, "repo": repo, "dest": dest, "key_filename": key_file}


ACTIONS = {"apply": apply}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
