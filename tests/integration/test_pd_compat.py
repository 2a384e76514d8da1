"""CPU mode's compatibility pieces (provision/sglang/cpu_compat.py) against the INSTALLED pinned SGLang stack.

Each test fails loudly when a new SGLang, sglang-kernel or NIXL makes a piece unnecessary (drop it) or
broken (fix it): the pins, the empty ``common_ops`` fallback, the VRAM→DRAM relabel in the NIXL agent (in
spawned children too), the CPU engine switch and the CPU flags, the progress thread's pause, the forked children
(that a server's children really are forked, and serve, is checked in ``test_pd_e2e.py``), one torch thread, and
one model module for SGLang's registry (its line in both servers' logs: ``test_pd_e2e.py`` too).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

import pytest

from provision.remote import __file__ as remote_init
from provision.sglang import cpu_compat
from tests.support.stack import SglangStack

pytestmark = pytest.mark.lab

RECHECK = "re-check every piece of provision/sglang/cpu_compat.py against it (and update the pins there)"


def py(
    lab: Any, stack: SglangStack, code: str, *, compat: bool, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with the venv's Python as the lab host's user; ``compat``: with the shipped files."""
    env = ["env", "SGLANG_USE_CPU_ENGINE=1"]
    if compat:
        env += [f"PYTHONPATH={cpu_compat.SHIPPED_DIR}", "PROVISION_CPU_COMPAT=1"]
    result: subprocess.CompletedProcess[str] = lab.run_as(
        stack.host, [*env, f"{stack.venv}/bin/python", "-c", code], timeout=timeout
    )
    return result


