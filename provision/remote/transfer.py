"""Host side of ``fetch``, ``tempfile`` and ``unarchive`` (stdlib only; Python 3.6+), one action per call.

``python3 - ACTION`` with the request on stdin (the host library's envelope, ``hostlib.serve``; for
``unarchive``, the request's line, then the archive of a controller-side ``unarchive``) answers:

* ``fetch {"src", "have"}``: the file's content (base64) and sha1, read through a symlink as Ansible's fetch
  does; the content is left out when its sha1 equals ``have`` (the controller's copy is already right).
  ``{"ok": true, "exists": false}`` for no file, ``"isdir": true`` for a directory.
* ``tempfile {"state", "path", "prefix", "suffix"}``: ``mkstemp``/``mkdtemp`` as Ansible's tempfile module.
* ``unarchive {"src"|stdin, "dest", "creates", "mode", "owner", "group", "check", "list_files"}``: compares the
  archive's members (content, mode, owner, group) with ``dest`` and extracts only when something differs (a
  converged rerun changes nothing); members that would land outside ``dest`` (absolute paths, ``..``, links out
  of it) are refused.
"""

import base64
import grp
import hashlib
import io
import os
import pwd
import shutil
import stat
import sys
import tarfile
import tempfile
import time
import zipfile

import hostlib


def _sha1(data):
    return hashlib.sha1(data).hexdigest()


def do_fetch(req):
    src = os.path.expanduser(req["src"])
    try:
        st = os.stat(src)  # follows a symlink, as Ansible's fetch (stat follow=True, then slurp)
    except FileNotFoundError:
        return {"ok": True, "exists": False, "src": src}
    except OSError as exc:
        return {"ok": False, "msg": "Unable to read %s: %s" % (src, exc)}
    if stat.S_ISDIR(st.st_mode):
        return {"ok": True, "exists": True, "isdir": True, "src": src}
    try:
        with open(src, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        return {"ok": False, "msg": "Unable to read %s: %s" % (src, exc)}
    digest = _sha1(data)
    answer = {"ok": True, "exists": True, "isdir": False, "src": src, "checksum": digest}
    if digest != req.get("have"):
        answer["content"] = base64.b64encode(data).decode("ascii")
    return answer


def path_info(path):
    """What Ansible's modules add to a result that names a ``path``/``dest``: owner, group, mode, size, state."""
    try:
        st = os.lstat(path)
    except OSError:
        return {"state": "absent"}
    if stat.S_ISLNK(st.st_mode):
        state = "link"
    elif stat.S_ISDIR(st.st_mode):
        state = "directory"
    else:
        state = "hard" if st.st_nlink > 1 else "file"
    info = {"uid": st.st_uid, "gid": st.st_gid, "mode": "0%03o" % stat.S_IMODE(st.st_mode), "state": state}
    info["size"] = st.st_size
    try:
        info["owner"] = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        info["owner"] = st.st_uid
    try:
        info["group"] = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        info["group"] = st.st_gid
    return info


def do_tempfile(req):
    prefix, suffix = req.get("prefix") or "", req.get("suffix") or ""
    for name, value in (("prefix", prefix), ("suffix", suffix)):
        if value and value != os.path.basename(value):
            return {"ok": False, "msg": "%s must be a valid file name component, got %r" % (name, value)}
    where = os.path.expanduser(req["path"]) if req.get("path") else None
    try:
        if req.get("state") == "directory":
            path = tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=where)
        else:
            handle, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=where)
            os.close(handle)
    except OSError as exc:
        return {"ok": False, "msg": str(exc)}
    answer = {"ok": True, "path": path}
    answer.update(path_info(path))
    return answer


# ------------------------------------------------------------------------------------------------ unarchive
class Member:
    __slots__ = ("kind", "mode", "mtime", "name", "read", "target")

    def __init__(self, name, kind, mode, target=None, read=None, mtime=None):
        self.name, self.kind, self.mode, self.target, self.read = name, kind, mode, target, read
        self.mtime = mtime


