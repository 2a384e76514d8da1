"""Every script shipped to hosts, and the one way the controller finds them: :func:`path`.

The files here (``*.py``, ``*.sh``) run ON the hosts, with whatever Python or sh is there (stdlib only, old
Pythons too); they never import provision. They travel on stdin (``ModuleContext.run_script``,
``ModuleContext.call_helper``), through the persistent agent (:mod:`provision.transport.agent`), or are copied when they
must outlive the command (the NIXL transfer's target). Each answers with ONE JSON object on its last stdout
line (``CommandResult.last_json``), except ``gather_facts.sh`` (sections, parsed by :mod:`provision.facts`).

The host library (``hostlib.py``: the envelope, ``Failed``, the atomic write, ...) is imported by the scripts
by its plain name; :func:`source` ships it with each script that imports it, whichever way the script travels:
the bytes it returns are the script bundled with its libraries (:func:`bundle`), a self-contained program.

This ``__init__`` is controller-side only and imports nothing of provision.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import re
import stat
import sys
import threading
import tokenize
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

REMOTE_DIR = Path(__file__).resolve().parent
# the modules that scripts import (shipped with them), each after those it imports: codec.py, hostlib.py,
# programs/pump.py
LIBRARIES = ("codec", "hostlib", "pump")
_IMPORTS = re.compile(r"^\s*(?:import|from)\s+(%s)\b" % "|".join(LIBRARIES), re.M)
_BUNDLE = """\
# {name}, bundled by provision (provision/remote/__init__.py) with the host libraries it imports
import sys as _provision_sys


def _provision_run(libraries, name, text):
    import types
    # compiled once per interpreter (the agent runs a script many times a run): a fresh module each call
    cache = _provision_sys.modules.setdefault("_provision_codes", types.ModuleType("_provision_codes"))
    codes = cache.__dict__.setdefault("codes", {{}})
    make = getattr(cache, "compile", None)  # an agent's: code kept on the host between runs (agent_boot.py)
    def code(text, filename):
        key = (filename, text)
        if key not in codes:
            codes[key] = make(text, filename) if make else compile(text, filename, "exec")
        return codes[key]
    for lib, lib_text in libraries:
        module = types.ModuleType(lib)
        module.__file__ = "<provision:%s>" % lib
        exec(code(lib_text, module.__file__), module.__dict__)
        _provision_sys.modules[lib] = module
    if __name__ == "__provision_warm__":  # a resident agent readying it for its runs: compiled, not run
        code(text, name)
        return
    exec(code(text, name), {{"__name__": "__main__", "__file__": name, "__builtins__": __builtins__}})


_provision_run({libraries}, {name!r}, {text})
"""


def path(name: str) -> Path:
    """The controller-side file of the shipped script ``name`` (``"file_state.py"``, ``"gather_facts.sh"``)."""
    if not name or "/" in name or name.startswith(".") or name == "__init__.py":
        raise ValueError(f"not a shipped helper script: {name!r}")
    return REMOTE_DIR / name


def request(req: dict[str, Any], data: bytes | None = None) -> bytes:
    """The stdin of one helper call in the host library's envelope (``hostlib.serve``): the request as a JSON
    object on one line, then, for an action that takes data (``hostlib.takes_data``), the data's bytes."""
    line = json.dumps(req).encode("utf-8")
    return line if data is None else line + b"\n" + data


def libraries_of(text: str) -> list[str]:
    """The host libraries (:data:`LIBRARIES`) a script's text imports, and those they import (the host library
    imports the codec), in the order of :data:`LIBRARIES`: each after those it imports."""
    found: set[str] = set()
    todo = set(_IMPORTS.findall(text))
    while todo:
        lib = todo.pop()
        found.add(lib)
        todo |= set(_IMPORTS.findall(library(lib).read_text(encoding="utf-8"))) - found
    return [lib for lib in LIBRARIES if lib in found]


def bundle(name: str, text: str) -> str:
    """``text`` (the script ``name``) as a self-contained program: each library it imports is built as a module
    of ``sys.modules`` first, then the script runs as ``__main__`` with its own file name and line numbers."""
    libs = libraries_of(text)
    if not libs:
        return text
    pairs = "[%s]" % ", ".join("(%r, %r)" % (lib, library(lib).read_text(encoding="utf-8")) for lib in libs)
    return _BUNDLE.format(name=name, libraries=pairs, text=repr(text))


