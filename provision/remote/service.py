"""The host side of ``service`` and ``systemd_service``, in one round trip (stdlib only; the request as JSON on
stdin, ``python3 - apply``: the host library's envelope, ``hostlib.serve``; one JSON answer with Ansible's keys,
``failed``/``msg`` with Ansible's messages when it could not).

``systemd_service`` (request ``module: systemd``) is ansible-core's ``systemd_service`` module: ``systemctl show``
read into ``status`` (its parser: multi-line values only for ``Exec*`` keys), then ``masked`` (``is-enabled`` says
``masked``), ``enabled`` (``is-enabled -l``: rc 0 is enabled unless it says enabled-runtime, indirect or alias),
``state`` (``ActiveState`` active/activating is running; ``restarted``/``reloaded`` start a stopped unit),
``daemon_reload``/``daemon_reexec`` first; ``no_block`` and ``force`` go on every ``systemctl``.

``service`` (request ``module: service``) first reads the host's service manager as Ansible's ``service_mgr``
fact does (``/proc/1/comm``, then systemd's canaries, upstart, OpenRC, ``/sbin/init``, ``/etc/init.d``) and
does what Ansible's ``service`` action then runs: on systemd the ``systemd_service`` logic above (``pattern``,
``sleep``, ``arguments`` and ``runlevel`` are ignored, as there); otherwise a SysV init script
(``/etc/init.d/NAME``) brought to a running state and a boot state as ansible-core's ``service`` module does on a
Linux host without systemd (its ``LinuxService``). Request keys: ``name``, ``state`` (started, stopped,
restarted, reloaded or null), ``enabled`` (bool or null), ``sleep``, ``pattern``, ``arguments``, ``check``;
answer keys ``name``, ``changed``, ``state``, ``enabled``. As Ansible:

- the running state is the init script's ``status`` (``service NAME status`` where ``service`` exists): rc 1-4
  or 69 is stopped, else a one-line answer's words (stop, run, not ...), else rc 0 is running; ``pattern``
  instead looks for the text in ``ps auxww``;
- ``restarted`` is stop, ``sleep`` seconds, start; ``reloaded`` starts a stopped service;
- the boot state is ``update-rc.d``: enabled when ``/etc/rc?.d/S??NAME`` exists; enabling a service without
  links runs ``update-rc.d NAME defaults`` first;
- the service's commands run in a session of their own, so a daemon they leave behind outlives this script (the
  command runner ends its own process group when the task is done), with only a C locale in the environment.

For ``service``, a host managed by upstart or OpenRC fails in one line: provision drives systemd and SysV init
scripts only.
"""

import glob
import os
import shlex
import shutil
import subprocess
import sys
import time

import hostlib
from hostlib import Failed
from pump import pump

TIMEOUT = 600  # one service command; the task's own timeout bounds the whole script too
OUTPUT_LIMIT = 64 << 20  # bytes kept of each output stream of a service command (the rest is read and dropped)
PATHS = ("/sbin", "/usr/sbin", "/bin", "/usr/bin", "/usr/local/sbin")
SYSTEMD_ONLY = ("masked", "daemon_reload", "daemon_reexec", "force", "no_block")  # modules/system.py's
SYSTEMD_CANARIES = ("/run/systemd/system/", "/dev/.run/systemd/", "/dev/.systemd/")
STOPPED_RCS = (1, 2, 3, 4, 69)  # LSB status codes for "not running", and EX_UNAVAILABLE
C_LOCALE = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}
PROC_1_NAMES = {"procd": "openwrt_init", "runit-init": "runit", "svscan": "svc", "openrc-init": "openrc"}
# `systemctl is-enabled` answers that mean "a unit systemd knows" (man systemctl, systemd 244)
ENABLED_STATES = ("enabled", "enabled-runtime", "linked", "linked-runtime", "masked", "masked-runtime", "static",
                  "indirect", "disabled", "generated", "transient")  # fmt: skip


class Done(Exception):
    """An early answer (check mode), as Ansible's ``exit_json`` in the middle of the module."""

    def __init__(self, **answer):
        super().__init__("done")
        self.answer = answer


def which(name):
    dirs = os.environ.get("PATH", "").split(os.pathsep) + list(PATHS)
    return shutil.which(name, path=os.pathsep.join(d for d in dirs if d))


