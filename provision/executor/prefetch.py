"""Batched state checks: the state reads of a run of consecutive tasks, in ONE round trip per host.

A converged play spends nearly all its time in round trips: every ``file``/``copy``/``template`` task, every
``command`` with ``creates``, reads the host's state (``remote/file_state.py stat``) and then changes nothing.
Before a *segment* (consecutive tasks that only read before they write, see :func:`probeable`), the executor
asks :meth:`Prefetch.before`; for each host of the batch this renders every task of the segment exactly as the
task itself will (:meth:`provision.taskrun.TaskRunner.prepare`), runs its module against a *recording*
connection that stops it at its first remote call, and keeps that call when it is a read-only one (a quick
script through the host's python agent). All of a host's recorded reads go to its agent in one message
(``op: batch``); the answers are kept, keyed by the exact call (interpreter, script, arguments, stdin).

Then the tasks run as always, in order, with all their semantics (when, register, changed_when, handlers,
check mode, --diff, errors at their task): only their first state read is answered from what was kept,
when the call is the very same one. A call that differs (its arguments depended on something the prefetch
could not know) simply goes to the host.

Correctness rests on one rule: an answer kept is used only while NOTHING may have changed on ANY host since
it was read. Every connection the tasks (and the executor: pending handlers) get is watched; any call that
may change a host (a command, a write, a helper call other than a state read) drops every kept answer of every
host before it goes out (two inventory names may be one machine). In a converged run nothing changes and
every read is answered; in a run that changes things, the first change costs the later tasks their own reads,
as without batching.

``PROVISION_BATCH_PROBES=0`` (or ``RunOptions.batch_probes = False``) turns batching off: the same run, one
round trip per task and host.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

from .. import templating
from ..playbook import Play, Task
from ..transport import AgentHost, CommandResult, Connection, has_agent
from ..transport.agent import QUICK_SCRIPTS
from .task_executor import TaskRunner

# modules whose run() only computes until its first remote call, which is a state read (file_state.py stat)
PROBED = frozenset({"file", "copy", "template", "command", "shell", "lineinfile", "blockinfile", "replace"})
READ_ONLY = {"file_state.py": frozenset({"stat"})}  # helper calls that change nothing on the host
BATCH_TIMEOUT = 60.0  # seconds for each read of a batch (a stat): a hung filesystem does not hold the run
TEMPLATE_CALLS = ("lookup", "query", "q(")  # a template that may call out (a lookup) is never rendered twice


def enabled(option: bool) -> bool:
    return option and os.environ.get("PROVISION_BATCH_PROBES", "1") != "0"


Key = tuple[str, str, tuple[str, ...], bytes]  # interpreter, script, args, stdin


def read_only(script: str, args: list[str]) -> bool:
    return bool(args) and args[0] in READ_ONLY.get(script, ())


# ----------------------------------------------------------------------------------------- which tasks
def probeable(task: Task) -> bool:
    """Whether ``task`` reads its state first, the same for every host, with nothing around it that the
    prefetch would have to imitate (loops, retries, delegation, run_once, templated tags, lookups)."""
    if task.module_class.name not in PROBED:
        return False
    if task.module_class.name in ("command", "shell") and not (
        task.args.get("creates") is not None or task.args.get("removes") is not None
    ):
        return False  # it runs its command: a change
    if task.loop is not None or task.until is not None or task.retries or task.delegate_to or task.run_once:
        return False
    if any(templating.is_template(t) for t in task.tags):
        return False
    text = json.dumps([task.args, task.when, task.environment, task.vars, task.check_mode], default=str)
    return not any(call in text for call in TEMPLATE_CALLS)


def transparent(task: Task) -> bool:
    """A task that never reaches a host (debug, assert, set_fact...): a segment goes on across it."""
    cls = task.module_class
    plain = cls.name not in ("meta", "include_tasks") and not task.delegate_to and task.loop is None
    return cls.controller_only and plain


def produced(task: Task) -> set[str]:
    """The variables ``task`` sets for the tasks after it."""
    names = {task.register} if task.register else set()
    if task.module_class.name == "set_fact":
        names |= {str(k) for k in task.args if k != "cacheable"}
    return names


def segment(tasks: list[Task], start: int, flush_points: set[int], selected: Callable[[Task], bool]) -> int:
    """The end (exclusive) of the segment that starts at ``tasks[start]``: probeable tasks, and tasks that
    reach no host, up to a handler flush, a task that reads what an earlier one of the segment sets, or
    anything else."""
    from ..plan import task_names

    made: set[str] = set()
    end = start
    while end < len(tasks):
        task = tasks[end]
        if not selected(task) and not any(templating.is_template(t) for t in task.tags):
            end += 1
        elif probeable(task) or transparent(task):
            if made and task_names(task) & made:  # (parsing a task's templates costs: only when it matters)
                break
            made |= produced(task)
            end += 1
        else:
            break
        if end in flush_points:  # handlers run after tasks[end - 1]
            break
    return end


# ----------------------------------------------------------------------------------------- recording
class _Stop(BaseException):
    def __init__(self, key: Key | None) -> None:
        super().__init__()
        self.key = key


class _RecordingAgent:
    def __init__(self, interpreter: str) -> None:
        self.interpreter = interpreter

    def call(self, script: str, args: list[str], stdin: bytes | None, timeout: float | None) -> CommandResult:
        ok = script in QUICK_SCRIPTS and read_only(script, args)
        raise _Stop((self.interpreter, script, tuple(args), stdin or b"") if ok else None)

    def __getattr__(self, name: str) -> Any:
        raise _Stop(None)


class _RecordingConnection:
    """Stands in for a host's connection while a module is run ahead: its first remote call ends the run."""

    commands_run = 0

    def __init__(self, name: str) -> None:
        self.name = name

    def python_agent(self, interpreter: str) -> _RecordingAgent:
        return _RecordingAgent(interpreter)

    def __getattr__(self, name: str) -> Any:
        def stop(*args: Any, **kwargs: Any) -> Any:
            raise _Stop(None)

        return stop


