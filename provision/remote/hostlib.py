"""The host library: what every shipped script would otherwise write for itself. Stdlib only, Python 3.6+.

A shipped script imports it by its plain name (``import hostlib``): run from this directory that is this file;
sent to a host, the controller ships it WITH the script whichever way the script travels (a fresh ``python3 -``,
the persistent agent, a copied file): :func:`provision.remote.source` bundles the libraries a script imports in
front of it (each becomes a module of ``sys.modules`` before the script runs; the script keeps its own line
numbers). One module both imported and shipped, as mitogen's; Ansible's module_utils bundling is the model of
the shipping.

What is here, once:

* :func:`serve`, THE request/answer envelope: the action is the first argument, the request a JSON object on
  stdin; ONE JSON object is printed on the last stdout line, ``{"ok": true, ...}`` or ``{"ok": false,
  "failed": true, "msg": ...}``; the exit code follows the answer: 0 when ``ok``, 1 when not. A bad request
  (unknown action, stdin not a JSON object, a missing or mistyped field) is an answer like any failure
  (``msg`` starts with ``bad request:``). An action that takes data besides its request (a file's bytes, a
  script) is marked :func:`takes_data`: its request is then stdin's first line, the data the bytes after it.
  An answer that says ``failed`` is not ``ok`` (Ansible's shape and the envelope's agree).
* :class:`Failed`: raise it anywhere under :func:`serve` to answer a failure (``msg`` and any fields).
* :func:`run`: a command's (rc, stdout, stderr) as text, bounded by a timeout, never through a shell.
* :func:`atomic_write`, THE way a file is written on a host: a new file beside the target (a random name opened
  with ``O_EXCL|O_NOFOLLOW``: never an existing file, never a planted link), created with its final mode from
  the first byte (the umask does not narrow it: ``fchmod``), filled, ``fsync``-ed, renamed over the target
  (whatever was there, a link included, is replaced, never written through), the directory ``fsync``-ed.
  :func:`copy_over` copies a file through it. :func:`swap_link` replaces a symlink the same way.
  :func:`set_aside` keeps what is at a name (a hard link beside it) for :func:`put_back` to rename over it
  again. A ``check`` (:func:`validator`: ansible-core's ``validate``) sees the new file before the rename and can
  refuse it; :func:`backup_local` keeps the old file beside it first (ansible-core's ``backup``).
* :func:`digest` (a file's hash, streamed), :func:`umask` (the process's umask, read without changing it),
  :func:`http_json` (one bounded HTTP request with a JSON body and answer), :func:`sse_json` (a POST read as a
  stream of server-sent JSON events, ``data: {...}`` up to ``data: [DONE]``, bounded in bytes and time).
* THE way a host script opens a URL: :func:`url_opener` (the URL's own user and password answer a 401, as
  Ansible's ``url_get``), :func:`mask_url` (the URL as it may be shown); :func:`download` streams one URL into
  a file through :func:`atomic_write`, every read and the whole bounded (``get_url`` and ``apt``'s ``deb``). THE
  pump (a child's pipes read together, bounded) is builtins-only, beside the spawn core: ``programs/pump.py``
  (``from pump import pump``).
"""

import errno
import os
import stat
import sys

if __package__:  # the controller imports this file (provision.remote.hostlib): its package's codec
    import importlib

    codec = importlib.import_module(__package__ + ".codec")
else:
    import codec  # THE JSON codec of the host programs (codec.py): json's, without json's imports

# hashlib, shutil, subprocess and urllib are imported by the functions that use them: every helper script imports
# this library, most need none of them, and urllib.request alone (http.client, email, ssl) cost a host's agent
# ~20 ms of CPU per run (half its start), on every host of a fleet

BAD_REQUEST = "bad request: "
CHUNK = 1 << 20


class Failed(Exception):
    """A failure to answer: ``msg`` and any fields of the answer (``Failed("no such user", name=n)``)."""

    def __init__(self, msg, **data):
        super().__init__(msg)
        self.msg = msg
        self.data = data

    def answer(self):
        out = dict(self.data)
        out.update(ok=False, failed=True, msg=self.msg)
        return out


