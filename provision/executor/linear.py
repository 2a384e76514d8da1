"""Execution: plays over hosts, in parallel, Ansible's linear order.

For each play: select hosts (play pattern ∩ ``--limit``), cut them into ``serial`` batches, and for each
batch run task after task on every active host at once (a thread pool of ``forks`` workers; each host has
ONE connection reused by every task). A failed host stops while the others go on; an unreachable host is
distinct from a failed one. After the tasks, notified handlers run once per host. A notification is
persisted on the host (``~/.provision/pending_handlers.json``) until its handler has run, so a handler
notified by a run that then failed still runs on the next run.

The per-task logic (when, loop, until, changed_when/failed_when, register, notify) lives in
:mod:`provision.taskrun`; this module orders the work and applies what each task returns
(:class:`~provision.taskrun.TaskOutcome`: the registered value, the facts a task set, the handlers it
notified, gathered facts) to the hosts' state. The task runner never writes that state: it gets the
inventory, the options, a reader of host state, the connection factory and the progress callback, not the
executor. Imports run one way: executor → taskrun.

An unexpected exception (a bug: in a module, the executor, a reporter) never ends the run without its
recap: inside one host's task it fails that host ("internal error: ..."); anywhere else it stops the run and
fails the hosts the play had not finished. Each is kept in ``Executor.internal_errors`` with its traceback,
for the CLI to log and name in one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from .. import templating
from ..commands import MASKER, Command
from ..errors import HostError, Interrupted, InventoryError, ProvisionError, SigTerm, Terminated, UnreachableError
from ..inventory import Inventory
from ..masking import register_inventory_secrets
from ..playbook import Play, Task, include_path, load_included, load_role
from ..report import NO_HOSTS_LEFT, Sink
from ..results import RunSummary, Status, TaskResult
from ..state import HostState, RunOptions
from ..transport import Connection, LocalConnection, open_connection
from .prefetch import Prefetch, enabled
from .task_executor import TaskOutcome, TaskRunner

PENDING_HANDLERS = "~/.provision/pending_handlers.json"


@dataclass
class InternalError:
    """An unexpected exception during the run: one line for the user, the exception (and its traceback) for
    the debug log."""

    message: str
    exc: BaseException


def task_selected(task: Task, tags: set[str], skip_tags: set[str], task_tags: set[str] | None = None) -> bool:
    """Ansible's tag rules (``Taggable.evaluate_tags``): ``always`` runs unless skipped, ``never`` only when asked
    for by name, ``tagged``/``untagged``/``all`` as in Ansible. ``task_tags``: the task's tags rendered, when
    they are templates."""
    own = set(task.tags if task_tags is None else task_tags) or {"untagged"}
    untagged = own == {"untagged"}
    only = tags or {"all"}
    if "always" in own or ("all" in only and "never" not in own) or own & only:
        run = True
    else:
        run = "tagged" in only and not untagged and "never" not in own
    if run and skip_tags:
        if "all" in skip_tags:
            run = "always" in own and "always" not in skip_tags
        elif own & skip_tags or ("tagged" in skip_tags and not untagged):
            run = False
    return run


class Executor:
    def __init__(self, inventory: Inventory, options: RunOptions, reporter: Sink, playbook_dir: str = ".") -> None:
        self.inventory = inventory
        self.options = options
        self.reporter = reporter
        self.playbook_dir = playbook_dir
        self.summary = RunSummary()
        self.state: dict[str, HostState] = {}
        self._conns: dict[str, Connection] = {}
        self._conn_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, options.forks), thread_name_prefix="provision")
        self._started = options.start_at_task is None
        self.internal_errors: list[InternalError] = []
        self._play_hosts: list[str] = []
        self._ended_play = False  # meta: end_play
        self._bad_before: set[str] = set()  # the hosts of the batch that had failed (or were unreachable) before it
        self._no_hosts_left = False  # every host of a batch failed in it: the run stops, as ansible-playbook
        self._handler_list: list[Task] = []
        self.prefetch = Prefetch(enabled(options.batch_probes))  # batched state checks (provision.prefetch)
        self._remote_user: str | None = None  # the play's remote_user (under the inventory's ansible_user)
        self._play_connection: str | None = None  # the play's connection (under the inventory's)
        self._conn_users: dict[str, Any] = {}  # the (user, connection) each cached connection was opened with
        self._inventory_lock = threading.Lock()  # add_host/group_by change the inventory from worker threads
        register_inventory_secrets(inventory, options.extra_vars)

    # ------------------------------------------------------------------ connections
    def connection(self, host: str) -> Connection:
        with self._conn_lock:
            conn = self._conns.get(host)
            variables = self.inventory.connection_vars(host) if host in self.inventory.hosts else {}
            user = variables.get("ansible_user") or self._remote_user
            kind = variables.get("ansible_connection") or self._play_connection
            if conn is not None and self._conn_users.get(host) != (user, kind):  # another play's user/connection
                conn.close()
                conn = None
            if conn is None:
                # a run holds each host's run lock while connected: no two runs ever overlap on a host
                if host in self.inventory.hosts:
                    opts = dataclasses.replace(self.options.connect, run_lock=self.options.run_lock)
                    if user and not variables.get("ansible_user"):
                        variables = {**variables, "ansible_user": user}
                    if kind and not variables.get("ansible_connection"):
                        variables = {**variables, "ansible_connection": kind}
                    conn = open_connection(host, variables, opts)
                elif host in ("localhost", "127.0.0.1"):
                    conn = LocalConnection(host)  # the controller itself (delegate_to): not a managed host
                else:
                    raise UnreachableError(host, "not in the inventory")
                self._conns[host] = conn
                self._conn_users[host] = (user, kind)
            return self.prefetch.watch(conn)

    def close(self) -> None:
        """Close every connection (also mid-task, on an interrupt: the hosts then kill what still runs)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._conn_lock:
            conns = list(self._conns.values())
        for conn in conns:
            conn.close()

    def commands_run(self) -> dict[str, int]:
        """Remote round trips per host (commands and calls to the persistent python helper)."""
        return {h: c.commands_run for h, c in self._conns.items()}

    def host_state(self, host: str) -> HostState:
        state = self.state.get(host)  # (read for every host on every task: no HostState made to be dropped)
        return state if state is not None else self.state.setdefault(host, HostState(host))

    # ------------------------------------------------------------------ plays
    def run(self, plays: list[Play]) -> RunSummary:
        try:
            for play in plays:
                self._play(play)
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
                self.summary.aborted = self._internal_error(exc, "in the executor").message
            for host in self._active(self._play_hosts):
                self.host_state(host).failed = True
                self.summary.stat(host).failed += 1
        return self.summary

    def _internal_error(self, exc: BaseException, context: str) -> InternalError:
        error = InternalError(f"internal error {context}: {type(exc).__name__}: {exc}", exc)
        self.internal_errors.append(error)
        return error

    def play_hosts(self, play: Play) -> list[str]:
        try:
            selected = [h.name for h in self.inventory.select(play.hosts)]
        except InventoryError:  # a group add_host/group_by did not make after all: no hosts, as in Ansible
            return []
        if self.options.limit:
            allowed = {h.name for h in self.inventory.select(self.options.limit)}
            selected = [h for h in selected if h in allowed]
        return selected

    @staticmethod
    def batches(hosts: list[str], serial: list[int | str]) -> list[list[str]]:
        if not serial:
            return [hosts] if hosts else []
        out: list[list[str]] = []
        i, step = 0, 0
        while i < len(hosts):
            spec = serial[min(step, len(serial) - 1)]
            size = max(1, int(len(hosts) * int(spec[:-1]) / 100)) if isinstance(spec, str) else spec
            out.append(hosts[i : i + size])
            i += size
            step += 1
        return out

    def _play(self, play: Play) -> None:
        self._handler_list = play.handlers
        self._remote_user = play.remote_user
        self._play_connection = play.connection
        hosts = self.play_hosts(play)
        self._play_hosts = hosts
        self.reporter.play_start(play.name, hosts)
        MASKER.add_vars(play.vars, play.no_log)  # the plain values; templates are rendered per host (taskrun)
        if not hosts:
            self.reporter.line("skipping: no hosts matched")
            return
        self._ended_play = False
        for name in hosts:
            self.host_state(name).ended = False  # meta: end_host lasts one play
        order = play.order  # a template is rendered with the play's vars and -e (the planner checked it)
        if templating.is_template(order):
            order = str(templating.render(order, templating.Vars(play.vars, self.options.extra_vars), play.where))
        for batch in self.batches(order_hosts(hosts, order), play.serial):  # the play's vars keep the order
            for name in batch:  # as Ansible's recap: the hosts a batch reached (not those an abort spared)
                self.summary.stat(name)
            if self._batch(play, batch, hosts) or self.summary.aborted or self._ended_play:
                return

    def _batch(self, play: Play, batch: list[str], play_hosts: list[str]) -> bool:
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
            self._each(batch, "Gathering Facts", runner.gather_facts)
        if play.handlers:
            self._load_pending(play, batch)
        for index, task in enumerate(play.tasks, 1):
            if self._started or task.name == self.options.start_at_task:
                self._started = True
                self._prefetch(play, index - 1, batch, runner)
                stop = self._task(play, task, batch, runner)
                if stop is not None:
                    if play.force_handlers and not self._ended_play:  # the failed hosts' handlers still run
                        self._handlers(play, batch, runner)
                    return stop
            if index in play.flush_points:  # the end of pre_tasks, tasks, post_tasks
                self._handlers(play, batch, runner)
        if not play.tasks:
            self._handlers(play, batch, runner)
        return False

    def _prefetch(self, play: Play, index: int, batch: list[str], runner: TaskRunner) -> None:
        """Before a run of tasks that read their state first: those reads in one round trip per host."""
        selected = partial(task_selected, tags=self.options.tags, skip_tags=self.options.skip_tags)
        self.prefetch.before(play, index, self._active(batch), runner, selected, self._conns.get, self._pool.map)

    def _task(
        self, play: Play, task: Task, batch: list[str], runner: TaskRunner, only: set[str] | None = None
    ) -> bool | None:
        """One task over the batch (``only``: the hosts an include gave it to); True/False when the batch must
        stop (True: the play too), None to go on."""
        hosts = self._selected(task, batch, runner)
        failed_before = {h for h in batch if self.host_state(h).failed}
        if only is not None:
            hosts = [h for h in hosts if h in only]
        if task.blocks:
            hosts = [h for h in hosts if self._in_flow(h, task)]
        if task.role_run is not None:  # meta: end_role ended this role for some hosts
            hosts = [h for h in hosts if task.role_run not in self.host_state(h).ended_roles]
        if task.module == "meta":
            stop = self._meta(play, task, self._live(hosts, task), batch, runner)
            if stop:
                return stop == "play"
        elif task.module in ("include_tasks", "include_role"):
            if self._include(play, task, self._live(hosts, task), batch, runner):
                return True
        elif hosts:
            live = self._live(hosts, task)
            run_once = runner.run_once(task, live)
            title = runner.title(task, live)
            run = partial(runner.run, task)
            self._each(live, title, run, run_once=run_once, where=task.where, task=task, live=True)
        for block in task.ends_blocks:  # a block is over: its failed hosts owe it nothing more
            for h in batch:
                self.host_state(h).always_due.discard(block)
        if task.any_errors_fatal and any(self.host_state(h).failed for h in set(batch) - failed_before):
            failed = sorted(h for h in set(batch) - failed_before if self.host_state(h).failed)
            self.summary.aborted = f"any_errors_fatal: {', '.join(failed)} failed"
            return True
        if self._check_abort(play, batch):
            return True
        return None

    def _include(self, play: Play, task: Task, hosts: list[str], batch: list[str], runner: TaskRunner) -> bool:
        """``include_tasks``/``include_role``: per host and loop item, the file (role) its ``when`` and templates
        give; the hosts that got the same one with the same item run its tasks together (each "included" counts
        ok, as in Ansible); the include's vars and item reach every included task, and its place in blocks too.
        A role's handlers join the play's."""
        if not hosts:
            return False
        groups: dict[tuple[str, str], tuple[list[str], dict[str, Any], dict[str, Any]]] = {}
        results: list[TaskResult] = []
        self.reporter.task_start(task.name)
        for host in hosts:
            try:
                found = runner.include_items(task, host)
            except ProvisionError as exc:
                results.append(TaskResult(host, task.name, Status.FAILED, f"{exc} ({task.where})"))
                continue
            if not found:
                results.append(TaskResult(host, task.name, Status.SKIPPED))
            for extra, args in found:
                target = self._include_target(task, args)
                if target is None:
                    msg = f"include_tasks: {args['file']} not found"
                    results.append(TaskResult(host, task.name, Status.FAILED, msg))
                    continue
                label = f" => (item={extra[task.loop_var]})" if extra else ""
                results.append(TaskResult(host, task.name, Status.OK, f"included: {target}{label}"))
                key = (
                    json.dumps([target, args], sort_keys=True, default=str),
                    json.dumps(extra, sort_keys=True, default=str),
                )
                groups.setdefault(key, ([], extra, args))[0].append(host)
        for result in results:
            self._record(result, rescued=self._caught(result, task))
        for members, extra, args in groups.values():
            try:
                tasks = self._included_tasks(play, task, args, extra)
            except ProvisionError as exc:
                for host in members:
                    self._record(TaskResult(host, task.name, Status.FAILED, str(exc)))
                continue
            for included in tasks:
                stop = self._task(play, included, batch, runner, only=set(members))
                if stop:
                    return True
        return False

    def _include_target(self, task: Task, args: dict[str, Any]) -> str | None:
        if task.module == "include_role":
            return f"role {args['name']}"
        target = include_path(str(args["file"]), task.file)
        return None if target is None else str(target)

    def _included_tasks(self, play: Play, task: Task, args: dict[str, Any], extra: dict[str, Any]) -> list[Task]:
        """What an include brings, read now, placed where the include is: under its vars (the role's own
        ``role_path``/``role_name`` kept), its loop item, in its blocks; an included file keeps the role of the
        include (its files, defaults)."""
        include_vars = dict(task.vars)
        if task.module == "include_role":
            playbook = str(Path(self.playbook_dir) / "playbook.yml")
            tasks, handlers, (defaults, role_vars) = load_role(
                task, args, playbook, set(play.tags), set(play.roles_run)
            )
            if args.get("public"):  # the role's defaults and vars stay for the rest of the play, as in Ansible
                play.role_defaults.update(defaults)
                play.role_vars.update(role_vars)
            for handler in handlers:
                if not any(h.file == handler.file and h.line == handler.line for h in play.handlers):
                    play.handlers.append(handler)
            include_vars.pop("role_path", None)
            include_vars.pop("role_name", None)
        else:
            target = include_path(str(args["file"]), task.file)
            assert target is not None
            tasks = load_included(task, target, set(play.tags))
        for included in tasks:
            included.vars = {**included.vars, **include_vars}  # the include's vars win, as Ansible's params
            included.inert_vars = {**task.inert_vars, **included.inert_vars, **extra}
            included.blocks = (*task.blocks, *included.blocks)
            if included.role_path is None:
                included.role_path, included.role_run = task.role_path, task.role_run
                included.role_defaults = {**task.role_defaults, **included.role_defaults}
        return tasks

    def _selected(self, task: Task, batch: list[str], runner: TaskRunner) -> list[str]:
        """The hosts of the batch that run ``task`` by the tags (templated tags are rendered per host)."""
        opts = self.options
        if not any(templating.is_template(t) for t in task.tags):
            return batch if task_selected(task, opts.tags, opts.skip_tags) else []
        return [h for h in batch if task_selected(task, opts.tags, opts.skip_tags, runner.tags(task, h))]

    def _active(self, hosts: list[str]) -> list[str]:
        return [h for h in hosts if self.host_state(h).active]

    # ------------------------------------------------------------------ meta
    def _meta(self, play: Play, task: Task, hosts: list[str], batch: list[str], runner: TaskRunner) -> str | None:
        """``meta: ACTION`` on the hosts that reach it (its ``when`` is evaluated per host, quietly: as in
        Ansible, a meta task adds nothing to the recap). Returns "play"/"batch" when the play/batch ends."""
        action = task.args["_raw_params"]
        if task.when is not None and action != "flush_handlers":
            hosts = [h for h in hosts if runner.condition(task, h)]
        if action == "flush_handlers":
            self._handlers(play, batch, runner)
        elif action == "end_play" and hosts:
            self._ended_play = True
            return "play"
        elif action == "end_batch" and hosts:
            return "batch"
        elif action == "end_host":
            for h in hosts:
                self.host_state(h).ended = True
        elif action == "end_role":
            for h in hosts:
                self.host_state(h).ended_roles.add(task.role_run or 0)
        elif action == "refresh_inventory" and hosts:  # the sources read again, the run's changes made again
            with self._inventory_lock:
                self.inventory.refresh(self.options.extra_vars)
            register_inventory_secrets(self.inventory, self.options.extra_vars)
        elif action == "reset_connection":  # the next task opens a new connection (new login, new env)
            for h in hosts:
                with self._conn_lock:
                    conn = self._conns.pop(h, None)
                if conn is not None:
                    conn.close()
        elif action == "clear_facts":
            for h in hosts:
                self.host_state(h).facts = {}
        elif action == "clear_host_errors":
            for h in batch:
                state = self.host_state(h)
                if state.failed and not state.unreachable:
                    state.failed = False
        return None

    # ------------------------------------------------------------------ blocks
    def _in_flow(self, host: str, task: Task) -> bool:
        """Whether ``host`` reaches ``task`` by the blocks it is in: a host that failed in a block skips the
        rest of the block's tasks; its ``rescue`` runs only on the hosts that failed in it (and were caught);
        ``always`` runs on every host that entered the block, a failed one too."""
        state = self.host_state(host)
        refs = task.blocks
        for i, ref in enumerate(refs):
            mark = state.blocks.get(ref.id)
            # the always of an inner block the host failed inside still runs (before this block's rescue)
            owed = any(r.section == "always" and r.id in state.blocks for r in refs[i + 1 :])
            if ref.section == "block" and mark is not None and not owed:
                return False
            if ref.section == "rescue" and mark != "rescuing" and not owed:
                return False
        if state.active:
            return True
        return not state.unreachable and any(r.section == "always" and r.id in state.always_due for r in task.blocks)

    def _live(self, hosts: list[str], task: Task | None) -> list[str]:
        """The hosts of ``hosts`` that run ``task``: the active ones, and failed ones an ``always`` still owes."""
        if task is None or not task.blocks:
            return self._active(hosts)
        return [h for h in hosts if self._in_flow(h, task)]

    def _caught(self, result: TaskResult, task: Task | None) -> bool:
        """A failure in a block: mark the host's blocks and say whether a ``rescue`` catches it. Caught: the host
        stays active, its rescue runs with ``ansible_failed_task``/``ansible_failed_result``; not caught: the
        host fails, and still runs the ``always`` of every block it is in."""
        if task is None or not task.blocks or result.status is not Status.FAILED or result.ignored:
            return False
        state = self.host_state(result.host)
        catch = next(
            (r for r in reversed(task.blocks) if r.section == "block" and r.has_rescue and r.id not in state.blocks),
            None,
        )
        for ref in reversed(task.blocks):
            if ref is catch:
                state.blocks[ref.id] = "rescuing"
                break
            if ref.section in ("block", "rescue"):
                state.blocks[ref.id] = "failed"
        if catch is None:
            state.always_due |= {r.id for r in task.blocks if r.has_always and r.section != "always"}
            return False
        failed_task = {"name": task.given_name, "action": task.module, "args": task.args, "path": task.where}
        state.set_vars.update(ansible_failed_task=failed_task, ansible_failed_result=result.registered())
        return True

    def _each(
        self,
        hosts: list[str],
        title: str,
        fn: Callable[[str], TaskOutcome | None],
        *,
        run_once: bool = False,
        handler: bool = False,
        where: str = "",
        task: Task | None = None,
        live: bool = False,
        forced: bool = False,
    ) -> list[TaskResult]:
        # live: the caller has just chosen them; forced: handlers of force_handlers run on failed hosts too
        active = hosts if live or forced else self._live(hosts, task)
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
                    msg = self._internal_error(exc, f"in task {title!r} on {host}{place}").message
                result = TaskResult(host, title, Status.FAILED, msg)
            if result is None:
                continue
            results.append(result)
            self._record(result, rescued=self._caught(result, task))
        return results

    def _run_and_apply(self, fn: Callable[[str], TaskOutcome | None], host: str) -> TaskResult | None:
        """One host's work (in a worker thread); what it returns is applied to the hosts' state at once, in that
        thread, before the next task (a notification is persisted on the host there too)."""
        outcome = fn(host)
        if outcome is None:
            return None
        self._apply(outcome)
        return outcome.result

    def _apply(self, outcome: TaskOutcome) -> None:
        """What a task returned, into the hosts' state: facts first, then the registered value (it wins over a
        fact of the same name), then the notified handlers."""
        host = outcome.result.host
        state = self.host_state(host)
        if outcome.gathered is not None:
            state.facts = outcome.gathered
        if outcome.included_vars:
            state.included_vars.update(outcome.included_vars)
        if outcome.inventory_changes:
            self._change_inventory(outcome)
        if outcome.facts:
            target = self.host_state(outcome.facts_to) if outcome.facts_to else state
            target.set_vars.update(outcome.facts)
        if outcome.register is not None:
            # run_once: the one result is registered on every host of the batch, as Ansible does
            for name in outcome.register_on:
                self.host_state(name).set_vars[outcome.register] = outcome.registered
        if outcome.notify:
            self._notify(host, outcome.notify)

    def _change_inventory(self, outcome: TaskOutcome) -> None:
        """add_host/group_by: their results applied to the inventory (later tasks and plays see it); a result
        is changed when the inventory changed, as in Ansible."""
        changed = False
        with self._inventory_lock:
            for res in outcome.inventory_changes:
                if "add_host" in res.data:
                    new = res.data["add_host"]
                    MASKER.add_vars(new["host_vars"])
                    done = self.inventory.add_dynamic_host(new["host_name"], new["groups"], new["host_vars"])
                else:
                    done = self.inventory.add_dynamic_group(
                        outcome.result.host, res.data["add_group"], res.data["parent_groups"]
                    )
                if done and res.status is Status.OK:
                    res.status = Status.CHANGED
                changed = changed or done
        result = outcome.result
        if changed and result.status is Status.OK:
            result.status = Status.CHANGED

    def _record(self, result: TaskResult, *, rescued: bool = False) -> None:
        state = self.host_state(result.host)
        if rescued:  # a block's rescue caught it: counted as rescued, the host goes on
            self.summary.stat(result.host).rescued += 1
            self.reporter.task_result(result)
            return
        self.summary.stat(result.host).count(result)
        if result.status is Status.UNREACHABLE and not result.ignored:  # ignore_unreachable: stays in the play
            state.unreachable = True
        elif result.status is Status.FAILED and not result.ignored:
            state.failed = True
        self.reporter.task_result(result)

    def _check_abort(self, play: Play, batch: list[str]) -> bool:
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

    # ------------------------------------------------------------------ handlers
    def _notify(self, host: str, names: list[str]) -> None:
        """Notifications name a handler or a ``listen`` topic: each handler they reach is pending on the host."""
        state = self.host_state(host)
        targets = [h.name for h in self._handler_list for n in names if n == h.name or n in h.listen]
        new = [n for n in dict.fromkeys(targets) if n not in state.notified]
        if not new:
            return
        state.notified.extend(new)
        if not self.options.check:
            self._save_pending(host)

    def _save_pending(self, host: str) -> None:
        state = self.host_state(host)
        conn = self.connection(host)
        with contextlib.suppress(HostError):
            if not state.provision_dir_ready:
                conn.run(Command.of("mkdir", "-p", "-m", "700", conn.expand_path("~/.provision")), timeout=30)
                state.provision_dir_ready = True
            conn.put(json.dumps(state.notified).encode(), PENDING_HANDLERS, 0o600)

    def _load_pending(self, play: Play, batch: list[str]) -> None:
        def load(host: str) -> None:
            state = self.host_state(host)
            if state.pending_loaded or not state.active:
                return
            state.pending_loaded = True
            with contextlib.suppress(HostError, ValueError):
                raw = self.connection(host).get(PENDING_HANDLERS)
                if raw:
                    names = [n for n in json.loads(raw) if isinstance(n, str)]
                    for handler in play.handlers:
                        if (handler.name in names or set(handler.listen) & set(names)) and (
                            handler.name not in state.notified
                        ):
                            state.notified.append(handler.name)

        self._handler_list = play.handlers
        list(self._pool.map(load, self._active(batch)))

    def _handlers(self, play: Play, batch: list[str], runner: TaskRunner) -> None:
        """Run the pending handlers, in the order they are defined; a handler notified by a handler runs in the
        same flush (the list is walked again while any is pending, as Ansible does)."""
        for _ in range(len(play.handlers) + 1):
            ran = False
            for handler in play.handlers:
                hosts = [h for h in self._handler_hosts(play, batch) if handler.name in self.host_state(h).notified]
                if not hosts:
                    continue
                ran = True
                for host in hosts:  # consumed before it runs: a handler may notify itself again
                    state = self.host_state(host)
                    state.notified = [n for n in state.notified if n != handler.name]
                if handler.module in ("include_tasks", "include_role"):  # a handler that includes tasks
                    self._include(play, handler, hosts, batch, runner)
                    for host in hosts:
                        if not self.options.check:
                            self._clear_pending(host)
                    continue
                run = partial(runner.run, handler)
                results = self._each(hosts, handler.name, run, handler=True, where=handler.where,
                                     forced=play.force_handlers)  # fmt: skip
                for result in results:
                    if result.status in (Status.OK, Status.CHANGED, Status.SKIPPED) and not self.options.check:
                        self._clear_pending(result.host)
                    elif result.status is Status.FAILED:
                        self.host_state(result.host).notified.append(handler.name)  # still pending on the host
            if not ran:
                return

    def _handler_hosts(self, play: Play, batch: list[str]) -> list[str]:
        """The hosts whose handlers run: the active ones; with ``force_handlers`` the failed ones too (not the
        unreachable), as in Ansible."""
        if not play.force_handlers:
            return self._active(batch)
        return [h for h in batch if not self.host_state(h).unreachable and not self.host_state(h).ended]

    def _clear_pending(self, host: str) -> None:
        state = self.host_state(host)
        with contextlib.suppress(HostError):
            if state.notified:
                self._save_pending(host)
            else:
                conn = self.connection(host)
                conn.run(Command.of("rm", "-f", conn.expand_path(PENDING_HANDLERS)), timeout=30)


def order_hosts(hosts: list[str], order: str) -> list[str]:
    """A play's ``order``: inventory (as given), reverse_inventory, sorted, reverse_sorted, shuffle."""
    if order == "reverse_inventory":
        return hosts[::-1]
    if order in ("sorted", "reverse_sorted"):
        return sorted(hosts, reverse=order == "reverse_sorted")
    if order == "shuffle":
        return random.sample(hosts, len(hosts))
    return hosts


def playbook_dir_of(path: str) -> str:
    return str(Path(path).resolve().parent)
