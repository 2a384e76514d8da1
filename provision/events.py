"""The event stream of a run: what the executor reports, as values any number of listeners receive.

The executor reports to a sink (:class:`provision.report.Sink`: ``play_start``, ``task_start``,
``task_result``, ``progress``, ``line``). :class:`EventStream` is such a sink: it turns each call into one event
and hands it to every listener, in order. The command line's human output and its ``--json`` document are one
listener (``Reporter.handle``); a script, a notebook or an orchestrator adds its own (``on_event=`` of every
verb in :mod:`provision.api`) and sees the same run the same way.

    PlayStarted(name, hosts)        a play begins on these hosts
    TaskStarted(name, handler)      a task (or handler) begins on the play's active hosts
    TaskFinished(result)            one host finished the task: its TaskResult (``.host``, ``.status``, ...)
    Progress(host, message)         a line of progress from a long task on one host (an install, a download)
    Message(text)                   a line of the human output that is no result ("skipping: no hosts matched")
    RunFinished(summary)            the run ended: its RunSummary (per-host stats, exit code)

Threads: ``Progress`` is emitted from the worker thread that runs the host's task (or, for the
``waiting for ... (Ns)`` lines of a long wait, from that wait's own thread, :mod:`provision.modules.progress`);
every other event from the thread that called the verb. A listener must be quick and must not raise (an
exception in a listener is a bug of that listener; the run reports it like any internal error). Values are as
the engine has them: a task's data may hold what a host returned; ``provision.api.masked`` hides the run's
secrets before you print one. A ``Progress`` message is masked already.

Imports only :mod:`provision.results` and :mod:`provision.commands` (the masker).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .commands import MASKER
from .results import RunSummary, TaskResult

__all__ = [
    "Event",
    "EventStream",
    "Listener",
    "Message",
    "PlayStarted",
    "Progress",
    "RunFinished",
    "TaskFinished",
    "TaskStarted",
]


@dataclass(frozen=True)
class PlayStarted:
    name: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class TaskStarted:
    name: str
    handler: bool = False


@dataclass(frozen=True)
class TaskFinished:
    result: TaskResult

    @property
    def host(self) -> str:
        return self.result.host


@dataclass(frozen=True)
class Progress:
    host: str
    message: str


@dataclass(frozen=True)
class Message:
    text: str


@dataclass(frozen=True)
class RunFinished:
    summary: RunSummary


Event = PlayStarted | TaskStarted | TaskFinished | Progress | Message | RunFinished
Listener = Callable[[Event], None]


class EventStream:
    """A sink for the executor that turns every report into an :data:`Event` for each listener, in order."""

    def __init__(self, *listeners: Listener | None) -> None:
        self.listeners: list[Listener] = [listener for listener in listeners if listener is not None]

    def subscribe(self, listener: Listener) -> None:
        self.listeners.append(listener)

    def emit(self, event: Event) -> None:
        for listener in self.listeners:
            listener(event)

    # the sink the executor reports to (provision.report.Sink)
    def play_start(self, name: str, hosts: list[str]) -> None:
        self.emit(PlayStarted(name, tuple(hosts)))

    def task_start(self, name: str, *, handler: bool = False) -> None:
        self.emit(TaskStarted(name, handler))

    def task_result(self, result: TaskResult) -> None:
        self.emit(TaskFinished(result))

    def progress(self, host: str, msg: str) -> None:
        self.emit(Progress(host, MASKER.mask(msg)))

    def line(self, text: str = "") -> None:
        self.emit(Message(text))
