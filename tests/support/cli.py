"""Small helpers shared by tests."""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.cli import main
from provision.results import TaskResult


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(argv: list[str]) -> CliResult:
    """Run the real CLI in-process and capture its exit code and output."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return CliResult(code, out.getvalue(), err.getvalue())


def named(shown: str, name: str) -> bool:
    """A task shown as ``name``, or as a role's task ``ROLE : name`` (Ansible's and provision's title)."""
    return shown == name or shown.endswith(f" : {name}")


def task(report: dict[str, Any], name: str, host: str) -> dict[str, Any]:
    """The result on ``host`` of the task ``name`` (:func:`named`) in a ``--json`` run report."""
    for play in report["plays"]:
        for entry in play["tasks"]:
            if named(entry["task"]["name"], name) and host in entry["hosts"]:
                return dict(entry["hosts"][host])
    raise AssertionError(f"no result of {name!r} on {host}")


@contextlib.contextmanager
def lab_ssh_config(lab: Any) -> Iterator[None]:
    """``PROVISION_SSH_CONFIG`` set to the lab's ssh config for the block (the in-process CLI reads it), then
    put back as it was (:meth:`tests.support.lab.Lab.pointed_at`)."""
    with lab.pointed_at():
        yield


def run_cli_in(workdir: Path, argv: list[str]) -> CliResult:
    """:func:`run_cli` from ``workdir`` (retry files and relative paths land there), back where it was after."""
    old = Path.cwd()
    os.chdir(workdir)
    try:
        return run_cli(argv)
    finally:
        os.chdir(old)


def run(*argv: str | Path, cwd: Path | None = None) -> CliResult:
    """:func:`run_cli` with arguments given as strings or paths, from ``cwd`` when one is given."""
    args = [str(a) for a in argv]
    return run_cli(args) if cwd is None else run_cli_in(cwd, args)


def write(path: Path, text: str) -> Path:
    """``text`` written to ``path``; the path (a playbook or inventory built inline)."""
    path.write_text(text)
    return path


class Collect:
    """A reporter (provision.report.Sink) that keeps every task result and prints nothing."""

    def __init__(self) -> None:
        self.results: list[TaskResult] = []

    def play_start(self, name: str, hosts: list[str]) -> None: ...
    def task_start(self, name: str, *, handler: bool = False) -> None: ...
    def progress(self, host: str, msg: str) -> None: ...
    def line(self, text: str = "") -> None: ...

    def task_result(self, result: TaskResult) -> None:
        self.results.append(result)


@dataclass
class Client:
    """Requests through a PD router, back to back on ``threads`` threads (thread 0 short ones, the others long
    ones), each checked for a completion; every outcome kept with its times (``events``: start, end, error or
    None), to count what failed around a fault and when serving came back. ``timeout``: each request's, seconds."""

    url: str
    threads_n: int = 2
    timeout: float = 120
    served: int = 0
    failures: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    events: list[tuple[float, float, str | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def one(self, n: int, tokens: int) -> None:
        body = {"text": f"request {n}", "sampling_params": {"max_new_tokens": tokens, "temperature": 0}}
        req = urllib.request.Request(f"{self.url}/generate", json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        started = time.monotonic()
        error: str | None
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                doc = json.loads(resp.read())
            got = (doc.get("meta_info") or {}).get("completion_tokens") or len(doc.get("output_ids") or [])
            error = None if resp.status == 200 and got else f"no completion: {str(doc)[:300]}"
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}: {exc.read()[:300]!r}"
        except (OSError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        with self.lock:
            self.events.append((started, time.monotonic(), error))
            if error is None:
                self.served += 1
                self.latencies.append(time.monotonic() - started)
            else:
                self.failures.append(f"request {n}: {error}")

    def loop(self, k: int) -> None:
        n = k
        while not self.stop.is_set():
            self.one(n, 4 if k == 0 else 64)  # short ones, and long ones that a drain has to wait for
            n += self.threads_n
            time.sleep(0.1)

    def since(self, t: float) -> list[tuple[float, float, str | None]]:
        """The outcomes of requests that ended after ``t`` (monotonic), in the order they ended."""
        with self.lock:
            return sorted((e for e in self.events if e[1] > t), key=lambda e: e[1])

    def __enter__(self) -> Client:
        self.threads = [threading.Thread(target=self.loop, args=(k,), daemon=True) for k in range(self.threads_n)]
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(150)
