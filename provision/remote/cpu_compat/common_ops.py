"""Empty on purpose — shipped by provision for CPU mode (pinned: sglang 0.5.23 / sglang-kernel 0.4.10).

The sglang-kernel wheel ships CUDA builds of ``common_ops`` only; its loader's last fallback is
``import common_ops`` (``sgl_kernel/load_utils.py``). On a host without a GPU this module satisfies that
import, and a Llama on CPU never calls a kernel op. See ``provision/cpu_compat/__init__.py``.
"""
