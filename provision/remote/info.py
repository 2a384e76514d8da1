"""Read-only answers for ``stat`` and ``slurp``, as Ansible's modules give them (stdlib only; Python 3.6+).

``python3 - ACTION`` with the request on stdin (the host library's envelope, ``hostlib.serve``): ``stat`` with
``{"path", "follow", "get_checksum", "checksum_algorithm", "get_mime"}`` answers ``{"ok": true, "stat": {...}}``
with Ansible's keys (``{"exists": false}`` for no file); ``slurp`` with ``{"src"}`` answers ``{"ok": true,
"content": base64, "source": path}`` or a failure; ``find`` (Ansible's find arguments, ``age`` in seconds,
``size`` in bytes, ``mode`` an int) answers ``{"ok": true, "files": [...], "matched", "examined",
"skipped_paths", "msg"}``; ``ping`` with ``{"data"}`` answers ``{"ok": true, "ping": data}``.
"""

import base64
import errno
import fnmatch
import grp
import os
import pwd
import re
import stat
import sys
import time

import hostlib


def _name(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return None


def _mime(path):
    """(mimetype, charset) as ``file`` says; ("unknown", "unknown") when it cannot."""
    rc, out, _ = hostlib.run(["file", "--mime-type", "--mime-encoding", path], timeout=30)
    if rc == 0:
        try:
            mime, charset = out.rsplit(":", 1)[1].split(";")
            return mime.strip(), charset.split("=")[1].strip()
        except (ValueError, IndexError):
            pass
    return "unknown", "unknown"


FLAGS = {
    "A": "noatime", "a": "append", "c": "compressed", "C": "nocow", "d": "nodump", "D": "dirsync",
    "e": "extents", "E": "encrypted", "h": "blocksize", "i": "immutable", "I": "indexed", "j": "journalled",
    "N": "inline", "s": "zero", "S": "synchronous", "t": "notail", "T": "blockroot", "u": "undelete",
    "X": "compressedraw", "Z": "compresseddirty",
}  # fmt: skip


def _attributes(path):
    """(version, attr_flags, attributes) from ``lsattr -vd``; (None, "", []) when it cannot tell."""
    rc, out, _ = hostlib.run(["lsattr", "-vd", path], timeout=30)
    if rc == 0:
        try:
            words = out.split()
            flags = words[1].replace("-", "").strip()
            return words[0].strip(), flags, [FLAGS[f] for f in flags if f in FLAGS]
        except IndexError:
            pass
    return None, "", []


def _mode_keys(st):
    """The keys Ansible's stat and find both give for a file's type, owner, size, times and permission bits."""
    mode = st.st_mode
    return {
        "mode": "%04o" % stat.S_IMODE(mode),
        "isdir": stat.S_ISDIR(mode),
        "ischr": stat.S_ISCHR(mode),
        "isblk": stat.S_ISBLK(mode),
        "isreg": stat.S_ISREG(mode),
        "isfifo": stat.S_ISFIFO(mode),
        "islnk": stat.S_ISLNK(mode),
        "issock": stat.S_ISSOCK(mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
        "size": st.st_size,
        "inode": st.st_ino,
        "dev": st.st_dev,
        "nlink": st.st_nlink,
        "atime": st.st_atime,
        "mtime": st.st_mtime,
        "ctime": st.st_ctime,
        "wusr": bool(mode & stat.S_IWUSR),
        "rusr": bool(mode & stat.S_IRUSR),
        "xusr": bool(mode & stat.S_IXUSR),
        "wgrp": bool(mode & stat.S_IWGRP),
        "rgrp": bool(mode & stat.S_IRGRP),
        "xgrp": bool(mode & stat.S_IXGRP),
        "woth": bool(mode & stat.S_IWOTH),
        "roth": bool(mode & stat.S_IROTH),
        "xoth": bool(mode & stat.S_IXOTH),
        "isuid": bool(mode & stat.S_ISUID),
        "isgid": bool(mode & stat.S_ISGID),
    }


def do_stat(req):
    path = os.path.expanduser(req["path"])
    try:
        st = os.stat(path) if req.get("follow") else os.lstat(path)
    except OSError:
        return {"exists": False}
    mode = st.st_mode
    out = {"exists": True, "path": path, **_mode_keys(st)}
    out.update({
        "blocks": st.st_blocks,
        "block_size": st.st_blksize,
        "device_type": st.st_rdev,
        "readable": os.access(path, os.R_OK),
        "writeable": os.access(path, os.W_OK),
        "executable": os.access(path, os.X_OK),
    })  # fmt: skip
    for key, value in (("pw_name", _name(pwd.getpwuid, st.st_uid)), ("gr_name", _name(grp.getgrgid, st.st_gid))):
        if value is not None:
            out[key] = value
    if stat.S_ISLNK(mode):
        out["lnk_source"] = os.path.realpath(path)
        out["lnk_target"] = os.readlink(path)
    if stat.S_ISREG(mode) and req.get("get_checksum", True) and os.access(path, os.R_OK):
        out["checksum"] = hostlib.digest(path, req.get("checksum_algorithm") or "sha1")
    if req.get("get_mime", True):
        out["mimetype"], out["charset"] = _mime(path)
    if req.get("get_attributes", True):
        out["version"], out["attr_flags"], out["attributes"] = _attributes(path)
    return out


def _matches(name, req):
    """The name against ``patterns`` (all, when none) less ``excludes``: shell globs, or regexes from the start."""
    if req.get("use_regex"):
        hit = lambda pat: re.match(pat, name) is not None  # noqa: E731
    else:
        hit = lambda pat: fnmatch.fnmatch(name, pat)  # noqa: E731
    patterns = req.get("patterns") or [".*" if req.get("use_regex") else "*"]
    return any(hit(p) for p in patterns) and not any(hit(e) for e in req.get("excludes") or [])


def _within(value, limit):
    """Age or size filters: a positive limit keeps values at least that large, a negative one at most."""
    return limit is None or (value >= limit if limit >= 0 else value <= -limit)


def _contains(path, req):
    pattern = req.get("contains")
    if pattern is None:
        return True
    prog = re.compile(pattern)
    try:
        with open(path, encoding=req.get("encoding")) as fh:
            if req.get("read_whole_file"):
                return prog.search(fh.read()) is not None
            return any(prog.match(line) for line in fh)
    except UnicodeDecodeError:
        raise ValueError("Failed to read the file %s due to an encoding error. current encoding: %s"
                         % (path, req.get("encoding") or "None (default determined by the Python built-in function "
                            '"open")')) from None  # fmt: skip
    except OSError:
        return False


def _found(path, st, req, now):
    """The entry's keys when it is of the wanted type and passes every filter, else None."""
    kind, mode = req.get("file_type") or "file", st.st_mode
    wanted = {"any": True, "directory": stat.S_ISDIR(mode), "file": stat.S_ISREG(mode), "link": stat.S_ISLNK(mode)}
    if not wanted[kind] or not _matches(os.path.basename(path), req):
        return None
    if not _within(now - getattr(st, "st_" + (req.get("age_stamp") or "mtime")), req.get("age")):
        return None
    want_mode = req.get("mode")
    if want_mode is not None:
        bits = stat.S_IMODE(mode)
        if (bits != want_mode) if req.get("exact_mode", True) else not bits & want_mode:
            return None
    if stat.S_ISREG(mode) and kind in ("any", "file") and not _within(st.st_size, req.get("size")):
        return None
    if kind == "file" and not _contains(path, req):
        return None
    out = {"path": path, **_mode_keys(st)}
    out["gr_name"] = _name(grp.getgrgid, st.st_gid) or ""
    out["pw_name"] = _name(pwd.getpwuid, st.st_uid) or ""
    if stat.S_ISREG(mode) and req.get("get_checksum"):
        out["checksum"] = hostlib.digest(path, req.get("checksum_algorithm") or "sha1")
    return out


def do_find(req):
    """Ansible's find: walk each path (top-down; one level unless ``recurse``; ``depth``; ``hidden``;
    ``follow``), keep what passes the filters, up to ``limit``; ``examined`` counts every entry listed."""
    found, skipped, examined, warned, msg = [], {}, 0, False, "All paths examined"
    limit, depth, now = req.get("limit"), req.get("depth"), time.time()

    def unreadable(exc):
        if exc.errno in (errno.EPERM, errno.EACCES, errno.ENOENT):
            skipped[exc.filename] = str(exc)
        else:
            raise exc

    for top in req["paths"]:
        top = os.path.expanduser(top)
        try:
            if not os.path.isdir(top):
                raise ValueError("'%s' is not a directory" % top)
            base = top.rstrip(os.sep).count(os.sep) + 1
            for root, dirs, files in os.walk(top, onerror=unreadable, followlinks=bool(req.get("follow"))):
                examined += len(files) + len(dirs)
                for name in files + dirs:
                    path = os.path.normpath(os.path.join(root, name))
                    if depth and path.count(os.sep) - base + 1 > depth:
                        del dirs[:]
                        continue
                    if name.startswith(".") and not req.get("hidden"):
                        continue
                    try:
                        st = os.lstat(path)
                    except OSError as exc:
                        skipped[path], warned = str(exc), True
                        continue
                    entry = _found(path, st, req, now)
                    if entry is not None:
                        found.append(entry)
                    if len(found) == limit:
                        msg = "Limit of matches reached"
                        break
                if not req.get("recurse") or len(found) == limit:
                    break
        except Exception as exc:  # as Ansible: the path is skipped with a warning, the others still searched
            skipped[top], warned = str(exc), True
    if warned:
        msg = "Not all paths examined, check warnings for details"
    return {"ok": True, "files": found, "matched": len(found), "examined": examined, "skipped_paths": skipped,
            "msg": msg}  # fmt: skip


def do_slurp(req):
    src = os.path.expanduser(req["src"])
    try:
        with open(src, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return {"ok": False, "msg": "File not found: %s" % src}
    except IsADirectoryError:
        return {"ok": False, "msg": "source is a directory and must be a file: %s" % src}
    except OSError as exc:
        return {"ok": False, "msg": "Unable to slurp file: %s" % exc}
    return {"ok": True, "content": base64.b64encode(data).decode("ascii"), "source": src}


ACTIONS = {
    "stat": lambda req: {"ok": True, "stat": do_stat(req)},
    "find": do_find,
    "slurp": do_slurp,
    "ping": lambda req: {"ok": True, "ping": req.get("data", "pong")},
}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
