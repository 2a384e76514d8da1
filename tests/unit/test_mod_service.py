"""``service`` before the run and on a host without the service; its behaviour against ansible-core's own
``service`` module (start, stop, restart, reload, pattern, enabled) is compared over SSH through ``become`` by the
compat case ``become_service``."""

from __future__ import annotations

import pytest

from provision.modules.base import ArgError, ModuleContext
from provision.modules.system import Service
from provision.transport import LocalConnection


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"name": "x"}, "one of the following is required: state, enabled"),
        ({"name": "x", "state": "running"}, "state"),
        ({"name": "x", "state": "started", "use": "upstart"}, "use"),
    ],
)
def test_bad_arguments_are_refused_before_the_run(args: dict[str, str], message: str) -> None:
    with pytest.raises(ArgError, match=message):
        Service.validate_static(args, lambda _: False)


@pytest.mark.parametrize("args", [{"state": "started"}, {"enabled": True}])
def test_a_service_without_an_init_script_fails_with_ansibles_message(args: dict[str, object]) -> None:
    full = {"name": "provision-no-such-service", "state": None, "enabled": None, "sleep": None, "pattern": None,
            "arguments": "", "use": "auto", **args}  # fmt: skip
    ctx = ModuleContext(host="h", conn=LocalConnection("h"), variables={})
    result = Service().run(ctx, full)
    assert result.failed
    assert result.msg == "Could not find the requested service provision-no-such-service: host"
