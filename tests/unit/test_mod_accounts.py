"""``group`` against ansible-core's own module, on this machine (the test suite runs as root: the lab makes Unix
users): each tool manages a group of its own (a fresh name and gid), the same steps in the same order, and the
registered results must match once the names and gids are mapped."""

from __future__ import annotations

import grp
import json
import pwd
import secrets
import subprocess
from pathlib import Path
from typing import Any

from provision.catalog import lookup
from provision.modules.base import ModuleContext
from provision.transport import LocalConnection
from tests.support.ansible_ref import ansible_results


def _free_gids(n: int) -> list[int]:
    used = {g.gr_gid for g in grp.getgrall()}
    # above GID_MAX: groupadd never hands them out itself, so the other tool's steps cannot take them
    return [g for g in range(61000, 62000, 2) if g not in used and g - 100 not in used][:n]  # _steps uses gid-100


def _steps(name: str, gid: int) -> list[tuple[dict[str, Any], bool]]:
    """(arguments, check mode) in order."""
    return [
        ({"name": name}, True),  # check mode: would add, adds nothing
        ({"name": name, "gid": gid - 100}, False),
        ({"name": name}, False),  # converged
        ({"name": name, "gid": gid}, True),
        ({"name": name, "gid": gid}, False),  # groupmod
        ({"name": name, "gid": gid, "system": True}, False),  # exists: unchanged, system as asked
        ({"name": name, "state": "absent"}, True),
        ({"name": name, "state": "absent"}, False),
        ({"name": name, "state": "absent"}, False),  # converged
        ({"name": "root", "gid": 0}, False),
    ]


def _normal(result: dict[str, Any], name: str, gid: int) -> dict[str, Any]:
    out = {k: v for k, v in result.items() if k not in ("invocation",) and v not in ("", False)}
    if "gid" in out:
        out["gid"] = {gid - 100: "GID0", gid: "GID"}.get(out["gid"], out["gid"])
    return json.loads(json.dumps(out).replace(name, "NAME"))


def test_group_the_same_as_ansible(tmp_path: Path) -> None:
    ref_name, our_name = f"pvga{secrets.token_hex(3)}", f"pvgp{secrets.token_hex(3)}"
    ref_gid, our_gid = _free_gids(2)
    try:
        tasks = [{"group": a, "check_mode": c} for a, c in _steps(ref_name, ref_gid)]
        theirs = ansible_results(tmp_path, tasks)
        cls = lookup("group")
        assert cls is not None
        for i, ((raw, check), ref) in enumerate(zip(_steps(our_name, our_gid), theirs, strict=True)):
            args = cls.coerce(cls.validate_static(raw, lambda v: False))
            ctx = ModuleContext(host="h", conn=LocalConnection("h"), variables={}, check=check)
            res = cls().run(ctx, args)
            ours = {**res.data, "changed": res.changed, "failed": res.failed, "msg": res.msg}
            assert _normal(ours, our_name, our_gid) == _normal(ref, ref_name, ref_gid), (i, raw, check)
            if i == 0:
                assert not any(g.gr_name == our_name for g in grp.getgrall())  # check mode added nothing
            if i == 4:
                assert grp.getgrnam(our_name).gr_gid == our_gid
    finally:
        for name in (ref_name, our_name):
            subprocess.run(["groupdel", name], capture_output=True, check=False)


# two SHA-512 crypt hashes (of "secret" and "other"): what Ansible's user module takes
HASH = "$6$provision$0jTqQAMWm3k8Kq4sZrBWnRGtVIzYiUH1cn5ZgJzq6mWfXJYxO0eU7h5m1.2p9wW5Bq1n0P5d5cyPZ1u0z4lzO/"
HASH2 = "$6$provision$9xWq4KpBqDkR0v8oTt1YJQfKk2m6J7bQn2aQ0s8Pz3Y1kq2zV6mWbDqTQe1sF4GmBz0yHq7UpLrXcN9aE5dKj1"