def failure(msg, **data):
    """The failure answer ``{"ok": false, "failed": true, "msg": msg, ...}``."""
    return Failed(msg, **data).answer()


def takes_data(handler):
    """Mark an action as called ``handler(request, data)``: the request is stdin's first line, ``data`` the bytes
    after it."""
    handler.takes_data = True
    return handler


def answer_of(actions, argv, text, data=b""):
    """The answer of one request: ``argv[0]`` names the action, ``text`` is its JSON request object (``data``:
    the bytes after the request, for an action marked :func:`takes_data`)."""
    if not argv or argv[0] not in actions:
        return failure(BAD_REQUEST + "usage: ACTION with a JSON request on stdin; ACTION is one of %s"
                       % ", ".join(sorted(actions)))  # fmt: skip
    try:
        request = codec.loads(text or "{}")
    except ValueError as exc:
        return failure(BAD_REQUEST + "the request is not JSON (%s)" % exc)
    if not isinstance(request, dict):
        return failure(BAD_REQUEST + "the request is a JSON %s, not an object" % type(request).__name__)
    try:
        handler = actions[argv[0]]
        answer = handler(request, data) if getattr(handler, "takes_data", False) else handler(request)
    except Failed as exc:
        return exc.answer()
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        what = "missing field %s" % exc if isinstance(exc, KeyError) else str(exc)
        return failure(BAD_REQUEST + what)
    except (OSError, RuntimeError) as exc:
        return failure(str(exc))
    if not isinstance(answer, dict):
        return failure("%s answered a %s, not an object" % (argv[0], type(answer).__name__))
    answer.setdefault("ok", not answer.get("failed"))
    if not answer["ok"]:
        answer.setdefault("failed", True)
        answer.setdefault("msg", "%s failed" % argv[0])
    return answer


def serve(actions, argv=None, stdin=None):
    """THE envelope of a shipped script: ``sys.exit(hostlib.serve({"name": handler, ...}))``. Reads the request
    (``stdin`` text, default the process's stdin), prints the answer as ONE JSON line, returns the exit code
    (0 when ok, 1 when not)."""
    argv = sys.argv[1:] if argv is None else argv
    data = b""
    if stdin is not None:
        text = stdin
    elif argv and getattr(actions.get(argv[0]), "takes_data", False):
        text, data = sys.stdin.buffer.readline().decode("utf-8", "replace"), sys.stdin.buffer.read()
    else:
        text = sys.stdin.buffer.read().decode("utf-8", "replace")
    answer = answer_of(actions, argv, text, data)
    sys.stdout.write(codec.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0 if answer.get("ok") else 1


def run(argv, timeout=None, stdin=None, env=None, cwd=None):
    """(rc, stdout, stderr) of ``argv`` as text (UTF-8, undecodable bytes replaced); rc 127 and the reason when
    it cannot start, 124 when it ran past ``timeout`` seconds (it is killed). Never a shell."""
    import subprocess

    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env, cwd=cwd,
        )  # fmt: skip
    except OSError as exc:
        return 127, "", str(exc)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return 124, out.decode("utf-8", "replace"), err.decode("utf-8", "replace") + "\ntimed out"
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")


def find_bin(name):
    """The path of the executable ``name`` on ``PATH`` and the sbin folders, as Ansible's ``get_bin_path``;
    ``Failed`` with its message when there is none."""
    path = os.pathsep.join([os.environ.get("PATH", "")] + list(SBIN))
    for folder in path.split(os.pathsep):
        found = os.path.join(folder, name)
        if folder and os.access(found, os.X_OK):
            return found
    raise Failed('Failed to find required executable "%s" in paths: %s' % (name, path))


