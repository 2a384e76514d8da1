"""``service`` before the run and on a host without the service; its behaviour against ansible-core's own
``service`` module (start, stop, restart, reload, pattern, enabled) is compared over SSH through ``become`` by the
compat case ``become_service``. The host side's service commands (``run_detached``, over THE pump) run here as on a
host: a daemon a command leaves holding its pipes does not hold the task, and the output kept is bounded."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path
from types import ModuleType

import pytest

from provision import remote
from provision.modules.base import ArgError, ModuleContext
from provision.modules.system import Service, SystemdService
from provision.transport import LocalConnection


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"name": "x"}, "one of the following is required: state, enabled"),
        ({"name": "x", "state": "running"}, "state"),
        ({"name": "x", "state": "started", "use": "upstart"}, "use"),
        ({"masked": True}, "missing parameter\\(s\\) required by 'masked': name"),
        ({"state": "started"}, "required by 'state': name"),
        ({"daemon_reload": True, "scope": "user"}, "scope 'user' is not supported"),
    ],
)
def test_bad_arguments_are_refused_before_the_run(args: dict[str, str], message: str) -> None:
    with pytest.raises(ArgError, match=message):
        Service.validate_static(args, lambda _: False)


@pytest.mark.parametrize(
    "args",
    [
        {"daemon_reload": True},  # systemd_service's arguments, handed on as Ansible's service action does
        {"daemon-reload": True},
        {"name": "x", "masked": False},  # false is given (ansible-core's required_one_of counts it)
        {"name": "x", "enabled": False},
        {"name": "x", "state": "started", "no_block": True, "force": True},
    ],
)
def test_systemd_arguments_and_false_values_are_taken(args: dict[str, object]) -> None:
    Service.validate_static(args, lambda _: False)
    SystemdService.validate_static(args, lambda _: False)


def test_systemd_service_arguments_on_a_host_without_systemd_fail_the_task(host_service: ModuleType) -> None:
    serve = host_service.hostlib.answer_of
    answer = serve(host_service.ACTIONS, ["apply"], '{"module": "service", "name": "x", "daemon_reload": true}')
    assert answer["failed"] and "Unsupported parameters for (service) module: daemon_reload" in answer["msg"]
    answer = serve(host_service.ACTIONS, ["apply"], '{"module": "service", "state": "started"}')
    assert answer["failed"] and answer["msg"] == "missing required arguments: name"


@pytest.mark.parametrize("args", [{"state": "started"}, {"enabled": True}])
def test_a_service_without_an_init_script_fails_with_ansibles_message(args: dict[str, object]) -> None:
    full = {"name": "provision-no-such-service", "state": None, "enabled": None, "sleep": None, "pattern": None,
            "arguments": "", "use": "auto", **args}  # fmt: skip
    ctx = ModuleContext(host="h", conn=LocalConnection("h"), variables={})
    result = Service().run(ctx, full)
    assert result.failed
    assert result.msg == "Could not find the requested service provision-no-such-service: host"


@pytest.fixture
def host_service() -> ModuleType:
    """provision/remote/service.py imported as on a host: its libraries (hostlib, pump) by their plain names."""
    for folder in (str(remote.REMOTE_DIR), str(remote.PROGRAMS_DIR)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location("host_service", remote.path("service.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_daemon_holding_the_pipes_does_not_hold_the_service_command(host_service: ModuleType, tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    script = f"echo out; echo err >&2; sleep 300 & echo $! > {pidfile}"
    try:
        rc, out, err = host_service.run_detached(["/bin/sh", "-c", script])
        assert (rc, out, err) == (0, "out\n", "err\n")
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_a_service_commands_output_is_kept_up_to_the_limit(
    host_service: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_service, "OUTPUT_LIMIT", 1000)
    rc, out, err = host_service.run_detached(["/bin/sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; echo e >&2"])
    assert (rc, out, err) == (0, "x" * 1000, "e\n")