def library(lib: str) -> Path:
    """The file of the host library ``lib``: this directory's, or a fixed programs' one (``pump``)."""
    return PROGRAMS_DIR / f"{lib}.py" if lib == "pump" else path(f"{lib}.py")


def source(name: str) -> bytes:
    """The bytes of the shipped script ``name``, as they travel to a host: bundled with the host libraries it
    imports (:func:`bundle`), whichever way it travels."""
    raw = path(name).read_bytes()
    if not name.endswith(".py"):
        return raw
    return bundle(name, raw.decode("utf-8")).encode("utf-8")


# ------------------------------------------------------------------------------------------ fixed programs
# The programs provision itself runs on hosts: the runner and its selector, async jobs, the run lock, the two
# bootstraps (``programs/``) and the python agent (``agent.py``). They travel in command lines (what the host's
# ``ps`` shows: no user value ever) or, the agent, zlib'd in one; so they go minified (:func:`minified`), and
# each that imports a core (:data:`CORES`: ``from spawn import ...``, ``from pump import ...``, the run lock's take
# ``from lockwait import ...``) has their text put in front of it, in that order.
PROGRAMS_DIR = REMOTE_DIR / "programs"
# the programs' own libraries, in the order they are put in front
CORES = ("codec", "pump", "spawn", "frames", "lockwait")
_CORE_IMPORT = re.compile(r"^from (%s) import [^\n]*\n" % "|".join(CORES), re.M)


def minified(text: str) -> str:
    """Python ``text`` as it travels: comments, docstrings (a string alone on its line), blank lines and repeated
    top-level imports left out, one space per indentation level, a space between two tokens only where two
    names or numbers would merge, simple statements of one block joined with ``;`` and a block of those put
    on its header's line. The result compiles to the same program (no f-strings: their inner tokens are not
    joined back faithfully)."""
    lines: list[tuple[int, str]] = []  # (depth, text) of each logical line kept
    words: list[str] = []
    kinds: list[int] = []
    depth = 0
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.INDENT:
            depth += 1
        elif tok.type == tokenize.DEDENT:
            depth -= 1
        elif tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            line = "".join(words)
            if words and kinds != [tokenize.STRING] and not (depth == 0 and line.startswith("import") and
                                                             (0, line) in lines):  # fmt: skip
                lines.append((depth, line))
            words, kinds = [], []
        elif tok.type not in (tokenize.COMMENT, tokenize.NL):
            if words and _WORDY.match(words[-1][-1]) and _WORDY.match(tok.string[0]):
                words.append(" ")
            words.append(tok.string)
            kinds.append(tok.type)
    return "".join(" " * d + line + "\n" for d, line in _joined(lines))


def _compound(line: str) -> bool:
    """A compound statement's line (its header, with or without its body) or a decorator: never joined after
    another statement."""
    return line.startswith("@") or re.split(r"[^A-Za-z]", line, maxsplit=1)[0] in _COMPOUND


def _header(line: str) -> bool:
    return line.endswith(":") and _compound(line)


_COMPOUND = {"if", "elif", "else", "for", "while", "try", "except", "finally", "with", "def", "class"}


