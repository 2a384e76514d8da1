"""Host side of ``pam_limits`` (community.general's) and ``sysctl`` (ansible.posix's): the configuration
file read, the one line fixed as those modules fix it, the file replaced atomically with its mode kept (a new
file: 0666 less the umask, as Ansible's ``open(..., 'a')``), stdlib only.

``python3 - pam_limits`` / ``python3 - sysctl`` with the request as JSON on stdin; one JSON answer with
Ansible's keys (``changed``, ``msg``; ``before``/``after`` for a diff). As Ansible's modules:

- ``pam_limits``: lines of four fields (``domain type item value``, a ``#`` comment kept) are matched on the
  first three; ``use_max``/``use_min`` keep the larger/smaller (``unlimited``, ``infinity`` and ``-1`` are no
  limit); a new or changed line is ``domain<TAB>type<TAB>item<TAB>value[<TAB>#comment]``; the file's values are
  validated as Ansible validates them (``nice``/``priority`` in -20..19, else a count or no limit);
- ``sysctl``: ``key=value`` lines (comments and blank lines kept, every line stripped, a key's later
  duplicates dropped), the current value from ``sysctl -e -n KEY`` (read only); ``sysctl_set`` sets it with
  ``sysctl -w`` and ``reload`` runs ``sysctl -p FILE`` when anything changed: both need root (``become``);
- ``mount`` (``present``, ``absent_from_fstab``): the fstab line of the mount point (a swap line: of its
  ``src``) made ``src path fstype opts dump passno`` (fields escaped as Ansible escapes them), or removed.
"""

import os
import re
import shutil
import sys

import hostlib
from hostlib import Failed

NO_LIMIT = ("unlimited", "infinity", "-1")
TRUE_WORDS = ("y", "yes", "on", "1", "true", "t")
FALSE_WORDS = ("n", "no", "off", "0", "false", "f")
C_LOCALE = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}
FSTAB_FIELDS = ("src", "name", "fstype", "opts", "dump", "passno")
FSTAB_LINE = "%(src)s %(name)s %(fstype)s %(opts)s %(dump)s %(passno)s\n"
SYSCTL_ERRORS = r'^sysctl: setting key "[^"]+": (Invalid argument|Read-only file system)$'


def _read(path):
    with open(path, "rb") as fh:
        return fh.read().decode("utf-8", "surrogateescape")


def _write(path, text, check):
    """``text`` over ``path`` (its mode kept; a new file's from the umask), unless ``check``."""
    if check:
        return
    hostlib.rewrite(path, text.encode("utf-8", "surrogateescape"))


def _valid_limit(item, value, prefix=""):
    if item in ("nice", "priority"):
        try:
            valid = -20 <= int(value) <= 19
        except ValueError:
            valid = False
        if not valid:
            raise Failed("%s Value of %r for item %r is invalid. Value must be a number in the range -20 to 19 "
                         "inclusive. Refer to the limits.conf(5) manual pages for more details."
                         % (prefix, value, item))  # fmt: skip
    elif not (value in NO_LIMIT or value.isdigit()):
        raise Failed("%s Value of %r for item %r is invalid. Value must either be 'unlimited', 'infinity' or -1, all "
                     "of which indicate no limit, or a limit of 0 or larger. Refer to the limits.conf(5) manual pages "
                     "for more details." % (prefix, value, item))  # fmt: skip


def _limit_value(value, actual, use_max, use_min):
    """The value to write where the file has ``actual`` (Ansible's ``use_max``/``use_min`` rules)."""
    value_free, actual_free = value in NO_LIMIT, actual in NO_LIMIT
    if use_max:
        return actual if actual_free else value if value_free else str(max(int(value), int(actual)))
    if use_min:
        if actual_free and value_free:
            return actual
        return value if actual_free else actual if value_free else str(min(int(value), int(actual)))
    return value


