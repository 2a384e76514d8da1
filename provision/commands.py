"""The ONE place that builds shell strings: quoting, environment, working directory, sudo, timeouts and
secret masking.

Nothing else in provision glues user values into shell text. A module describes what to run as a
:class:`Command` (an argv list, or a user's own shell script for the ``shell`` module); :meth:`Command.render`
produces what the host receives: a FIXED exec text (the runner, :data:`RUNNER`: the only thing the host's
process list shows) and the script (every value quoted) with the command's stdin data, sent on stdin.
:meth:`Command.display` produces what may be shown to people (secrets replaced by ``********``).

Secrets: any value registered with :data:`MASKER` (vars whose names contain token/password/secret/passwd,
at any depth and as rendered for each host; vars listed in ``no_log``; module args marked secret; values
wrapped in :class:`Secret`) is replaced, raw and in its escaped forms (JSON, ``repr``, YAML, shell-quoted),
in every string that passes through ``MASKER.mask`` — the reporter, the JSON writer, the retry file, the
error lines and the debug log all do, as the last step before the text leaves the process.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import yaml

from . import remote

MASK = "********"
MIN_SECRET_LEN = 4
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


def masked_forms(text: str) -> list[str]:
    """``text`` as it may appear in output: raw, stripped, JSON-escaped (ASCII and not), ``repr``, YAML
    double- and single-quoted, and shell-quoted."""
    forms = [
        text,
        text.strip(),
        json.dumps(text)[1:-1],
        json.dumps(text, ensure_ascii=False)[1:-1],
        repr(text)[1:-1],
        yaml.safe_dump(text, default_style='"', width=2**31, allow_unicode=True).rstrip("\n")[1:-1],
        yaml.safe_dump(text, default_style='"', width=2**31).rstrip("\n")[1:-1],
        text.replace("'", "''"),
        shlex.quote(text),
    ]
    return list(dict.fromkeys(f for f in forms if len(f) >= MIN_SECRET_LEN))


_SECRET_NAMES: dict[str, bool] = {}  # name -> whether SECRET_NAME_RE finds it (names repeat: every task, every host)
# the facts of `getent`: the passwd database is world-readable (its password field is "x": masking its values would
# hide "root" and "/bin/bash" in every line of output); the shadow databases hold the password hashes
NOT_SECRET_NAMES = frozenset({"getent_passwd"})
SECRET_FACT_NAMES = frozenset({"getent_shadow", "getent_gshadow"})


def is_secret_name(name: object, no_log: Iterable[str] = ()) -> bool:
    if not isinstance(name, str):
        return False
    found = _SECRET_NAMES.get(name)
    if found is None:
        if len(_SECRET_NAMES) > 1 << 16:
            _SECRET_NAMES.clear()
        found = bool(SECRET_NAME_RE.search(name)) and name not in NOT_SECRET_NAMES
        found = _SECRET_NAMES[name] = found or name in SECRET_FACT_NAMES
    return found or name in no_log


class Masker:
    """Replaces every registered secret value in text. Thread-safe; values shorter than 4 chars are ignored
    (masking "a" everywhere would destroy output without protecting anything).

    A value is registered with its escaped forms (:func:`masked_forms`), so it is masked in JSON, YAML,
    ``repr`` and shell-quoted text too. Containers register every value inside them; numbers register as text.
    """

    def __init__(self) -> None:
        self._secrets: set[str] = set()  # the registered values
        self._values: set[str] = set()  # ... and their escaped forms: what is masked
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    def add(self, value: object) -> None:
        """Register a secret: a string, a number, a :class:`Secret`, or every value of a dict/list."""
        texts = {t for t in _leaves(value) if len(t) >= MIN_SECRET_LEN}
        if not texts:  # (an empty or short value: every task on every host registers hf_token's "")
            return
        with self._lock:
            texts -= self._secrets
            if not texts:
                return
            self._secrets |= texts
            new = {form for text in texts for form in masked_forms(text)} - self._values
            if new:
                self._values |= new
                ordered = sorted(self._values, key=len, reverse=True)
                self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    def add_vars(
        self,
        variables: Mapping[str, object],
        no_log: Iterable[str] = (),
        render: Callable[[object], object] | None = None,
    ) -> None:
        """Register the values of secret-looking variables (and of those named in ``no_log``), at any depth:
        ``creds: {api_token: X}`` registers X. A value that is a template is registered as ``render`` returns
        it (the caller renders it for one host, and returns None when it cannot be rendered there: a var
        undefined for that host registers nothing); without ``render`` a template registers nothing."""
        extra = set(no_log)
        for name, value in variables.items():
            if is_secret_name(name, extra):
                self.add(_rendered(value, render))
            elif isinstance(value, (dict, list, tuple)):
                self._add_nested(value, render)

    def _add_nested(self, value: object, render: Callable[[object], object] | None) -> None:
        # plain containers only: lazy mapping views (``hostvars``) would build every host's vars
        if isinstance(value, dict):
            self.add_vars(value, render=render)
        elif isinstance(value, (list, tuple)):
            for item in value:
                self._add_nested(item, render)

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
            self._secrets.clear()
            self._values.clear()
            self._pattern = None


def _is_template(value: str) -> bool:
    return "{{" in value or "{%" in value


def _rendered(value: object, render: Callable[[object], object] | None) -> object:
    """``value`` with every template inside it rendered; a template that cannot be rendered is dropped."""
    if isinstance(value, str) and _is_template(value):
        return render(value) if render is not None else None
    if isinstance(value, dict):
        return [_rendered(v, render) for v in value.values()]
    if isinstance(value, (list, tuple)):
        return [_rendered(v, render) for v in value]
    return value


def _leaves(value: object) -> Iterable[str]:
    """The text of every scalar inside ``value`` (bools and None are not secrets)."""
    if isinstance(value, Secret):
        yield value.value
    elif isinstance(value, str):
        yield value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _leaves(v)


MASKER = Masker()


def _plain(value: object) -> str:
    return value.value if isinstance(value, Secret) else str(value)


def quote(value: object) -> str:
    """Quote one value for a POSIX shell. The only quoting function in provision."""
    return shlex.quote(_plain(value))


def _shown(value: object) -> str:
    return MASK if isinstance(value, Secret) else shlex.quote(str(value))


# The fixed program that runs every command on a host (``python3 -c RUNNER N M T H``: the script and data on its
# stdin, ``/bin/sh`` in a new session, killed at the deadline, when the channel ends or goes silent): the file
# ``provision/remote/programs/runner.py`` with the spawn core, minified (:func:`provision.remote.program`).
# What every host's ``ps`` shows: it holds no user value. (``RUNNER``, ``SELECTOR`` and ``ASYNC_JOB`` are made on
# first use: see :func:`__getattr__`.)
_PROGRAMS = {"RUNNER": "runner.py", "SELECTOR": "select_runner.sh", "ASYNC_JOB": "async_job.py"}


def __getattr__(name: str) -> str:
    """The fixed programs (``RUNNER``, ``SELECTOR``, ``ASYNC_JOB``), minified on first use, not at import."""
    if name in _PROGRAMS:
        return remote.program(_PROGRAMS[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# What the controller sends every H seconds on the stdin of a command's runner, of the run-lock holder
# (``connection.RUN_LOCKER``) and of the python agent, once everything else it had to send is sent: one
# newline. The runner and the lock holder take any byte as a sign of life; to the agent a bare newline is an
# empty line between two requests, which it skips (a request starts with its length in digits).
HEARTBEAT = b"\n"

# Chooses the runner, or (no python3 on the host) a plain sh path (``remote/programs/select_runner.sh``).
# Arguments: $0 RUNNER, $1 N, $2 M, $3 T, $4 H. (``SELECTOR``)


class CommandError(ValueError):
    """A command that cannot be expressed faithfully on a POSIX host (a NUL byte in a value, an invalid
    environment name): the task fails with this message; nothing is sent."""


def check_nul(what: str, value: object) -> None:
    if "\x00" in _plain(value):
        raise CommandError(f"{what} contains a NUL byte, which a command line, an environment or a shell script "
                           "cannot carry; nothing was run")  # fmt: skip


@dataclass(frozen=True)
class Invocation:
    """How a command travels: ``text`` is the exec request (fixed wrapper text, what ``ps`` shows on the
    host: no environment value, no script text), ``stdin`` the bytes to send on the channel's stdin (the
    script, then the command's own stdin data). The channel's stdin must stay OPEN until the command ends:
    its EOF tells the runner on the host that the controller is gone, and it kills the command (as does
    silence, when it was rendered with a heartbeat interval: see :data:`RUNNER`)."""

    text: str
    stdin: bytes


@dataclass(frozen=True)
class Command:
    """A command to run on a host.

    ``argv``: a list of words, each quoted in the script. ``script``: a user's shell text (``shell`` module),
    run verbatim by ``/bin/sh`` — it is the user's program, never re-interpreted by our wrapper. Exactly one
    of the two is set.
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

    def script_text(self) -> str:
        """The shell script the host's ``/bin/sh`` runs (it travels on stdin): environment, cd, the command."""
        for name, value in self.env.items():
            if not _ENV_NAME_RE.match(name):
                raise CommandError(f"invalid environment variable name: {name!r}")
            check_nul(f"environment variable {name}", value)
        for word in self.argv:
            check_nul("a command argument", word)
        if self.script is not None:
            check_nul("the shell script", self.script)
        if self.chdir:
            check_nul("chdir", self.chdir)
        lines = ["exec 3<&-"]  # the script's own pipe: sh has its copy, the command's processes get none
        lines += [f"export {k}={quote(v)}" for k, v in self.env.items()]
        if self.chdir:
            lines.append(f"cd {quote(self.chdir)} || exit 1")
        if self.script is not None:
            lines.append(self.script)
        else:
            # `exec`: the program itself runs, never a shell builtin of the same name (dash's `echo` would
            # read backslashes in an argument), as an argv command runs under Ansible
            lines.append("exec " + " ".join(quote(a) for a in self.argv))
        return "\n".join(lines) + "\n"

    def render(self, timeout: float | None = None, stdin: bytes | None = None, heartbeat: float = 0.0) -> Invocation:
        """The exec text (fixed wrapper) and the stdin bytes (script + ``stdin`` data) for the host.
        ``heartbeat``: the H the runner is told; a connection that passes H > 0 must then send
        :data:`HEARTBEAT` on the channel every H seconds once ``stdin`` is sent, or the runner kills the
        command after 3 H seconds of silence."""
        script = self.script_text().encode()
        data = stdin or b""
        words: list[str] = []
        if self.become:
            words += ["sudo", "-n", "-H", "-u", quote(self.become_user), "--"]
        selector, runner = remote.program("select_runner.sh"), remote.program("runner.py")
        words += ["/bin/sh", "-c", quote(selector), quote(runner), str(len(script)), str(len(data))]
        words.append(f"{timeout:g}" if timeout else "0")
        words.append(f"{heartbeat:g}" if heartbeat and heartbeat > 0 else "0")
        return Invocation(" ".join(words), script + data)

    def direct(self) -> str:
        """Plain quoted argv after ``exec``, for the long-lived stream processes provision starts itself (the
        python agent, the run lock): they own their stdin and die with it. ``exec``: the program replaces the
        login shell (dash does not do it by itself), so it is the process sshd started, leading the session's
        process group, which the agent TERMs when it leaves. Never for user commands."""
        if self.script is not None or self.env or self.chdir or self.become:
            raise ValueError("direct() is only for a bare argv command")
        return "exec " + " ".join(quote(a) for a in self.argv)

    def display(self) -> str:
        """What may be shown to people: secrets masked, no wrapper noise."""
        return MASKER.mask(self._inner(_shown))


def argv_join(argv: Sequence[object]) -> str:
    """Join an argv list into quoted shell text (for launch scripts rendered to files)."""
    return " ".join(quote(a) for a in argv)


# The fixed program behind ``async`` tasks and ``async_status`` (``python3 -c ASYNC_JOB MODE JID ...``): the ONE
# deliberate exception to "a command dies with its channel" (``provision/remote/programs/async_job.py``, with
# the spawn core, minified). Its text is what the host's process list shows: it holds no user value.


def async_job(python: str, mode: str, jid: str, *rest: object) -> Command:
    """The command that runs :data:`ASYNC_JOB` in ``mode`` for job ``jid`` (a controller-made name)."""
    if not re.fullmatch(r"j[0-9]+\.[0-9]+", jid):
        raise CommandError(f"invalid async job id: {jid!r}")
    return Command.of(python, "-c", remote.program("async_job.py"), mode, jid, *rest)
