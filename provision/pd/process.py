"""``process``: a supervised long-running process on a host without systemd.

The launch ``script`` (an executable file, usually rendered by ``template``) is started detached in its own
session (``setsid``), stdin from /dev/null, stdout and stderr appended to ``log``; it outlives the SSH session.
Its record (pid, the pid's kernel start time, session, the script's sha256 at start, log, run id) lives in
``pidfile_dir/NAME.json`` with the bare pid in ``NAME.pid``. All the work happens on the host in the stdlib
helper ``provision/remote/process_ctl.py``, ONE round trip per task.

* ``state: started`` — ``ok`` when the same script is already running (pid alive with the recorded start
  time, and the script's sha256 unchanged since it started); a changed script restarts it (``changed``),
  unless ``restart_on_change: false``; a dead one is started again, after ending any of its children that
  outlived it (they hold ports and memory).
* ``state: restarted`` — always stop (if running) and start.
* ``state: stopped`` — TERM to the whole session, wait ``stop_timeout`` seconds, KILL what is left, wait;
  ``ok`` when nothing was running. With ``run_id`` only a process started by that run is stopped (how
  ``provision pd up`` cleans up after a failed run without touching what earlier runs started).

With ``supervisor: provision`` the host's supervisor (``process_ctl.py`` copied to ``pidfile_dir/supervisor.py``,
detached, one per ``pidfile_dir``) starts the script and keeps it running: a process that dies is started again
after a growing delay (``restart``: ``delay`` doubled per crash, at most ``max_delay``), and past ``burst``
restarts within ``interval`` seconds it stays down (a crash loop) until the next start. ``venv``: the venv link
the default launch command runs; resolved at each start and handed to the script (``PROVISION_PD_VENV``), so a
supervised restart stays on the env the process was started with. ``group`` (a member of a multi-host server:
``{instance, health, grace, interval}``): when the server's health URL (its leader's ``/health``) fails for
``grace`` seconds after it had answered, this member restarts too, so a dead or hung rank takes every rank
down and up again (provision's supervisor, or under systemd a watch unit beside the process's).

With ``supervisor: systemd`` the process is the unit ``provision-pd-NAME.service`` (in /etc/systemd/system;
the task needs root or ``become``): the helper writes the unit and its drop-ins (the restart policy; at each
start the env resolved then), then systemd is asked through ``systemd_service``'s host code (service.py):
``daemon-reload`` when a file changed, enabled, started (restarted when the script changed). systemd restarts it
on a crash (``Restart=on-failure`` after ``RestartSec``, growing where systemd has ``RestartSteps``) up to the
start limit, and starts it at boot. ``state: stopped`` stops it, disables it and removes its files.

Check mode asks the helper what it would do and changes nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .. import remote
from ..modules.base import Arg, ArgError, HelperError, Module, ModuleContext, ModuleResult, register
from ..modules.system import systemd_unit

HELPER = "process_ctl.py"
DEFAULT_PIDFILE_DIR = "~/.provision/run"
NAME_RE = re.compile(r"^[A-Za-z0-9_.@-]+$")
SUPERVISORS = ("none", "provision", "systemd")


def supervisor_request(supervisor: str) -> dict[str, Any]:
    """What a start or status request carries for the supervisor: its name and, for provision's, its source."""
    if supervisor not in ("provision", "auto"):
        return {}
    return {"supervisor": "provision", "supervisor_source": remote.source(HELPER).decode("utf-8")}


