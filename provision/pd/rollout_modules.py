"""``pd_rollout_step``: one host-side step of ``provision pd rollout`` (:mod:`provision.pd.rollout`), run by the
shipped helper ``provision/remote/pd_rollout.py`` in one round trip.

Actions (``request`` is the helper's JSON request; the rollout builds it from the plan):

* ``router_list`` / ``router_remove`` / ``router_add`` (router hosts): the router's worker API, each action
  waited for until the router lists (or no longer lists) the workers; ``router_metrics``: requests served.
* ``drain`` (server hosts): until the server has no request running or waiting, bounded by ``timeout``; a
  drain that times out is reported (``drained: false``), not failed: the rollout decides.
* ``pinned`` (router hosts): one PD generation pinned to a given prefill and decode; ``pairs``: one for each of
  the given pairs, a bounded number at once (:mod:`provision.pd.pairs`).
* ``files`` (server hosts): keep / restore / discard the previous launch script and env file (and the venv
  link's previous target when an install switched it under the running server).
* ``stack`` (server hosts): does the running server use the venv ``venv_path`` points at now?

Never changes anything in check mode (skipped). Reports ``changed`` for the actions that change something.
"""

from __future__ import annotations

import json
from typing import Any

from ..modules.base import Arg, HelperError, Module, ModuleContext, ModuleResult, register

HELPER = "pd_rollout.py"
ACTIONS = ("adopt", "ports", "router_list", "router_remove", "router_add", "router_metrics", "drain", "pinned",
           "pairs", "files", "stack")  # fmt: skip
CHANGING = ("router_remove", "router_add", "files", "adopt")


@register
class PdRolloutStep(Module):
    name = "pd_rollout_step"
    args = {
        "action": Arg(required=True, choices=ACTIONS),
        "request": Arg("dict", default=None),
        "timeout": Arg("float", default=120.0),
    }

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        action = args["action"]
        if ctx.check:
            return ModuleResult(skipped=True, msg=f"check mode: {action} not run")
        request = dict(args["request"] or {})
        try:
            answer = ctx.call_helper(HELPER, action, stdin=json.dumps(request).encode(), timeout=args["timeout"] + 30,
                                     what=f"pd_rollout {action}", check_rc=False)  # fmt: skip
        except HelperError as exc:
            return exc.as_result()
        if not answer.get("ok"):
            return ModuleResult(failed=True, msg=f"{action}: {answer.get('msg', 'failed')}", data=answer)
        changed = action in CHANGING and bool(answer.get("removed") or answer.get("added") or answer.get("done"))
        return ModuleResult(changed=changed, msg=f"{action}: ok", data=answer)
