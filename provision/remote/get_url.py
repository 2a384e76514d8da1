"""Host side of ``get_url``: the download happens ON the host, as Ansible's (stdlib only; Python 3.6+).

``python3 - get`` with ``{"url", "dest", "checksum", "mode", "force", "timeout", "headers", "check"}`` on stdin
(the host library's envelope, ``hostlib.serve``: the headers may hold secrets) answers with Ansible's keys.
Semantics as Ansible's get_url: an existing ``dest`` with a matching ``checksum`` and ``force: no`` is not
downloaded; otherwise the request carries ``If-Modified-Since`` (a 304 changes nothing); the body goes to a temp
file beside ``dest`` (``hostlib.atomic_write``: never a planted name), is checked against ``checksum``, and
replaces ``dest`` with its final mode only when its content differs (check mode writes nothing). Every wait is
bounded by ``timeout``.
"""

import email.utils
import hashlib
import os
import ssl
import stat
import sys
import urllib.error
import urllib.parse
import urllib.request

import hostlib


def _set_mode(path, mode, check):
    if mode is None:
        return False
    if stat.S_IMODE(os.stat(path).st_mode) == mode:
        return False
    if not check:
        os.chmod(path, mode)
    return True


def main(req):
    answer = _main(req)
    if "url" in answer:
        answer["url"] = hostlib.mask_url(answer["url"])
    return answer


def _main(req):
    url, dest = req["url"], os.path.expanduser(req["dest"])
    force, check, mode = bool(req.get("force")), bool(req.get("check")), req.get("mode")
    timeout = float(req.get("timeout") or 10)
    headers = dict(req.get("headers") or {})
    result = {"url": url, "dest": dest, "changed": False, "checksum_dest": None, "checksum_src": None}
    algorithm, want = "", ""
    if req.get("checksum"):
        algorithm, _, want = req["checksum"].partition(":")
        want = want.strip().lower()
        if not want or algorithm not in hashlib.algorithms_available:
            result.update(failed=True, msg="The checksum parameter has to be in format <algorithm>:<checksum>")
            return result
    if os.path.isdir(dest):
        name = os.path.basename(urllib.parse.urlsplit(url).path) or "index.html"
        dest = os.path.join(dest, name)
        result["dest"] = dest
    last_mod = None
    if os.path.exists(dest):
        mismatch = False
        if not force and want:
            mismatch = hostlib.digest(dest, algorithm) != want
        if not force and want and not mismatch:
            result["changed"] = _set_mode(dest, mode, check)
            result["msg"] = (
                "file already exists but file attributes changed" if result["changed"] else "file already exists"
            )
            return result
        last_mod = os.path.getmtime(dest)
        if mismatch:
            force = True
    context = None if req.get("validate_certs", True) else ssl._create_unverified_context()
    opener, bare_url = hostlib.url_opener(url, context)
    request = urllib.request.Request(bare_url, headers=headers, method="HEAD" if check else "GET")
    if last_mod is not None and not force:
        request.add_header("If-Modified-Since", email.utils.formatdate(last_mod, usegmt=True))
    try:
        response = opener.open(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 304:
            return {
                "url": url,
                "dest": dest,
                "changed": False,
                "msg": "HTTP Error 304: Not Modified",
                "status_code": 304,
            }
        return {
            "url": url,
            "dest": dest,
            "failed": True,
            "msg": "Request failed",
            "status_code": exc.code,
            "response": str(exc),
        }
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return {"url": url, "dest": dest, "failed": True, "msg": "Request failed: %s" % reason, "status_code": -1}
    parent = os.path.dirname(dest) or "."
    if not os.path.isdir(parent):
        response.close()
        result.update(failed=True, msg="Destination %s does not exist" % parent)
        return result
    hashes = {name: hashlib.new(name) for name in {"sha1", "md5", algorithm or "sha1"}}
    state = {"size": 0, "opened": False}

    def stream(fh):
        state["opened"] = True
        while True:
            block = response.read(1 << 16)
            if not block:
                break
            state["size"] += len(block)
            for h in hashes.values():
                h.update(block)
            if fh is not None:
                fh.write(block)
        response.close()
        result.update(status_code=response.status, msg="OK (%d bytes)" % state["size"], size=state["size"])
        result["checksum_src"] = hashes["sha1"].hexdigest()
        result["checksum_dest"] = hostlib.digest(dest, "sha1") if os.path.exists(dest) else None
        if fh is None:
            return
        if want and hashes[algorithm].hexdigest() != want:
            for key in ("size", "status_code"):
                result.pop(key, None)
            got = hashes[algorithm].hexdigest()
            raise _Keep("The checksum for %s did not match %s; it was %s." % (dest, want, got))
        if result["checksum_src"] == result["checksum_dest"]:
            raise _Keep(None)  # the same content: dest is left as it is

    try:
        if check:  # nothing is written: the answer says whether it would change
            stream(None)
            result["changed"] = result["checksum_dest"] != result["checksum_src"]
            result["msg"] = "OK"
            return result
        final = (
            mode
            if mode is not None
            else (stat.S_IMODE(os.stat(dest).st_mode) if os.path.exists(dest) else 0o666 & ~hostlib.umask())
        )
        try:
            hostlib.atomic_write(dest, mode=final, fill=stream)  # a new O_EXCL file beside dest, renamed over it
            result["changed"] = True
        except _Keep as keep:
            if keep.msg is not None:
                result.update(failed=True, msg=keep.msg)
                return result
            result["changed"] = _set_mode(dest, mode, False)
        result["md5sum"] = hostlib.digest(dest, "md5")
        return result
    except (OSError, ValueError) as exc:
        if not state["opened"]:
            response.close()
            result.update(failed=True, msg="Destination %s is not writable" % parent)
            return result
        result.update(failed=True, msg="failed to download %s: %s" % (url, exc))
        return result


class _Keep(Exception):
    """Raised while the download is written: the temp file is dropped, ``dest`` kept (``msg``: why it failed)."""

    def __init__(self, msg):
        super().__init__(msg)
        self.msg = msg


def _path_info(result):
    """The keys Ansible's module adds to any result that names a ``dest``: its owner, mode, size and state."""
    path = result.get("dest")
    if not path or result.get("failed"):  # Ansible's fail_json adds nothing
        return result
    try:
        st = os.lstat(path)
    except OSError:
        result["state"] = "absent"
        return result
    if stat.S_ISLNK(st.st_mode):
        state = "link"
    elif stat.S_ISDIR(st.st_mode):
        state = "directory"
    else:
        state = "hard" if st.st_nlink > 1 else "file"
    result.update(uid=st.st_uid, gid=st.st_gid, mode="0%03o" % stat.S_IMODE(st.st_mode), state=state, size=st.st_size)
    for key, lookup, ident in (("owner", _pw, st.st_uid), ("group", _gr, st.st_gid)):
        name = lookup(ident)
        result[key] = name if name is not None else ident
    return result


def _pw(uid):
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _gr(gid):
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return None


def get(req):
    return _path_info(main(req))


ACTIONS = {"get": get}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
