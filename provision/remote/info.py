"""Read-only answers for ``stat`` and ``slurp``, as Ansible's modules give them (stdlib only; Python 3.6+).

``python3 - stat JSON`` with ``{"path", "follow", "get_checksum", "checksum_algorithm", "get_mime"}`` prints
``{"ok": true, "stat": {...}}`` with Ansible's keys (``{"exists": false}`` for no file); ``slurp JSON`` with
``{"src"}`` prints ``{"ok": true, "content": base64, "source": path}`` or ``{"ok": false, "msg": ...}``.
"""

import base64
import grp
import hashlib
import json
import os
import pwd
import stat
import subprocess
import sys


def _name(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return None


def _checksum(path, algorithm):
    digest = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _mime(path):
    """(mimetype, charset) as ``file`` says; ("unknown", "unknown") when it cannot."""
    try:
        proc = subprocess.run(
            ["file", "--mime-type", "--mime-encoding", path],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )
        if proc.returncode == 0:
            mime, charset = proc.stdout.decode("utf-8", "replace").rsplit(":", 1)[1].split(";")
            return mime.strip(), charset.split("=")[1].strip()
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
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
    try:
        proc = subprocess.run(["lsattr", "-vd", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30)
        if proc.returncode == 0:
            words = proc.stdout.decode("utf-8", "replace").split()
            flags = words[1].replace("-", "").strip()
            return words[0].strip(), flags, [FLAGS[f] for f in flags if f in FLAGS]
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return None, "", []


def do_stat(req):
    path = os.path.expanduser(req["path"])
    try:
        st = os.stat(path) if req.get("follow") else os.lstat(path)
    except OSError:
        return {"exists": False}
    mode = st.st_mode
    out = {
        "exists": True,
        "path": path,
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
        "blocks": st.st_blocks,
        "block_size": st.st_blksize,
        "device_type": st.st_rdev,
        "readable": os.access(path, os.R_OK),
        "writeable": os.access(path, os.W_OK),
        "executable": os.access(path, os.X_OK),
    }
    for key, value in (("pw_name", _name(pwd.getpwuid, st.st_uid)), ("gr_name", _name(grp.getgrgid, st.st_gid))):
        if value is not None:
            out[key] = value
    if stat.S_ISLNK(mode):
        out["lnk_source"] = os.path.realpath(path)
        out["lnk_target"] = os.readlink(path)
    if stat.S_ISREG(mode) and req.get("get_checksum", True) and os.access(path, os.R_OK):
        out["checksum"] = _checksum(path, req.get("checksum_algorithm") or "sha1")
    if req.get("get_mime", True):
        out["mimetype"], out["charset"] = _mime(path)
    if req.get("get_attributes", True):
        out["version"], out["attr_flags"], out["attributes"] = _attributes(path)
    return out


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


def main(argv):
    action, req = argv[1], json.loads(argv[2])
    if action == "stat":
        answer = {"ok": True, "stat": do_stat(req)}
    elif action == "slurp":
        answer = do_slurp(req)
    elif action == "ping":
        answer = {"ok": True, "ping": req.get("data", "pong")}
    else:
        answer = {"ok": False, "msg": "unknown action %r" % action}
    print(json.dumps(answer))
    return 0 if answer.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