def source_of(lab: Any, stack: SglangStack, module: str) -> str:
    """The source file of an installed module, read without importing it (nor its parent packages)."""
    top, *rest = module.split(".")
    code = (
        f"import importlib.util as i, os; root = list(i.find_spec({top!r}).submodule_search_locations)[0]; "
        f"print(open(os.path.join(root, *{rest!r}) + '.py').read())"
    )
    out = py(lab, stack, code, compat=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_the_pins(lab: Any, sglang_stack: SglangStack) -> None:
    code = "import importlib.metadata as m; print(*(m.version(n) for n in ('sglang', 'sglang-kernel', 'nixl')))"
    out = py(lab, sglang_stack, code, compat=False)
    found = out.stdout.split()
    pinned = [cpu_compat.SGLANG_VERSION, cpu_compat.SGLANG_KERNEL_VERSION, cpu_compat.NIXL_VERSION]
    assert found == pinned, f"the stack is {found}, cpu_compat was made for {pinned}: {RECHECK}"


def test_common_ops_is_still_needed_and_enough(lab: Any, sglang_stack: SglangStack) -> None:
    loader = source_of(lab, sglang_stack, "sgl_kernel.load_utils")  # read, not imported: that runs the fallback
    assert "import common_ops" in loader, f"sgl_kernel no longer falls back to `import common_ops`: {RECHECK}"
    bare = py(lab, sglang_stack, "import sgl_kernel", compat=False)
    assert bare.returncode != 0 and "common_ops" in bare.stderr, (
        "sgl_kernel imports on a CPU host WITHOUT the empty common_ops: the piece may be unnecessary now"
    )
    shipped = py(lab, sglang_stack, "import sgl_kernel; print(sgl_kernel.common_ops.__file__)", compat=True)
    assert shipped.returncode == 0, f"sgl_kernel fails even with the empty common_ops:\n{shipped.stderr[-2000:]}"
    assert shipped.stdout.strip().endswith("remote/cpu_compat/common_ops.py")


RELABEL = """
import json, multiprocessing as mp, numpy as np
from nixl._api import nixl_agent, nixl_agent_config
import inspect

def register(_=None):
    agent = nixl_agent("probe-%d" % np.random.randint(1 << 30), nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(1 << 16, dtype=np.uint8)
    try:
        agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "VRAM")
        return "ok"
    except Exception as exc:
        return "%s: %s" % (type(exc).__name__, exc)

if __name__ == "__main__":
    params = {m: "mem_type" in inspect.signature(getattr(nixl_agent, m)).parameters
              for m in ("get_reg_descs", "get_xfer_descs", "prep_xfer_dlist")}
    with mp.get_context("spawn").Pool(1) as pool:
        child = pool.map(register, [0])[0]
    print(json.dumps({"params": params, "here": register(), "child": child}))
"""


def relabel(lab: Any, stack: SglangStack, tmp: str, compat: bool) -> dict[str, Any]:
    lab.run_as(stack.host, ["sh", "-c", f"cat > {tmp}"], input=RELABEL)
    env = ["env"] + ([f"PYTHONPATH={cpu_compat.SHIPPED_DIR}", "PROVISION_CPU_COMPAT=1"] if compat else [])
    out = lab.run_as(stack.host, [*env, f"{stack.venv}/bin/python", tmp], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def test_dram_relabel_is_still_needed_and_works(lab: Any, sglang_stack: SglangStack) -> None:
    tmp = f"{lab.hosts[sglang_stack.host].home}/relabel_probe.py"
    bare = relabel(lab, sglang_stack, tmp, compat=False)
    assert bare["params"] == dict.fromkeys(cpu_compat.PATCHED_METHODS, True), (
        f"nixl_agent's patched methods changed ({bare['params']}): {RECHECK}"
    )
    assert bare["here"] != "ok", "UCX now registers host memory labelled VRAM: the DRAM relabel may be unnecessary"
    patched = relabel(lab, sglang_stack, tmp, compat=True)
    assert patched["here"] == "ok" and patched["child"] == "ok", patched  # spawned children are patched too
    conn = source_of(lab, sglang_stack, "sglang.srt.disaggregation.nixl.conn")
    assert '"VRAM"' in conn and "get_xfer_descs" in conn and "prep_xfer_dlist" in conn, (
        f"SGLang's NIXL connector no longer labels KV buffers VRAM the way the relabel expects: {RECHECK}"
    )


def test_cpu_engine_switch_and_flags(lab: Any, sglang_stack: SglangStack) -> None:
    remote = remote_init.rsplit("/", 1)[0]
    model = f"{lab.hosts[sglang_stack.host].home}/.provision/models/tiny-llama"  # resolve_once reads its config
    made = lab.run_as(sglang_stack.host, [f"{sglang_stack.venv}/bin/python", f"{remote}/make_tiny_model.py", "make"],
                      input=json.dumps({"dest": model}), timeout=300)  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr[-2000:]
    common = source_of(lab, sglang_stack, "sglang.srt.utils.common")
    assert "SGLANG_USE_CPU_ENGINE" in common, f"SGLang no longer reads SGLANG_USE_CPU_ENGINE: {RECHECK}"
    flags = [w for line in cpu_compat.cpu_server_flags() for w in line]
    decode = [w for f in cpu_compat.CPU_DECODE_FLAGS for w in f]
    base = ["--model-path", model, "--disaggregation-transfer-backend", "nixl"]
    request = {
        "argvs": [[*base, "--disaggregation-mode", "prefill", *flags],
                  [*base, "--disaggregation-mode", "decode", *flags, *decode]],
        "env": {**cpu_compat.CPU_ENV, "PYTHONPATH": str(cpu_compat.SHIPPED_DIR)},
    }  # fmt: skip
    helper = f"{remote}/sglang_args_check.py"
    out = lab.run_as(
        sglang_stack.host, [f"{sglang_stack.venv}/bin/python", helper, "check"], input=json.dumps(request), timeout=300
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["results"] == [{"ok": True, "error": None}] * 2, f"SGLang rejects the CPU flags: {report}"


PROGRESS = """
import json, time
from nixl._api import nixl_agent, nixl_agent_config
agent = nixl_agent("idle-probe", nixl_agent_config(backends=["UCX"]))
t0, c0 = time.time(), time.process_time()
time.sleep(3)
print(json.dumps({"cpu": (time.process_time() - c0) / (time.time() - t0)}))
"""


def test_the_progress_thread_pause_is_still_needed_and_works(lab: Any, sglang_stack: SglangStack) -> None:
    api = source_of(lab, sglang_stack, "nixl_cu13._api")
    assert "pthrDelay = 0" in api, f"NIXL's Python API no longer creates agents with pthrDelay 0: {RECHECK}"
    out = py(lab, sglang_stack, PROGRESS, compat=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "NIXL progress thread pauses 1000 us" in out.stderr
    cpu = json.loads(out.stdout.strip().splitlines()[-1])["cpu"]
    assert cpu < 0.2, f"an idle NIXL agent still uses {cpu:.0%} of a core with the pause"  # busy: a whole core


FORK = """
import json, multiprocessing as mp
mp.set_start_method("spawn", force=True)  # what SGLang's engine does before it starts the scheduler
print(json.dumps({"method": mp.get_start_method()}))
"""


def test_forked_children_are_still_needed_and_work(lab: Any, sglang_stack: SglangStack) -> None:
    engine = source_of(lab, sglang_stack, "sglang.srt.entrypoints.engine")
    assert 'mp.set_start_method("spawn", force=True)' in engine, (
        f"SGLang's engine no longer sets the spawn start method the way the fork expects: {RECHECK}"
    )
    bare = py(lab, sglang_stack, FORK, compat=False)
    assert json.loads(bare.stdout.strip().splitlines()[-1]) == {"method": "spawn"}, bare.stderr[-2000:]
    forked = py(lab, sglang_stack, FORK, compat=True)
    assert json.loads(forked.stdout.strip().splitlines()[-1]) == {"method": "fork"}, forked.stderr[-2000:]
    assert "the server's children are forked, not spawned" in forked.stderr


THREADS = "import json, torch; print(json.dumps({'threads': torch.get_num_threads()}))"


def test_one_torch_thread_is_still_needed_and_works(lab: Any, sglang_stack: SglangStack) -> None:
    runner = source_of(lab, sglang_stack, "sglang.srt.model_executor.model_runner")
    assert re.search(r'if self\.device != "cpu":\s*torch\.set_num_threads\(1\)', runner), (
        f"SGLang's model runner no longer leaves a CPU server's torch threads alone: {RECHECK}"
    )
    bootstrap = source_of(lab, sglang_stack, "sglang.srt.distributed.bootstrap")
    assert "if _is_cpu_amx_available or _is_cpu_arm64:" in bootstrap, (
        f"SGLang binds a CPU server's OpenMP threads under other conditions now: {RECHECK}"
    )
    bare = py(lab, sglang_stack, THREADS, compat=False)
    threads = json.loads(bare.stdout.strip().splitlines()[-1])["threads"]
    assert threads > 1 or os.cpu_count() == 1, f"torch starts on {threads} thread(s) by itself: the piece may go"
    one = lab.run_as(sglang_stack.host, ["env", *(f"{k}={v}" for k, v in cpu_compat.CPU_ENV.items()),
                                         f"{sglang_stack.venv}/bin/python", "-c", THREADS], timeout=300)  # fmt: skip
    assert json.loads(one.stdout.strip().splitlines()[-1]) == {"threads": 1}, one.stderr[-2000:]


REGISTRY = """
import json, os, sys, tempfile
model = tempfile.mkdtemp()
with open(os.path.join(model, "config.json"), "w") as fh:
    json.dump({"architectures": ["LlamaForCausalLM"]}, fh)  # the tiny model's, as make_tiny_model writes it
import provision_cpu_compat  # what the sitecustomize does in a server's launcher
kept = provision_cpu_compat.only_model_modules(
    [sys.executable, "-m", "sglang.launch_server", "--model-path", model], os.environ)
from sglang.srt.models.registry import ModelRegistry
cls, arch = ModelRegistry.resolve_model_cls(["LlamaForCausalLM"])
print(json.dumps({"kept": kept, "models": len(ModelRegistry.models), "resolved": [cls.__name__, arch],
                  "modules": sorted(m for m in sys.modules if m.startswith("sglang.srt.models."))}))
"""


def test_one_model_module_is_still_needed_and_works(lab: Any, sglang_stack: SglangStack) -> None:
    """SGLang's registry imports every model module when it is imported (the scheduler's largest cost to /health:
    3.3 of 5.1 CPU-s), skipping those SGLANG_DISABLED_MODEL_ARCHS names; with the piece it imports the model's own
    and still resolves the model's class. (The registry's source is read for the first part: importing all 255
    modules in a fresh venv compiles them, over 300 s in a CI run beside the other groups.)"""
    registry = source_of(lab, sglang_stack, "sglang.srt.models.registry")
    assert re.search(r'^else:\n\s+ModelRegistry\.register\("sglang\.srt\.models"\)', registry, re.M), (
        f"SGLang's registry no longer imports every model module when imported: the piece may go ({RECHECK})"
    )
    assert "for _, name, ispkg in pkgutil.iter_modules(package.__path__" in registry, RECHECK
    one = py(lab, sglang_stack, REGISTRY, compat=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    only = json.loads(one.stdout.strip().splitlines()[-1])
    assert only["kept"] == ["llama"] and only["resolved"] == ["LlamaForCausalLM", "LlamaForCausalLM"], only
    assert only["models"] < 10 and "sglang.srt.models.llama" in only["modules"], only
    assert len(only["modules"]) < 10, f"SGLANG_DISABLED_MODEL_ARCHS no longer keeps modules out: {RECHECK}"
    assert "SGLang's model registry imports only llama (of " in one.stderr
