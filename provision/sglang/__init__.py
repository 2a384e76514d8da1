"""SGLang on the host: its own argument check, CPU mode, and the tiny model.

:mod:`.modules` — ``sglang_args_check`` (the server flags checked by SGLang's real parser, on the host),
``sglang_tiny_model`` (a random-weight Llama made on the host: no model hub) and ``sglang_cpu_compat`` (ships
CPU mode's files); :mod:`.cpu_compat` — every piece that lets a real SGLang PD pair run without a GPU, each
with its reason, and the pinned versions it was made for. The shipped files themselves live in
``provision/remote/cpu_compat/``.

May import: :mod:`provision.modules` (the contract and ``files``' atomic writes), :mod:`provision.commands`,
:mod:`provision.remote`. :mod:`provision.pd` reads :mod:`.cpu_compat` for CPU-mode launch flags.
"""
