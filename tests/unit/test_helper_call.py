"""The one helper-call contract (``ModuleContext.call_helper`` / ``helper_answer``): the answer, or ONE error type
with the host's message, through LocalConnection with the shipped scripts."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from provision.errors import ModuleError
from provision.modules.base import HelperError, ModuleContext, helper_answer
from provision.transport import CommandResult, LocalConnection
from provision.transport.agent import AgentUnavailable
from provision.transport.local import _PipeStream


@pytest.fixture
def ctx() -> Iterator[Callable[[], ModuleContext]]:
    """A context on a LocalConnection, closed afterwards (file_state.py runs in the connection's agent)."""
    conn = LocalConnection("h")
    yield lambda: ModuleContext(host="h", conn=conn, variables={"ansible_python_interpreter": sys.executable})
    conn.close()


def test_the_answer(tmp_path: Path, ctx: Callable[[], ModuleContext]) -> None:
    answer = ctx().call_helper("file_state.py", "stat", stdin=json.dumps({"paths": [str(tmp_path)]}).encode())
    assert answer["ok"] and answer["states"][0]["type"] == "directory"


def test_a_failure_carries_the_hosts_message_and_the_output(tmp_path: Path, ctx: Callable[[], ModuleContext]) -> None:
    request = json.dumps({"ops": [{"op": "nope", "path": str(tmp_path)}]}).encode()
    with pytest.raises(HelperError) as info:
        ctx().call_helper("file_state.py", "apply", stdin=request, what="apply")
    err = info.value
    assert isinstance(err, ModuleError) and err.host == "h" and err.rc == 1
    assert err.answer is not None and err.answer["ok"] is False and err.reason == err.answer["msg"]
    assert err.msg == f"apply failed (rc=1): {err.answer['msg']}"
    assert err.data["rc"] == 1 and "nope" in str(err.data["stdout"]) and "stderr" in err.data
    failed = err.as_result()
    assert failed.failed and failed.msg == err.msg and failed.data["rc"] == 1


def test_check_rc_false_returns_an_answer_whatever_the_rc(tmp_path: Path, ctx: Callable[[], ModuleContext]) -> None:
    request = json.dumps({"ops": [{"op": "nope", "path": str(tmp_path)}]}).encode()
    answer = ctx().call_helper("file_state.py", "apply", stdin=request, check_rc=False)
    assert answer["ok"] is False and "nope" in answer["msg"]


def test_a_missing_interpreter_is_one_clear_line(ctx: Callable[[], ModuleContext]) -> None:
    with pytest.raises(HelperError) as info:
        ctx().call_helper("wait_for.py", "{}", python="/nonexistent/python3", what="wait_for", hint="check it")
    err = info.value
    assert err.no_python and err.rc in (126, 127) and err.answer is None
    assert err.msg.startswith(f"wait_for: cannot run /nonexistent/python3 (rc={err.rc}): check it")
    with pytest.raises(HelperError, match="cannot run"):  # also when any answer would do
        ctx().call_helper("wait_for.py", "{}", python="/nonexistent/python3", check_rc=False)


def test_no_answer() -> None:
    quiet = CommandResult(0, "not json\n", "boom\n", "cmd")
    with pytest.raises(HelperError, match=r"^h: x.py printed no answer \(rc=0\): hint boom$") as info:
        helper_answer(quiet, "h", "x.py", "python3", hint="hint")
    assert not info.value.no_python and info.value.reason == "boom"
    with pytest.raises(HelperError, match=r"^h: x.py failed \(rc=2\): boom$"):
        helper_answer(CommandResult(2, "", "boom\n", "cmd"), "h", "x.py", "python3")
    with pytest.raises(HelperError, match=r"^h: x.py printed no answer \(rc=2\): boom$"):
        helper_answer(CommandResult(2, "", "boom\n", "cmd"), "h", "x.py", "python3", check_rc=False)
    # the one envelope: an answer that says it failed is a failure whatever the rc, with the host's msg
    said = CommandResult(0, '{"ok": false, "failed": true, "msg": "no such user"}\n', "", "cmd")
    with pytest.raises(HelperError, match=r"^h: x.py failed \(rc=0\): no such user$") as failed:
        helper_answer(said, "h", "x.py", "python3")
    assert failed.value.reason == "no such user" and failed.value.answer == {"ok": False, "failed": True,
                                                                             "msg": "no such user"}  # fmt: skip
    assert helper_answer(said, "h", "x.py", "python3", check_rc=False)["msg"] == "no such user"
    # the last JSON object line is the answer: lines after it that are not JSON do not hide it
    assert helper_answer(CommandResult(0, 'log\n{"ok": true}\ntrailing\n', "", "cmd"), "h", "x.py", "p") == {"ok": True}


def test_an_agent_that_dies_at_once_is_reaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """No such interpreter: the agent's process exits before its source is sent; it is reaped at once (before,
    its Popen was left to a finalizer: a ResourceWarning in whatever test ran next)."""
    procs: list[subprocess.Popen[bytes]] = []
    real_init = _PipeStream.__init__

    def init(self: _PipeStream, proc: subprocess.Popen[bytes]) -> None:
        procs.append(proc)
        real_init(self, proc)

    def broken(self: _PipeStream, data: bytes) -> None:
        raise BrokenPipeError("the agent is gone")

    monkeypatch.setattr(_PipeStream, "__init__", init)
    monkeypatch.setattr(_PipeStream, "send", broken)
    conn = LocalConnection("h")
    with pytest.raises(AgentUnavailable):
        conn.python_agent(sys.executable)
    assert len(procs) == 1 and procs[0].returncode is not None
    conn.close()


# ---- the helpers pd export also ships (make_tiny_model, nixl_probe), called by their modules
HOST_PYTHON = "/usr/bin/python3"  # a Python without transformers or nixl: the helpers' failure answers


def test_the_tiny_model_module_reads_the_helpers_answers(tmp_path: Path) -> None:
    from provision import testing

    dest = tmp_path / "models" / "tiny"
    failed = testing.run_module("sglang_tiny_model", {"path": str(dest), "python": HOST_PYTHON, "seed": 3})
    assert failed.failed and failed.msg.startswith("making the tiny model failed: ModuleNotFoundError"), failed
    assert failed.data["changed"] is False and failed.data["path"] == str(dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == [".tiny.lock"]  # the half-made model is gone
    dest.mkdir()
    spec = {"architecture": "LlamaForCausalLM", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 1024, "dtype": "bfloat16",
            "tie_word_embeddings": False, "max_position_embeddings": 2048, "seed": 3}  # fmt: skip
    (dest / ".provision-tiny-model.json").write_text(json.dumps(spec))
    present = testing.run_module("sglang_tiny_model", {"path": str(dest), "python": HOST_PYTHON, "seed": 3})
    assert not present.failed and not present.changed and present.msg == f"{dest} is present", present
    bad = testing.run_module("sglang_tiny_model", {"path": str(dest), "python": HOST_PYTHON, "seed": -1})
    assert bad.failed and "bad request: seed -1" in bad.msg, bad


def test_the_nixl_smoke_module_reads_the_probes_failure_answer(tmp_path: Path) -> None:
    from provision import testing

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(HOST_PYTHON)
    result = testing.run_module("nixl_smoke", {"venv": str(venv), "backends": ["UCX"], "require_vram": True})
    assert result.failed and result.msg.startswith("NIXL smoke test failed: import nixl._api failed"), result
    assert "no nixl variant installed" in result.msg and result.data["report"]["failed"] is True
