"""Reporting: Ansible-like human output, the ``--json`` document, and the retry file.

Every string printed or written here passes through :data:`provision.commands.MASKER` as the LAST step
before it leaves the process (after JSON encoding, so escaped forms of secrets are masked too).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Protocol, TextIO

from .commands import MASKER
from .events import Event, Message, PlayStarted, Progress, RunFinished, TaskFinished, TaskStarted
from .localfiles import replace_file
from .results import RunSummary, Status, TaskResult
from .terminal import printable

# a host's output must not drive the controller's terminal: provision.terminal.printable, the one escaping
# function of every human printer


PROFILE_LIMIT = 20  # the tasks --profile lists (as Ansible's profile_tasks)
NO_HOSTS_LEFT = "\nNO MORE HOSTS LEFT: every host of the batch failed or was unreachable"
# ad hoc (`provision task`): the modules whose output is shown as text (`host | CHANGED | rc=0 >>`), Ansible's
# MODULE_NO_JSON; the lines of a host's output shown before the rest is cut (--json keeps all of it)
ADHOC_TEXT_MODULES = frozenset({"command", "shell", "raw"})
ADHOC_HEAD_LINES = 40  # stdout, and a result shown as JSON: its first lines
ADHOC_TAIL_LINES = 20  # stderr: its last lines (where the error is)
ADHOC_LINE_CHARS = 500
_DEBUG_KEYS = frozenset({"msg", "exception", "warnings", "deprecations"})
_COLORS = {
    Status.OK: "32", Status.CHANGED: "33", Status.FAILED: "31", Status.UNREACHABLE: "31", Status.SKIPPED: "36",
}  # fmt: skip


class Sink(Protocol):
    """What the executor reports to: a :class:`Reporter`, or a :class:`provision.events.EventStream` that hands
    each report to its listeners as an event (the CLI's reporter is one of them: :meth:`Reporter.handle`)."""

    def play_start(self, name: str, hosts: list[str]) -> None: ...
    def task_start(self, name: str, *, handler: bool = False) -> None: ...
    def task_result(self, result: TaskResult) -> None: ...
    def progress(self, host: str, msg: str) -> None: ...
    def line(self, text: str = "") -> None: ...


class Reporter:
    def __init__(
        self, *, json_mode: bool = False, verbosity: int = 0, stream: TextIO | None = None, profile: bool = False,
        adhoc: str | None = None, recap: bool = True,
    ) -> None:  # fmt: skip
        self.json_mode = json_mode
        self.recap_on_finish = recap  # the recap printed on the RunFinished event (False: a query's quiet run)
        self.recapped = False  # the recap was printed (a front end prints a plain one when this listener failed)
        self.adhoc = adhoc  # the module of `provision task`: each host's result as Ansible's ad hoc shows it
        self.profile = profile  # --profile: the time of each task in the recap (Ansible's profile_tasks)
        self._timings: list[list[Any]] = []  # [title, started, ended] of each task, in order
        self.verbosity = verbosity
        self.out = stream or (sys.stderr if json_mode else sys.stdout)
        self.color = self.out.isatty()
        self._lock = threading.Lock()
        self._plays: list[dict[str, Any]] = []
        self._task: dict[str, Any] | None = None
        self.failures: list[TaskResult] = []  # failed/unreachable results, for the debug log
        self._started = time.monotonic()

    # ------------------------------------------------------------------ printing
    def _paint(self, text: str, status: Status) -> str:
        return f"\033[{_COLORS[status]}m{text}\033[0m" if self.color else text

    def line(self, text: str = "") -> None:
        with self._lock:
            self.out.write(MASKER.mask(text) + "\n")
            self.out.flush()

    @staticmethod
    def _banner(text: str) -> str:
        return f"\n{text} " + "*" * max(3, 78 - len(text))

    def warning(self, msg: str) -> None:
        self.line(f"[WARNING]: {msg}")

    def progress(self, host: str, msg: str) -> None:
        self.line(f"  .. [{host}] {printable(msg)}")

    # ------------------------------------------------------------------ events
    def handle(self, event: Event) -> None:
        """The human output and the ``--json`` document, built from the run's event stream (a listener:
        ``EventStream(reporter.handle)``), the recap on ``RunFinished``: a front end only parses and prints."""
        if isinstance(event, PlayStarted):
            self.play_start(event.name, list(event.hosts))
        elif isinstance(event, TaskStarted):
            self.task_start(event.name, handler=event.handler)
        elif isinstance(event, TaskFinished):
            self.task_result(event.result)
        elif isinstance(event, Progress):
            self.progress(event.host, event.message)
        elif isinstance(event, Message) and not (self.adhoc and event.text == NO_HOSTS_LEFT):
            self.line(event.text)
        elif isinstance(event, RunFinished) and self.recap_on_finish:
            self.recap(event.summary)

    def play_start(self, name: str, hosts: list[str]) -> None:
        self._plays.append({"play": {"name": name, "hosts": hosts}, "tasks": []})
        if not self.adhoc:
            self.line(self._banner(f"PLAY [{name}]"))

    def task_start(self, name: str, *, handler: bool = False) -> None:
        now = time.monotonic()
        self._timings.append([f"{'RUNNING HANDLER' if handler else 'TASK'} [{name}]", now, now])
        self._task = {"task": {"name": name, "handler": handler}, "hosts": {}}
        if self._plays:
            self._plays[-1]["tasks"].append(self._task)
        if not self.adhoc:
            self.line(self._banner(f"{'RUNNING HANDLER' if handler else 'TASK'} [{name}]"))

    def task_result(self, result: TaskResult) -> None:
        if self._timings:
            self._timings[-1][2] = time.monotonic()  # a task lasts until its last host's result
            if self.profile and self._task is not None:
                self._task["task"]["duration"] = round(self._timings[-1][2] - self._timings[-1][1], 4)
        if self._task is not None:
            self._task["hosts"][result.host] = MASKER.mask_obj(result.to_json())
        if result.status in (Status.FAILED, Status.UNREACHABLE) and not result.ignored:
            self.failures.append(result)
        self.line(self.format_adhoc(result) if self.adhoc else self.format_result(result))

    def format_result(self, result: TaskResult) -> str:
        host = result.host + (f" -> {result.delegated_to}" if result.delegated_to else "")
        status = result.status
        if status is Status.FAILED:
            head = "...ignoring" if result.ignored else ""
            text = f"fatal: [{host}]: FAILED! => {printable(result.msg)}"
            body = self._paint(text, status) + (f"\n{head}" if head else "")
        elif status is Status.UNREACHABLE:
            body = self._paint(f"fatal: [{host}]: UNREACHABLE! => {printable(result.msg)}", status)
        elif status is Status.SKIPPED:
            body = self._paint(f"skipping: [{host}]", status)
            if result.msg and self.verbosity:
                body += f" => {printable(result.msg)}"
        else:
            body = self._paint(f"{status.value}: [{host}]", status)
            if result.msg and (self.verbosity or result.data.get("_show_msg")):
                body += f" => {printable(result.msg)}"
        for item in result.item_results:
            label = printable(str(item.data.get("item_label", "")))
            body += "\n  " + self._paint(f"{item.status.value}: [{host}] => (item={label})", item.status)
            if item.status is Status.FAILED or (item.msg and (self.verbosity or item.data.get("_show_msg"))):
                body += f" {printable(item.msg)}"
        if result.diff:
            body += "\n" + printable(result.diff.rstrip("\n"))
        if self.verbosity and result.data:
            shown = {k: v for k, v in result.data.items() if not k.startswith("_")}
            if shown:
                body += "\n" + json.dumps(MASKER.mask_obj(shown), indent=2, default=str, sort_keys=True)
        return body

    def format_adhoc(self, result: TaskResult) -> str:
        """One host's result as Ansible's ad hoc (minimal callback) shows it: ``host | CHANGED | rc=0 >>`` and the
        output for command/shell/raw, ``host | SUCCESS => {...}`` for other modules; a long output is cut, with a
        line that says so (``--json`` has all of it)."""
        host = result.host + (f" -> {result.delegated_to}" if result.delegated_to else "")
        status, data = result.status, result.data
        if status is Status.SKIPPED:
            return self._paint(f"{host} | SKIPPED", status)
        caption = {Status.OK: "SUCCESS", Status.CHANGED: "CHANGED", Status.FAILED: "FAILED"}.get(status, "UNREACHABLE")
        if self.adhoc in ADHOC_TEXT_MODULES and status is not Status.UNREACHABLE and "rc" in data:
            body = [self._paint(f"{host} | {caption} | rc={data['rc']} >>", status)]
            body += _cut(str(data.get("stdout") or ""), "stdout", head=ADHOC_HEAD_LINES)
            body += _cut(str(data.get("stderr") or ""), "stderr", tail=ADHOC_TAIL_LINES)
            if result.msg and not result.msg.startswith("non-zero return code"):  # (the rc and stderr say that)
                body.append(printable(result.msg))  # "Did not run command since '/etc/passwd' exists"
        else:  # failed/skipped are the caption; an empty msg is no news (as Ansible's result shows neither)
            hidden = {"failed", "skipped", *(["msg"] if not result.msg else []), *(["diff"] if result.diff else [])}
            shown = {k: v for k, v in result.to_json().items() if not k.startswith("_") and k not in hidden}
            if self.adhoc == "debug":  # what debug was asked to show, alone (Ansible's _clean_results)
                asked = _DEBUG_KEYS if "msg" in data else set(data) - {"verbosity", "msg"}
                shown = {k: v for k, v in shown.items() if k in asked}
            text = json.dumps(MASKER.mask_obj(shown), indent=4, default=str, sort_keys=True)
            lines = _cut(text, "result", head=ADHOC_HEAD_LINES)
            bang = "" if status in (Status.OK, Status.CHANGED) else "!"
            body = [self._paint(f"{host} | {caption}{bang} => {lines[0]}", status), *lines[1:]]
        if result.diff:
            body.append(printable(result.diff.rstrip("\n")))
        return "\n".join(body)

    def recap(self, summary: RunSummary) -> None:
        self.recapped = True
        if self.adhoc:  # as Ansible's ad hoc: each host's result is all there is
            if summary.aborted:
                self.line(f"Run stopped early: {summary.aborted}")
            return
        self.line(self._banner("PLAY RECAP"))
        width = max((len(h) for h in summary.stats), default=10)
        for host, st in summary.stats.items():
            worst = (
                Status.UNREACHABLE if st.unreachable else Status.FAILED if st.failed
                else Status.CHANGED if st.changed else Status.OK
            )  # fmt: skip
            self.line(
                f"{self._paint(host.ljust(width), worst)} : ok={st.ok:<4} changed={st.changed:<4} "
                f"unreachable={st.unreachable:<4} failed={st.failed:<4} skipped={st.skipped:<4} "
                f"rescued={st.rescued:<4} ignored={st.ignored}"
            )
        if summary.aborted:
            self.line(f"\nRun stopped early: {summary.aborted}")
        if self.profile:
            self.profile_recap()
        self.line(f"\nfinished in {time.monotonic() - self._started:.2f}s")

    def profile_recap(self, limit: int = PROFILE_LIMIT) -> None:
        """``--profile``: the slowest tasks first, each from its start to its last host's result (Ansible's
        profile_tasks; the time between tasks, connecting and batched state reads, belongs to none)."""
        if not self._timings:
            return
        self.line(self._banner("TASKS RECAP"))
        ranked = sorted(self._timings, key=lambda t: t[1] - t[2])
        for title, started, ended in ranked[:limit]:
            shown = printable(title if len(title) <= 66 else title[:63] + "...")
            self.line(f"{shown} {'-' * max(3, 67 - len(shown))} {ended - started:7.2f}s")
        if len(ranked) > limit:
            self.line(f"({len(ranked) - limit} more under {ranked[limit - 1][2] - ranked[limit - 1][1]:.2f}s)")

    def json_document(self, summary: RunSummary) -> dict[str, Any]:
        return {
            "plays": self._plays,
            "stats": {h: s.to_json() for h, s in summary.stats.items()},
        }

    def emit_json(self, summary: RunSummary, stream: TextIO | None = None) -> None:
        """The run's document, masked as TEXT: every string of it (keys too) with each registered secret's
        JSON-escaped form hidden, also a secret registered after a result was recorded (each result was
        masked when recorded; walking the whole document again first added nothing)."""
        text = json.dumps(self.json_document(summary), indent=2, default=str)
        (stream or sys.stdout).write(MASKER.mask(text) + "\n")


def _cut(text: str, what: str, *, head: int = 0, tail: int = 0) -> list[str]:
    """The lines of a host's ``text`` for a terminal: its first ``head`` (or last ``tail``) lines, each at most
    ADHOC_LINE_CHARS, and a line saying what was left out."""
    lines = printable(text.rstrip("\n")).split("\n") if text else []
    keep = head or tail
    shown = lines[:keep] if head else lines[-keep:]
    out = [line if len(line) <= ADHOC_LINE_CHARS else line[:ADHOC_LINE_CHARS] + " ..." for line in shown]
    cut = sum(len(line) > ADHOC_LINE_CHARS for line in shown)
    if len(lines) > keep or cut:
        which = "first" if head else "last"
        said = f"{which} {len(shown)} of {len(lines)} lines" if len(lines) > keep else "long lines cut"
        out.insert(len(out) if head else 0, f"[{what}: {said}; --json shows all of it]")
    return out


def write_retry_file(playbook: str, summary: RunSummary, directory: str | None = None) -> str | None:
    """Write the failed/unreachable host names, one per line; ``-l @file`` reruns just them. The file is
    replaced, never written through a link planted at its name."""
    hosts = [h for h in summary.stats if summary.stats[h].failed or summary.stats[h].unreachable]
    if not hosts:
        return None
    base = Path(directory) if directory else Path.cwd()
    path = base / (Path(playbook).stem + ".retry")
    try:
        replace_file(path, MASKER.mask("".join(h + "\n" for h in hosts)))
    except OSError:
        return None
    return str(path)