def pam_limits(req):
    path, domain, kind, item = req["dest"], req["domain"], req["limit_type"], req["limit_item"]
    value, comment = str(req["value"]), req.get("comment") or ""
    exists = os.path.isfile(path)
    if exists and not os.access(path, os.W_OK):
        raise Failed("%s is not writable. Use sudo" % path)
    folder = os.path.dirname(path)
    if not exists and not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
        raise Failed("directory %s is not writable (check presence, access rights, use sudo)" % folder)
    if req.get("use_max") and req.get("use_min"):
        raise Failed("Cannot use use_min and use_max at the same time.")
    _valid_limit(item, value)
    before = _read(path) if exists else ""
    out, message, found, changed = [], "", False, not exists
    for line in before.splitlines(True):
        squeezed = re.sub(r"\s+", " ", line).strip()
        if line.startswith("#") or not squeezed:
            out.append(line)
            continue
        if not comment:  # as Ansible: the first commented line's comment sticks for the new line
            comment = line.split("#", 1)[1] if "#" in line else ""
        fields = squeezed.split("#", 1)[0].rstrip().split(" ")
        if len(fields) != 4:
            out.append(line)
            continue
        _valid_limit(fields[2], fields[3], prefix="Invalid configuration found in '%s'." % path)
        if fields[:3] != [domain, kind, item]:
            out.append(line)
            continue
        found = True
        new = value if value == fields[3] else _limit_value(value, fields[3], req.get("use_max"), req.get("use_min"))
        if new == fields[3]:
            message = line
            out.append(line)
            continue
        changed = True
        message = "\t".join((domain, kind, item, new)) + ("\t#" + comment if comment else "") + "\n"
        out.append(message)
    if not found:
        changed = True
        message = "\t".join((domain, kind, item, value)) + ("\t#" + comment if comment else "") + "\n"
        out.append(message)
    after = "".join(out)
    _write(path, after, req.get("check"))
    return {"changed": changed, "msg": message, "before": before, "after": after}


