"""A stdout callback for ansible-playbook that prints one JSON document shaped like provision's ``--json``
(ansible-core 2.19 no longer ships its json callback: that lives in the ansible.posix collection).

Used by the differential harness through ``ANSIBLE_CALLBACK_PLUGINS`` and ``ANSIBLE_STDOUT_CALLBACK``."""

from __future__ import annotations

import json
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: compat_json
    type: stdout
    short_description: provision-shaped JSON for the differential harness
    description: one JSON document with plays, tasks, per-host results and stats
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "compat_json"

    def __init__(self) -> None:
        super().__init__()
        self.plays: list[dict[str, Any]] = []

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self.plays.append({"play": {"name": play.get_name()}, "tasks": []})

    def _start(self, task: Any) -> None:
        if not self.plays:
            self.plays.append({"play": {"name": ""}, "tasks": []})
        self.plays[-1]["tasks"].append({"task": {"name": task.get_name()}, "hosts": {}})

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._start(task)

    def _record(self, result: Any, **extra: Any) -> None:
        data = dict(self._convert(result._result))
        data["action"] = result._task.action
        data.update(extra)
        if self.plays and self.plays[-1]["tasks"]:
            self.plays[-1]["tasks"][-1]["hosts"][result._host.get_name()] = data

    @staticmethod
    def _convert(value: Any) -> Any:
        return json.loads(json.dumps(value, default=str))

    def v2_runner_on_ok(self, result: Any) -> None:
        self._record(result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._record(result, ignored=True) if ignore_errors else self._record(result)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._record(result, skipped=True)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._record(result)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        summary = {h: stats.summarize(h) for h in sorted(stats.processed)}
        print(json.dumps({"plays": self.plays, "stats": summary}, indent=2, default=str))
