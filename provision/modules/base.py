"""The module contract.

A module is a class with a name, an argument spec and ``run(ctx, args) -> ModuleResult``. It READS the host's
state first and changes it only when it differs: a module that finds the host already right returns
``changed=False``. In check mode (``ctx.check``) it must not change anything and returns what it WOULD do
(``changed=True`` when it would change). With ``ctx.diff`` it fills ``ModuleResult.diff`` (unified diff text).

Modules never build shell strings: they hand :class:`provision.commands.Command` objects to ``ctx.run``,
and write files with ``ctx.put`` (atomic). A shipped helper script (``provision/remote/``) is called with
``ctx.call_helper``: its JSON answer, or :class:`HelperError` with the host's message. Failures: return
``ModuleResult(failed=True, msg=...)`` or raise :class:`provision.errors.ModuleError`; never let a foreign
exception out.

Arguments are validated twice: statically before any host is contacted (``validate_static``: unknown names,
missing required ones, bad choices — for values that are not Jinja2 templates), and again on the rendered
values just before ``run`` (``coerce``: types).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .. import remote
from ..commands import Command, check_nul
from ..data import templates_dir
from ..errors import ModuleError
from ..transport import AgentHost, CommandResult, Connection
from ..transport.agent import QUICK_SCRIPTS, AgentUnavailable
from .progress import Waiting

BOOL_TRUE = {"yes", "true", "on", "1", "y"}
BOOL_FALSE = {"no", "false", "off", "0", "n"}
# run_script with stdin data: read the length-prefixed source, run it; the rest of stdin is the script's
# (``provision/remote/programs/script_boot.py``, minified)
_BOOTSTRAP = remote.program("script_boot.py")


class HelperError(ModuleError):
    """A shipped helper (``provision/remote/``) gave no answer, could not start, or failed.

    ``msg`` is one line for the user; ``data`` (rc, stdout, stderr) goes into the task's result. ``reason`` is
    the host's own ``msg`` (or ``error``) from the answer when there is one, else the output's tail;
    ``answer`` the JSON answer (None when there was none); ``no_python`` says the interpreter could not be run
    (rc 126/127, no answer)."""

    def __init__(
        self,
        host: str,
        msg: str,
        *,
        result: CommandResult,
        script: str,
        python: str,
        reason: str,
        answer: dict[str, Any] | None = None,
        no_python: bool = False,
    ) -> None:
        super().__init__(host, msg, rc=result.rc, stdout=result.stdout, stderr=result.stderr)
        self.result, self.script, self.python, self.reason = result, script, python, reason
        self.answer, self.no_python = answer, no_python

    @property
    def rc(self) -> int:
        return self.result.rc

    def as_result(self) -> ModuleResult:
        """The failure as a module result, for modules that return failures instead of raising."""
        return ModuleResult(failed=True, msg=self.msg, data=dict(self.data))


def helper_answer(
    result: CommandResult,
    host: str,
    script: str,
    python: str,
    *,
    what: str | None = None,
    hint: str = "",
    check_rc: bool = True,
) -> dict[str, Any]:
    """The JSON answer of a helper run (:meth:`CommandResult.last_json`), or :class:`HelperError`.

    The messages: ``WHAT: cannot run PYTHON (rc=127): HINT TAIL`` (no answer, rc 126/127);
    ``WHAT failed (rc=N): REASON`` (rc != 0 with ``check_rc``: the host's ``msg``/``error``, else the output's
    tail); ``WHAT printed no answer (rc=N): HINT TAIL`` (``failed`` instead of ``printed no answer`` when rc != 0
    with ``check_rc``). ``what`` defaults to the script's name; ``hint`` says what to check when there is no
    answer."""
    what = what or script
    answer = result.last_json()
    if answer is not None and (result.rc == 0 or not check_rc):
        return answer
    no_python = answer is None and result.rc in (126, 127)
    hinted = f"{hint} " if hint else ""
    if no_python:
        reason = result.tail(5)
        msg = f"{what}: cannot run {python} (rc={result.rc}): {hinted}{reason}"
    elif answer is not None:
        reason = str(answer.get("msg") or answer.get("error") or result.tail())
        msg = f"{what} failed (rc={result.rc}): {reason}"
    else:
        reason = result.tail()
        verb = "failed" if check_rc and result.rc != 0 else "printed no answer"
        msg = f"{what} {verb} (rc={result.rc}): {hinted}{reason}"
    raise HelperError(
        host, msg, result=result, script=script, python=python, reason=reason, answer=answer, no_python=no_python
    )


@dataclass
class ModuleResult:
    changed: bool = False
    failed: bool = False
    skipped: bool = False
    msg: str = ""
    data: dict[str, Any] = field(default_factory=dict)  # returned values: rc, stdout, stderr, path, ...
    diff: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # set_fact / gathered facts: merged into host vars
    gathered: dict[str, Any] | None = None  # the setup module: becomes the host's ansible_facts
    notify: bool = True  # handlers are notified only when changed; kept for modules that never notify

    @classmethod
    def from_answer(cls, answer: Mapping[str, Any]) -> ModuleResult:
        """A helper's answer that already has Ansible's result shape: ``changed``, ``failed`` and ``msg``, and the
        module's own keys as the returned values."""
        data = dict(answer)
        changed, failed = bool(data.pop("changed", False)), bool(data.pop("failed", False))
        return cls(changed=changed, failed=failed, msg=str(data.pop("msg", "") or ""), data=data)