def _clean(name):
    """The member's path relative to dest, or None when it would land outside dest."""
    name = name.replace("\\", "/")
    if name.startswith("/"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None if ".." in parts else ""
    return "/".join(parts)


def _tar_members(tar):
    out = []
    for info in tar.getmembers():
        if info.isdir():
            kind = "dir"
        elif info.issym():
            kind = "link"
        elif info.isfile():
            kind = "file"
        else:
            continue  # devices, fifos, hard links: not extracted (Ansible would need root for most)
        out.append(
            Member(
                info.name + "/" if kind == "dir" else info.name,  # as ``tar -t`` lists a directory
                kind,
                info.mode & 0o7777,
                info.linkname or None,
                (lambda i=info: tar.extractfile(i).read()) if kind == "file" else None,
                info.mtime,
            )
        )
    return out


def _zip_members(zf):
    out = []
    for info in zf.infolist():
        unix = info.external_attr >> 16
        if info.is_dir():
            kind = "dir"
        elif stat.S_ISLNK(unix):
            kind = "link"
        else:
            kind = "file"
        mode = stat.S_IMODE(unix) if unix else (0o755 if kind == "dir" else 0o644)
        target = zf.read(info).decode("utf-8", "surrogateescape") if kind == "link" else None
        read = (lambda i=info: zf.read(i)) if kind == "file" else None
        out.append(Member(info.filename, kind, mode, target, read, time.mktime(info.date_time + (0, 0, -1))))
    return out


def _open_archive(data):
    """(handler name, members) of the archive bytes, or raises ValueError."""
    buf = io.BytesIO(data)
    if zipfile.is_zipfile(buf):
        return "ZipArchive", _zip_members(zipfile.ZipFile(io.BytesIO(data)))
    buf.seek(0)
    try:
        tar = tarfile.open(fileobj=buf, mode="r:*")  # noqa: SIM115 (read lazily by the members)
    except tarfile.TarError:
        raise ValueError("not a tar or zip archive") from None
    handler = "TgzArchive" if data[:2] == b"\x1f\x8b" else "TarArchive"
    return handler, _tar_members(tar)


def _ids(req):
    """The uid and gid that owner/group name (-1: leave as extracted); KeyError for an unknown name."""
    uid = pwd.getpwnam(req["owner"]).pw_uid if req.get("owner") else -1
    gid = grp.getgrnam(req["group"]).gr_gid if req.get("group") else -1
    return uid, gid


def _differs(path, member, mode, ids=(-1, -1)):
    try:
        st = os.lstat(path)
    except OSError:
        return True
    if (ids[0] != -1 and st.st_uid != ids[0]) or (ids[1] != -1 and st.st_gid != ids[1]):
        return True
    if member.kind == "dir":
        return not stat.S_ISDIR(st.st_mode) or (mode is not None and stat.S_IMODE(st.st_mode) != mode)
    if member.kind == "link":
        return not stat.S_ISLNK(st.st_mode) or os.readlink(path) != member.target
    if not stat.S_ISREG(st.st_mode):
        return True
    want = mode if mode is not None else member.mode
    if stat.S_IMODE(st.st_mode) != want:
        return True
    data = member.read()
    if st.st_size != len(data):
        return True
    with open(path, "rb") as fh:
        return fh.read() != data


def _inside(dest, path):
    real_dest = os.path.realpath(dest)
    real = os.path.realpath(os.path.dirname(path))
    return real == real_dest or real.startswith(real_dest + os.sep)


def _write(path, member, mode, ids=(-1, -1)):
    _put(path, member, mode)
    if ids != (-1, -1):
        os.lchown(path, *ids)


def _put(path, member, mode):
    if member.kind == "dir":
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode if mode is not None else (member.mode or 0o755))
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    if member.kind == "link":
        os.symlink(member.target, path)
        return
    # THE atomic write (no fsync per member: an archive of many files; the old file or the new one, never half)
    hostlib.atomic_write(path, member.read(), mode if mode is not None else member.mode, sync=False)


def do_unarchive(req, stdin):
    dest = os.path.expanduser(req["dest"])
    creates = req.get("creates")
    if creates and os.path.lexists(os.path.expanduser(creates)):
        return {"ok": True, "skipped": True, "msg": "skipped, since %s exists" % creates}
    if not os.path.isdir(dest):
        return {"ok": False, "msg": "dest '%s' must be an existing dir" % dest}
    if req.get("src") is not None:
        src = os.path.expanduser(req["src"])
        try:
            with open(src, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            return {"ok": False, "msg": "Source '%s' failed to transfer: %s" % (src, exc)}
    else:
        data = stdin
    try:
        handler, members = _open_archive(data)
    except (ValueError, zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        return {"ok": False, "msg": 'Failed to find handler for "%s": %s' % (req.get("name"), exc)}
    if req.get("check") and handler != "ZipArchive":  # as Ansible's unarchive, whose tar handler uses gtar
        return {
            "ok": True,
            "skipped": True,
            "msg": "remote module (unarchive) does not support check mode when using gtar",
        }
    mode = req.get("mode")
    try:
        ids = _ids(req)
    except KeyError as exc:
        return {"ok": False, "msg": "unknown owner or group: %s" % exc}
    todo, names = [], []
    for member in members:
        rel = _clean(member.name)
        if rel is None:
            return {"ok": False, "msg": "archive member %r would land outside dest: refused" % member.name}
        if rel == "":
            continue
        if member.kind == "link" and (member.target.startswith("/") or ".." in member.target.split("/")):
            return {"ok": False, "msg": "archive member %r links outside dest: refused" % member.name}
        names.append(member.name)
        path = os.path.join(dest, rel)
        if not _inside(dest, path):
            return {"ok": False, "msg": "archive member %r would land outside dest: refused" % member.name}
        if _differs(path, member, mode, ids):
            todo.append((path, member))
    answer = {"ok": True, "changed": bool(todo), "handler": handler, "dest": dest}
    if req.get("list_files"):
        answer["files"] = names
    if todo and not req.get("check"):
        try:
            for path, member in todo:
                _write(path, member, mode, ids)
            for path, member in reversed(todo):  # as tar does: the archive's times (dirs last: after their files)
                if member.mtime is not None and member.kind != "link":
                    os.utime(path, (member.mtime, member.mtime))
        except OSError as exc:
            return {"ok": False, "msg": "failed to unpack into %s: %s" % (dest, exc)}
    answer.update(path_info(dest))
    return answer


ACTIONS = {
    "fetch": do_fetch,
    "tempfile": do_tempfile,
    "unarchive": hostlib.takes_data(lambda req, data: do_unarchive(req, data if req.get("src") is None else b"")),
}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