def helper(ctx: ModuleContext, action: str, request: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    """Run one action of process_ctl.py on the host; its JSON answer (``ok: false`` + ``msg`` on trouble, also
    when it could not run or printed no answer)."""
    stdin = json.dumps(request).encode()
    try:
        return ctx.call_helper(HELPER, action, stdin=stdin, timeout=timeout, what="process_ctl", check_rc=False)
    except HelperError as exc:
        return {"ok": False, "msg": exc.msg}


def format_tail(lines: list[str], limit: int = 30) -> str:
    shown = [line.rstrip() for line in lines if line.strip()][-limit:]
    return "\n".join(f"    {line}" for line in shown)


@register
class Process(Module):
    name = "process"
    args = {
        "name": Arg(required=True),
        "script": Arg("path"),
        "state": Arg(default="started", choices=("started", "stopped", "restarted")),
        "log": Arg("path"),
        "pidfile_dir": Arg("path", default=DEFAULT_PIDFILE_DIR, aliases=("piddir",)),
        "env": Arg("dict", default=None),
        "run_id": Arg(default=None),
        "restart_on_change": Arg("bool", default=True),
        "stop_timeout": Arg("float", default=20.0),
        "supervisor": Arg(default="none", choices=SUPERVISORS),
        "restart": Arg("dict", default=None),
        "venv": Arg("path", default=None),
        "group": Arg("dict", default=None),  # a member of a multi-host server: {instance, health, grace, interval}
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        state = args.get("state", "started")
        if state in ("started", "restarted") and "script" not in args and not is_template(state):
            raise ArgError(f"process: state={state} needs script")
        name = args.get("name")
        if isinstance(name, str) and not is_template(name) and not NAME_RE.match(name):
            raise ArgError(f"process: name {name!r} may hold only letters, digits and . _ - @")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        name = args["name"]
        if not NAME_RE.match(name):
            return ModuleResult(failed=True, msg=f"process: name {name!r} may hold only letters, digits and . _ - @")
        piddir = ctx.expand(args["pidfile_dir"])
        if args["state"] == "stopped":
            return self.stop(ctx, args, name, piddir)
        if not args["script"]:
            return ModuleResult(failed=True, msg=f"process: state={args['state']} needs script")
        log = ctx.expand(args["log"] or f"{args['pidfile_dir'].rstrip('/')}/{name}.log")
        request = {
            "name": name,
            "piddir": piddir,
            "script": ctx.expand(args["script"]),
            "log": log,
            "env": {str(k): str(v) for k, v in (args["env"] or {}).items()},
            "run_id": args["run_id"] or None,
            "restart_changed": args["restart_on_change"],
            "force_restart": args["state"] == "restarted",
            "stop_timeout": args["stop_timeout"],
            "check": ctx.check,
            "policy": dict(args["restart"] or {}),
            "venv": ctx.expand(args["venv"]) if args["venv"] else None,
            "group": dict(args["group"]) if args["group"] else None,
            **supervisor_request(args["supervisor"]),
        }
        if args["supervisor"] == "systemd":
            if request["group"]:  # the watch unit runs this helper's ``watch``: its source goes with the request
                request["group_source"] = remote.source(HELPER).decode("utf-8")
            return self.unit_start(ctx, request, args["stop_timeout"])
        answer = helper(ctx, "start", request, timeout=args["stop_timeout"] + 60)
        data = {"name": name, "pid": answer.get("pid"), "log": log, "action": answer.get("action")}
        if not answer.get("ok"):
            msg = f"process {name}: {answer.get('msg', 'failed')}"
            if answer.get("log_tail"):
                msg += f"\n  last lines of {log}:\n{format_tail(answer['log_tail'])}"
            return ModuleResult(failed=True, msg=msg, data={**data, "rc": answer.get("rc")})
        action = answer.get("action", "none")
        if action == "none":
            note = " (its script changed; restart_on_change is off)" if answer.get("stale") else ""
            return ModuleResult(msg=f"{name} is running (pid {answer.get('pid')}){note}", data=data)
        verb = {"started": "started", "restarted": "restarted"}.get(action, action)
        prefix = "would be " if ctx.check else ""
        return ModuleResult(changed=True, msg=f"{name} {prefix}{verb} (pid {answer.get('pid')})", data=data)

    def unit_start(self, ctx: ModuleContext, request: dict[str, Any], stop_timeout: float) -> ModuleResult:
        """The unit's files (the helper), then systemd: reload when they changed, enabled, started or restarted;
        then, after a moment, the process must still run (else: the log tail)."""
        name, log = request["name"], request["log"]
        answer = helper(ctx, "unit", request)
        data = {"name": name, "pid": answer.get("pid"), "log": log, "action": answer.get("action"),
                "unit": answer.get("unit"), "supervisor": "systemd", "written": answer.get("written")}  # fmt: skip
        if not answer.get("ok"):
            return ModuleResult(failed=True, msg=f"process {name}: {answer.get('msg', 'failed')}", data=data)
        unit = answer["unit"]
        files = bool(answer.get("written"))
        if ctx.check:
            changed = files or answer["action"] != "none"
            what = f"would be {answer['action']}" if answer["action"] != "none" else "is running"
            return ModuleResult(changed=changed, msg=f"{name} ({unit}) {what}", data=data)
        state = answer["state"] if answer["action"] != "none" else "started"
        systemd = systemd_unit(ctx, name=unit, daemon_reload=files, enabled=True, state=state)
        if systemd.failed:
            return ModuleResult(failed=True, msg=f"process {name}: {unit}: {systemd.msg}", data=data)
        changed = files or systemd.changed
        if answer.get("watch"):  # started with the unit (Wants=); started here when it was not running
            watch = systemd_unit(ctx, name=answer["watch"], state="started")
            if watch.failed:
                return ModuleResult(failed=True, msg=f"process {name}: {answer['watch']}: {watch.msg}", data=data)
            changed = changed or watch.changed
        settle = 1.0 if answer["action"] != "none" else 0.0
        item = {"name": name, "piddir": request["piddir"], "script": request["script"], "log": log}
        status = helper(ctx, "status", {"procs": [item], "settle": settle})
        row = (status.get("procs") or [{}])[0]
        data.update(pid=row.get("pid"), restarts=row.get("restarts"))
        if not row.get("running"):
            tail = helper(ctx, "tail", {"procs": [item], "lines": 20}).get("procs") or [{}]
            msg = f"process {name}: {unit} is not running ({row.get('unit_state') or row.get('error')})"
            if tail[0].get("lines"):
                msg += f"\n  last lines of {log}:\n{format_tail(tail[0]['lines'])}"
            return ModuleResult(failed=True, msg=msg, data=data)
        if not changed:
            note = " (its script changed; restart_on_change is off)" if answer.get("stale") else ""
            return ModuleResult(msg=f"{name} is running as {unit} (pid {row.get('pid')}){note}", data=data)
        verb = answer["action"] if answer["action"] != "none" else "reconfigured"
        return ModuleResult(changed=True, msg=f"{name} {verb} as {unit} (pid {row.get('pid')})", data=data)

    def unit_stop(self, ctx: ModuleContext, name: str, piddir: str, unit: str) -> ModuleResult:
        """Stopped, disabled (nothing at boot), its files removed, systemd reloaded."""
        systemd = systemd_unit(ctx, name=unit, state="stopped", enabled=False)
        if systemd.failed:
            return ModuleResult(failed=True, msg=f"process {name}: {unit}: {systemd.msg}", data={"unit": unit})
        removed = helper(ctx, "unit_remove", {"name": name, "piddir": piddir, "check": ctx.check})
        if not removed.get("ok"):
            return ModuleResult(failed=True, msg=f"process {name}: {unit}: {removed.get('msg')}", data={"unit": unit})
        if not ctx.check:
            reload = systemd_unit(ctx, daemon_reload=True)
            if reload.failed:
                return ModuleResult(failed=True, msg=f"process {name}: daemon-reload: {reload.msg}")
        prefix = "would be " if ctx.check else ""
        return ModuleResult(changed=True, msg=f"{name} ({unit}) {prefix}stopped, disabled and removed",
                            data={"name": name, "unit": unit, "action": "stopped"})  # fmt: skip

    def stop(self, ctx: ModuleContext, args: dict[str, Any], name: str, piddir: str) -> ModuleResult:
        request = {
            "name": name,
            "piddir": piddir,
            "timeout": args["stop_timeout"],
            "run_id": args["run_id"] or None,
            "check": ctx.check,
        }
        answer = helper(ctx, "stop", request, timeout=args["stop_timeout"] + 60)
        data = {"name": name, "pid": answer.get("pid"), "action": answer.get("action"), "killed": answer.get("killed"),
                "seconds": answer.get("seconds")}  # fmt: skip
        if not answer.get("ok"):
            return ModuleResult(failed=True, msg=f"process {name}: {answer.get('msg', 'stop failed')}", data=data)
        if answer.get("unit"):
            return self.unit_stop(ctx, name, piddir, answer["unit"])
        if answer.get("action") == "stopped":
            prefix = "would be " if ctx.check else ""
            took = f" in {answer['seconds']}s" if answer.get("seconds") is not None else ""
            return ModuleResult(changed=True, msg=f"{name} {prefix}stopped (pid {answer.get('pid')}){took}", data=data)
        why = f" ({answer['skipped']})" if answer.get("skipped") else ""
        return ModuleResult(msg=f"{name} is not running{why}", data=data)
