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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import remote
from ..commands import Command, check_nul
from ..errors import ModuleError
from ..transport import CommandResult, Connection, has_agent
from ..transport.agent import QUICK_SCRIPTS, AgentUnavailable
from .arg_types import coerce_value, to_bool
from .args import ArgError, parse_kv
from .progress import Waiting

# run_script with stdin data: read the length-prefixed source, run it; the rest of stdin is the script's
# (``provision/remote/programs/script_boot.py``, minified)
_BOOTSTRAP = remote.program("script_boot.py")


class HelperError(ModuleError):
    """A shipped helper (``provision/remote/``) gave no answer, could not start, or failed.

    ``msg`` is one line for the user; ``data`` (rc, stdout, stderr) goes into the task's result. ``reason`` is
    the host's own ``msg`` from the answer when there is one, else the output's tail;
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
    """The answer of a helper run in the host library's ONE envelope (``hostlib.serve``: one JSON object on the
    last stdout line, ``{"ok": true, ...}`` or ``{"ok": false, "failed": true, "msg": ...}``, exit 1 when not ok),
    or :class:`HelperError`.

    The messages: ``WHAT: cannot run PYTHON (rc=127): HINT TAIL`` (no answer, rc 126/127);
    ``WHAT failed (rc=N): MSG`` (a failure answer with ``check_rc``: the host's ``msg``, else the output's tail);
    ``WHAT printed no answer (rc=N): HINT TAIL`` (``failed`` instead of ``printed no answer`` when rc != 0 with
    ``check_rc``). ``check_rc=False`` returns a failure answer too (the caller reads its ``ok`` and ``msg``).
    ``what`` defaults to the script's name; ``hint`` says what to check when there is no answer."""
    what = what or script
    answer = result.last_json()
    if answer is not None and ((result.rc == 0 and answer.get("ok") is not False) or not check_rc):
        return answer
    no_python = answer is None and result.rc in (126, 127)
    hinted = f"{hint} " if hint else ""
    if no_python:
        reason = result.tail(5)
        msg = f"{what}: cannot run {python} (rc={result.rc}): {hinted}{reason}"
    elif answer is not None:
        reason = str(answer.get("msg") or result.tail())
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
        module's own keys as the returned values (the envelope's ``ok`` is not one of them)."""
        data = dict(answer)
        data.pop("ok", None)
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
    # renders a template FILE (the template module: ansible_managed, its includes) with extra vars and the task's
    # environment options (templating.FILE_OPTIONS: lstrip_blocks, delimiters, ...)
    render_file: Callable[[str, dict[str, Any], dict[str, Any]], str] | None = None
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
        if quick and has_agent(self.conn):
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

    def facts_with(self, facts: Mapping[str, Any]) -> dict[str, Any]:
        """The host's ``ansible_facts`` with ``facts`` added: what a module that returns facts (``setup``,
        ``getent``) makes the host's facts (``ModuleResult.gathered``)."""
        current = self.variables.get("ansible_facts")
        return {**(dict(current) if isinstance(current, dict) else {}), **facts}

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
    returned_facts: ClassVar[frozenset[str]] = frozenset()  # facts its result defines: known to the planner

    @classmethod
    def facts_defined(cls, args: Mapping[str, Any], is_template: Callable[[Any], bool]) -> frozenset[str] | None:
        """The facts a task of this module defines, for the planner: :attr:`returned_facts`, or what its
        arguments name (``getent``'s ``getent_DATABASE``); None when they are named only at run time."""
        return cls.returned_facts

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
                coerce_value(resolved[name], spec.type, f"{cls.name}: {name}")  # a wrong literal: say so now
            if name in resolved and spec.choices and not is_template(resolved[name]):
                value = resolved[name]
                if spec.type == "bool":
                    value = to_bool(value, name)
                if value not in spec.choices:
                    raise ArgError(f"{cls.name}: {name}={value!r} is not one of {list(spec.choices)}")
        try:
            cls.check_combination(resolved, is_template)
        except ArgError:
            # `executable: "{{ x | ternary(omit, y) }}"` beside `virtualenv: ...`: an argument a template may omit
            # is checked when it renders (``ModuleCall.prepare``); refused now only if wrong without them too
            present = {k: v for k, v in resolved.items() if not may_omit(v, is_template)}
            if len(present) == len(resolved):
                raise
            cls.check_combination(present, is_template)
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
                out[name] = coerce_value(args[name], spec.type, f"{cls.name}: {name}")
            else:
                out[name] = spec.default
            if spec.choices and out[name] is not None and out[name] not in spec.choices:
                raise ArgError(f"{cls.name}: {name}={out[name]!r} is not one of {list(spec.choices)}")
        return out

    # ---------------------------------------------------------------- execution
    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        raise NotImplementedError


def may_omit(value: Any, is_template: Callable[[Any], bool]) -> bool:
    """Whether an argument's value is a template that may render to ``omit`` (the argument is then not given)."""
    return isinstance(value, str) and "omit" in value and bool(is_template(value))


def _has_template(value: Any, is_template: Callable[[Any], bool]) -> bool:
    if isinstance(value, Mapping):
        return any(_has_template(v, is_template) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_template(v, is_template) for v in value)
    return bool(is_template(value))


REGISTRY: dict[str, type[Module]] = {}


def register(cls: type[Module]) -> type[Module]:
    REGISTRY[cls.name] = cls
    REGISTRY[f"ansible.builtin.{cls.name}"] = cls
    return cls


def lookup(name: str) -> type[Module] | None:
    return REGISTRY.get(name)