def run(argv):
    """A quick query (``update-rc.d``, ``ps``): rc, stdout, stderr, with the C locale added."""
    try:
        proc = subprocess.run(  # noqa: UP022 (capture_output is 3.7+; hosts may have 3.6)
            argv,
            env=dict(os.environ, **C_LOCALE),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise Failed("'%s' did not finish within %d s" % (" ".join(argv), TIMEOUT)) from None
    except OSError as exc:
        raise Failed("cannot run '%s': %s" % (argv[0], exc.strerror)) from None
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")


def run_detached(argv):
    """A service command, in a new session (a daemon it starts is not in this script's process group) with
    only the C locale in its environment (as Ansible's daemonized commands). Its output is read until it exits,
    not until every descendant closes the pipes: a daemon that keeps them open does not hold the task."""
    try:
        proc = subprocess.Popen(
            argv, env=dict(C_LOCALE), cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        raise Failed("cannot run '%s': %s" % (argv[0], exc.strerror)) from None
    out_pipe, err_pipe = proc.stdout, proc.stderr
    assert out_pipe is not None and err_pipe is not None
    deadline = time.monotonic() + TIMEOUT

    def wake(quiet):  # a second without output once the command exited: a daemon it left holds the pipes
        if time.monotonic() > deadline:
            proc.kill()
            raise Failed("'%s' did not finish within %d s" % (" ".join(argv), TIMEOUT))
        return False if quiet and proc.poll() is not None else 1.0

    out, err = pump([out_pipe.fileno(), err_pipe.fileno()], wake, OUTPUT_LIMIT)
    rc = proc.wait()
    out_pipe.close()
    err_pipe.close()
    return rc, out.decode(errors="replace"), err.decode(errors="replace")


def systemd_managed():
    return bool(which("systemctl")) and any(os.path.exists(c) for c in SYSTEMD_CANARIES)


def service_manager():
    """Ansible's ``service_mgr`` fact on Linux: PID 1's name when it names an init system, else the probes."""
    try:
        with open("/proc/1/comm") as fh:
            proc_1 = fh.read()
    except OSError:
        proc_1 = os.readlink("/sbin/init") if os.path.islink("/sbin/init") else ""
    proc_1 = os.path.basename(proc_1).strip()
    if proc_1 and proc_1 != "init" and not proc_1.endswith("sh"):  # many say init; a shell: a container
        return PROC_1_NAMES.get(proc_1, proc_1)
    if systemd_managed():
        return "systemd"
    if which("initctl") and os.path.exists("/etc/init/"):
        return "upstart"
    if os.path.exists("/sbin/openrc"):
        return "openrc"
    if which("systemctl") and os.path.islink("/sbin/init") and os.path.basename(os.readlink("/sbin/init")) == "systemd":
        return "systemd"
    if os.path.exists("/etc/init.d/"):
        return "sysvinit"
    return "service"


def parse_systemctl_show(lines):
    """``systemctl show`` as a dict; a value spans lines only for ``Exec*`` keys that open with ``{`` (Ansible's
    parser: a one-line Description starting with ``{`` must not swallow the rest)."""
    parsed, multival, key = {}, [], None
    for line in lines:
        if key is None:
            if "=" in line:
                key, value = line.split("=", 1)
                if key.startswith("Exec") and value.lstrip().startswith("{") and not value.rstrip().endswith("}"):
                    multival.append(value)
                    continue
                parsed[key] = value.strip()
                key = None
        else:
            multival.append(line)
            if line.rstrip().endswith("}"):
                parsed[key] = "\n".join(multival).strip()
                multival, key = [], None
    return parsed


def _ignored(text):
    return "=" not in text and ("ignoring request" in text or "ignoring command" in text)


def _sysv_is_enabled(name):
    if not os.path.isdir("/etc/rc0.d/"):
        return bool(glob.glob("/etc/init.d/rc?.d/S??" + name))
    return bool(glob.glob("/etc/rc?.d/S??" + name))


class Systemd:
    """ansible-core's ``systemd_service`` module, step for step (systemctl argv, no shell)."""

    def __init__(self, req):
        self.unit = req.get("name")
        self.req = req
        self.check = bool(req.get("check"))
        systemctl = which("systemctl")
        if not systemctl:
            raise Failed('Failed to find required executable "systemctl"')
        self.systemctl = [systemctl] + [flag for flag, on in (("--no-block", req.get("no_block")),
                                                              ("--force", req.get("force"))) if on]  # fmt: skip
        os.environ.setdefault("XDG_RUNTIME_DIR", "/run/user/%s" % os.geteuid())
        self.result = {"name": self.unit, "changed": False, "status": {}}

    def ctl(self, *args):
        return run(self.systemctl + list(args))

    def apply(self):
        for verb in ("daemon_reload", "daemon_reexec"):
            if self.req.get(verb) and not self.check:
                rc, _, err = self.ctl(verb.replace("_", "-"))
                if rc != 0:
                    raise Failed("failure %d during %s: %s" % (rc, verb.replace("_", "-"), err))
        if self.unit:
            found = self.read_unit()
            if self.req.get("masked") is not None:
                self.set_masked(found)
            if self.req.get("enabled") is not None:
                self.set_enabled(found)
            if self.req.get("state") is not None:
                self.set_state(found)
        return self.result

    def read_unit(self):
        unit, status = self.unit, self.result["status"]
        is_initd, is_systemd = os.path.exists("/etc/init.d/" + unit), False
        rc, out, err = self.ctl("show", unit)
        if rc == 0 and not (_ignored(out) or _ignored(err)):
            if out:
                status.update(parse_systemctl_show(out.split("\n")))
                is_systemd = status.get("LoadState", "not-found") != "not-found"
                if is_systemd and status.get("LoadState") != "masked" and "LoadError" in status:
                    raise Failed("Error loading unit file '%s': %s" % (unit, status["LoadError"]))
        elif err and rc == 1 and "Failed to parse bus message" in err:
            status.update(parse_systemctl_show(out.split("\n")))
            base, sep, _ = unit.partition("@")
            _, out, _ = self.ctl("list-unit-files", base + sep + "*")
            is_systemd = base + sep in out
            _, out, _ = self.ctl("is-active", unit)
            status["ActiveState"] = out.rstrip("\n")
        else:
            _, out, _ = self.ctl("is-enabled", unit)
            if out.strip() in ENABLED_STATES or self.ctl("list-unit-files", unit)[0] == 0:
                is_systemd = True
            else:
                rc, out, err = run(self.systemctl)
                if rc != 0:
                    raise Failed(err or out, rc=rc)
        self.is_initd = is_initd
        return is_systemd or is_initd

    def set_masked(self, found):
        wanted = self.req["masked"]
        _, out, _ = self.ctl("is-enabled", self.unit)
        if (out.strip() == "masked") == wanted:
            return
        self.result["changed"] = True
        if self.check:
            return
        action = "mask" if wanted else "unmask"
        rc, _, err = self.ctl(action, self.unit)
        if rc != 0:
            self.require(found)
            raise Failed("Failed to %s the service (%s): %s" % (action, self.unit, err.strip()))

    def set_enabled(self, found):
        wanted = self.req["enabled"]
        self.require(found)
        enabled = False
        rc, out, _ = self.ctl("is-enabled", self.unit, "-l")
        if rc == 0:
            enabled = out.rstrip() not in ("enabled-runtime", "indirect", "alias")
        elif rc == 1 and self.is_initd and not out.strip().endswith("disabled") and _sysv_is_enabled(self.unit):
            enabled = True
        self.result["enabled"] = enabled
        if enabled == wanted:
            return
        self.result["changed"] = True
        if not self.check:
            action = "enable" if wanted else "disable"
            rc, out, err = self.ctl(action, self.unit)
            if rc != 0:
                raise Failed("Unable to %s service %s: %s" % (action, self.unit, out + err))
        self.result["enabled"] = not enabled

    def set_state(self, found):
        state, status = self.req["state"], self.result["status"]
        self.require(found)
        self.result["state"] = state
        if "ActiveState" not in status:
            raise Failed("Service is in unknown state", status=status)
        running = status["ActiveState"] in ("active", "activating")
        action = None
        if state == "started":
            action = None if running else "start"
        elif state == "stopped":
            action = "stop" if running or status["ActiveState"] == "deactivating" else None
        else:
            action = state[:-2] if running else "start"  # restarted/reloaded: restart/reload, or start
            self.result["state"] = "started"
        if action:
            self.result["changed"] = True
            if not self.check:
                rc, _, err = self.ctl(action, self.unit)
                if rc != 0:
                    raise Failed("Unable to %s service %s: %s" % (action, self.unit, err))

    def require(self, found):
        if not found:
            raise Failed("Could not find the requested service %s: host" % self.unit)


class Service:
    def __init__(self, req):
        self.name = req["name"]
        self.state = req.get("state")
        self.enable = req.get("enabled")
        self.sleep = req.get("sleep")
        self.pattern = req.get("pattern")
        self.arguments = shlex.split(req.get("arguments") or "")
        self.check = bool(req.get("check"))
        self.running = None
        self.changed = False
        self.svc_change = False
        initscript = "/etc/init.d/%s" % self.name
        self.initscript = initscript if os.path.isfile(initscript) else None
        self._find_tools()

    def _find_tools(self):
        if systemd_managed():  # PID 1 is not systemd, yet systemd runs: Ansible's LinuxService would use it
            raise Failed("service: systemd runs on this host but is not PID 1; use systemd_service")
        if which("initctl") and os.path.exists("/etc/init/%s.conf" % self.name):
            raise Failed(
                "service: %s is an upstart job; provision drives systemd and SysV init scripts only" % self.name
            )
        if which("rc-service"):
            raise Failed("service: this host runs OpenRC; provision drives systemd and SysV init scripts only")
        self.enable_cmd = None
        if self.initscript:
            self.enable_cmd = next(filter(None, (which(t) for t in ("update-rc.d", "insserv", "chkconfig"))), None)
        if self.enable_cmd is None:
            raise Failed("Could not find the requested service %s: host" % self.name)
        self.svc_cmd = which("service")

    def control(self, action):
        """``service NAME ACTION ARGS`` (the init script itself without ``service``); restart is stop then start."""
        prefix = [self.svc_cmd, self.name] if self.svc_cmd else [self.initscript]
        if action != "restart":
            return run_detached(prefix + [action] + self.arguments)
        rc1, out1, err1 = run_detached(prefix + ["stop"] + self.arguments)
        if self.sleep:
            time.sleep(self.sleep)
        rc2, out2, err2 = run_detached(prefix + ["start"] + self.arguments)
        if rc1 != 0 and rc2 == 0:
            return rc2, out2, err2
        return rc1 + rc2, out1 + out2, err1 + err2

    def set_boot_state(self):
        if os.path.basename(self.enable_cmd or "") != "update-rc.d":
            raise Failed("service: enabled needs update-rc.d on this host (found %s)" % self.enable_cmd)
        enabled = bool(glob.glob("/etc/rc?.d/S??" + self.name))
        self.changed = self.enable != enabled
        if not self.changed or self.check:
            return
        steps = [["enable"]] if self.enable else [["disable"]]
        if self.enable and not glob.glob("/etc/rc?.d/K??" + self.name):
            steps.insert(0, ["defaults"])
        for step in steps:
            rc, out, err = run([self.enable_cmd, self.name] + step)
            if rc != 0:
                raise Failed(err or out)

    def read_running(self):
        if self.pattern:
            rc, out, _ = run([which("ps") or "ps", "auxww"])
            if rc == 0:
                self.running = any(self.pattern in line and "pattern=" not in line for line in out.split("\n"))
            return
        rc, out, _ = self.control("status")
        if rc in STOPPED_RCS:
            self.running = False
        elif out.count("\n") <= 1:
            self.running = _running_from_words(out.lower().replace(self.name.lower(), ""))
        if self.running is None and rc == 0:
            self.running = True

    def apply_state(self):
        if self.running is None:
            raise Failed("failed determining service state, possible typo of service name?")
        wants = {"started": not self.running, "reloaded": True, "stopped": self.running, "restarted": True}
        self.svc_change = bool(wants[self.state])
        if not self.svc_change:
            return
        if self.check:
            raise Done(changed=True, msg="service state changed")
        if self.state == "started" or (self.state == "reloaded" and not self.running):
            action = "start"
        else:
            action = {"stopped": "stop", "reloaded": "reload", "restarted": "restart"}[self.state]
        rc, out, err = self.control(action)
        if rc != 0 and "Job is already running" not in err:
            raise Failed(err or out)


def _running_from_words(text):
    """Ansible's reading of a one-line status answer (the service's own name removed): None when unsure."""
    if "stop" in text:
        return False
    if "run" in text:
        return "not " not in text
    if "start" in text and "not " not in text:
        return True
    dead = ("could not access pid file", "is dead and pid file exists", "dead but subsys locked",
            "dead but pid file exists")  # fmt: skip
    return False if any(d in text for d in dead) else None


def apply(req):
    if req.get("module") == "systemd":
        return Systemd(req).apply()
    manager = service_manager()
    if manager == "systemd":  # Ansible's service action runs its systemd module, without the SysV-only keys
        keep = ("name", "state", "enabled", "check") + SYSTEMD_ONLY
        return Systemd({k: v for k, v in req.items() if k in keep}).apply()
    given = [k for k in SYSTEMD_ONLY if req.get(k)]
    if given:  # ansible-core's service module (a host without systemd) has no such arguments
        raise Failed("Unsupported parameters for (service) module: %s (they are systemd_service's; this host "
                     "is not run by systemd)" % ", ".join(given))  # fmt: skip
    if not req.get("name"):
        raise Failed("missing required arguments: name")
    if manager == "openwrt_init":
        raise Failed("service: this host runs OpenWrt's procd; provision drives systemd and SysV init scripts only")
    service = Service(req)
    answer = {"name": service.name}
    if service.enable is not None:
        service.set_boot_state()
        answer["enabled"] = service.enable
    if service.state is None:
        answer["changed"] = service.changed
        return answer
    service.read_running()
    service.apply_state()
    answer["changed"] = service.changed or service.svc_change
    answer["state"] = "stopped" if service.state == "stopped" else "started"
    return answer


def apply_request(req):
    try:
        return apply(req)
    except Done as done:
        return done.answer


ACTIONS = {"apply": apply_request}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