def umask():
    """The process's umask (``os.umask`` sets one to read it: it is put back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(directory):
    try:
        fd = os.open(directory or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_beside(path):
    """A name beside ``path`` that does not exist yet (random: nobody can plant a link there in advance), never
    longer than the longest name a filesystem takes (255 bytes: the target's name is shortened for it)."""
    head, base = os.path.split(path)
    suffix = ".tmp-%d-%s" % (os.getpid(), os.urandom(6).hex())
    base = base.encode("utf-8", "surrogateescape")[: 255 - len(suffix)].decode("utf-8", "ignore")
    return os.path.join(head, base + suffix)


def atomic_write(path, data=None, mode=0o644, fill=None, sync=True, owner=None, check=None):
    """``path`` replaced by a new file holding ``data`` (bytes) or what ``fill(fh)`` writes, with ``mode`` from
    its creation on (``O_EXCL|O_NOFOLLOW`` on a random name beside ``path``, ``fchmod`` so that the umask does
    not narrow it), ``owner`` ``(uid, gid)`` when given (-1: left as it is), ``fsync``-ed with its directory when
    ``sync``, renamed over ``path``. ``check(temp_path)``, when given, is called on the complete new file before
    the rename: what it raises leaves ``path`` as it was. Whatever was at ``path`` (a file, a link) is replaced,
    never written through; the temp file is removed on any failure."""
    tmp = temp_beside(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, mode & 0o7777)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode & 0o7777)
            if owner is not None:
                os.fchown(fh.fileno(), owner[0], owner[1])
                os.fchmod(fh.fileno(), mode & 0o7777)  # chown clears set-id bits
            if fill is not None:
                fill(fh)
            elif data is not None:
                fh.write(data)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        if check is not None:
            check(tmp)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if sync:
        _fsync_dir(os.path.dirname(path))


def rewrite(path, data, new_mode=None):
    """``path`` replaced by ``data`` through :func:`atomic_write`, with the mode the file has now (a new file's:
    ``new_mode``, or 0666 less the umask, what ``open(path, "w")`` would give it)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = (0o666 & ~umask()) if new_mode is None else new_mode
    atomic_write(path, data, mode=mode)


def copy_over(src, dest, sync=True, owner=None, check=None):
    """``dest`` replaced by a copy of ``src`` (its mode and times, as ``shutil.copy2``) through
    :func:`atomic_write` (``owner``, ``check``: as there): a link at ``dest`` is replaced, never followed."""
    import shutil

    st = os.stat(src)
    with open(src, "rb") as source:
        atomic_write(dest, mode=stat.S_IMODE(st.st_mode), fill=lambda fh: shutil.copyfileobj(source, fh, CHUNK),
                     sync=sync, owner=owner, check=check)  # fmt: skip
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def backup_local(path):
    """ansible-core's ``backup``: a copy of the file at ``path`` (a link: of what it points to) beside it, named
    ``PATH.PID.YYYY-MM-DD@HH:MM:SS~``, with its mode and times and, as root, its owner; the copy's name, or None
    when there is no file. Made through :func:`copy_over`: a link planted at that name is replaced."""
    if not os.path.exists(path):
        return None
    import time

    name = "%s.%s.%s" % (path, os.getpid(), time.strftime("%Y-%m-%d@%H:%M:%S~", time.localtime()))
    st = os.stat(path)
    copy_over(path, name, owner=(st.st_uid, st.st_gid) if os.geteuid() == 0 else None)
    return name


class Invalid(Exception):
    """What a :func:`validator` raises for a new file its command refused: the command's rc, stdout, stderr."""

    def __init__(self, rc, out, err):
        super().__init__("failed to validate")
        self.rc, self.out, self.err = rc, out, err


def validator(argv, timeout=None):
    """The ``check`` of :func:`atomic_write` for ansible-core's ``validate``: ``argv`` (the command's words, as
    the controller split them) run with each ``%s`` replaced by the new file's path, never through a shell;
    :class:`Invalid` when it exits non-zero."""

    def check(path):
        rc, out, err = run([word.replace("%s", path) for word in argv], timeout=timeout)
        if rc != 0:
            raise Invalid(rc, out, err)

    return check


