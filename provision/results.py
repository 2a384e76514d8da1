"""Results: what each task did on each host, the per-host recap, and the run's exit code."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from .errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE


class Status(str, enum.Enum):
    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    SKIPPED = "skipped"
    UNREACHABLE = "unreachable"


@dataclass
class TaskResult:
    host: str
    task: str
    status: Status
    msg: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    diff: str | None = None
    ignored: bool = False  # failed but ignore_errors
    changed_on_failure: bool = False  # failed, but changed something first (a command that ran): Ansible counts it
    item_results: list[TaskResult] = field(default_factory=list)
    duration: float = 0.0
    delegated_to: str | None = None

    @property
    def changed(self) -> bool:
        return self.status is Status.CHANGED

    @property
    def failed(self) -> bool:
        return self.status is Status.FAILED

    def registered(self) -> dict[str, Any]:
        """The value ``register:`` stores, shaped as Ansible's."""
        out: dict[str, Any] = dict(self.data)
        out.update(
            changed=self.status is Status.CHANGED or (self.status is Status.FAILED and self.changed_on_failure),
            failed=self.status in (Status.FAILED, Status.UNREACHABLE),
            skipped=self.status is Status.SKIPPED,
            msg=self.data.get("msg", self.msg),  # debug keeps its message's type there
        )
        if "skip_reason" in out:  # skipped by `when`: Ansible's result has no msg
            out.pop("msg", None)
        if self.status is Status.UNREACHABLE:
            out["unreachable"] = True
        if self.item_results:
            out["results"] = [r.registered() for r in self.item_results]
        return out

    def to_json(self) -> dict[str, Any]:
        out = self.registered()
        out.pop("results", None)
        if self.item_results:
            out["results"] = [r.to_json() for r in self.item_results]
        if self.diff:
            out["diff"] = self.diff
        if self.ignored:
            out["ignored"] = True
        return out


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    ignored: int = 0
    rescued: int = 0  # failures a block's rescue caught (counted neither ok nor failed, as in Ansible)

    def count(self, result: TaskResult) -> None:
        if result.status is Status.CHANGED:
            self.changed += 1
            self.ok += 1  # Ansible counts changed tasks in ok too
        elif result.status is Status.OK:
            self.ok += 1
        elif result.status is Status.SKIPPED:
            self.skipped += 1
        elif result.status is Status.UNREACHABLE and result.ignored:  # ignore_unreachable, as Ansible counts it
            self.ok += 1
            self.ignored += 1
        elif result.status is Status.UNREACHABLE:
            self.unreachable += 1
        elif result.ignored:
            self.ignored += 1
            self.ok += 1
            if result.changed_on_failure:  # Ansible: an ignored failure that changed something counts changed
                self.changed += 1
        else:
            self.failed += 1

    def to_json(self) -> dict[str, int]:
        return {
            "ok": self.ok, "changed": self.changed, "failed": self.failed, "unreachable": self.unreachable,
            "skipped": self.skipped, "rescued": self.rescued, "ignored": self.ignored,
        }  # fmt: skip


@dataclass
class RunSummary:
    stats: dict[str, HostStats] = field(default_factory=dict)
    interrupted: bool = False
    aborted: str | None = None  # why the run stopped early (max_fail_percentage, any_errors_fatal)

    def stat(self, host: str) -> HostStats:
        return self.stats.setdefault(host, HostStats())

    @property
    def failed_hosts(self) -> list[str]:
        return [h for h, s in self.stats.items() if s.failed]

    @property
    def unreachable_hosts(self) -> list[str]:
        return [h for h, s in self.stats.items() if s.unreachable]

    @property
    def changed_total(self) -> int:
        return sum(s.changed for s in self.stats.values())

    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.failed_hosts or self.aborted:
            return EXIT_FAILED
        if self.unreachable_hosts:
            return EXIT_UNREACHABLE
        return EXIT_OK