def record(runner: TaskRunner, task: Task, host: str) -> Key | None:
    """The first remote call ``task`` will make on ``host`` when it is a read-only agent call, else None."""
    where = f"task {task.name!r} ({task.where})"
    try:
        variables = runner.host_vars(host, task)
        if task.when is not None and not templating.condition(task.when, variables, where):
            return None
        cls, args, ctx = runner.prepare(task, host, variables, where)
        render_file = ctx.render_file

        def guarded(text: str, extra: dict[str, Any], options: dict[str, Any]) -> str:
            if render_file is None or any(call in text for call in TEMPLATE_CALLS):
                raise _Stop(None)
            return render_file(text, extra, options)

        recording = _RecordingConnection(host)
        ctx = dataclasses.replace(ctx, conn=recording, peer=None, progress=None, render_file=guarded)
        cls().run(ctx, args)
    except _Stop as stop:
        return stop.key
    except Exception:  # anything the task itself will report, at its place
        return None
    return None


# ----------------------------------------------------------------------------------------- the answers
class Prefetch:
    """The answers read ahead for the current segment, and the watch on every connection."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self._lock = threading.Lock()
        self._answers: dict[int, dict[Key, CommandResult]] = {}  # by id() of the host's connection
        self._end = -1  # the current segment: tasks[_start:_end] of the play _runner runs (one batch)
        self._start = -1
        self._runner: TaskRunner | None = None
        self._watched: dict[int, _Watched] = {}
        self.hits = 0  # state reads answered from a batch (tests, benchmarks)
        self.batches = 0

    # -- connections
    def watch(self, conn: Connection) -> Connection:
        if not self.on:
            return conn
        with self._lock:
            watched = self._watched.get(id(conn))
            if watched is None or watched.conn is not conn:
                watched = self._watched[id(conn)] = _Watched(conn, self)
        return watched

    def touched(self) -> None:
        """Something may change a host: nothing read before is trusted any more."""
        with self._lock:
            self._answers.clear()

    def answer(self, conn: Connection, key: Key) -> CommandResult | None:
        with self._lock:
            found = self._answers.get(id(conn), {}).get(key)
            if found is not None:
                self.hits += 1
            return None if found is None else dataclasses.replace(found)

    # -- segments
    def before(
        self,
        play: Play,
        index: int,
        hosts: list[str],
        runner: TaskRunner,
        selected: Callable[[Task], bool],
        opened: Callable[[str], Connection | None],
        each: Callable[[Callable[[str], None], list[str]], Iterable[None]],
    ) -> None:
        """Called before ``play.tasks[index]`` runs on the batch: at the start of a segment of at least two
        probeable tasks, read their states on each host of ``hosts`` that is connected already (``opened``:
        its connection, None when there is none yet; a host is never contacted first by a read ahead, so an
        unreachable or busy one is reported by its task as always). ``each`` maps over hosts in parallel."""
        if not self.on or (runner is self._runner and self._start <= index < self._end):
            return
        tasks = self._begin(play, index, runner, selected)
        conns = {h: c for h in hosts if (c := _connected(opened, h)) is not None}
        if not conns:
            self._end = index + 1  # the first task connects; the segment starts again after it
            return
        if len(tasks) < 2:
            return
        list(each(lambda host: self._read(host, tasks, runner, conns[host]), list(conns)))
        self.batches += 1

    def behind_contact(
        self,
        play: Play,
        index: int,
        runner: TaskRunner,
        selected: Callable[[Task], bool],
        opened: Callable[[str], Connection | None],
    ) -> Callable[[str], None]:
        """The read-ahead of the segment at ``play.tasks[index]`` host by host, each right behind the executor's
        first contact with that host (its pending handlers read: its connection made): a host that answers
        early reads ahead while the others are still connecting, where :meth:`before` waits for the slowest
        handshake of the batch (a fresh run at 64 hosts spent ~0.3 s there). The returned function is called
        with each host after its contact, from the executor's pool; :meth:`before` at ``index`` then reads no
        more. A first contact changes nothing a task reads: it takes the run lock and reads a file of
        provision's own (``~/.provision/``)."""
        if not self.on:
            return lambda host: None
        tasks = self._begin(play, index, runner, selected)
        if len(tasks) < 2:
            return lambda host: None
        self.batches += 1

        def read(host: str) -> None:
            conn = _connected(opened, host)
            if conn is not None:
                self._read(host, tasks, runner, conn)

        return read

    def _begin(self, play: Play, index: int, runner: TaskRunner, selected: Callable[[Task], bool]) -> list[Task]:
        """A new segment at ``play.tasks[index]``: nothing read before is kept; its probeable tasks."""
        self.touched()
        self._runner, self._start = runner, index
        self._end = segment(play.tasks, index, play.flush_points, selected)
        return [t for t in play.tasks[index : self._end] if selected(t) and probeable(t)]

    def _read(self, host: str, tasks: list[Task], runner: TaskRunner, raw: Connection) -> None:
        keys = list(dict.fromkeys(k for k in (record(runner, t, host) for t in tasks) if k is not None))
        by_python: dict[str, list[Key]] = {}
        for key in keys:
            by_python.setdefault(key[0], []).append(key)
        for interpreter, group in by_python.items():
            if len(group) < 2:
                continue  # one read gains nothing: the task makes it itself
            if not has_agent(raw):
                continue
            try:
                results = raw.python_agent(interpreter).batch([(k[1], list(k[2]), k[3]) for k in group], BATCH_TIMEOUT)
            except Exception:  # AgentUnavailable, a lost connection: the tasks read for themselves and report it
                continue
            with self._lock:
                kept = self._answers.setdefault(id(raw), {})
                kept.update({k: r for k, r in zip(group, results, strict=True) if r is not None})


