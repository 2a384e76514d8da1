"""The install: a venv with NIXL (the variant for the host's CUDA) and SGLang, made the same way on every host.

:mod:`.host` — what is on the host (``python_check``: interpreters, venv, free space; ``wheel_sync``: a
controller wheelhouse copied over; the host-state probe and the stack's error explanations); :mod:`.modules` —
``nixl_variant`` (cu12/cu13 from the driver's CUDA) and ``venv_stack`` (uv or pip into a NEW venv, then an
atomic switch, under a build lock; converged in one round trip). Their host-side helpers are
``provision/remote/stack_*.py`` and ``pip_state.py``.

May import: :mod:`provision.modules.base` (the module contract), :mod:`provision.commands`,
:mod:`provision.errors`, :mod:`provision.remote`, :mod:`provision.transport`. Never the engine above the
modules (executor, task runner, playbook, CLI).
"""
