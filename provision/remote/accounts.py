"""Host side of ``group`` and ``user`` (stdlib only; Python 3.6+): read the account, change it only when it
differs, as Ansible's modules decide it.

``python3 - group`` (``name, state, gid, system, force, non_unique, gid_min, gid_max, check``) and
``python3 - user`` (``name, state, uid, group, groups, append, comment, home, shell, create_home,
move_home, system, force, remove, non_unique, check``), the request on stdin (the host library's envelope,
``hostlib.serve``: it may hold a password hash, never in an argv), answer Ansible's result. ``groupadd``/``groupmod``/
``groupdel`` and ``useradd``/``usermod``/``userdel`` run with an argv (no shell), as root through ``become``;
their stdout/stderr come back as Ansible's modules return them. No password travels here.
"""

import grp
import os
import pwd
import shutil
import sys

import hostlib


def _info(name):
    try:
        return grp.getgrnam(name)
    except KeyError:
        return None


def do_group(req):
    name, state, gid = req["name"], req.get("state") or "present", req.get("gid")
    result = {"name": name, "state": state}
    rc, out, err = None, "", ""
    current = _info(name)
    if state == "absent":
        if current is not None:
            if req.get("check"):
                return {"changed": True}
            rc, out, err = hostlib.run(["groupdel"] + (["-f"] if req.get("force") else []) + [name])
    elif current is None:
        if req.get("check"):
            return {"changed": True}
        argv = ["groupadd"]
        if gid is not None:
            argv += ["-g", str(gid)] + (["-o"] if req.get("non_unique") else [])
        if req.get("system"):
            argv.append("-r")
        for key, value in (("GID_MIN", req.get("gid_min")), ("GID_MAX", req.get("gid_max"))):
            if value is not None:
                argv += ["-K", "%s=%s" % (key, value)]
        rc, out, err = hostlib.run(argv + [name])
    elif gid is not None and current.gr_gid != int(gid):
        if req.get("check"):
            rc = 0
        else:
            unique = ["-o"] if req.get("non_unique") else []
            rc, out, err = hostlib.run(["groupmod", "-g", str(gid)] + unique + [name])
    if rc is not None and rc != 0:
        return {"failed": True, "name": name, "msg": err}
    result["changed"] = rc is not None
    if out:
        result.update(stdout=out, stdout_lines=out.splitlines())
    if err:
        result.update(stderr=err, stderr_lines=err.splitlines())
    now = _info(name)
    if now is not None:
        result["system"] = bool(req.get("system"))
        result["gid"] = now.gr_gid
    return result


def _user(name):
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def _shadow_hash(name):
    """The user's password hash from /etc/shadow ('' when unreadable or absent)."""
    try:
        with open("/etc/shadow") as fh:
            for line in fh:
                if line.startswith(name + ":"):
                    return line.split(":")[1]
    except OSError:
        pass
    return ""


def _set_hash(name, value):
    """``chpasswd -e``: the hash travels on stdin, never in an argv (Ansible puts it in ``useradd -p``)."""
    return hostlib.run(["chpasswd", "-e"], stdin=("%s:%s\n" % (name, value)).encode())


def _memberships(name):
    return [g.gr_name for g in grp.getgrall() if name in g.gr_mem]


def _groups_set(wanted):
    """The wanted supplementary groups (names), or a message naming one that does not exist."""
    names = []
    for g in wanted:
        info = _info(g) if not str(g).isdigit() else _by_gid(int(g))
        if info is None:
            return None, "Group %s does not exist" % g
        names.append(info.gr_name)
    return names, None


def _by_gid(gid):
    try:
        return grp.getgrgid(gid)
    except KeyError:
        return None


def _group_gid(group):
    info = _by_gid(int(group)) if str(group).isdigit() else _info(group)
    return None if info is None else info.gr_gid


def _create(req):
    name = req["name"]
    argv = ["useradd"]
    if req.get("uid") is not None:
        argv += ["-u", str(req["uid"])] + (["-o"] if req.get("non_unique") else [])
    if req.get("group") is not None:
        if _group_gid(req["group"]) is None:
            return None, "Group %s does not exist" % req["group"]
        argv += ["-g", str(req["group"])]
    elif _info(name) is not None:
        argv.append("-N")  # a group named as the user exists: do not make another (USERGROUPS_ENAB)
    if req.get("groups"):
        names, error = _groups_set(req["groups"])
        if error:
            return None, error
        argv += ["-G", ",".join(names)]
    if req.get("comment") is not None:
        argv += ["-c", req["comment"]]
    if req.get("home") is not None:
        argv += ["-d", req["home"]]
    if req.get("shell") is not None:
        argv += ["-s", req["shell"]]
    argv.append("-m" if req.get("create_home", True) else "-M")
    if req.get("system"):
        argv.append("-r")
    for key, value in (("UID_MIN", req.get("uid_min")), ("UID_MAX", req.get("uid_max"))):
        if value is not None:
            argv += ["-K", "%s=%s" % (key, value)]
    return argv + [name], None