def _connected(opened: Callable[[str], Connection | None], host: str) -> Connection | None:
    conn = opened(host)
    return conn if conn is not None and getattr(conn, "connected", True) else None


class _Watched:
    """A host's connection as the run sees it while batching is on: a call that may change the host drops
    every kept answer first; a state read is answered from them when it is the very call read ahead."""

    def __init__(self, conn: Connection, prefetch: Prefetch) -> None:
        self.conn = conn
        self._prefetch = prefetch

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)  # name, commands_run, expand_path, get (reads), close

    def run(self, *args: Any, **kwargs: Any) -> CommandResult:
        self._prefetch.touched()
        return self.conn.run(*args, **kwargs)

    def put(self, *args: Any, **kwargs: Any) -> None:
        self._prefetch.touched()
        self.conn.put(*args, **kwargs)

    def python_agent(self, interpreter: str) -> _WatchedAgent:
        return _WatchedAgent(cast(AgentHost, self.conn).python_agent(interpreter), self, interpreter)


class _WatchedAgent:
    def __init__(self, agent: Any, watched: _Watched, interpreter: str) -> None:
        self._agent = agent
        self._watched = watched
        self._interpreter = interpreter

    def __getattr__(self, name: str) -> Any:  # try_exec, lock...: may change the host
        self._watched._prefetch.touched()
        return getattr(self._agent, name)

    def read(self, path: str, limit: int) -> Any:
        return self._agent.read(path, limit)

    def call(self, script: str, args: list[str], stdin: bytes | None, timeout: float | None) -> CommandResult:
        prefetch = self._watched._prefetch
        if read_only(script, args):
            found = prefetch.answer(self._watched.conn, (self._interpreter, script, tuple(args), stdin or b""))
            if found is not None:
                return found
        else:
            prefetch.touched()
        return self._agent.call(script, args, stdin, timeout)
