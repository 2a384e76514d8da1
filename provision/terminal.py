"""Text for the operator's terminal: the one escaping function every human printer uses.

A host's output must not drive the controller's terminal: cursor moves and screen clears (CSI), a fake
``ok:`` painted over a failure, OSC 52 clipboard writes (paste-jacking the operator), title changes, bidi
overrides and isolates that reorder what is shown. :func:`printable` shows every C0/C1 control character
(except newline and tab), DEL and every bidi control as an escape (``\\x1b``, ``\\u202e``), so the text is
still readable and nothing acts. With ``colour=True`` (SGLang's own logs, ``pd logs``) the SGR colour
sequences ``ESC [ digits;... m`` pass through as they are — they only colour text — and everything else is
escaped as above. ``--json`` output escapes control characters by construction (``json.dumps``).
"""

from __future__ import annotations

import re

# C0 but newline and tab, DEL, C1, the bidi marks, embeddings, overrides and isolates
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SGR = re.compile(r"\x1b\[[0-9;]{0,32}m")
CLIP = 2000  # characters of one host value a human line shows (a huge completion): the rest is counted


def _escape(text: str) -> str:
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def printable(text: object, *, colour: bool = False) -> str:
    """``text`` made safe for a terminal (see the module's docstring)."""
    text = text if isinstance(text, str) else str(text)
    if not colour:
        return _escape(text)
    out, last = [], 0
    for m in _SGR.finditer(text):
        out += [_escape(text[last : m.start()]), m.group()]
        last = m.end()
    out.append(_escape(text[last:]))
    return "".join(out) + ("\x1b[0m" if last else "")  # a colour the host left on ends with its text


def clipped(text: str, limit: int = CLIP) -> str:
    """At most ``limit`` characters of ``text``, and how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"