def _joined(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Adjacent simple statements of one depth (one block: a block in between would need a header) joined
    with ``;``, then a header whose block is one such line given that line."""
    simple: list[tuple[int, str]] = []
    for d, line in lines:
        if simple and simple[-1][0] == d and not _compound(line) and not _compound(simple[-1][1]):
            simple[-1] = (d, simple[-1][1] + ";" + line)
        else:
            simple.append((d, line))
    out: list[tuple[int, str]] = []
    for i, (d, line) in enumerate(simple):
        ends = i + 1 == len(simple) or simple[i + 1][0] < d  # the block is this one line
        if ends and out and out[-1][0] == d - 1 and _header(out[-1][1]) and not _compound(line):
            out[-1] = (d - 1, out[-1][1] + line)
        else:
            out.append((d, line))
    return out


_WORDY = re.compile(r"[A-Za-z0-9_]")


_MAKING = threading.RLock()  # re-entrant: one thing made once may need another (the packed agent, the agent)
F = TypeVar("F", bound=Callable[..., Any])


def once(fn: F) -> F:
    """``fn``'s answer per arguments, made once per process, on first use, under one lock: a run's host threads
    all ask at once (an unlocked cache let each of them make it: 14 minifications of the agent at 64 hosts)."""
    made: dict[tuple[Any, ...], Any] = {}

    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        if args not in made:
            with _MAKING:
                if args not in made:
                    made[args] = fn(*args)
        return made[args]

    return cast(F, wrapper)


@once
def program(name: str) -> str:
    """The fixed program ``name`` (``programs/NAME``, or ``agent.py``) as it travels: the pump and the spawn core
    in front when it imports them, minified; a ``.sh`` one without its comment lines. Made once per process, on
    first use (minifying them all is ~40 ms of a command line's start: a run needs only some)."""
    return _program(name)


@once
def host_library(name: str) -> types.ModuleType:
    """A fixed program's library (``programs/NAME.py``, builtins only) as a module of the controller's, made once:
    the keeper reads a resident agent's frames with the resident's own reader (``frames``)."""
    module = types.ModuleType(f"provision.remote.programs.{name}")
    file = PROGRAMS_DIR / f"{name}.py"
    module.__file__ = str(file)
    exec(compile(file.read_text(encoding="utf-8"), str(file), "exec"), module.__dict__)
    return module


def _core(name: str) -> Path:
    """A core's file: a host library's (``codec``, ``pump``: shipped with scripts too), else ``programs/NAME.py``."""
    return library(name) if name in LIBRARIES else PROGRAMS_DIR / f"{name}.py"


def _program(name: str) -> str:
    file = REMOTE_DIR / name if name == "agent.py" else PROGRAMS_DIR / name
    text = file.read_text(encoding="utf-8")
    if name.endswith(".sh"):
        return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    used = set(_CORE_IMPORT.findall(text))
    if used:
        cores = "".join(_core(core).read_text(encoding="utf-8") for core in CORES if core in used)
        text = cores + _CORE_IMPORT.sub("", text)
    return kept_minified(text)


# A program's minified text is kept between runs in the controller user's cache (``$XDG_CACHE_HOME`` or
# ``~/.cache``, ``provision/programs/``): minifying the agent and the bootstraps is ~40 ms of CPU at the start of
# every run (tokenize is pure Python before 3.12), paid before the first host gets its agent.
CACHE_DIR = ("provision", "programs")


def kept_minified(text: str) -> str:
    """:func:`minified` ``text``, from the cache when it holds it. An entry is named by a hash of the text, of
    this file (the minifier) and of the Python version (tokenize's), and is used only from a folder that is this
    user's own and not writable by others (opened without following a link, then checked, the entry read through
    it the same way: a regular file of this user's, not writable by others); anything else minifies as if there
    were no cache. Entries are written 0600 under a temporary name, then renamed into place; a failed write
    only loses the cache; none is written under ``python -B`` (as Python's bytecode); past 64 entries the oldest
    half go."""
    key = hashlib.sha256(_minifier_id() + text.encode("utf-8")).hexdigest() + ".py"
    folder = _cache_folder()
    if folder is None:
        return minified(text)
    try:
        try:
            found = _read_private(key, folder)
        except OSError:
            found = None
        if found is not None:
            return found
        made = minified(text)
        if sys.dont_write_bytecode:  # Python's own switch for its caches (-B, PYTHONDONTWRITEBYTECODE)
            return made
        _bound(folder)
        temp = f".{key}.{os.urandom(6).hex()}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(made.encode("utf-8"))
            os.replace(temp, key, src_dir_fd=folder, dst_dir_fd=folder)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=folder)
        return made
    finally:
        os.close(folder)


def _bound(folder: int, keep: int = 64) -> None:
    """Each version of provision brings its own entries: past ``keep`` the oldest half go."""
    names = os.listdir(folder)
    if len(names) < keep:
        return
    aged = []
    for name in names:
        with contextlib.suppress(OSError):
            aged.append((os.stat(name, dir_fd=folder, follow_symlinks=False).st_mtime, name))
    for _, name in sorted(aged)[: len(aged) - keep // 2]:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=folder)


@functools.cache
def _minifier_id() -> bytes:
    return Path(__file__).read_bytes() + b"\0" + sys.version.encode() + b"\0"


def _private(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _cache_folder() -> int | None:
    """The cache folder, open (a descriptor; the caller closes it), or None where it cannot be made or is not
    this user's own."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser().joinpath(*CACHE_DIR)
    try:
        if not sys.dont_write_bytecode:
            base.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    if not _private(os.fstat(fd)):
        os.close(fd)
        return None
    return fd


def _read_private(name: str, folder: int) -> str | None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=folder)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or not _private(st):
            return None
        try:
            return fh.read().decode("utf-8")
        except UnicodeDecodeError:
            return None
