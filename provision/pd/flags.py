"""Command-line words: lists given as strings or lists, one script line per flag, and the value argparse
would keep for a flag (the last one wins) — what the checks read from the final argv."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any


class PlanError(ValueError):
    """A var that cannot be turned into a plan (the message names the host and the var)."""


def words(value: Any, what: str) -> list[str]:
    """A command or argument list given as a string (shell words) or a list."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise PlanError(f"{what}: {exc}") from None
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def flag_lines(args: Sequence[str]) -> list[list[str]]:
    """Group a flat argument list into one line per flag (a word starting with ``--`` starts a line)."""
    lines: list[list[str]] = []
    for word in args:
        if word.startswith("--") or not lines:
            lines.append([word])
        else:
            lines[-1].append(word)
    return lines


def effective(args: Sequence[str], *names: str) -> str | None:
    """The value argparse would keep for a flag (the last one wins; ``--x=v`` or ``--x v``)."""
    found: str | None = None
    for i, word in enumerate(args):
        for name in names:
            if word == name and i + 1 < len(args):
                found = args[i + 1]
            elif word.startswith(name + "="):
                found = word.split("=", 1)[1]
    return found
