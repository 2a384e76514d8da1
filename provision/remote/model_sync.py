"""Model directory sync, run ON the host (stdlib only; Python 3.6+): ``provision model sync``'s host side.

    python - OP            (the request: ONE JSON line on stdin; ``recv``: the file bytes follow it)

in the host library's envelope (``hostlib.serve``): every op answers ONE JSON object (``fetch`` prints progress
lines before it, ``serve`` its port); ``{"ok": false, "msg": ...}`` and exit 1 on failure. The controller
imports this file too (:func:`manifest_of`, :func:`digest_of`): the host library is then its package's.

Paths: for a model directory ``P/NAME`` (``dir``) the files of the sync live beside it, on the same filesystem,
so that the last step is one rename:

* ``P/.NAME.provision-partial/``: the staged copy being filled (files resume where they stopped);
* ``P/.NAME.provision-partial.manifest.json`` / ``P/.NAME.provision-manifest.json``: the manifest caches of the
  staged copy and of ``dir``: per file ``[size, mtime_ns, inode, sha256]``, so a file is hashed again only when
  its size, mtime or inode changed.

A manifest is ``{relative path: [size, sha256]}`` over the regular files of the directory (a symlink to a
file is read through; names with a component starting with ``.`` are not part of a model: skipped).

Ops:

* ``manifest {"dir"}``: ``{"exists", "files", "digest", "hashed"}`` (``hashed``: bytes read to hash now).
* ``plan {"dir", "want", "reserve", "create"}``: ``{"state": "synced"}`` when ``dir`` holds exactly ``want``;
  else, with ``create``, the staged copy is made ready (files already right in ``dir`` hard-linked in, strays
  and files longer than wanted removed) and the answer is ``{"state": "transfer", "todo": {path: offset},
  "need", "free"}`` or ``{"state": "short", "need", "free", "shortfall"}`` (free bytes of the filesystem
  less ``reserve``, before anything is written).
* ``recv {"dir", "path", "offset", "size", "sha256"}`` + bytes: append to the staged file at ``offset`` (which
  must be its current size); at ``size`` the whole file is hashed: ``{"done", "bad"}`` (a bad one is removed).
* ``serve {"dir", "token", "files", "address", "slots", "stop", "lifetime"}``: a TCP server on ``address``
  (port 0: any free one) that sends the listed files of ``dir`` to a peer presenting ``token`` (compared in
  constant time), ``slots`` at once; first line ``{"port"}``, then it runs until the file
  ``P/.NAME.provision-serve-STOP.stop`` exists or ``lifetime`` seconds passed.
* ``stop {"dir", "stop"}``: create that file (the controller ending a ``serve``).
* ``fetch {"dir", "address", "port", "token", "files": {path: [offset, size, sha256]}, "timeout"}``: pull those
  files from a peer's ``serve`` into the staged copy, hashing as they come: ``{"done", "bad", "bytes"}``.
* ``commit {"dir", "want"}``: every staged file checked against ``want`` (from the cache: each was hashed on
  arrival), then the staged copy replaces ``dir`` in one rename (``renameat2(RENAME_EXCHANGE)`` when ``dir``
  exists, the old copy then removed), and its cache becomes ``dir``'s.

Writes never follow a link: directories are walked with ``O_NOFOLLOW`` relative to their parent, files are
created with their final mode (0644, directories 0755), a path from a request must be a plain relative path.
"""

import ctypes
import errno
import hashlib
import hmac
import importlib
import json
import os
import shutil
import socket
import stat
import struct
import sys
import threading
import time

try:
    import hostlib
except ImportError:  # the controller imports this file (provision.remote.model_sync): its package's library
    hostlib = importlib.import_module(__package__ + ".hostlib")

BLOCK = 1 << 20
PARTIAL = ".provision-partial"
CACHE = ".provision-manifest.json"


# ------------------------------------------------------------------------------------------------ paths
def _names(dir_):
    path = os.path.abspath(os.path.expanduser(dir_)).rstrip("/")
    parent, name = os.path.split(path)
    if not name:
        raise hostlib.Failed("the model directory cannot be /")
    return path, parent, name


