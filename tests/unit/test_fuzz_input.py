"""Property-based fuzzing of the user's input (issue 23, class 14): generated inventories (PD vars and
connection vars of any type), playbooks (module arguments of any type, null, odd templates), ``-e`` values and
limits, through the real CLI. Whatever the input, the answer is exit 5 (or 3) with ONE line, or a run that ends
as runs end (0, 2, 4) — never "internal error", never a traceback.

The only hosts are 127.0.0.1 port 1, where nothing listens: a run that passes validation ends unreachable.
Fixed budget (``max_examples``, derandomized): the same inputs in every CI run.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.cli import run_cli_in

PD_VARS = ("pd_dir", "pd_pid_dir", "venv_path", "model_path", "ucx_tls", "ucx_net_devices", "server_port",
           "bootstrap_port", "router_port", "tp", "dp", "base_gpu_id", "page_size", "sglang_extra_args",
           "router_extra_args", "pd_env", "sglang_device", "router_health_check_timeout", "hf_token",
           "sglang_server_cmd", "kv_cache_dtype", "wheelhouse_target")  # fmt: skip
CONNECTION_VARS = ("ansible_port", "ansible_host", "ansible_user", "ansible_ssh_private_key_file",
                   "ansible_python_interpreter", "ansible_become")  # fmt: skip
MODULES = ("debug", "command", "shell", "file", "copy", "set_fact", "wait_for", "fail", "assert", "template",
           "lineinfile", "pip", "uri", "stat")  # fmt: skip

BAD_HOSTS = ("", " ", "a..b", "x" * 300, "\u00e4" * 70, "\u00ad", "-", "127.0.0.1:22", None, 5, [1], "\udcff", "a\x00b")
CODES: list[int] = []  # what the examples ended with (printed with -s: is the fuzzing reaching runs?)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["", "{{ x }}", "{{ undefined_var }}", "{% if %}", "..", "/", "a b", "127.0.0.1", "-1"])
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=6), inner, max_size=3), max_leaves=5)  # fmt: skip


@st.composite
def inputs(draw: st.DrawFn, inventory: bool = True, playbook: bool = True) -> dict[str, Any]:
    """A case: the host's vars (when ``inventory``) and the tasks (when ``playbook``) generated, the rest plain."""
    host_vars = (
        draw(st.dictionaries(st.sampled_from(PD_VARS + CONNECTION_VARS), values, min_size=1, max_size=3))
        if inventory
        else {}
    )
    if "ansible_host" in host_vars:  # names that fail to resolve or encode, never one that could answer
        host_vars["ansible_host"] = draw(st.sampled_from(BAD_HOSTS))
    tasks: list[dict[str, Any]] = [] if playbook else [{"name": "plain", "debug": {"msg": "{{ inventory_hostname }}"}}]
    for _ in range(draw(st.integers(1, 3)) if playbook else 0):
        module = draw(st.sampled_from(MODULES))
        args = draw(st.none() | st.dictionaries(st.sampled_from(["msg", "path", "src", "dest", "state", "mode",
                                                                  "that", "port", "content", "name", "url"]),
                                                 values, max_size=3))  # fmt: skip
        task: dict[str, Any] = {"name": "t", module: args}
        if draw(st.booleans()):
            task[draw(st.sampled_from(["when", "loop", "retries", "delay", "register", "tags", "environment"]))] = draw(
                values
            )
        tasks.append(task)
    tasks.append({"name": "connect", "command": "true"})  # every run that passes validation reaches for its host
    command = draw(
        st.sampled_from(["run", "run", "pd up", "pd status", "inventory", "facts"] if inventory else ["run"])
    )
    extra = draw(st.lists(st.text(max_size=20) | st.sampled_from(["a=1", "tp=x", "pd_dir=5", "@/dev/null"]),
                          max_size=2)) if inventory else []  # fmt: skip
    limit = (
        draw(st.none() | st.text(max_size=10) | st.sampled_from(["p1", "all", "!d1", "prefill&router"]))
        if inventory
        else None
    )
    return {"host_vars": host_vars, "tasks": tasks, "command": command, "extra": extra, "limit": limit}


def write(directory: Path, case: dict[str, Any]) -> list[str]:
    ghost = {"ansible_host": "127.0.0.1", "ansible_port": 1}
    inventory = {"all": {"vars": {"sglang_device": "cpu"}, "children": {
        "prefill": {"hosts": {"p1": {**ghost, **case["host_vars"]}}},
        "decode": {"hosts": {"d1": {**ghost, "server_port": 30010}}},
        "router": {"hosts": {"p1": {"router_port": 8000}}},
    }}}  # fmt: skip
    (directory / "inv.yml").write_text(yaml.safe_dump(inventory))
    (directory / "pb.yml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": case["tasks"]}]))
    argv = {"run": ["run", "pb.yml"], "pd up": ["pd", "up"], "pd status": ["pd", "status"],
            "inventory": ["inventory", "--list"], "facts": ["facts"]}[case["command"]]  # fmt: skip
    argv += ["-i", "inv.yml", "--connect-timeout", "2"]
    for value in case["extra"]:
        argv += ["-e", value]
    if case["limit"] is not None and case["command"] != "inventory":
        argv += ["-l", case["limit"]]
    return argv


EXAMPLES = int(os.environ.get("PROVISION_FUZZ_EXAMPLES", "60"))  # the CI budget (per test); more to hunt
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip


def check(case: dict[str, Any]) -> None:
    old = os.environ.get("PROVISION_DEBUG_LOG")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PROVISION_DEBUG_LOG"] = str(Path(tmp) / "debug.log")
        try:
            result = run_cli_in(Path(tmp), write(Path(tmp), case))
        finally:
            if old is None:
                os.environ.pop("PROVISION_DEBUG_LOG", None)
            else:
                os.environ["PROVISION_DEBUG_LOG"] = old
    CODES.append(result.code)
    shown = result.out + result.err
    assert "internal error" not in shown and "Traceback" not in shown, (case, shown[-3000:])
    assert result.code in (0, 2, 3, 4, 5), (case, result.code, shown[-3000:])
    if result.code in (3, 5):
        errors = [line for line in result.err.splitlines() if line.startswith("ERROR")]
        assert len(errors) == 1, (case, result.err)


@FUZZ
@given(inputs(playbook=False))
def test_any_inventory_extra_vars_and_limit_is_one_line_or_a_run(case: dict[str, Any]) -> None:
    check(case)


@FUZZ
@given(inputs(inventory=False))
def test_any_playbook_is_one_line_or_a_run(case: dict[str, Any]) -> None:
    check(case)


@FUZZ
@given(inputs())
def test_any_input_is_one_line_or_a_run_never_an_internal_error(case: dict[str, Any]) -> None:
    check(case)


def test_the_fuzzing_reached_runs_and_refusals() -> None:
    """Runs after the fuzz test (file order): both kinds of outcome were seen, so neither side is starved."""
    if not CODES:
        return  # run alone
    print(f"\nexit codes of the fuzzed inputs: { {c: CODES.count(c) for c in sorted(set(CODES))} }")
    assert 5 in CODES and any(c in (0, 2, 4) for c in CODES)