def _sysctl_value(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    text = str(value)
    if text.lower() in TRUE_WORDS:
        return "1"
    if text.lower() in FALSE_WORDS:
        return "0"
    return text.strip()


def _sysctl(argv):
    """``sysctl ARGS``, found as Ansible's ``get_bin_path`` finds it (``PATH``, then the sbin folders)."""
    env = dict(os.environ, **C_LOCALE)
    path = os.pathsep.join([env.get("PATH", ""), "/sbin", "/usr/sbin", "/usr/local/sbin"])
    found = shutil.which(argv[0], path=path)
    if found is None:
        raise Failed('Failed to find required executable "sysctl" in paths: %s' % path)
    return hostlib.run([found, *argv[1:]], timeout=60, env=env)


def _same_words(a, b):
    return a is not None and b is not None and a.split() == b.split()


def sysctl(req):
    name, state, path = str(req["name"]).strip(), req.get("state") or "present", req["sysctl_file"]
    value = _sysctl_value(req.get("value"))
    rc, current, _ = _sysctl(["sysctl", "-e", "-n", name])
    current = current if rc == 0 else None
    lines = [line.strip() for line in _read(path).splitlines()] if os.path.isfile(path) else []
    values, fixed, seen = {}, [], []
    for line in lines:
        if not line or line.startswith(("#", ";")) or "=" not in line:
            fixed.append(line)
            continue
        key, val = (part.strip() for part in line.split("=", 1))
        values[key] = val
        if key in seen:
            continue
        seen.append(key)
        if key != name:
            fixed.append("%s=%s" % (key, val))
        elif state == "present":
            fixed.append("%s=%s" % (key, value))
    if name not in seen and state == "present":
        fixed.append("%s=%s" % (name, value))
    in_file, write, changed = values.get(name), False, False
    if in_file is None:
        changed = write = state == "present"
    elif (in_file and state == "absent") or in_file != value:
        changed = write = True
    elif req.get("reload"):  # the file is right: the running value decides
        changed = not _same_words(current, value)
    set_proc = False
    if req.get("sysctl_set") and state == "present" and not _same_words(current, value):
        changed, set_proc = True, current is not None
    if not req.get("check"):
        errors = ["-e"] if req.get("ignoreerrors") else []
        if set_proc:
            word = '"%s"' % value if value.split() else value
            rc, out, err = _sysctl(["sysctl", *errors, "-w", "%s=%s" % (name, word)])
            if rc != 0 or re.search(SYSCTL_ERRORS, err, re.MULTILINE):
                raise Failed("setting %s failed: %s" % (name, out + err))
        if write:
            _write(os.path.realpath(path), "".join(line + "\n" for line in fixed), False)
        if changed and req.get("reload"):
            rc, out, err = _sysctl(["sysctl", *errors, "-p", path])
            if rc != 0 or re.search(SYSCTL_ERRORS, err, re.MULTILINE):
                raise Failed("Failed to reload sysctl: %s" % (out + err))
    return {"changed": changed}


def _fstab_escape(value):
    return value if isinstance(value, int) else value.replace("\\", "\\134").replace(" ", "\\040").replace("&", "\\046")


def _fstab_lines(path):
    with open(path) as fh:
        return [line if line.endswith("\n") else line + "\n" for line in fh.readlines()]


def _fstab_fields(fields):
    return {key: fields[i] for i, key in enumerate(FSTAB_FIELDS[: len(fields)])}


def _fstab_match(fields, name, src):
    """The line of the mount point ``name`` (a swap line: of ``src``), as Ansible matches it."""
    swap_of_other = src is not None and fields["name"] == "none" and fields["fstype"] == "swap" and fields["src"] != src
    return fields["name"] == name and not swap_of_other


def _fstab_set(args, check):
    """Ansible's ``set_mount`` (Linux): the line of ``name`` made ``src name fstype opts dump passno``."""
    want = {k: _fstab_escape(v) for k, v in args.items() if k != "warnings"}
    out, exists, changed = [], False, False
    for line in _fstab_lines(args["fstab"]):
        fields = line.split("#")[0].split()
        if not line.strip() or line.strip().startswith("#") or len(fields) not in (4, 5, 6):
            out.append(line)
            continue
        have = {
            "dump": 0,
            "passno": 0,
            **_fstab_fields(fields),
        }  # as Ansible: the optional fields as ints, never equal to '0'
        if not _fstab_match(have, want["name"], args.get("src")):
            out.append(line)
            continue
        exists = True
        for key in ("src", "fstype", "opts", "dump", "passno"):
            if have[key] != want[key]:
                have[key], changed = want[key], True
        out.append(FSTAB_LINE % have if changed else line)
    if not exists:
        out.append(FSTAB_LINE % want)
        changed = True
    if changed:
        _write(args["fstab"], "".join(out), check)
    return changed


def _fstab_unset(args, check):
    """Ansible's ``unset_mount``: the lines of ``name`` (six fields only) removed."""
    out, changed, name = [], False, _fstab_escape(args["name"])
    for line in _fstab_lines(args["fstab"]):
        fields = line.split()
        if line.strip() and not line.strip().startswith("#") and len(fields) == 6:
            have = _fstab_fields(fields)
            if _fstab_match(have, name, args.get("src")):
                changed = True
                continue
        out.append(line)
    if changed:
        _write(args["fstab"], "".join(out), check)
    return changed


def mount(req):
    """``state`` present or absent_from_fstab: the fstab only, nothing is mounted or unmounted."""
    args = {"name": os.path.expanduser(req["path"]), "opts": "defaults", "dump": "0", "passno": "0",
            "fstab": req.get("fstab") or "/etc/fstab", "boot": "yes", "warnings": []}  # fmt: skip
    for key in ("src", "fstype", "passno", "opts", "dump", "fstab"):
        if req.get(key) is not None:
            args[key] = os.path.expanduser(req[key]) if key == "src" else req[key]
    opts = args["opts"].split(",")
    if req.get("boot", True) and "noauto" in opts:
        args["warnings"].append("Ignore the 'boot' due to 'opts' contains 'noauto'.")
    elif not req.get("boot", True):
        args["boot"] = "no"
        args["opts"] = ",".join(opts + ["noauto"])
    path = args["fstab"]
    if not os.path.exists(path):
        try:
            if not os.path.exists(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path))
            open(path, "a").close()
        except PermissionError:
            raise Failed("Failed to open %s due to permission issue" % path) from None
        except OSError as exc:
            raise Failed("Failed to open %s due to %s" % (path, exc)) from None
    edit = _fstab_set if req["state"] == "present" else _fstab_unset
    changed = edit(args, req.get("check"))
    args["backup_file"] = ""
    if not args["warnings"]:  # as ansible-core 2.19: an empty list is no key
        del args["warnings"]
    return dict(args, changed=changed)


ACTIONS = {"pam_limits": pam_limits, "sysctl": sysctl, "mount": mount}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