def _modify(req, info):
    argv = ["usermod"]
    if req.get("uid") is not None and info.pw_uid != int(req["uid"]):
        argv += ["-u", str(req["uid"])] + (["-o"] if req.get("non_unique") else [])
    if req.get("group") is not None:
        gid = _group_gid(req["group"])
        if gid is None:
            return None, "Group %s does not exist" % req["group"]
        if info.pw_gid != gid:
            argv += ["-g", str(gid)]
    wanted = req.get("groups")
    if wanted is not None:
        current = _memberships(req["name"])
        need, names = False, []
        if wanted == []:
            need = bool(current) and not req.get("append")
        else:
            names, error = _groups_set(wanted)
            if error:
                return None, error
            diff = set(current).symmetric_difference(names)
            if diff:
                if req.get("append"):
                    if any(g in diff for g in names):
                        argv.append("-a")
                        need = True
                else:
                    need = True
        if need:
            argv += ["-G", ",".join(names)]
    if req.get("comment") is not None and info.pw_gecos != req["comment"]:
        argv += ["-c", req["comment"]]
    if req.get("home") is not None and info.pw_dir != req["home"]:
        argv += ["-d", req["home"]] + (["-m"] if req.get("move_home") else [])
    if req.get("shell") is not None and info.pw_shell != req["shell"]:
        argv += ["-s", req["shell"]]
    current = _shadow_hash(req["name"])
    lock = req.get("password_lock")
    if lock and not current.startswith("!"):
        argv.append("-L")
    elif lock is False and current.startswith("!"):
        argv.append("-U")
    password = req.get("password")
    always = req.get("update_password", "always") == "always"
    if always and password is not None and current.lstrip("!") != password.lstrip("!"):
        argv = [a for a in argv if a not in ("-L", "-U")]  # the new hash carries the lock itself
    return (argv + [req["name"]] if len(argv) > 1 else None), None


def _new_hash(req, info_exists):
    """The hash to set with chpasswd, or None: Ansible's ``-p`` (``!`` in front when locked)."""
    password = req.get("password")
    if password is None:
        return None
    if info_exists:
        current = _shadow_hash(req["name"])
        if req.get("update_password", "always") != "always" or current.lstrip("!") == password.lstrip("!"):
            return None
    return "!%s" % password if req.get("password_lock") else password


def _make_home(home, uid, gid):
    """Ansible's create_homedir + chown_homedir: the skeleton copied, everything owned by the user."""
    if os.path.isdir("/etc/skel"):
        shutil.copytree("/etc/skel", home, symlinks=True)
    else:
        os.makedirs(home)
    os.chmod(home, 0o755 & ~hostlib.umask())
    for root, dirs, files in os.walk(home):
        os.lchown(root, uid, gid)
        for entry in dirs + files:
            os.lchown(os.path.join(root, entry), uid, gid)


def do_user(req):
    name, state, check = req["name"], req.get("state") or "present", bool(req.get("check"))
    result = {"name": name, "state": state}
    rc, out, err = None, "", ""
    info = _user(name)
    if state == "absent":
        if info is not None:
            if check:
                return {"changed": True}
            rc, out, err = hostlib.run(
                ["userdel"] + (["-f"] if req.get("force") else []) + (["-r"] if req.get("remove") else []) + [name]
            )
            if rc != 0:
                return {"failed": True, "name": name, "msg": err, "rc": rc}
            result.update(force=bool(req.get("force")), remove=bool(req.get("remove")))
    else:
        if info is None:
            if check:
                return {"changed": True}
            argv, error = _create(req)
            if error:
                return {"failed": True, "msg": error}
            rc, out, err = hostlib.run(argv)
            new = _new_hash(req, False)
            if rc == 0 and new is not None:
                rc, more_out, more_err = _set_hash(name, new)
                out, err = out + more_out, err + more_err
            result.update(system=bool(req.get("system")), create_home=bool(req.get("create_home", True)))
        else:
            argv, error = _modify(req, info)
            if error:
                return {"failed": True, "msg": error}
            if argv is not None:
                rc, out, err = (0, "", "") if check else hostlib.run(argv)
            new = _new_hash(req, True)
            if new is not None and (rc is None or rc == 0):
                if check:
                    rc = 0
                else:
                    rc, more_out, more_err = _set_hash(name, new)
                    out, err = out + more_out, err + more_err
            result.update(append=bool(req.get("append")), move_home=bool(req.get("move_home")))
        if rc is not None and rc != 0:
            return {"failed": True, "name": name, "msg": err, "rc": rc}
        if req.get("password") is not None:
            result["password"] = "NOT_LOGGING_PASSWORD"
    result["changed"] = rc is not None
    if out:
        result.update(stdout=out, stdout_lines=out.splitlines())
    if err:
        result.update(stderr=err, stderr_lines=err.splitlines())
    now = _user(name)
    if now is not None and state == "present":
        result.update(uid=now.pw_uid, group=now.pw_gid, comment=now.pw_gecos, home=now.pw_dir, shell=now.pw_shell)
        if req.get("groups") is not None:
            result["groups"] = ",".join(req["groups"])
        home = req.get("home") or now.pw_dir
        if not os.path.exists(home) and req.get("create_home", True):
            if not check:
                _make_home(home, now.pw_uid, now.pw_gid)
            result["changed"] = True
    return result


ACTIONS = {"group": do_group, "user": do_user}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