def _partial(dir_):
    _, parent, name = _names(dir_)
    return os.path.join(parent, "." + name + PARTIAL)


def _cache_path(dir_):
    _, parent, name = _names(dir_)
    return os.path.join(parent, "." + name + CACHE)


def _partial_cache(dir_):
    return _partial(dir_) + ".manifest.json"


def _check_rel(rel):
    """A request's relative path: plain components only (no '', '.', '..', no absolute path, no NUL)."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel:
        raise hostlib.Failed("bad file path in the request: %r" % (rel,))
    parts = rel.split("/")
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        raise hostlib.Failed("bad file path in the request: %r" % (rel,))
    return parts


def _open_dir(root, parts, create):
    """An fd of ``root/parts...`` walked without following links (created 0755 when ``create``)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_file(root, rel, flags, create_dirs=False):
    parts = _check_rel(rel)
    dfd = _open_dir(root, parts[:-1], create_dirs)
    try:
        return os.open(parts[-1], flags | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
    finally:
        os.close(dfd)


def _ensure_real_dir(path, create):
    """``path`` is a real directory (not a link); made 0755 when ``create``. False when it is not there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return False
        os.mkdir(path, 0o755)
        return True
    if stat.S_ISLNK(st.st_mode):
        raise hostlib.Failed("%s is a symbolic link: point model_path at the real directory" % path)
    if not stat.S_ISDIR(st.st_mode):
        raise hostlib.Failed("%s exists and is not a directory" % path)
    return True


# ------------------------------------------------------------------------------------------------ manifests
def walk(root):
    """relative path -> os.stat of the model's files (through file links; dot names skipped), sorted."""
    out = {}
    for base, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name.startswith("."):
                continue
            full = os.path.join(base, name)
            try:
                st = os.stat(full)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                out[os.path.relpath(full, root)] = st
    return dict(sorted(out.items()))


def read_cache(path):
    try:
        with open(path) as fh:
            doc = json.load(fh)
        files = doc.get("files") if isinstance(doc, dict) else None
        return files if isinstance(files, dict) else {}
    except (OSError, ValueError):
        return {}


def write_cache(path, files):
    """The cache file, through ``hostlib.atomic_write`` (a new file beside it, renamed over it)."""
    data = json.dumps({"version": 1, "files": files}, sort_keys=True).encode()
    hostlib.atomic_write(path, data, 0o644, sync=False)


def _cached_sha(cache, rel, st):
    entry = cache.get(rel)
    if isinstance(entry, list) and len(entry) == 4 and entry[:3] == [st.st_size, st.st_mtime_ns, st.st_ino]:
        return entry[3]
    return None


def manifest_of(root, cache_file):
    """(manifest, bytes hashed now) of ``root``, the cache at ``cache_file`` used and refreshed."""
    cache = read_cache(cache_file) if cache_file else {}
    files, fresh, hashed = {}, {}, 0
    for rel, st in walk(root).items():
        sha = _cached_sha(cache, rel, st)
        if sha is None:
            sha = hostlib.digest(os.path.join(root, rel))
            hashed += st.st_size
        files[rel] = [st.st_size, sha]
        fresh[rel] = [st.st_size, st.st_mtime_ns, st.st_ino, sha]
    if cache_file and fresh != cache:
        try:
            write_cache(cache_file, fresh)
        except OSError:
            pass  # a directory we may read but not write beside: hashed again next time
    return files, hashed


def digest_of(files):
    text = json.dumps(sorted([p, s, h] for p, (s, h) in files.items()), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def op_manifest(req):
    path = _names(req["dir"])[0]
    if not _ensure_real_dir(path, False):
        return {"exists": False, "dir": path}
    files, hashed = manifest_of(path, _cache_path(path))
    return {"exists": True, "dir": path, "files": files, "digest": digest_of(files), "hashed": hashed}


# ------------------------------------------------------------------------------------------------ plan
def _want(req):
    want = req["want"]
    if not isinstance(want, dict):
        raise hostlib.Failed("want must be a mapping")
    for rel, entry in want.items():
        _check_rel(rel)
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int) and entry[0] >= 0):
            raise hostlib.Failed("bad manifest entry for %s" % rel)
    return want


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def op_plan(req):
    want = _want(req)
    path, parent, _ = _names(req["dir"])
    if not os.path.isdir(parent):
        if not req.get("create"):
            return _plan_answer(want, {}, parent, req)
        os.makedirs(parent, 0o755, exist_ok=True)
    have = {}
    if _ensure_real_dir(path, False):
        have, _ = manifest_of(path, _cache_path(path))
        if have == want:
            return {"state": "synced"}
    partial = _partial(path)
    existed = _ensure_real_dir(partial, False)
    if not req.get("create"):
        return _plan_answer(want, {}, parent, req, exists=existed)
    if not existed:  # the disk is checked before anything is written
        short = _plan_answer(want, {}, parent, req, have=have)
        if short["state"] == "short":
            return short
    _ensure_real_dir(partial, True)
    cache = read_cache(_partial_cache(path))
    fresh, todo = {}, {}
    staged = walk(partial)
    for rel, st in staged.items():  # strays and files longer than wanted go
        if rel not in want or st.st_size > want[rel][0] or os.path.islink(os.path.join(partial, rel)):
            os.unlink(os.path.join(partial, rel))
    staged = walk(partial)
    for rel, (size, sha) in want.items():
        st = staged.get(rel)
        if st is not None and st.st_size == size:
            got = _cached_sha(cache, rel, st) or hostlib.digest(os.path.join(partial, rel))
            if got == sha:
                fresh[rel] = [st.st_size, st.st_mtime_ns, st.st_ino, got]
                continue
            os.unlink(os.path.join(partial, rel))
            st = None
        if st is None and have.get(rel) == [size, sha]:  # right in the old copy: linked, not sent
            parts = _check_rel(rel)
            dfd = _open_dir(partial, parts[:-1], True)
            try:
                os.link(os.path.join(path, rel), parts[-1], dst_dir_fd=dfd, follow_symlinks=False)
            finally:
                os.close(dfd)
            st = os.stat(os.path.join(partial, rel))
            fresh[rel] = [st.st_size, st.st_mtime_ns, st.st_ino, sha]
            continue
        todo[rel] = st.st_size if st is not None else 0
    write_cache(_partial_cache(path), fresh)
    return _plan_answer(want, todo, parent, req, exists=True)


