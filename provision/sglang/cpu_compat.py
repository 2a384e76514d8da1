"""CPU mode: every compatibility piece that lets a REAL SGLang prefill/decode pair run on hosts without a GPU.

This is a way to test and try provision (CI, a laptop, a person without GPUs), NOT a way to serve models:
the model is a tiny random-weight Llama generated on the host, and the KV cache moves between host-memory
buffers. Everything here was made for, and is tested against, the pinned stack below; a new SGLang must be
re-checked with ``tests/integration/test_pd_compat.py``, which fails loudly when a piece became unnecessary or
broken.

Pinned: sglang 0.5.23, sglang-kernel 0.4.10, sglang-router 0.3.2, nixl / nixl-cu13 1.5.1.

The pieces (the only CPU-specific knowledge in provision; :mod:`provision.pd.spec` imports it from here):

1. ``SGLANG_USE_CPU_ENGINE=1`` (:data:`CPU_ENV`). Without it SGLang treats ``--device cpu`` as unknown and
   its RoPE falls back to vllm's kernels.
2. Server flags (:func:`cpu_server_flags`): ``--device cpu --attention-backend torch_native
   --disable-cuda-graph --skip-server-warmup --disable-radix-cache --max-total-tokens N``.
   ``--mem-fraction-static`` does not bound the CPU KV pool; without ``--max-total-tokens`` a server
   allocated ~2 GB. ``--sleep-on-idle``: without it an idle CPU server's scheduler busy-polls a whole core;
   with it an idle pair's two schedulers took 2.1% and 1.9% of a core (60 s of an idle ``site.yml`` pair,
   2026-12-06).
3. Decode flag (:data:`CPU_DECODE_FLAGS`): ``--disaggregation-decode-retraction-backup cpu_tensor``: the
   default backup pins host memory through CUDA.
4. ``remote/cpu_compat/common_ops.py``: an EMPTY module named ``common_ops``. The sglang-kernel wheel ships CUDA builds
   only; the last fallback of its loader (``sgl_kernel/load_utils.py``) is ``import common_ops``. A Llama on
   CPU never calls a kernel op, so an empty module is enough for ``import sgl_kernel`` to succeed.
5. ``remote/cpu_compat/provision_cpu_compat.py`` + ``remote/cpu_compat/sitecustomize.py``: the DRAM relabel.
   SGLang's NIXL connector labels the KV buffers "VRAM"; on CPU they are host memory and UCX refuses to register host
   memory as VRAM (``NIXL_ERR_BACKEND``). The patch relabels "VRAM" as "DRAM" in the NIXL agent's
   ``get_reg_descs``, ``get_xfer_descs`` AND ``prep_xfer_dlist`` (patching only the first two hangs the
   request with ``no available backends for mem type 'VRAM_SEG'``). ``sitecustomize`` applies it at
   interpreter start in EVERY process of the server (SGLang's scheduler runs in children; spawned ones
   inherit ``PYTHONPATH`` but not a parent's monkey patches: see 6), then runs the ``sitecustomize`` it shadows.
   The same module gives NIXL's progress thread a 1 ms pause (it otherwise spins a whole core per server).
6. Forked children, in the same module: SGLang sets the ``spawn`` start method for its scheduler and
   detokenizer (CUDA does not survive a fork), and each spawned child imports SGLang again: a CPU decode
   server took 37.5 CPU-s (27.3 s on 2 cores) to ``/health``. With no CUDA on the host, ``spawn`` becomes
   ``fork`` and the children inherit the launcher's imports: 16.8 CPU-s (17.6 s), every start and restart
   (``benchmarks/cpu_server_start.py``).

7. ``OMP_NUM_THREADS=1`` (in :data:`CPU_ENV`): torch's intra-op threads, one per server process instead of one per
   core. SGLang sets one thread for GPU servers only (``ModelRunner.load_model``). The tiny model's operations are
   too small to share: with a thread per core a server took about the same wall for its generations and twice the
   CPU (on 2 cores: 30 generations of 16 tokens, 3.81 CPU-s against 1.78; its start 16.1 CPU-s against 14.2:
   ``benchmarks/cpu_server_start.py --compare threads``, medians of 3), and each server's threads were as many as
   the machine's cores, whatever else ran on them. ``pd_env`` may set it.
8. One model module for SGLang's registry, in the same shipped module: the scheduler imports every module of
   ``sglang/srt/models`` (255) to find the model's class, 3.3 of its 5.1 CPU-s to ``/health`` once the children
   are forked (6). In a server's launcher the shipped module sets SGLang's own ``SGLANG_DISABLED_MODEL_ARCHS`` to
   every model module whose ``EntryClass`` names none of the model's ``config.json`` architectures; the forked
   scheduler inherits it. A decode server's start to ``/health``: 16.7 CPU-s / 17.6 s against 14.5 / 15.6, the
   scheduler 4.5 against 1.8 CPU-s (``benchmarks/cpu_server_start.py --compare registry``, medians of 3). Nothing
   is set over a value ``pd_env`` gives (empty: every module), nor when no module names the model.

The shipped files go to one directory on the host (``pd_compat_dir``); the launch env puts it first on
``PYTHONPATH`` and sets ``PROVISION_CPU_COMPAT=1`` (:func:`cpu_env`).
"""

