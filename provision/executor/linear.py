"""The executor: plays over hosts, in parallel, in Ansible's linear order (its ``linear`` strategy).

For each play: select hosts (play pattern ∩ ``--limit``), cut them into ``serial`` batches, and for each
batch run task after task on every active host at once (a thread pool of ``forks`` workers; each host has
ONE connection reused by every task, :mod:`.connections`). A failed host stops while the others go on; an
unreachable host is distinct from a failed one. After the tasks, notified handlers run once per host
(:mod:`.handlers` keeps them pending, on the host too).

The per-task logic (when, loop, until, changed_when/failed_when, register, notify) lives in
:mod:`.task_executor`; this module orders the work, and :mod:`.outcomes` applies what each task returns
(:class:`~.task_executor.TaskOutcome`) to the hosts' state. Blocks (:mod:`.blocks`), includes
(:mod:`.includes`), ``meta`` (:mod:`.meta`) and the tag/order/serial rules (:mod:`.selection`) have their own
files. The task runner never writes run state: it gets the inventory, the options, a reader of host state, the
connection factory and the progress callback, not the executor.

An unexpected exception (a bug: in a module, the executor, a reporter) never ends the run without its
recap: inside one host's task it fails that host ("internal error: ..."); anywhere else it stops the run and
fails the hosts the play had not finished. Each is kept in ``Executor.internal_errors`` with its traceback,
for the CLI to log and name in one line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from ..commands import MASKER
from ..errors import Interrupted, ProvisionError, SigTerm, Terminated
from ..inventory import Inventory
from ..masking import register_inventory_secrets
from ..playbook import Play, Task
from ..report import NO_HOSTS_LEFT, Sink
from ..results import RunSummary, Status, TaskResult
from ..state import HostState, RunOptions
from ..transport import Connection
from . import blocks, meta
from .connections import Connections
from .handlers import PendingHandlers
from .includes import group_by_include, included_tasks
from .outcomes import Recorder
from .prefetch import Prefetch, enabled
from .selection import hosts_by_tags, play_batches, play_hosts, task_selected
from .task_executor import TaskOutcome, TaskRunner


@dataclass
class InternalError:
    """An unexpected exception during the run: one line for the user, the exception (and its traceback) for
    the debug log."""

    message: str
    exc: BaseException


class Executor:
    def __init__(self, inventory: Inventory, options: RunOptions, reporter: Sink, playbook_dir: str = ".") -> None:
        self.inventory = inventory
        self.options = options
        self.reporter = reporter
        self.playbook_dir = playbook_dir
        self.summary = RunSummary()
        self.state: dict[str, HostState] = {}
        self.prefetch = Prefetch(enabled(options.batch_probes))  # batched state checks (.prefetch)
        # relative paths over a local connection start in the playbook's directory, as ansible-playbook has them
        self._connections = Connections(inventory, options, self.prefetch, os.path.abspath(playbook_dir))
        self._pool = ThreadPoolExecutor(max_workers=max(1, options.forks), thread_name_prefix="provision")
        self._started = options.start_at_task is None
        self.internal_errors: list[InternalError] = []
        self._play_hosts: list[str] = []
        self._ended_play = False  # meta: end_play
        self._bad_before: set[str] = set()  # the hosts of the batch that had failed (or were unreachable) before it
        self._no_hosts_left = False  # every host of a batch failed in it: the run stops, as ansible-playbook
        self._pending = PendingHandlers(self.host_state, self.connection, check=options.check)
        self._recorder = Recorder(inventory, self.summary, reporter, self.host_state, self._pending.notify)
        register_inventory_secrets(inventory, options.extra_vars)

    # ------------------------------------------------------------------ connections and host state
    def connection(self, host: str) -> Connection:
        return self._connections.get(host)

    def close(self) -> None:
        """Close every connection (also mid-task, on an interrupt: the hosts then kill what still runs)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._connections.close_all()

    def commands_run(self) -> dict[str, int]:
        """Remote round trips per host (commands and calls to the persistent python helper)."""
        return self._connections.commands_run()

    def host_state(self, host: str) -> HostState:
        state = self.state.get(host)  # (read for every host on every task: no HostState made to be dropped)
        return state if state is not None else self.state.setdefault(host, HostState(host))

    # ------------------------------------------------------------------ plays and batches
    def run(self, plays: list[Play]) -> RunSummary:
        try:
            for play in plays:
                self._run_play(play)
                if self.summary.aborted or self._no_hosts_left:
                    break
        except KeyboardInterrupt as exc:
            self.summary.interrupted = True
            if isinstance(exc, SigTerm):
                raise Terminated("terminated (SIGTERM)") from None
            raise Interrupted("interrupted") from None
        except Interrupted:
            raise
        except Exception as exc:  # a bug: keep the recap and the retry file, name it in one line
            if isinstance(exc, ProvisionError):
                self.summary.aborted = str(exc)
            else:
                self.summary.aborted = self._keep_internal_error(exc, "in the executor").message
            for host in self._hosts_still_running(self._play_hosts):
                self.host_state(host).failed = True
                self.summary.stat(host).failed += 1
        return self.summary

    def _keep_internal_error(self, exc: BaseException, context: str) -> InternalError:
        error = InternalError(f"internal error {context}: {type(exc).__name__}: {exc}", exc)
        self.internal_errors.append(error)
        return error

    def play_hosts(self, play: Play) -> list[str]:
        return play_hosts(self.inventory, play, self.options.limit)

    def _run_play(self, play: Play) -> None:
        self._pending.handlers = play.handlers
        self._connections.remote_user = play.remote_user
        self._connections.play_connection = play.connection
        hosts = self.play_hosts(play)
        self._play_hosts = hosts
        self.reporter.play_start(play.name, hosts)
        MASKER.add_vars(play.vars, play.no_log)  # the plain values; templates are rendered per host (task_executor)
        if not hosts:
            self.reporter.line("skipping: no hosts matched")
            return
        self._ended_play = False
        for name in hosts:
            self.host_state(name).ended = False  # meta: end_host lasts one play
        for batch in play_batches(play, hosts, self.options.extra_vars):
            for name in batch:  # as Ansible's recap: the hosts a batch reached (not those an abort spared)
                self.summary.stat(name)
            if self._run_batch(play, batch, hosts) or self.summary.aborted or self._ended_play:
                return

    def _run_batch(self, play: Play, batch: list[str], play_hosts: list[str]) -> bool:
        """Run the play's tasks and handlers on one batch; True when the play must stop."""
        self._bad_before = {h for h in batch if self.host_state(h).failed or self.host_state(h).unreachable}
        runner = TaskRunner(
            play,
            batch,
            play_hosts,
            inventory=self.inventory,
            options=self.options,
            host_state=self.host_state,
            connection=self.connection,
            progress=self.reporter.progress,
            playbook_dir=self.playbook_dir,
        )
        if play.gather_facts and self._started:
            self._run_on_hosts(batch, "Gathering Facts", runner.gather_facts)
        if play.handlers:  # the first contact with each host: its read-ahead follows it there (no barrier)
            ahead = None
            if self._started and play.tasks:
                ahead = self.prefetch.behind_contact(play, 0, runner, self._selected, self._connections.opened)
            self._pending.load(play, self._hosts_still_running(batch), self._pool.map, ahead)
        for index, task in enumerate(play.tasks, 1):
            if self._started or task.name == self.options.start_at_task:
                self._started = True
                self._read_ahead(play, index - 1, batch, runner)
                stop = self._run_task(play, task, batch, runner)
                if stop is not None:
                    if play.force_handlers and not self._ended_play:  # the failed hosts' handlers still run
                        self._flush_handlers(play, batch, runner)
                    return stop
            if index in play.flush_points:  # the end of pre_tasks, tasks, post_tasks
                self._flush_handlers(play, batch, runner)
        if not play.tasks:
            self._flush_handlers(play, batch, runner)
        return False

    def _read_ahead(self, play: Play, index: int, batch: list[str], runner: TaskRunner) -> None:
        """Before a run of tasks that read their state first: those reads in one round trip per host."""
        hosts = self._hosts_still_running(batch)
        self.prefetch.before(play, index, hosts, runner, self._selected, self._connections.opened, self._pool.map)

    def _selected(self, task: Task) -> bool:
        return task_selected(task, tags=self.options.tags, skip_tags=self.options.skip_tags)

    def _batch_must_stop(self, play: Play, batch: list[str]) -> bool:
        """After a task: whether its failures end the batch (any_errors_fatal, max_fail_percentage, no host
        left); the reason is kept in the summary."""
        bad = [h for h in batch if self.host_state(h).failed or self.host_state(h).unreachable]
        if not bad:
            return False
        if play.any_errors_fatal and any(self.host_state(h).failed for h in bad):
            self.summary.aborted = f"any_errors_fatal: {', '.join(bad)} failed"
            return True
        if play.max_fail_percentage is not None:
            percent = 100.0 * len(bad) / len(batch)
            if percent > play.max_fail_percentage:
                self.summary.aborted = (
                    f"max_fail_percentage {play.max_fail_percentage:g}% exceeded: "
                    f"{len(bad)} of {len(batch)} hosts in the batch failed ({percent:.0f}%)"
                )
                return True
        if len(bad) == len(batch) and not any(self.host_state(h).always_due for h in bad):
            if set(batch) <= self._bad_before:  # a play of hosts that had failed already: nothing ran, nothing said
                return True
            self.reporter.line(NO_HOSTS_LEFT)
            # the whole batch failed in it: ansible-playbook runs no later batch or play (one banner, not one a play)
            self._no_hosts_left = not set(batch) & self._bad_before
            return True
        return False

    # ------------------------------------------------------------------ tasks
    def _run_task(
        self, play: Play, task: Task, batch: list[str], runner: TaskRunner, only: set[str] | None = None
    ) -> bool | None:
        """One task over the batch (``only``: the hosts an include gave it to); True/False when the batch must
        stop (True: the play too), None to go on."""
        hosts = hosts_by_tags(task, batch, self.options, runner.tags)
        failed_before = {h for h in batch if self.host_state(h).failed}
        if only is not None:
            hosts = [h for h in hosts if h in only]
        if task.blocks:
            hosts = [h for h in hosts if blocks.reaches(self.host_state(h), task)]
        if task.role_run is not None:  # meta: end_role ended this role for some hosts
            hosts = [h for h in hosts if task.role_run not in self.host_state(h).ended_roles]
        if task.module == "meta":
            stop = self._run_meta(play, task, self._hosts_reaching(hosts, task), batch, runner)
            if stop:
                return stop == "play"
        elif task.module in ("include_tasks", "include_role"):
            if self._run_include(play, task, self._hosts_reaching(hosts, task), batch, runner):
                return True
        elif hosts:
            live = self._hosts_reaching(hosts, task)
            run_once = runner.run_once(task, live)
            title = runner.title(task, live)
            run = partial(runner.run, task)
            self._run_on_hosts(live, title, run, run_once=run_once, where=task.where, task=task, chosen=True)
        for block in task.ends_blocks:  # a block is over: its failed hosts owe it nothing more
            for h in batch:
                self.host_state(h).always_due.discard(block)
        if task.any_errors_fatal and any(self.host_state(h).failed for h in set(batch) - failed_before):
            failed = sorted(h for h in set(batch) - failed_before if self.host_state(h).failed)
            self.summary.aborted = f"any_errors_fatal: {', '.join(failed)} failed"
            return True
        if self._batch_must_stop(play, batch):
            return True
        return None

    def _hosts_still_running(self, hosts: list[str]) -> list[str]:
        """The hosts that have neither failed, nor become unreachable, nor ended (``HostState.active``)."""
        return [h for h in hosts if self.host_state(h).active]

    def _hosts_reaching(self, hosts: list[str], task: Task | None) -> list[str]:
        """The hosts of ``hosts`` that run ``task``: the active ones, and failed ones an ``always`` still owes."""
        if task is None or not task.blocks:
            return self._hosts_still_running(hosts)
        return [h for h in hosts if blocks.reaches(self.host_state(h), task)]

    def _run_on_hosts(
        self,
        hosts: list[str],
        title: str,
        fn: Callable[[str], TaskOutcome | None],
        *,
        run_once: bool = False,
        handler: bool = False,
        where: str = "",
        task: Task | None = None,
        chosen: bool = False,
        forced: bool = False,
    ) -> list[TaskResult]:
        """``fn`` on each host in the thread pool, each outcome applied and its result recorded as it comes.
        ``chosen``: the caller has just chosen the hosts; ``forced``: handlers of force_handlers run on failed
        hosts too; otherwise the hosts that reach ``task`` run it."""
        active = hosts if chosen or forced else self._hosts_reaching(hosts, task)
        if not active:
            return []
        if run_once:
            active = active[:1]
        self.reporter.task_start(title, handler=handler)
        futures = [self._pool.submit(self._run_and_apply, fn, h) for h in active]
        results: list[TaskResult] = []
        for host, future in zip(active, futures, strict=True):
            try:
                result = future.result()
            except Interrupted:
                raise
            except Exception as exc:  # a bug in a module or the task runner: this host fails, the run goes on
                place = f" ({where})" if where else ""
                if isinstance(exc, ProvisionError):
                    msg = f"{exc}{place}"
                else:
                    msg = self._keep_internal_error(exc, f"in task {title!r} on {host}{place}").message
                result = TaskResult(host, title, Status.FAILED, msg)
            if result is None:
                continue
            results.append(result)
            self._record_result(result, task)
        return results

    def _run_and_apply(self, fn: Callable[[str], TaskOutcome | None], host: str) -> TaskResult | None:
        """One host's work (in a worker thread); what it returns is applied to the hosts' state at once, in that
        thread, before the next task (a notification is persisted on the host there too)."""
        outcome = fn(host)
        if outcome is None:
            return None
        self._recorder.apply_outcome(outcome)
        return outcome.result

    def _record_result(self, result: TaskResult, task: Task | None) -> None:
        """A result recorded, as rescued when a block around ``task`` catches its failure."""
        caught = blocks.rescued(self.host_state(result.host), result, task)
        self._recorder.record_result(result, rescued=caught)

    # ------------------------------------------------------------------ includes and meta
    def _run_include(self, play: Play, task: Task, hosts: list[str], batch: list[str], runner: TaskRunner) -> bool:
        """``include_tasks``/``include_role``: per host and loop item, the file (role) its ``when`` and templates
        give; the hosts that got the same one with the same item run its tasks together (each "included" counts
        ok, as in Ansible); the include's vars and item reach every included task, and its place in blocks too.
        True when the play must stop."""
        if not hosts:
            return False
        self.reporter.task_start(task.name)
        results, groups = group_by_include(task, hosts, runner)
        for result in results:
            self._record_result(result, task)
        for members, extra, args in groups:
            try:
                tasks = included_tasks(play, task, args, extra, self.playbook_dir)
            except ProvisionError as exc:
                for host in members:
                    self._recorder.record_result(TaskResult(host, task.name, Status.FAILED, str(exc)))
                continue
            for included in tasks:
                stop = self._run_task(play, included, batch, runner, only=set(members))
                if stop:
                    return True
        return False

    def _run_meta(self, play: Play, task: Task, hosts: list[str], batch: list[str], runner: TaskRunner) -> str | None:
        """``meta: ACTION`` on the hosts that reach it (its ``when`` is evaluated per host, quietly: as in
        Ansible, a meta task adds nothing to the recap). Returns "play"/"batch" when the play/batch ends."""
        action = task.args["_raw_params"]
        if task.when is not None and action != "flush_handlers":
            hosts = [h for h in hosts if runner.condition(task, h)]
        if action == "flush_handlers":
            self._flush_handlers(play, batch, runner)
        elif action == "end_play" and hosts:
            self._ended_play = True
            return "play"
        elif action == "end_batch" and hosts:
            return "batch"
        elif action not in meta.FLOW_ACTIONS:
            meta.act_on_hosts(
                task, hosts, batch, self.host_state, inventory=self.inventory, options=self.options,
                inventory_lock=self._recorder.inventory_lock, connections=self._connections,
            )  # fmt: skip
        return None

    # ------------------------------------------------------------------ handlers
    def _flush_handlers(self, play: Play, batch: list[str], runner: TaskRunner) -> None:
        """Run the pending handlers, in the order they are defined; a handler notified by a handler runs in the
        same flush (the list is walked again while any is pending, as Ansible does)."""
        for _ in range(len(play.handlers) + 1):
            ran = False
            for handler in play.handlers:
                hosts = [
                    h for h in self._hosts_running_handlers(play, batch) if handler.name in self.host_state(h).notified
                ]
                if not hosts:
                    continue
                ran = True
                for host in hosts:  # consumed before it runs: a handler may notify itself again
                    state = self.host_state(host)
                    state.notified = [n for n in state.notified if n != handler.name]
                if handler.module in ("include_tasks", "include_role"):  # a handler that includes tasks
                    self._run_include(play, handler, hosts, batch, runner)
                    for host in hosts:
                        self._pending.ran(host)
                    continue
                run = partial(runner.run, handler)
                results = self._run_on_hosts(hosts, handler.name, run, handler=True, where=handler.where,
                                             forced=play.force_handlers)  # fmt: skip
                for result in results:
                    if result.status in (Status.OK, Status.CHANGED, Status.SKIPPED):
                        self._pending.ran(result.host)
                    elif result.status is Status.FAILED:
                        self.host_state(result.host).notified.append(handler.name)  # still pending on the host
            if not ran:
                return

    def _hosts_running_handlers(self, play: Play, batch: list[str]) -> list[str]:
        """The hosts whose handlers run: the active ones; with ``force_handlers`` the failed ones too (not the
        unreachable), as in Ansible."""
        if not play.force_handlers:
            return self._hosts_still_running(batch)
        return [h for h in batch if not self.host_state(h).unreachable and not self.host_state(h).ended]
