"""Read and change file state on the host, in one round trip each (stdlib only; Python 3.6+).

Run by the ``file``, ``copy``, ``template`` and ``command`` modules as ``python3 - ACTION`` with the request on
stdin (the host library's envelope, ``hostlib.serve``; a failure answers ``{"ok": false, "msg": ...}``, exit 1):

* ``stat {"paths": [...], "follow": bool, "hash": bool, "glob": bool, "want": sha256,
  "content_limit": n}`` prints ``{"ok": true, "states": [...]}``, one state per path: ``exists``, ``type``
  (file, directory, link, other; of the path itself), ``ftype`` (the type after following a link), ``mode``,
  ``owner``, ``group``, ``size``, ``mtime``, ``atime``, ``target``, ``real`` (its ``realpath``) and
  ``link_owners`` (who owns the links on the way there; ``link_trusted``: each is root or this process's user)
  for a link, ``parent`` (is the parent a
  directory), ``sha256`` (regular files, when ``hash``) and ``content`` (base64, when the hash differs from the
  ``want`` sha256 and the file is at most ``content_limit`` bytes: for ``--diff``), ``umask`` (this process's).
  With ``glob``, only ``exists`` (any match) and ``umask``.
* ``apply {"ops": [...]}`` performs operations in order (mkdir, touch, absent, link, attrs, copy: a file on the
  host copied to ``path`` with its mode and times, through ``hostlib.copy_over``) and answers ``{"ok": true}``.
  A copy takes ``backup`` and ``validate`` as ``write`` does; its ``backup_file``/``invalid`` are answered, and
  an ``invalid`` one ends the operations there.
* ``tree {"path": ...}`` prints ``{"ok": true, "entries": [...]}``: everything under a directory (not the directory
  itself; links not followed), each with ``path``, ``ftype`` (its own type), ``mode``, ``owner``, ``group``.
* ``write {"path": ..., "mode": ..., "owner": ..., "group": ..., "backup": ..., "validate": [argv]}`` (the
  request's line, then the data) writes the data to the path (``hostlib.atomic_write``), the new file owned by
  ``owner``/``group`` when given. ``backup`` (true, or the path to name it after: a link whose target is
  written) first keeps the old file (``hostlib.backup_local``: the answer's ``backup_file``); ``validate`` runs
  its command on the complete new file, ``%s`` its path, before it replaces the old one: a non-zero exit leaves
  the old file and answers ``{"ok": true, "invalid": {"rc", "stdout", "stderr"}}`` (as ansible-core's ``copy``,
  the backup is made before the command runs).
"""

import binascii
import grp
import os
import pwd
import stat
import sys
import time

import hostlib

KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "directory", stat.S_IFLNK: "link"}


def _kind(st):
    return KINDS.get(stat.S_IFMT(st.st_mode), "other")


def _name(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def stat_one(path, req):
    path = os.path.expanduser(path)
    parent = os.path.dirname(path.rstrip("/")) or "."
    out = {"path": path, "exists": False, "type": None, "ftype": None, "parent": os.path.isdir(parent)}
    out["umask"] = hostlib.umask()  # what a new file's mode starts from (a symbolic mode such as u+x applies to it)
    if req.get("glob"):
        if not any(c in path for c in "*?["):  # a plain path: what glob answers for it, without importing glob
            out["exists"] = os.path.isdir(path) if path.endswith("/") else os.path.lexists(path)
            return out
        import glob  # here only: it imports re (~5 ms of the script's start, on every host)

        out["exists"] = bool(glob.glob(path))
        return out
    try:
        lst = os.lstat(path)
    except OSError:
        return out
    out["exists"] = True
    out["type"] = _kind(lst)
    st = lst
    if out["type"] == "link":
        out["target"] = os.readlink(path)
        out["real"] = os.path.realpath(path)
        out["link_owners"], out["link_trusted"] = _link_owners(path)
        try:
            st = os.stat(path)
        except OSError:
            st = None  # type: ignore[assignment]  # dangling link
    out["ftype"] = _kind(st) if st is not None else None
    shown = st if (req.get("follow", True) and st is not None) else lst
    out.update(
        mode=stat.S_IMODE(shown.st_mode),
        owner=_name(pwd.getpwuid, shown.st_uid),
        group=_name(grp.getgrgid, shown.st_gid),
        size=shown.st_size,
        mtime=shown.st_mtime,
        atime=shown.st_atime,
    )
    if req.get("hash") and out["ftype"] == "file":
        out["sha256"] = hostlib.digest(path)
        want = req.get("want")
        if want and want != out["sha256"] and out["size"] <= req.get("content_limit", 0):
            with open(path, "rb") as fh:
                out["content"] = binascii.b2a_base64(fh.read(), newline=False).decode("ascii")
    return out


def _link_owners(path):
    """The owners of the links met from ``path`` to what it names (a chain of links), and whether each of them
    is root or this process's user: the line modules edit a link's target only then (what Linux's
    protected_symlinks asks of a link in a shared directory)."""
    owners, trusted = [], True
    for _ in range(40):  # the kernel's own limit of links in a row (ELOOP)
        try:
            st = os.lstat(path)
        except OSError:
            break
        if not stat.S_ISLNK(st.st_mode):
            break
        owners.append(_name(pwd.getpwuid, st.st_uid))
        trusted = trusted and st.st_uid in (0, os.geteuid())
        path = os.path.join(os.path.dirname(path), os.readlink(path))
    return sorted(set(owners)), trusted


def _attrs(path, op):
    if op.get("mode") is not None:
        os.chmod(path, op["mode"])
    if op.get("owner") is not None or op.get("group") is not None:
        uid = pwd.getpwnam(op["owner"]).pw_uid if op.get("owner") is not None else -1
        gid = grp.getgrnam(op["group"]).gr_gid if op.get("group") is not None else -1
        os.chown(path, uid, gid)
    if op.get("mtime") is not None or op.get("atime") is not None:
        st = os.stat(path)
        now = time.time()
        atime = {"now": now, None: st.st_atime}.get(op.get("atime"), op.get("atime"))
        mtime = {"now": now, None: st.st_mtime}.get(op.get("mtime"), op.get("mtime"))
        os.utime(path, (atime, mtime))


def _absent(path):
    if os.path.isdir(path) and not os.path.islink(path):
        import shutil  # here only, as glob

        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def apply_op(op):
    path = os.path.expanduser(op["path"])
    kind = op["op"]
    if kind == "mkdir":
        os.makedirs(path, exist_ok=True)
    elif kind == "touch":
        with open(path, "ab"):
            pass
    elif kind == "absent":
        _absent(path)
    elif kind == "link":
        if os.path.lexists(path):
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)  # only an empty directory is replaced by a link
            else:
                os.unlink(path)
        os.symlink(op["src"], path)
        return
    elif kind == "copy":
        done = _guarded(path, op, lambda owner, check: _copy(os.path.expanduser(op["src"]), path, owner, check))
        if "invalid" in done:
            return done
        _attrs(path, op)
        return done
    elif kind != "attrs":
        raise ValueError("unknown operation " + kind)
    _attrs(path, op)


