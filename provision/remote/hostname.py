"""Host side of ``hostname`` (ansible-core's): the host's permanent and running name set as that module's Linux
strategies set them.

``python3 - apply`` with the request as JSON on stdin: ``name``, ``use`` (null: chosen as Ansible chooses it),
``check``. One JSON answer with the module's keys (``changed``, ``name``, ``ansible_facts``, and ``before``/
``after``, the ``hostname = NAME`` texts of Ansible's diff). As the module:

- the strategy: ``use`` (``debian`` and ``systemd`` are hostnamectl, ``redhat`` is ``/etc/sysconfig/network``);
  without it ``systemd`` where ``systemctl`` is on PATH and systemd runs (``/run/systemd/system/``), else by the
  distribution (``ID`` of ``/etc/os-release``): the Debian family writes ``/etc/hostname``, the Red Hat family
  ``/etc/sysconfig/network``; another distribution fails as the module does;
- the file strategies have no running name (it is the permanent one) and write the file only; ``systemd`` asks
  ``hostnamectl --transient|--static status`` and sets the static then the running name;
- the before name of the diff is the running one when it differs from ``name``, else the permanent one.

Files are written atomically (an existing file keeps its mode; a new one is 0644); check mode writes nothing.
"""

import os
import platform
import socket
import sys

import hostlib
from hostlib import Failed

HOSTNAME_FILE = "/etc/hostname"
NETWORK_FILE = "/etc/sysconfig/network"
OS_RELEASE = ("/etc/os-release", "/usr/lib/os-release")
SYSTEMD_CANARIES = ("/run/systemd/system/", "/dev/.run/systemd/", "/dev/.systemd/")

# ansible-core 2.19's Linux subclasses of Hostname: distribution -> strategy (tests/unit/test_mod_hostname.py
# reads the module's own classes and checks this table); Alpine, Gentoo and SLES are not offered
FILE_DISTROS = ("Debian", "Kylin", "Cumulus-linux", "Kali", "Parrot", "Ubuntu", "Linuxmint", "Linaro", "Devuan",
                "Raspbian", "Uos", "Deepin", "Neon", "Void", "Pop")  # fmt: skip
REDHAT_DISTROS = ("Redhat", "Centos", "Anolis", "Cloudlinuxserver", "Cloudlinux", "Alinux", "Scientific", "Oracle",
                  "Virtuozzo", "Amazon", "Altlinux", "Eurolinux")  # fmt: skip
USE = {"debian": "systemd", "systemd": "systemd", "redhat": "redhat"}


def distribution():
    """``distro.id().capitalize()`` as ansible-core's ``get_distribution`` (``ID`` of os-release)."""
    for path in OS_RELEASE:
        try:
            with open(path) as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition("=")
            if key.strip() == "ID":
                name = value.strip().strip("\"'").lower().replace(" ", "_").capitalize()
                return {"Amzn": "Amazon", "Rhel": "Redhat"}.get(name, name) or "OtherLinux"
        break
    return "OtherLinux"


def systemd_managed():
    try:
        hostlib.find_bin("systemctl")
    except Failed:
        return False
    return any(os.path.exists(p) for p in SYSTEMD_CANARIES)


def strategy_of(use):
    if use is not None:
        return USE[use]
    if platform.system() != "Linux":
        raise Failed("hostname module cannot be used on platform %s" % platform.system())
    if systemd_managed():
        return "systemd"
    dist = distribution()
    if dist in FILE_DISTROS:
        return "file"
    if dist in REDHAT_DISTROS:
        return "redhat"
    raise Failed("hostname module cannot be used on platform Linux (%s)" % dist)


def _write(path, text, check):
    if check:
        return
    try:
        hostlib.rewrite(path, text.encode("utf-8"), new_mode=0o644)
    except OSError as exc:
        raise Failed("failed to update hostname: %s" % exc) from None