def _plan_answer(want, todo, parent, req, exists=False, have=None):
    if not exists:  # nothing staged yet: every file but those the old copy holds right (linked, not sent)
        todo = {rel: 0 for rel in want if (have or {}).get(rel) != want[rel]}
    need = sum(want[rel][0] - off for rel, off in todo.items())
    probe = parent
    while not os.path.isdir(probe):
        probe = os.path.dirname(probe)
    free = max(0, free_bytes(probe) - int(req.get("reserve") or 0))
    if need > free:
        return {"state": "short", "need": need, "free": free, "shortfall": need - free, "fs": probe}
    return {"state": "transfer", "todo": todo, "need": need, "free": free}


# ------------------------------------------------------------------------------------------------ receive
def _finish(path, rel, size, sha, got):
    """A staged file that reached its size: recorded in the cache when its sha256 is right, else removed."""
    partial = _partial(path)
    full = os.path.join(partial, rel)
    st = os.lstat(full)
    if got != sha or st.st_size != size:
        os.unlink(full)
        return False
    cache_file = _partial_cache(path)
    cache = read_cache(cache_file)
    cache[rel] = [st.st_size, st.st_mtime_ns, st.st_ino, got]
    write_cache(cache_file, cache)
    return True


def _write_at(fd, offset, data):
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def op_recv(req, payload):
    path = _names(req["dir"])[0]
    rel, offset, size, sha = req["path"], int(req["offset"]), int(req["size"]), req["sha256"]
    fd = _open_file(_partial(path), rel, os.O_WRONLY | os.O_CREAT, create_dirs=True)
    try:
        current = os.fstat(fd).st_size
        if current != offset:
            raise hostlib.Failed("%s holds %d bytes, not %d: plan again" % (rel, current, offset))
        if offset + len(payload) > size:
            raise hostlib.Failed("%s would grow past its size %d" % (rel, size))
        _write_at(fd, offset, payload)
        end = offset + len(payload)
        if end < size:
            return {"done": [], "bad": [], "size": end}
        os.fsync(fd)
    finally:
        os.close(fd)
    ok = _finish(path, rel, size, sha, hostlib.digest(os.path.join(_partial(path), rel)))
    return {"done": [rel] if ok else [], "bad": [] if ok else [rel], "size": size}


