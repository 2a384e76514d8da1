"""``async``/``poll`` on a task and the ``async_status`` module, as Ansible has them.

A task with ``async: N`` whose module supports it (``command``, ``shell``: their work is one remote command)
runs as a job detached from the SSH channel (:data:`provision.commands.ASYNC_JOB`): the job survives the
channel, kills itself after N seconds, and writes its record (JSON, 0600, atomically) to
``~/.provision/async/JID`` on the host. ``poll: M > 0`` (15 by default): the controller reads the record every
M seconds until it is finished or N seconds are used up ("async task did not complete within the requested
time - Ns"); the result is the module's, with ``ansible_job_id``, ``started``, ``finished`` and
``results_file``, and the record is removed. ``poll: 0``: the task returns at once (changed, ``finished``
false); ``async_status: jid=...`` reads the record later, ``mode: cleanup`` removes it.

What a guard or check mode decides (nothing to run) is recorded as a finished job, as Ansible's check-mode
job reports its module's check result. The record comes from an untrusted host: it is parsed as JSON and only
known keys of the right types are used; nothing in it is ever rendered.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from typing import Any

from ..commands import async_job
from ..transport import CommandResult
from ..transport.base import host_json
from .base import Arg, Module, ModuleContext, ModuleResult, register

ASYNC_DIR = "~/.provision/async"
DEFAULT_POLL = 15  # Ansible's DEFAULT_POLL_INTERVAL
_JOB_KEYS = ("ansible_job_id", "started", "finished", "results_file")


def new_jid() -> str:
    return f"j{secrets.randbelow(999999999999)}.{os.getpid()}"


def _call(ctx: ModuleContext, mode: str, jid: str, *rest: object, stdin: bytes | None = None) -> dict[str, Any]:
    res = ctx.run(async_job(ctx.python(), mode, jid, *rest), stdin=stdin)
    answer = res.last_json() if res.rc == 0 else None
    if answer is None or not isinstance(answer.get("file"), str):
        raise _JobError(f"async job {jid}: the host's job helper failed (rc={res.rc}): {res.tail(5)}")
    return answer


class _JobError(Exception):
    pass


def _text(record: dict[str, Any], key: str) -> str:
    value = record.get(key, "")
    return value if isinstance(value, str) else ""


def _number(record: dict[str, Any], key: str) -> float:
    value = record.get(key, 0)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _finished(record: dict[str, Any], jid: str, path: str) -> ModuleResult:
    """The module result a finished job record stands for."""
    meta: dict[str, Any] = record["meta"] if isinstance(record.get("meta"), dict) else {}
    keys = {"ansible_job_id": jid, "started": True, "finished": True, "results_file": path}
    given = record.get("result")
    if isinstance(given, dict):  # written by the controller (check mode, a guard): the module's own result
        data: dict[str, Any] = given["data"] if isinstance(given.get("data"), dict) else {}
        return ModuleResult(
            changed=given.get("changed") is True, failed=given.get("failed") is True,
            skipped=given.get("skipped") is True, msg=_text(given, "msg"), data={**data, **keys},
        )  # fmt: skip
    if record.get("failed"):  # the time limit: the job was killed
        data = {"child_pid": record.get("child_pid"), "stdout": "", "stderr": "", "stdout_lines": [],
                "stderr_lines": []}  # fmt: skip
        return ModuleResult(failed=True, msg=_text(record, "msg") or "Timeout exceeded", data={**data, **keys})
    from .commands_mod import _Runner  # the record of a command job: reported as the command module does

    rc = record.get("rc")
    res = CommandResult(
        rc=rc if isinstance(rc, int) and not isinstance(rc, bool) else 1,
        stdout=_text(record, "stdout"), stderr=_text(record, "stderr"), command=_text(meta, "cmd"),
        duration=max(0.0, _number(record, "end") - _number(record, "start")),
    )  # fmt: skip
    out = _Runner.report(res, meta.get("strip", True) is not False)
    out.data.update(keys)
    return out


def status(ctx: ModuleContext, jid: str) -> ModuleResult:
    """What ``async_status`` reports for ``jid``."""
    answer = _call(ctx, "status", jid)
    path = answer["file"]
    text = answer.get("job")
    if not isinstance(text, str):
        return ModuleResult(failed=True, msg="could not find job",
                            data={"ansible_job_id": jid, "started": True, "finished": True})  # fmt: skip
    try:
        record = host_json(text)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        return ModuleResult(
            failed=True,
            msg="Could not parse job output",
            data={"ansible_job_id": jid, "started": True, "finished": True, "results_file": path},
        )
    if not record.get("finished"):
        return ModuleResult(data={"ansible_job_id": jid, "started": True, "finished": False, "results_file": path})
    return _finished(record, jid, path)


def cleanup(ctx: ModuleContext, jid: str) -> ModuleResult:
    answer = _call(ctx, "status", jid)
    if not isinstance(answer.get("job"), str):
        return ModuleResult(failed=True, msg="could not find job",
                            data={"ansible_job_id": jid, "started": True, "finished": True})  # fmt: skip
    answer = _call(ctx, "cleanup", jid)
    return ModuleResult(data={"ansible_job_id": jid, "erased": answer["file"], "started": False, "finished": False,
                              "stdout": "", "stderr": "", "stdout_lines": [], "stderr_lines": []})  # fmt: skip


def run_async(cls: type[Module], ctx: ModuleContext, args: dict[str, Any], limit: int, poll: int) -> ModuleResult:
    """Run ``cls`` (a module with ``supports_async``) as an ``async: limit`` job, polled every ``poll`` s."""
    module = cls()
    jid = new_jid()
    try:
        planned = module.plan_command(ctx, args)  # type: ignore[attr-defined]
        if isinstance(planned, ModuleResult):  # nothing to run: recorded as a finished job
            if planned.failed and not planned.data:
                return planned  # bad arguments: no job at all
            given = {"changed": planned.changed, "failed": planned.failed, "skipped": planned.skipped,
                     "msg": planned.msg, "data": planned.data}  # fmt: skip
            path = _call(ctx, "write", jid, stdin=json.dumps({"result": given}).encode())["file"]
        else:
            cmd, data = planned
            meta = json.dumps({"cmd": cmd.display(), "strip": args.get("strip_empty_ends", True)}).encode()
            script = cmd.script_text().encode()
            path = _call(ctx, "start", jid, limit, len(meta), len(script), stdin=meta + script + (data or b""))["file"]
        started = {"ansible_job_id": jid, "started": True, "finished": False, "results_file": path}
        if poll <= 0:
            return ModuleResult(changed=True, data=started)
        result: ModuleResult | None = None
        left = limit
        while left > 0:
            time.sleep(poll)
            result = status(ctx, jid)
            if result.data.get("finished") or result.failed:
                break
            left -= poll
        if result is None or not result.data.get("finished"):
            shown = result.data if result is not None else started
            return ModuleResult(failed=True, msg=f"async task did not complete within the requested time - {limit}s",
                                data={"async_result": dict(shown)})  # fmt: skip
        _call(ctx, "cleanup", jid)
        return result
    except _JobError as exc:
        return ModuleResult(failed=True, msg=str(exc), data={"ansible_job_id": jid})


@register
class AsyncStatus(Module):
    name = "async_status"
    args = {"jid": Arg(required=True), "mode": Arg(choices=("status", "cleanup"), default="status")}

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        jid = str(args["jid"])
        try:
            return cleanup(ctx, jid) if args["mode"] == "cleanup" else status(ctx, jid)
        except ValueError as exc:  # an invalid job id (CommandError): nothing was run
            return ModuleResult(failed=True, msg=f"async_status: {exc}")
        except _JobError as exc:
            return ModuleResult(failed=True, msg=str(exc))


__all__ = ["ASYNC_DIR", "DEFAULT_POLL", "AsyncStatus", "cleanup", "run_async", "status"]