def _copy(src, path, owner=None, check=None):
    """As Ansible's copy with remote_src: the source's mode and times come along, except that a file made new
    gets 0666 less the umask."""
    creating = not os.path.lexists(path)
    hostlib.copy_over(src, path, owner=owner, check=check)
    if creating:
        os.chmod(path, 0o666 & ~hostlib.umask())


def _owner(req):
    """(uid, gid) of the request's owner/group names (-1 for one not given), or None for neither."""
    if req.get("owner") is None and req.get("group") is None:
        return None
    uid = pwd.getpwnam(req["owner"]).pw_uid if req.get("owner") is not None else -1
    gid = grp.getgrnam(req["group"]).gr_gid if req.get("group") is not None else -1
    return uid, gid


def _guarded(path, req, put):
    """``put(owner, check)`` with the request's ``backup`` and ``validate`` around it: the answer's
    ``backup_file`` (when one was made) and ``invalid`` (when the validate command refused the new file)."""
    done = {}
    if req.get("backup"):  # a path: the backup is named after it (the link whose target is written)
        backup = hostlib.backup_local(req["backup"] if isinstance(req["backup"], str) else path)
        if backup is not None:
            done["backup_file"] = backup
    check = hostlib.validator(req["validate"]) if req.get("validate") else None
    try:
        put(_owner(req), check)
    except hostlib.Invalid as exc:
        done["invalid"] = {"rc": exc.rc, "stdout": exc.out, "stderr": exc.err}
    return done


@hostlib.takes_data
def write(req, data):
    path = os.path.expanduser(req["path"])
    mode = req.get("mode")
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            mode = 0o644
    try:
        done = _guarded(
            path, req, lambda owner, check: hostlib.atomic_write(path, data, mode, owner=owner, check=check)
        )
    except OSError as exc:  # the filesystem's own words too (strerror), as an SFTP write reports them
        raise hostlib.Failed(str(exc), strerror=exc.strerror or str(exc)) from None
    done["ok"] = True
    return done


def tree(req):
    top = os.path.expanduser(req["path"])
    entries = []
    for root, dirs, files in os.walk(top):
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            entries.append({
                "path": path,
                "exists": True,
                "ftype": _kind(st),
                "mode": stat.S_IMODE(st.st_mode),
                "owner": _name(pwd.getpwuid, st.st_uid),
                "group": _name(grp.getgrgid, st.st_gid),
            })  # fmt: skip
    return entries


def apply(req):
    answer = {"ok": True}
    for op in req["ops"]:
        answer.update(apply_op(op) or {})
        if "invalid" in answer:
            break
    return answer


ACTIONS = {
    "stat": lambda req: {"ok": True, "states": [stat_one(p, req) for p in req["paths"]]},
    "apply": apply,
    "write": write,
    "tree": lambda req: {"ok": True, "entries": tree(req)},
}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