# ------------------------------------------------------------------------------------------------ serve
def _recv_line(conn, limit=65536):
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
        if len(data) > limit:
            raise ConnectionError("request too long")
    return json.loads(data.decode())


def _serve_one(conn, roots, token, allowed):
    """One peer request: ``{"token", "path", "offset"}`` -> 8-byte length, then the bytes (length 2**64-1:
    refused)."""
    with conn:
        conn.settimeout(60)
        try:
            req = _recv_line(conn)
            if not hmac.compare_digest(str(req.get("token", "")).encode(), token.encode()):
                raise ConnectionError("bad token")
            rel, offset = req.get("path"), int(req.get("offset", 0))
            if rel not in allowed:
                raise ConnectionError("not served")
            fd = None
            for root in roots:
                try:
                    fd = _open_file(root, rel, os.O_RDONLY)
                    break
                except (OSError, hostlib.Failed):
                    continue
            if fd is None:
                raise ConnectionError("missing")
        except (ConnectionError, ValueError, OSError):
            try:
                conn.sendall(struct.pack(">Q", (1 << 64) - 1))
            except OSError:
                pass
            return
        try:
            conn.settimeout(None)  # sendfile needs a blocking socket; a stalled peer is bounded by SO_SNDTIMEO
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 60, 0))
            size = os.fstat(fd).st_size
            left = max(0, size - offset)
            conn.sendall(struct.pack(">Q", left))
            while left > 0:
                sent = os.sendfile(conn.fileno(), fd, offset, min(left, 1 << 24))
                if sent == 0:
                    break
                offset, left = offset + sent, left - sent
        except OSError:
            pass
        finally:
            os.close(fd)


def _stop_file(req):
    _, parent, name = _names(req["dir"])
    tag = str(req["stop"])
    if not tag.isalnum():
        raise hostlib.Failed("bad stop tag")
    return os.path.join(parent, ".%s.provision-serve-%s.stop" % (name, tag))


