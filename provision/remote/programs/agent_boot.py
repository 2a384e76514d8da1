"""Starts the python agent (``python3 -S -c BOOTSTRAP H [SOURCE REQUEST]``): its source from argv (zlib, base64:
it travels with the first request in the exec line, see ``PythonAgent.command``), else read from stdin,
length-prefixed and unbuffered (nothing of the first request may be swallowed by a buffer); then runs it.

``_code`` is the compile of the agent and of what it runs (the agent finds it in its globals): the code it makes
is kept in ``~/.cache/provision-code/`` between runs, so a fresh agent does not compile the same sources again
(the agent, the host library and a run's scripts: ~12 ms of a fresh start's ~25). An entry is named by a hash of
the source, its file name and the interpreter's bytecode version, and is only used from a folder that is the
user's own and private (0700, owned by the effective uid: opened without following a link, then checked) and
when the entry is the user's, a regular file and private too; anything else compiles as if there were no cache.
Entries are written as Python writes its own bytecode caches: created 0600, under a temporary name, then renamed;
never with ``PYTHONDONTWRITEBYTECODE`` (``-B``). The oldest go when the folder holds more than ``_KEEP``.
"""

import os
import sys

_KEEP = 256


def _code(text, name):
    try:
        import marshal

        try:
            from _sha2 import sha256
        except ImportError:
            from _sha256 import sha256
        magic = sys.modules["_frozen_importlib_external"].MAGIC_NUMBER
        data = text.encode("utf-8") if isinstance(text, str) else text
        key = sha256(magic + name.encode("utf-8") + b"\0" + data).hexdigest()[:48] + ".code"
        cache = os.path.join(os.path.expanduser("~"), ".cache")
        folder = os.path.join(cache, "provision-code")
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except FileNotFoundError:
            if sys.dont_write_bytecode:
                raise
            for made in (cache, folder):  # under an existing home only: a home is never made here
                try:
                    os.mkdir(made, 0o700)
                except FileExistsError:
                    pass
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except Exception:
        return compile(text, name, "exec")
    try:
        me = os.geteuid()
        st = os.fstat(fd)
        if st.st_uid != me or st.st_mode & 0o077:
            return compile(text, name, "exec")  # not the user's own private folder: never read, never written
        try:
            entry = os.fdopen(os.open(key, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd), "rb")
        except OSError:
            entry = None
        if entry is not None:
            with entry:
                try:
                    st = os.fstat(entry.fileno())
                    if st.st_uid == me and not st.st_mode & 0o077 and (st.st_mode & 0o170000) == 0o100000:
                        code = marshal.loads(entry.read())
                        if type(code) is type(_code.__code__):
                            return code
                except Exception:
                    pass
        code = compile(text, name, "exec")
        if not sys.dont_write_bytecode:
            _keep(fd, key, marshal.dumps(code))
        return code
    finally:
        os.close(fd)


def _keep(fd, key, blob):
    temp = "%s.%s.tmp" % (key, os.urandom(8).hex())  # not the pid: hosts may share a home (NFS)
    made = False
    try:
        out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
        made = True
        try:
            while blob:
                blob = blob[os.write(out, blob) :]
        finally:
            os.close(out)
        os.rename(temp, key, src_dir_fd=fd, dst_dir_fd=fd)
        made = False
        names = os.listdir(fd)
        if len(names) > _KEEP:  # the oldest half go (each version of provision brings its own entries)
            aged = sorted(names, key=lambda n: os.stat(n, dir_fd=fd, follow_symlinks=False).st_mtime)
            for old in aged[: len(names) - _KEEP // 2]:
                os.unlink(old, dir_fd=fd)
    except Exception:
        if made:  # only what this agent created: never another writer's temporary file
            try:
                os.unlink(temp, dir_fd=fd)
            except OSError:
                pass


if len(sys.argv) > 2:
    import binascii  # not base64: it imports re (~4 ms of every agent's start)
    import zlib

    source = zlib.decompress(binascii.a2b_base64(sys.argv[2]))
else:
    header = b""
    while not header.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk:
            raise SystemExit(1)
        header += chunk
    size = int(header)
    source = b""
    while len(source) < size:
        chunk = os.read(0, size - len(source))
        if not chunk:
            raise SystemExit(1)
        source += chunk
exec(_code(source, "provision-agent"))
