"""File modes as Ansible's modules take them: octal (``'0644'``, ``0o644``), symbolic (``u=rw,g=r,o=``,
``u+x,go-w``, ``a+X``) and ``preserve``; a symbolic mode resolved against a file's current mode or, for a new
file, the host's umask (:func:`resolve_mode`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .args import ArgError

_ABSOLUTE = re.compile(r"^([ugoa]+)=([rwx]*)$")
_CLAUSE = re.compile(r"^(a|[ugo]*)((?:[-+=][rwxXstugo]*)+)$")  # Ansible's users: '', 'a' or letters of ugo
_ACTION = re.compile(r"([-+=])([rwxXstugo]*)")
_SHIFT = {"u": 6, "g": 3, "o": 0}
_CLASS = {"u": 0o4700, "g": 0o2070, "o": 0o1007}  # what '=' replaces: the class's rwx and its special bit


class SymbolicMode(str):
    """A chmod-style mode whose result depends on the file (``u+x``, ``go-w``, ``a+X``, ``+r``): modules resolve
    it against the file's current mode (or a new file's, from the host's umask) with :func:`resolve_mode`."""


class PreserveMode(str):
    """``mode: preserve`` (copy and template): the source file's own mode on the controller."""


def parse_mode(value: Any) -> int | SymbolicMode | PreserveMode:
    """Ansible-style mode: '0644', '644', 0o644 (an int as YAML gives it), a symbolic mode that sets every class
    absolutely ('u=rw,g=r,o=': an int at once), any other symbolic mode (a :class:`SymbolicMode`), or
    ``preserve`` (a :class:`PreserveMode`: copy and template replace it, other modules refuse it)."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text == "preserve":
        return PreserveMode(text)
    if text and all(c in "01234567" for c in text):
        return int(text, 8)
    clauses = text.split(",")
    if text and all(_ABSOLUTE.match(part) for part in clauses):
        covered = "".join(part.split("=")[0] for part in clauses).replace("a", "ugo")
        if set(covered) >= {"u", "g", "o"}:
            return apply_symbolic(text, 0, is_dir=False, umask=0)
    if text and all(_CLAUSE.match(part) and _copies_alone(part) for part in clauses):
        return SymbolicMode(text)
    raise ArgError(f"mode {value!r} must be octal like '0644' or symbolic like 'u=rw,g=r,o=' or 'u+x,go-w'")


def _copies_alone(clause: str) -> bool:
    """Copying another class's bits (``g=u``) takes exactly one letter, as in Ansible."""
    return all(len(perms) <= 1 or not set(perms) & set("ugo") for _, perms in _ACTION.findall(clause))


def apply_symbolic(text: str, current: int, is_dir: bool, umask: int) -> int:
    """The mode ``text`` (validated by :func:`parse_mode`) makes of ``current``, with chmod's and Ansible's rules:
    no class letter means all three with the umask's bits left alone; ``X`` is x for a directory or when some x
    bit is already set; ``s`` the set-id bit of u/g, ``t`` the sticky bit (o only); ``u``/``g``/``o`` as
    permissions copy that class's bits; clauses and their operations apply left to right."""
    mode = current & 0o7777
    for clause in text.split(","):
        m = _CLAUSE.match(clause)
        assert m is not None
        who = m.group(1)
        classes = "ugo" if who in ("", "a") else who
        mask = umask if who == "" else 0
        for op, perms in _ACTION.findall(m.group(2)):
            for cls in classes:
                bits = _perm_bits(cls, perms, mode, is_dir, mask)
                if op == "=":
                    mode = (mode & ~_CLASS[cls]) | bits
                elif op == "+":
                    mode |= bits
                else:
                    mode &= ~bits
    return mode


def _perm_bits(cls: str, perms: str, mode: int, is_dir: bool, umask: int) -> int:
    shift, bits = _SHIFT[cls], 0
    for p in perms:
        if p in "rwx":
            bits |= ({"r": 4, "w": 2, "x": 1}[p] << shift) & ~umask
        elif p == "X" and (is_dir or mode & 0o111):
            bits |= 1 << shift
        elif p == "s":
            bits |= {"u": 0o4000, "g": 0o2000, "o": 0}[cls]
        elif p == "t":
            bits |= 0o1000 if cls == "o" else 0
        elif p in "ugo":
            bits |= ((mode >> _SHIFT[p]) & 7) << shift
    return bits


def new_file_mode(st: Mapping[str, Any], base: int = 0o666) -> int:
    """The mode a file (0o666) or directory (0o777) made now gets on the host: ``base`` less its umask, which the
    state read ``st`` reports (022 when it does not)."""
    return base & ~int(st.get("umask", 0o022))


def resolve_mode(want: int | str | None, st: Mapping[str, Any], new_mode: int = 0o666) -> int | None:
    """The mode a module sets: ``want`` itself, or a :class:`SymbolicMode` applied to the file's current mode
    (``st``: its state from ``file_state.py``), or for a file not there yet to ``new_mode`` less the host's umask
    (0o666: a new file, 0o777: a new directory), as Ansible does after creating it."""
    if isinstance(want, PreserveMode):
        raise ArgError("mode=preserve is only for copy (with src) and template")
    if not isinstance(want, SymbolicMode):
        return want if want is None else int(want)
    umask = int(st.get("umask", 0o022))
    if st.get("exists") and st.get("mode") is not None:
        return apply_symbolic(want, int(st["mode"]), st.get("ftype") == "directory", umask)
    return apply_symbolic(want, new_file_mode(st, new_mode), new_mode == 0o777, umask)