def op_serve(req):
    path = _names(req["dir"])[0]
    roots = [path, _partial(path)] if req.get("partial") else [path]
    token, allowed, stop = str(req["token"]), set(req["files"]), _stop_file(req)
    lifetime = float(req.get("lifetime") or 3600)
    slots = threading.BoundedSemaphore(max(1, int(req.get("slots") or 2)))
    sock = socket.socket(socket.AF_INET6 if ":" in req["address"] else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((req["address"], 0))
    sock.listen(16)
    sock.settimeout(0.2)
    sys.stdout.write(json.dumps({"port": sock.getsockname()[1], "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    end = time.monotonic() + lifetime
    served = [0]

    def worker(conn):
        try:
            _serve_one(conn, roots, token, allowed)
            served[0] += 1
        finally:
            slots.release()

    while time.monotonic() < end and not os.path.lexists(stop):
        try:
            conn, _ = sock.accept()
        except OSError:  # socket.timeout, every 0.2 s: look at the stop file again
            continue
        if not slots.acquire(timeout=30):
            conn.close()
            continue
        threading.Thread(target=worker, args=(conn,), daemon=True).start()
    sock.close()
    try:
        os.unlink(stop)
    except OSError:
        pass
    return {"served": served[0]}


def op_stop(req):
    stop = _stop_file(req)
    fd = os.open(stop, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    return {}


# ------------------------------------------------------------------------------------------------ fetch
def _fetch_one(req, path, rel, offset, size, sha):
    """One file from the peer into the staged copy, from ``offset``; its sha256 (prefix re-read first)."""
    partial = _partial(path)
    fd = _open_file(partial, rel, os.O_WRONLY | os.O_CREAT, create_dirs=True)
    try:
        current = os.fstat(fd).st_size
        if current != offset:
            raise hostlib.Failed("%s holds %d bytes, not %d: plan again" % (rel, current, offset))
        digest = hashlib.sha256()
        if offset:
            with open(os.path.join(partial, rel), "rb") as fh:
                left = offset
                while left > 0:
                    block = fh.read(min(BLOCK, left))
                    if not block:
                        break
                    digest.update(block)
                    left -= len(block)
        sock = socket.create_connection((req["address"], int(req["port"])), timeout=float(req.get("timeout", 60)))
        got = 0
        with sock:
            line = {"token": req["token"], "path": rel, "offset": offset}
            sock.sendall((json.dumps(line) + "\n").encode())
            head = b""
            while len(head) < 8:
                chunk = sock.recv(8 - len(head))
                if not chunk:
                    raise hostlib.Failed("the peer closed the connection for %s" % rel)
                head += chunk
            (length,) = struct.unpack(">Q", head)
            if length == (1 << 64) - 1:
                raise hostlib.Failed("the peer refused %s" % rel)
            if offset + length != size:
                raise hostlib.Failed("the peer has %d bytes of %s, not %d" % (offset + length, rel, size))
            pos = offset
            while got < length:
                chunk = sock.recv(min(BLOCK, length - got))
                if not chunk:
                    break
                _write_at(fd, pos, chunk)
                digest.update(chunk)
                pos += len(chunk)
                got += len(chunk)
        if offset + got < size:
            raise hostlib.Failed("the peer stopped sending %s at %d of %d bytes" % (rel, offset + got, size))
        os.fsync(fd)
    finally:
        os.close(fd)
    return _finish(path, rel, size, sha, digest.hexdigest()), got


def op_fetch(req):
    path = _names(req["dir"])[0]
    done, bad, total = [], [], 0  # type: ignore[var-annotated]
    for rel, (offset, size, sha) in sorted(req["files"].items()):
        try:
            ok, got = _fetch_one(req, path, rel, int(offset), int(size), sha)
        except OSError as exc:  # socket.timeout too
            raise hostlib.Failed("fetching %s from %s:%s: %s" % (rel, req["address"], req["port"], exc)) from None
        total += got
        (done if ok else bad).append(rel)
        sys.stdout.write(json.dumps({"progress": rel, "bytes": total}) + "\n")
        sys.stdout.flush()
    return {"done": done, "bad": bad, "bytes": total}


# ------------------------------------------------------------------------------------------------ commit
_RENAME_EXCHANGE = 2


def _exchange(a, b):
    """renameat2(a, b, RENAME_EXCHANGE): both names swap in one step; False where the kernel/libc cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if fn(at_fdcwd, a.encode(), at_fdcwd, b.encode(), _RENAME_EXCHANGE) == 0:
        return True
    if ctypes.get_errno() in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), b)


def op_commit(req):
    want = _want(req)
    path = _names(req["dir"])[0]
    partial = _partial(path)
    if not _ensure_real_dir(partial, False):
        raise hostlib.Failed("nothing staged at %s: plan again" % partial)
    cache = read_cache(_partial_cache(path))
    staged = walk(partial)
    for rel, (_, sha) in want.items():
        st = staged.get(rel)
        if st is None or _cached_sha(cache, rel, st) != sha:
            raise hostlib.Failed("%s is not complete in %s: sync again" % (rel, partial))
    extra = sorted(set(staged) - set(want))
    if extra:
        raise hostlib.Failed("%s holds files the model does not (%s): sync again" % (partial, extra[0]))
    os.chmod(partial, 0o755)
    if _ensure_real_dir(path, False):
        if _exchange(partial, path):
            shutil.rmtree(partial)  # the old copy, now under the staged name
        else:
            old = partial + ".old"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(path, old)
            os.rename(partial, path)
            shutil.rmtree(old)
    else:
        os.rename(partial, path)
    os.replace(_partial_cache(path), _cache_path(path))
    return {"dir": path, "files": len(want)}


ACTIONS = {"manifest": op_manifest, "plan": op_plan, "recv": hostlib.takes_data(op_recv), "serve": op_serve,
           "stop": op_stop, "fetch": op_fetch, "commit": op_commit}  # fmt: skip

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