def swap_link(link, target):
    """``link`` made a symlink to ``target`` in one step: a new link under a random name renamed over it
    (``symlink`` never follows nor replaces what is there; the rename replaces a file or link at ``link``, a
    directory is refused)."""
    tmp = temp_beside(link)
    os.symlink(target, tmp)
    try:
        if os.path.isdir(link) and not os.path.islink(link):
            raise OSError(errno.EISDIR, "is a directory, not a link", link)
        os.rename(tmp, link)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def set_aside(path):
    """What is at ``path`` (a file or a link, never followed) kept under a random name beside it, by a hard link:
    ``path`` itself stays as it is (no moment without it) until it is replaced. The kept name, or None when
    nothing is at ``path``. :func:`put_back` renames it over ``path`` again."""
    if not os.path.lexists(path):
        return None
    kept = temp_beside(path)
    os.link(path, kept, follow_symlinks=False)
    return kept


def put_back(kept, path):
    """``path`` replaced in one step by what :func:`set_aside` kept (renamed over it: whatever is at ``path`` now
    is replaced, never written through)."""
    os.rename(kept, path)


def digest(path, algorithm="sha256"):
    """The hex digest of the file ``path`` (read in chunks: any size)."""
    with open(path, "rb") as fh:
        h = _hasher(algorithm, os.fstat(fh.fileno()).st_size)
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _hasher(algorithm, size):
    """A new hash object: hashlib's, or for a small file's sha256 (what a converged copy or template checks)
    Python's own, which is built in: hashlib loads OpenSSL, ~3 ms of the script's start, repaid on large files
    only."""
    if algorithm == "sha256" and size <= CHUNK:
        for module in ("_sha2", "_sha256"):  # Python 3.12+, 3.6-3.11
            try:
                return __import__(module).sha256()
            except (ImportError, AttributeError):
                pass
    import hashlib

    return hashlib.new(algorithm)


