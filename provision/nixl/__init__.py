"""NIXL: the gate and the preflight.

:mod:`.modules` — ``nixl_smoke`` (the seed's gate: nixl imports, its plugins load, ``UCX`` is listed) and
``nixl_transfer`` (a real two-process WRITE from a prefill host into a decode host's memory, verified, timed
and judged against a floor); :mod:`.pairing` — the preflight's choice of memory, GPUs and link for one pair,
from both hosts' facts; :mod:`.ucx` — UCX environment checks (``UCX_TLS`` without tcp or cuda_ipc), the
``UCX_PROTO_INFO`` table parser, bandwidth floors per link kind. Host side: ``provision/remote/nixl_probe.py``
and ``nixl_transfer.py``.

May import: :mod:`provision.modules.base`, :mod:`provision.commands`, :mod:`provision.errors`,
:mod:`provision.remote`, :mod:`provision.transport`. :mod:`provision.pd` reads :mod:`.ucx` for the launch env.
"""