@dataclass(frozen=True)
class Arg:
    type: str = "str"  # str | int | float | bool | list | dict | path | raw | mode
    required: bool = False
    default: Any = None
    choices: tuple[Any, ...] | None = None
    aliases: tuple[str, ...] = ()
    secret: bool = False  # masked in output


class ArgError(ValueError):
    """Bad module arguments (message names the argument)."""


@dataclass
class ModuleContext:
    """What a module may use: the host's connection, its vars, and the run's modes."""

    host: str
    conn: Connection
    variables: Mapping[str, Any]
    check: bool = False
    diff: bool = False
    become: bool = False
    become_user: str = "root"
    verbosity: int = 0  # the run's -v count (debug's `verbosity` threshold)
    environment: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = 1800.0
    controller_dir: str = "."  # where relative `src` of copy/template is looked up (the playbook's dir)
    render: Callable[[str], str] | None = None  # renders a template text with the host's vars
    # renders a template FILE (the template module: Ansible's trim_blocks, ansible_managed) with extra vars
    render_file: Callable[[str, dict[str, Any]], str] | None = None
    progress: Callable[[str], None] | None = None  # for long-running modules: one line of progress
    evaluate: Callable[[str], Any] | None = None  # evaluates a Jinja2 expression (assert/debug var/when)
    # ... as a conditional (assert's ``that``: the templates in its string constants are rendered first, as
    # ansible-core 2.19 does); None: ``evaluate``
    condition: Callable[[str], Any] | None = None
    peer: Callable[[str], Connection] | None = None  # the connection of another inventory host (transfers)

    def run(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        check_rc: bool = False,
        on_output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        if self.environment:
            cmd = cmd.with_env(self.environment)
        if self.become and not cmd.become:
            cmd = Command(cmd.argv, cmd.script, cmd.env, cmd.chdir, True, self.become_user)
        result = self.conn.run(cmd, timeout=timeout or self.timeout, stdin=stdin, on_output=on_output)
        if check_rc and result.rc != 0:
            raise ModuleError(
                self.host,
                f"command failed (rc={result.rc}): {result.command}\n{result.tail()}",
                rc=result.rc,
                stdout=result.stdout,
                stderr=result.stderr,
            )
        return result

    def run_script(
        self,
        script: str,
        *args: object,
        python: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        """Run one of the package's remote helper scripts (``provision/remote/<script>``) on the host with
        its Python: the source travels on stdin (``python3 - ARGS``), so nothing is left behind.

        ``stdin``: data for the script (read with ``sys.stdin.buffer.read()``): file content, request bodies,
        anything that must not appear on the host's process list. The source then travels length-prefixed
        in front of it and a one-line bootstrap (``python3 -c``) runs it. ``env``: the script's own environment
        (on top of the task's). ``on_output``: each line of output as it comes (a fresh process, never the agent).

        Most modules want :meth:`call_helper` (the answer, or one error); this returns the raw result."""
        for arg in args:
            check_nul("a helper argument", arg)
        interpreter = python or self.python()
        quick = script in QUICK_SCRIPTS and not self.become and not self.environment and not env and not on_output
        if quick and isinstance(self.conn, AgentHost):
            try:
                agent = self.conn.python_agent(interpreter)
                return agent.call(script, [str(a) for a in args], stdin, timeout or self.timeout)
            except AgentUnavailable:
                pass  # no agent on this host: a fresh process below says what is wrong
        source = remote.source(script)
        if stdin is None:
            cmd, data = Command.of(interpreter, "-", *args), source
        else:
            cmd, data = Command.of(interpreter, "-c", _BOOTSTRAP, *args), b"%d\n" % len(source) + source + stdin
        return self.run(cmd.with_env(env) if env else cmd, stdin=data, timeout=timeout, on_output=on_output)

    def call_helper(
        self,
        script: str,
        *args: object,
        python: str | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        what: str | None = None,
        hint: str = "",
        check_rc: bool = True,
    ) -> dict[str, Any]:
        """Run a shipped helper (:meth:`run_script`) and return its JSON answer (:func:`helper_answer`): THE way a
        module talks to ``provision/remote/``. Raises :class:`HelperError` (a ``ModuleError``) when the helper
        does not answer, or, with ``check_rc`` (the default), exits non-zero; ``check_rc=False`` returns any
        answer whatever the rc (helpers that report failures in their JSON: process_ctl, the NIXL/SGLang probes).
        """
        interpreter = python or self.python()
        result = self.run_script(script, *args, python=interpreter, stdin=stdin, timeout=timeout, env=env)
        return helper_answer(result, self.host, script, interpreter, what=what, hint=hint, check_rc=check_rc)

    def waiting(self, what: str, timeout: float | None = None) -> Waiting:
        """``with ctx.waiting("p0 to answer http://.../health", 900):`` around a call that blocks: every
        WAIT_EVERY seconds a progress line ``waiting for <what> (20s of 900s)`` (:mod:`.progress`)."""
        return Waiting(self.progress, what, timeout=timeout)

    def python(self) -> str:
        """The host's Python for helper scripts: ``ansible_python_interpreter``, else ``python3``."""
        return str(self.variables.get("ansible_python_interpreter") or "python3")

    def put(self, data: bytes, path: str, mode: int | None = None) -> None:
        check_nul("a file path", path)  # a C path would end at the NUL: a different file
        self.conn.put(data, path, mode)

    def get(self, path: str) -> bytes | None:
        check_nul("a file path", path)
        return self.conn.get(path)

    def expand(self, path: str) -> str:
        return self.conn.expand_path(path)


class Module:
    name: ClassVar[str]
    args: ClassVar[dict[str, Arg]] = {}
    free_form: ClassVar[str | None] = None  # `command: echo hi` puts the string into this argument
    controller_only: ClassVar[bool] = False  # debug/set_fact/fail/assert: no connection needed
    check_mode_support: ClassVar[bool] = True
    expression_args: ClassVar[tuple[str, ...]] = ()  # args holding bare Jinja2 expressions (assert's `that`)
    supports_async: ClassVar[bool] = False  # `async` may run it as a detached job (see modules/async_mod.py)
    show_msg: ClassVar[bool] = False  # the result's message is worth printing without -v (debug, measurements)

    # ---------------------------------------------------------------- validation
    @classmethod
    def normalize(cls, raw: Any) -> dict[str, Any]:
        """Turn the task's module value (dict, free-form string, or None) into a dict of arguments."""
        if raw is None:
            return {}
        if isinstance(raw, str):
            if cls.free_form:
                return {cls.free_form: raw}
            return parse_kv(raw)
        if isinstance(raw, Mapping):
            return dict(raw)
        raise ArgError(f"arguments of {cls.name} must be a mapping, got {type(raw).__name__}")

    @classmethod
    def validate_static(cls, args: Mapping[str, Any], is_template: Callable[[Any], bool]) -> dict[str, Any]:
        """Check names, required arguments and choices. Returns args with aliases resolved."""
        resolved: dict[str, Any] = {}
        alias_of = {a: n for n, spec in cls.args.items() for a in spec.aliases}
        for key, value in args.items():
            name = alias_of.get(key, key)
            if name not in cls.args:
                known = ", ".join(sorted(cls.args)) or "none"
                raise ArgError(f"{cls.name}: unknown argument {key!r} (known: {known})")
            resolved[name] = value
        for name, spec in cls.args.items():
            if spec.required and name not in resolved:
                raise ArgError(f"{cls.name}: missing required argument {name!r}")
            if name in resolved and resolved[name] is not None and not _has_template(resolved[name], is_template):
                _coerce(resolved[name], spec, f"{cls.name}: {name}")  # a literal of the wrong type: say so now
            if name in resolved and spec.choices and not is_template(resolved[name]):
                value = resolved[name]
                if spec.type == "bool":
                    value = to_bool(value, name)
                if value not in spec.choices:
                    raise ArgError(f"{cls.name}: {name}={value!r} is not one of {list(spec.choices)}")
        cls.check_combination(resolved, is_template)
        return resolved

    @classmethod
    def check_combination(cls, args: Mapping[str, Any], is_template: Callable[[Any], bool]) -> None:
        """Override for mutually exclusive/required-together arguments."""

    @classmethod
    def coerce(cls, args: Mapping[str, Any]) -> dict[str, Any]:
        """Apply defaults and types to rendered arguments."""
        out: dict[str, Any] = {}
        for name, spec in cls.args.items():
            if name in args and args[name] is not None:
                out[name] = _coerce(args[name], spec, f"{cls.name}: {name}")
            else:
                out[name] = spec.default
            if spec.choices and out[name] is not None and out[name] not in spec.choices:
                raise ArgError(f"{cls.name}: {name}={out[name]!r} is not one of {list(spec.choices)}")
        return out

    # ---------------------------------------------------------------- execution
    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        raise NotImplementedError


def _has_template(value: Any, is_template: Callable[[Any], bool]) -> bool:
    if isinstance(value, Mapping):
        return any(_has_template(v, is_template) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_template(v, is_template) for v in value)
    return bool(is_template(value))


def to_bool(value: Any, name: str = "value") -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in BOOL_TRUE:
        return True
    if text in BOOL_FALSE:
        return False
    raise ArgError(f"{name}: {value!r} is not a boolean")


def _coerce(value: Any, spec: Arg, name: str) -> Any:
    try:
        if spec.type in ("str", "path"):
            if isinstance(value, (dict, list)):
                raise ArgError(f"{name} must be a string")
            return str(value)
        if spec.type == "int":
            return int(value)
        if spec.type == "float":
            return float(value)
        if spec.type == "bool":
            return to_bool(value, name)
        if spec.type == "list":
            if isinstance(value, str):
                return [v.strip() for v in value.split(",") if v.strip()]
            if isinstance(value, (list, tuple)):
                return list(value)
            return [value]
        if spec.type == "dict":
            if not isinstance(value, Mapping):
                raise ArgError(f"{name} must be a mapping")
            return dict(value)
        if spec.type == "mode":
            return parse_mode(value)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ArgError):
            raise
        raise ArgError(f"{name}: {value!r} is not a valid {spec.type}") from None
    return value


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


def find_controller_file(controller_dir: str, src: str, also: str | None = None) -> Path | None:
    """Where a ``copy``/``template`` ``src`` lives on the controller, as Ansible looks: beside the playbook
    (or in the role), in its ``templates/`` or ``files/``; then, for a role's task, the same in the playbook's
    folder (``also``), as Ansible's search path goes on from the role to the playbook; then in the project's
    ``templates/`` next to the playbooks dir; last, the templates shipped with provision
    (:func:`provision.data.templates_dir`: a copy of a shipped playbook still finds them)."""
    base = Path(controller_dir)
    if Path(src).is_absolute():
        candidates = [Path(src)]
    else:
        dirs = [base] + ([Path(also)] if also and Path(also) != base else [])
        candidates = [d / sub / src for d in dirs for sub in ("", "templates", "files")]
        candidates += [base.parent / "templates" / src, templates_dir() / src]
    return next((c for c in candidates if c.is_file()), None)


REGISTRY: dict[str, type[Module]] = {}


def register(cls: type[Module]) -> type[Module]:
    REGISTRY[cls.name] = cls
    REGISTRY[f"ansible.builtin.{cls.name}"] = cls
    return cls


def lookup(name: str) -> type[Module] | None:
    return REGISTRY.get(name)