class FileStrategy:
    """``/etc/hostname``: the running name is the permanent one; setting it writes the file only."""

    def __init__(self, path=None):
        self.path = path or HOSTNAME_FILE

    def permanent(self):
        if not os.path.isfile(self.path):
            return ""
        try:
            with open(self.path, "rb") as fh:
                return fh.read().decode("utf-8", "replace").strip()
        except OSError as exc:
            raise Failed("failed to read hostname: %s" % exc) from None

    current = permanent

    def set_current(self, name, check):
        pass

    def set_permanent(self, name, check):
        _write(self.path, "%s\n" % name, check)


class RedHatStrategy(FileStrategy):
    """``HOSTNAME=`` in ``/etc/sysconfig/network``."""

    def __init__(self, path=None):
        super().__init__(path or NETWORK_FILE)

    def _lines(self):
        try:
            with open(self.path, "rb") as fh:
                return fh.read().decode("utf-8", "replace").splitlines(True)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise Failed("failed to read hostname: %s" % exc) from None

    def permanent(self):
        for line in self._lines():
            line = line.strip()
            if line.startswith("HOSTNAME"):
                parts = line.split("=")
                if len(parts) != 2:
                    raise Failed("failed to read hostname: %s values to unpack (expected 2%s)"
                                 % (("too many", "") if len(parts) > 2 else ("not enough", ", got 1")))  # fmt: skip
                return parts[1].strip()
        raise Failed("Unable to locate HOSTNAME entry in %s" % self.path)

    current = permanent

    def set_permanent(self, name, check):
        lines = [("HOSTNAME=%s\n" % name) if x.strip().startswith("HOSTNAME") else x for x in self._lines()]
        if not any(x.strip().startswith("HOSTNAME") for x in self._lines()):
            lines.append("HOSTNAME=%s\n" % name)
        _write(self.path, "".join(lines), check)


class SystemdStrategy:
    """``hostnamectl``: the transient (running) and static names."""

    def __init__(self):
        self.cmd = hostlib.find_bin("hostnamectl")

    def _run(self, *args):
        rc, out, err = hostlib.run([self.cmd] + list(args), timeout=120)
        if rc != 0:
            raise Failed("Command failed rc=%d, out=%s, err=%s" % (rc, out, err))
        return out.strip()

    def current(self):
        return self._run("--transient", "status")

    def permanent(self):
        return self._run("--static", "status")

    @staticmethod
    def _short(name):
        if len(name) > 64:
            raise Failed("name cannot be longer than 64 characters on systemd servers, try a shorter name")

    def set_current(self, name, check):
        if not check:
            self._short(name)
            self._run("--transient", "set-hostname", name)

    def set_permanent(self, name, check):
        if not check:
            self._short(name)
            self._run("--pretty", "--static", "set-hostname", name)


def make(strategy):
    return {"file": FileStrategy, "redhat": RedHatStrategy, "systemd": SystemdStrategy}[strategy]()


def update(strat, name, check, systemd):
    """Ansible's order: the running name then the permanent one (systemd: the permanent one first)."""
    changed = False
    steps = [("current", "set_current"), ("permanent", "set_permanent")]
    for get, put in reversed(steps) if systemd else steps:
        if getattr(strat, get)() != name:
            getattr(strat, put)(name, check)
            changed = True
    return changed


def facts(name):
    fqdn = socket.getfqdn()
    return {"ansible_hostname": name.split(".")[0], "ansible_nodename": name, "ansible_fqdn": fqdn,
            "ansible_domain": ".".join(fqdn.split(".")[1:])}  # fmt: skip


def apply(req):
    name, check = req["name"], bool(req.get("check"))
    if not isinstance(name, str):
        raise ValueError("name must be a string")
    kind = strategy_of(req.get("use"))
    strat = make(kind)
    current, permanent = strat.current(), strat.permanent()
    changed = update(strat, name, check, kind == "systemd")
    before = current if name != current else permanent
    out = {"changed": changed, "name": name, "ansible_facts": facts(name)}
    if changed:
        out.update(before="hostname = %s\n" % before, after="hostname = %s\n" % name)
    return out


ACTIONS = {"apply": apply}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
