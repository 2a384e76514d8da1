"""The ONE place that builds shell strings: quoting, environment, working directory, sudo, timeouts and
secret masking.

Nothing else in provision glues user values into shell text. A module describes what to run as a
:class:`Command` (an argv list, or a user's own shell script for the ``shell`` module); :meth:`Command.render`
produces the exact text the remote ``sh`` receives (every value quoted), and :meth:`Command.display`
produces what may be shown to people (secrets replaced by ``********``).

Secrets: any value registered with :data:`MASKER` (vars whose names contain token/password/secret/passwd,
vars listed in ``no_log``, or wrapped in :class:`Secret`) is replaced in every string that passes through
``MASKER.mask`` — the reporter, the JSON writer, the retry file and the debug log all do.
"""

from __future__ import annotations

import re
import shlex
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

MASK = "********"
SECRET_NAME_RE = re.compile(r"token|password|passwd|secret", re.IGNORECASE)
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Secret:
    """A value that is used for real but always printed as ``********``."""

    value: str

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return f"Secret({MASK})"


class Masker:
    """Replaces every registered secret value in text. Thread-safe; values shorter than 4 chars are ignored
    (masking "a" everywhere would destroy output without protecting anything)."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    def add(self, value: object) -> None:
        text = value.value if isinstance(value, Secret) else str(value)
        if len(text) < 4:
            return
        with self._lock:
            if text not in self._values:
                self._values.add(text)
                ordered = sorted(self._values, key=len, reverse=True)
                self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    def add_vars(self, variables: Mapping[str, object], no_log: Iterable[str] = ()) -> None:
        """Register the values of secret-looking variables (and of those named in ``no_log``)."""
        extra = set(no_log)
        for name, value in variables.items():
            if (SECRET_NAME_RE.search(name) or name in extra) and isinstance(value, (str, int, Secret)):
                self.add(value)

    def mask(self, text: str) -> str:
        pattern = self._pattern
        return pattern.sub(MASK, text) if pattern and text else text

    def mask_obj(self, obj: object) -> object:
        """Mask strings inside nested dicts/lists (for JSON output)."""
        if isinstance(obj, str):
            return self.mask(obj)
        if isinstance(obj, Secret):
            return MASK
        if isinstance(obj, Mapping):
            return {k: self.mask_obj(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.mask_obj(v) for v in obj]
        return obj

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._pattern = None


MASKER = Masker()


def _plain(value: object) -> str:
    return value.value if isinstance(value, Secret) else str(value)


def quote(value: object) -> str:
    """Quote one value for a POSIX shell. The only quoting function in provision."""
    return shlex.quote(_plain(value))


def _shown(value: object) -> str:
    return MASK if isinstance(value, Secret) else shlex.quote(str(value))


@dataclass(frozen=True)
class Command:
    """A command to run on a host.

    ``argv``: a list of words, each quoted on render. ``script``: a user's shell text (``shell`` module),
    run verbatim by ``/bin/sh -c`` — it is the user's program, so it is passed as ONE quoted argument and
    never re-interpreted by our wrapper. Exactly one of the two is set.
    """

    argv: tuple[object, ...] = ()
    script: str | None = None
    env: Mapping[str, object] = field(default_factory=dict)
    chdir: str | None = None
    become: bool = False
    become_user: str = "root"

    @classmethod
    def of(cls, *argv: object, **kw: object) -> Command:
        return cls(argv=tuple(argv), **kw)  # type: ignore[arg-type]

    @classmethod
    def shell(cls, script: str, **kw: object) -> Command:
        return cls(script=script, **kw)  # type: ignore[arg-type]

    def with_env(self, env: Mapping[str, object]) -> Command:
        merged = {**env, **self.env}
        return Command(self.argv, self.script, merged, self.chdir, self.become, self.become_user)

    def _inner(self, qf: Callable[[object], str]) -> str:
        body = self.script if self.script is not None else " ".join(qf(a) for a in self.argv)
        return f"cd {qf(self.chdir)} && {body}" if self.chdir else body

    def render(self, timeout: float | None = None) -> str:
        """The exact text sent to the remote shell: every value quoted."""
        for name in self.env:
            if not _ENV_NAME_RE.match(name):
                raise ValueError(f"invalid environment variable name: {name!r}")
        inner = self._inner(quote)
        if self.script is not None or self.chdir:
            # the user's shell text (or our cd prefix) travels as ONE quoted argument of sh -c
            inner = f"/bin/sh -c {quote(inner)}"
        words: list[str] = []
        if self.become:
            words += ["sudo", "-n", "-H", "-u", quote(self.become_user), "--"]
        if self.env:
            words += ["env", *(f"{k}={quote(v)}" for k, v in self.env.items())]
        if timeout:
            # GNU timeout runs the command in its own process group and signals the whole group:
            # a timed-out command leaves nothing running on the host.
            words += ["timeout", "-k", "5", f"{timeout:g}"]
        return " ".join([*words, inner])

    def display(self) -> str:
        """What may be shown to people: secrets masked, no wrapper noise."""
        return MASKER.mask(self._inner(_shown))


def argv_join(argv: Sequence[object]) -> str:
    """Join an argv list into quoted shell text (for launch scripts rendered to files)."""
    return " ".join(quote(a) for a in argv)
