"""Module arguments given as text: Ansible's free-form ``k=v`` words (:func:`split_args`, :func:`split_kv`,
:func:`parse_kv`: quotes, escapes and Jinja2 blocks kept whole), read by modules and by the playbook loader; and
:class:`ArgError`, the error of a bad argument (part of the module contract, re-exported by ``base``)."""

from __future__ import annotations

import codecs
import re
from typing import Any


class ArgError(ValueError):
    """Bad module arguments (message names the argument)."""


_ESCAPES = re.compile(r"""(\\U[0-9a-fA-F]{8}|\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|\\N\{[^}]+\}|\\[\\'"abfnrtv])""")
_JINJA_OPEN = {"{{": "}}", "{%": "%}", "{#": "#}"}


def split_args(text: str) -> list[tuple[str, int, int]]:
    """Ansible's ``split_args``: words separated by whitespace, where quoted text and Jinja2 blocks
    (``{{ ... }}``, ``{% ... %}``) stay inside one word. Each word with its start and end offsets."""
    words: list[tuple[str, int, int]] = []
    start: int | None = None
    quote: str | None = None
    closers: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if quote is None and not closers and c.isspace():
            if start is not None:
                words.append((text[start:i], start, i))
                start = None
            i += 1
            continue
        if start is None:
            start = i
        two = text[i : i + 2]
        if quote is not None:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif two in _JINJA_OPEN:
            closers.append(_JINJA_OPEN[two])
            i += 2
            continue
        elif closers and two == closers[-1]:
            closers.pop()
            i += 2
            continue
        elif c in "'\"" and not closers:
            quote = c
        i += 1
    if quote is not None or closers:
        raise ArgError(f"cannot parse arguments {text!r}: unbalanced {'quotes' if quote else 'Jinja2 braces'}")
    if start is not None:
        words.append((text[start:], start, len(text)))
    return words


def _decode_escapes(word: str) -> str:
    return _ESCAPES.sub(lambda m: codecs.decode(m.group(0), "unicode-escape"), word)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def split_kv(word: str) -> tuple[str, str] | None:
    """``key=value`` of one word (the first ``=`` not escaped with a backslash), escapes decoded and the value
    unquoted, as Ansible's ``parse_kv``; None for a word that is not ``key=value``."""
    word = _decode_escapes(word)
    pos = 0
    while True:
        pos = word.find("=", pos + 1)
        if pos < 0:
            return None
        if word[pos - 1] != "\\":
            return word[:pos].strip(), _unquote(word[pos + 1 :].strip())


def parse_kv(text: str) -> dict[str, Any]:
    """Parse Ansible's ``k=v k2='v 2' k3={{ a }}/{{ b }}`` argument strings (ad hoc ``-a`` and string module
    args): Jinja2 blocks and quotes stay in one value, escapes (``\\n``) are decoded, values are strings."""
    out: dict[str, Any] = {}
    for word, _, _ in split_args(text):
        kv = split_kv(word)
        if kv is None:
            raise ArgError(f"expected key=value, got {word!r}")
        out[kv[0]] = kv[1]
    return out