def mask_url(url):
    """The URL as it may be shown: its user and password replaced by ``****`` (as Ansible's mask_url)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if not parts.username and not parts.password:
        return url
    host = parts.netloc.rpartition("@")[2]
    userinfo = "****:****" if parts.password else "****"
    return urllib.parse.urlunsplit(parts._replace(netloc="%s@%s" % (userinfo, host)))


def url_opener(url, context=None):
    """``(opener, bare_url)``: an opener that answers a 401 with the URL's own user and password (as Ansible's
    url_get does; ``context``: an ``ssl.SSLContext`` for https), and the URL without them."""
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    handlers = [urllib.request.HTTPSHandler(context=context)] if context is not None else []  # type: list
    if parts.username is not None:
        url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        manager = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        user = urllib.parse.unquote(parts.username)
        manager.add_password(None, url, user, urllib.parse.unquote(parts.password or ""))
        handlers.append(urllib.request.HTTPBasicAuthHandler(manager))
    return urllib.request.build_opener(*handlers), url


def download(url, path, timeout=10.0, total=1800.0, mode=0o600):
    """The body of a GET of ``url`` written to ``path`` through :func:`atomic_write` (``mode``). Bounded: each
    connect and read by ``timeout`` seconds, the whole by ``total``. :class:`Failed` with Ansible's
    ``fetch_file`` message (``Failure downloading URL, why``; the URL's password masked) when it cannot."""
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + total
    opener, bare = url_opener(url)

    def fail(why):
        return Failed("Failure downloading %s, %s" % (mask_url(url), why))

    try:
        response = opener.open(urllib.request.Request(bare), timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise fail("HTTP Error %s: %s" % (exc.code, exc.reason)) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise fail("Request failed: %s" % getattr(exc, "reason", exc)) from None

    def fill(fh):
        with response:
            for block in iter(lambda: response.read(1 << 16), b""):
                if time.monotonic() > deadline:
                    raise fail("not downloaded within %g s" % total)
                fh.write(block)

    try:
        atomic_write(path, mode=mode, fill=fill)
    except (OSError, ValueError) as exc:  # a read that timed out, a connection reset
        raise fail(str(exc)) from None


def http_json(method, url, body=None, timeout=10.0, limit=16 << 20):
    """One HTTP request (a JSON ``body`` when given), bounded by ``timeout`` seconds and ``limit`` bytes of
    answer: ``(status or None, parsed JSON or text or None, error text)``; never raises for the network."""
    import urllib.error
    import urllib.request

    data = None if body is None else codec.dumps(body).encode("utf-8")
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw, status = resp.read(limit), resp.getcode()
    except urllib.error.HTTPError as exc:
        return exc.code, None, exc.read(1000).decode("utf-8", "replace")[:1000]
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return None, None, str(getattr(exc, "reason", exc))
    text = raw.decode("utf-8", "replace")
    try:
        return status, codec.loads(text), ""
    except ValueError:
        return status, text, ""


def sse_json(url, body, on_chunk, timeout=60.0, limit=16 << 20):
    """POST the JSON ``body`` to ``url`` and read the answer as server-sent events (OpenAI-style ``data: {...}``
    lines, ending with ``data: [DONE]``): each ``data:`` line's JSON object is given to ``on_chunk(obj)`` as it
    comes (other lines, and payloads that are not JSON objects, are skipped); reading stops at ``[DONE]`` or at
    the end of the stream. Returns the HTTP status. Bounded: ``limit`` bytes of stream in all, ``timeout``
    seconds for the whole of it (the connection, each read, and their sum). :class:`Failed` when it cannot be
    read whole, with ``status`` (the HTTP status; None when none came) and ``reason`` (an HTTP error's body,
    else the msg): an HTTP error (msg ``HTTP 500: <body>``), no answer (msg: why, in the network's words), the
    stream past ``limit`` bytes or past the deadline. What ``on_chunk`` raises is raised as it is."""
    got = {}  # type: dict
    chunks = _sse_chunks(url, body, timeout, limit, got)
    try:
        for chunk in chunks:
            on_chunk(chunk)
    finally:
        chunks.close()
    return got.get("status")


def _sse_chunks(url, body, timeout, limit, got):
    """The JSON objects of :func:`sse_json`'s stream (``got["status"]``: the HTTP status once it came)."""
    import http.client
    import socket
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    data = codec.dumps(body).encode("utf-8")
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    late = "no end of the stream from %s within %gs" % (url, timeout)
    if timeout <= 0:  # a socket timeout of 0 is no wait at all: a connection could not even begin
        raise Failed(late, status=None, reason=late)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            got["status"] = resp.getcode()
            # the socket under the answer (http.client keeps no public handle on it): each read waits only as
            # long as the deadline leaves; without it, each read is bounded by ``timeout`` and their sum checked
            sock = getattr(getattr(getattr(resp, "fp", None), "raw", None), "_sock", None)
            seen = 0
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Failed(late, status=got["status"], reason=late)
                if sock is not None:
                    sock.settimeout(left)
                raw = resp.readline(limit - seen + 1)
                if not raw:
                    return
                seen += len(raw)
                if seen > limit:
                    over = "the stream from %s passed %d bytes" % (url, limit)
                    raise Failed(over, status=got["status"], reason=over)
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    return
                try:
                    chunk = codec.loads(payload)
                except ValueError:
                    continue
                if isinstance(chunk, dict):
                    yield chunk
    except urllib.error.HTTPError as exc:
        text = exc.read(1000).decode("utf-8", "replace")[:1000]
        raise Failed("HTTP %s: %s" % (exc.code, text[:500]), status=exc.code, reason=text) from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        timeouts = (socket.timeout, TimeoutError)  # one class from Python 3.10 on, two before
        msg = late if isinstance(why, timeouts) or isinstance(exc, timeouts) else str(why)
        raise Failed(msg, status=got.get("status"), reason=msg) from None