def _user_steps(n: str, uid: int, gid: int, home: str) -> list[tuple[str, dict[str, Any], bool]]:
    """(module, arguments, check mode) in order; the groups ``n``-g (gid), ``n``-a and ``n``-b come first."""
    return [
        ("group", {"name": f"{n}g", "gid": gid}, False),
        ("group", {"name": f"{n}a"}, False),
        ("group", {"name": f"{n}b"}, False),
        ("user", {"name": n}, True),  # check mode: would add, adds nothing
        ("user", {"name": n, "uid": uid, "comment": "Test User", "shell": "/bin/sh", "home": home}, False),
        ("user", {"name": n, "uid": uid, "comment": "Test User", "shell": "/bin/sh", "home": home}, False),
        ("user", {"name": n, "groups": [f"{n}a"], "append": True}, False),
        ("user", {"name": n, "groups": [f"{n}a"], "append": True}, False),  # converged
        ("user", {"name": n, "groups": [f"{n}b"]}, False),  # replaces the supplementary groups
        ("user", {"name": n, "group": f"{n}g"}, False),
        ("user", {"name": n, "shell": "/bin/bash"}, True),
        ("user", {"name": n, "groups": [f"{n}-missing"]}, False),  # fails, names the group
        ("user", {"name": n, "password": HASH}, False),
        ("user", {"name": n, "password": HASH}, False),  # converged
        ("user", {"name": n, "password_lock": True}, False),
        ("user", {"name": n, "password_lock": True}, False),  # converged
        ("user", {"name": n, "password": HASH2, "update_password": "on_create"}, False),  # exists: unchanged
        ("user", {"name": n, "password": HASH2, "password_lock": False}, True),
        ("user", {"name": n, "password": HASH2, "password_lock": False}, False),
        ("user", {"name": n, "state": "absent", "remove": True}, False),
        ("user", {"name": n, "state": "absent", "remove": True}, False),  # converged
    ]


def _shadow(name: str) -> str:
    for line in Path("/etc/shadow").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":")[1]
    return ""


def _user_normal(result: dict[str, Any], n: str, uid: int, gid: int, home: str) -> dict[str, Any]:
    out = {k: v for k, v in result.items() if k not in ("invocation", "exception") and v not in ("", False)}
    if "group" in out:
        out["group"] = "GID" if out["group"] == gid else "AUTO"  # the user's own group: any free gid
    if out.get("uid") == uid:
        out["uid"] = "UID"
    if "gid" in out:
        out["gid"] = "GID" if out["gid"] == gid else "AUTO"
    return json.loads(json.dumps(out).replace(home, "HOME").replace(n, "NAME").replace(f"uid {uid} ", "uid UID "))


def test_user_the_same_as_ansible(tmp_path: Path) -> None:
    ref_name, our_name = f"pvua{secrets.token_hex(3)}", f"pvup{secrets.token_hex(3)}"
    used_uids = {p.pw_uid for p in pwd.getpwall()}
    ref_uid, our_uid = [u for u in range(61001, 62000, 2) if u not in used_uids][:2]
    ref_gid, our_gid = _free_gids(2)
    ref_home, our_home = str(tmp_path / "home-a"), str(tmp_path / "home-p")
    try:
        steps = _user_steps(ref_name, ref_uid, ref_gid, ref_home)
        (tmp_path / "ref").mkdir()
        theirs = ansible_results(tmp_path / "ref", [{m: a, "check_mode": c} for m, a, c in steps])
        mine = _user_steps(our_name, our_uid, our_gid, our_home)
        for i, ((module, raw, check), ref) in enumerate(zip(mine, theirs, strict=True)):
            cls = lookup(module)
            assert cls is not None
            args = cls.coerce(cls.validate_static(raw, lambda v: False))
            ctx = ModuleContext(host="h", conn=LocalConnection("h"), variables={}, check=check)
            res = cls().run(ctx, args)
            ours = {**res.data, "changed": res.changed, "failed": res.failed, "msg": res.msg}
            assert _user_normal(ours, our_name, our_uid, our_gid, our_home) == _user_normal(
                ref, ref_name, ref_uid, ref_gid, ref_home
            ), (i, module, raw, check)
            if i == 3:
                assert our_name not in {p.pw_name for p in pwd.getpwall()}  # check mode added nothing
            if i == 5:
                entry = pwd.getpwnam(our_name)
                assert (entry.pw_uid, entry.pw_shell, entry.pw_dir) == (our_uid, "/bin/sh", our_home)
                assert Path(our_home).stat().st_uid == our_uid
            if i == 10:
                assert pwd.getpwnam(our_name).pw_shell == "/bin/sh"
            if i == 12:  # the hash as given; locked ('!'); on_create and check mode leave it; a new one unlocked
                assert _shadow(our_name) == HASH
            if i in (14, 16, 17):
                assert _shadow(our_name) == "!" + HASH
            if i == 18:
                assert _shadow(our_name) == HASH2
        assert not Path(our_home).exists()  # remove: true took the home
    finally:
        for name in (ref_name, our_name):
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True, check=False)
            for group in (name, f"{name}g", f"{name}a", f"{name}b"):
                subprocess.run(["groupdel", group], capture_output=True, check=False)
