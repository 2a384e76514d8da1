"""Host side of ``modprobe`` (community.general's): a kernel module loaded or unloaded with ``modprobe``, and kept
(or no longer kept) across boots in ``/etc/modules-load.d`` and ``/etc/modprobe.d``, as that module does it.

``python3 - apply`` with the request as JSON on stdin: ``name``, ``state``, ``params``, ``persistent``, ``check``.
One JSON answer with the module's keys (``changed``, ``name``, ``params``, ``state``). As the module:

- loaded: a line ``NAME `` (``-`` read as ``_``) in ``/proc/modules``, else ``/NAME.ko`` at the end of a line of
  ``/lib/modules/RELEASE/modules.builtin``; a file that cannot be read fails the task with its error;
- ``present`` and not loaded: ``modprobe NAME PARAMS`` (``-n`` in check mode); ``absent`` and loaded:
  ``modprobe -r NAME``; modprobe's stderr is the message when it fails;
- ``persistent: present``: ``NAME`` in ``/etc/modules-load.d/NAME.conf`` unless a file there lists it; unless the
  ``options NAME KEY=VALUE`` lines of ``/etc/modprobe.d`` are exactly ``params``, those lines are commented out
  and ``/etc/modprobe.d/NAME.conf`` holds one ``options`` line per parameter; ``persistent: absent`` comments
  out the module's lines in both folders.

Files are written atomically (a file that exists keeps its mode; a new one is 0644); check mode writes nothing.
"""

import os
import platform
import re
import shlex
import sys

import hostlib
from hostlib import Failed

MODULES_LOAD = "/etc/modules-load.d"
PARAMETERS = "/etc/modprobe.d"
PROC_MODULES = "/proc/modules"


def builtin_path():
    return os.path.join("/lib/modules/", platform.release(), "modules.builtin")


class Modprobe:
    def __init__(self, req):
        self.name, self.state = req["name"], req.get("state", "present")
        self.params, self.persistent = req.get("params") or "", req.get("persistent", "disabled")
        self.check, self.changed = bool(req.get("check")), False
        name = re.escape(self.name)
        self.re_module = re.compile(r"^ *%s *(?:[#;].*)?\n?\Z" % name)
        self.re_params = re.compile(r"^options %s \w+=\S+ *(?:[#;].*)?\n?\Z" % name)
        self.re_param = re.compile(r"^options %s (\w+=\S+) *(?:[#;].*)?\n?\Z" % name)

    def result(self):
        return {"changed": self.changed, "name": self.name, "params": self.params, "state": self.state}

    def fail(self, msg, **data):
        out = self.result()
        out.update(data)
        return Failed(msg, **out)

    # ---------------------------------------------------------------- the running kernel
    def loaded(self):
        try:
            wanted = self.name.replace("-", "_") + " "
            with open(PROC_MODULES) as fh:
                if any(line.startswith(wanted) for line in fh):
                    return True
            with open(builtin_path()) as fh:
                return any(line.rstrip().endswith("/" + self.name + ".ko") for line in fh)
        except OSError as exc:
            raise self.fail(str(exc)) from None

    def _modprobe(self, argv):
        rc, out, err = hostlib.run([hostlib.find_bin("modprobe")] + argv, timeout=300)
        if rc != 0:
            raise self.fail(err, rc=rc, stdout=out, stderr=err)

    def load(self):
        self._modprobe((["-n"] if self.check else []) + [self.name] + shlex.split(self.params))
        if self.check or self.loaded():
            self.changed = True

    def unload(self):
        self._modprobe(["-r", self.name] + (["-n"] if self.check else []))
        self.changed = True

    # ---------------------------------------------------------------- the files read at boot
    @staticmethod
    def _files(folder):
        if not os.path.isdir(folder):
            return []
        return [p for p in (os.path.join(folder, n) for n in sorted(os.listdir(folder))) if os.path.isfile(p)]

    @staticmethod
    def _lines(path):
        with open(path) as fh:
            return fh.readlines()

    def listed(self):
        return any(self.re_module.match(line) for p in self._files(MODULES_LOAD) for line in self._lines(p))

    def set_params(self):
        found = set()  # type: set[str]
        for path in self._files(PARAMETERS):
            found.update(m.group(1) for m in map(self.re_param.match, self._lines(path)) if m)
        return found

    def _write(self, path, text):
        if self.check:
            return
        hostlib.rewrite(path, text.encode("utf-8"), new_mode=0o644)

    def _comment_out(self, folder, pattern):
        for path in self._files(folder):
            lines = self._lines(path)
            new = ["#" + line if pattern.match(line) else line for line in lines]
            if new != lines:
                self._write(path, "".join(new))

    def keep(self):
        if not self.listed():
            self._write(os.path.join(MODULES_LOAD, self.name + ".conf"), self.name + "\n")
            self.changed = True
        if set(self.params.split()) != self.set_params():
            self._comment_out(PARAMETERS, self.re_params)
            lines = ["options %s %s" % (self.name, p) for p in self.params.split()]
            self._write(os.path.join(PARAMETERS, self.name + ".conf"), "\n".join(lines) + "\n")
            self.changed = True

    def forget(self):
        if self.listed():
            self._comment_out(MODULES_LOAD, self.re_module)
            self.changed = True
        if self.set_params():
            self._comment_out(PARAMETERS, self.re_params)
            self.changed = True


def apply(req):
    mod = Modprobe(req)
    hostlib.find_bin("modprobe")
    if mod.state == "present" and not mod.loaded():
        mod.load()
    elif mod.state == "absent" and mod.loaded():
        mod.unload()
    persist(mod)
    return mod.result()


def persist(mod):
    """The files read at boot made to agree with ``persistent``."""
    kept = mod.persistent != "disabled" and mod.listed()
    if mod.persistent == "present" and not (kept and set(mod.params.split()) == mod.set_params()):
        mod.keep()
    elif mod.persistent == "absent" and (kept or mod.set_params()):
        mod.forget()


ACTIONS = {"apply": apply}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