from __future__ import annotations

from ..remote import REMOTE_DIR

SGLANG_VERSION = "0.5.23"
SGLANG_KERNEL_VERSION = "0.4.10"
NIXL_VERSION = "1.5.1"

SHIPPED_DIR = REMOTE_DIR / "cpu_compat"
SHIPPED = ("common_ops.py", "provision_cpu_compat.py", "sitecustomize.py")
PATCHED_METHODS = ("get_reg_descs", "get_xfer_descs", "prep_xfer_dlist")  # of nixl._api.nixl_agent

CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "PROVISION_CPU_COMPAT": "1", "OMP_NUM_THREADS": "1"}
DEFAULT_MAX_TOTAL_TOKENS = 16384
CPU_DECODE_FLAGS = (("--disaggregation-decode-retraction-backup", "cpu_tensor"),)
# A CPU server answers /health slowly while it decodes and while another server starts on the same cores (seen:
# over 5 s, the router's default, three times in a row on both decodes of a 2-core machine during a rollout, and
# the router then had no decode worker): the router waits this long instead.
CPU_ROUTER_HEALTH_CHECK_TIMEOUT = 30
# pd_transfer_timeout in CPU mode (spec.transfer_timeout_env): a CPU request's whole prefill takes under a second
# here, so a server that waits 15 s for its peer's half of a transfer has lost it (its decode was killed, say),
# and fails it for the router to retry on another pair. SGLang's own 300 s outlasted the lab clients' 90-120 s.
CPU_TRANSFER_TIMEOUT = 15


def cpu_server_flags(max_total_tokens: int = DEFAULT_MAX_TOTAL_TOKENS) -> list[list[str]]:
    """The server flags CPU mode needs, one flag (with its value) per entry."""
    return [
        ["--device", "cpu"],
        ["--attention-backend", "torch_native"],
        ["--disable-cuda-graph"],
        ["--skip-server-warmup"],
        ["--disable-radix-cache"],
        ["--max-total-tokens", str(max_total_tokens)],
        # an idle CPU scheduler otherwise busy-polls a whole core: two servers held both cores of a 2-core
        # machine, and every provision run beside them (a converged site.yml, CI) waited for CPU
        ["--sleep-on-idle"],
    ]


def cpu_env(compat_dir: str) -> dict[str, str]:
    """Environment of a CPU-mode server: the engine switch, and the shipped modules first on PYTHONPATH."""
    return {**CPU_ENV, "PYTHONPATH": compat_dir}


def shipped_files() -> dict[str, bytes]:
    """Name → content of every file shipped to the host's compat directory."""
    return {name: (SHIPPED_DIR / name).read_bytes() for name in SHIPPED}


__all__ = [
    "CPU_DECODE_FLAGS",
    "CPU_ENV",
    "CPU_ROUTER_HEALTH_CHECK_TIMEOUT",
    "CPU_TRANSFER_TIMEOUT",
    "PATCHED_METHODS",
    "SGLANG_VERSION",
    "SHIPPED",
    "cpu_env",
    "cpu_server_flags",
    "shipped_files",
]
