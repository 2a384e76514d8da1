"""``group`` against ansible-core's own module, on this machine (the test suite runs as root: the lab makes Unix
users): each tool manages a group of its own (a fresh name and gid), the same steps in the same order, and the
registered results must match once the names and gids are mapped."""

from __future__ import annotations

import grp
import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

from ansible_ref import ansible_results

from provision.catalog import lookup
from provision.modules.base import ModuleContext
from provision.transport import LocalConnection


def _free_gids(n: int) -> list[int]:
    used = {g.gr_gid for g in grp.getgrall()}
    return [g for g in range(47000, 48000, 2) if g not in used and g - 100 not in used][:n]  # _steps uses gid-100


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
