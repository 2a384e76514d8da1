"""The install: a venv with NIXL (the variant for the host's CUDA) and SGLang, made the same way on every host.

:mod:`.host` — what is on the host (``python_check``: interpreters, venv, free space; ``wheel_sync``: a
controller wheel directory or ``provision wheelhouse`` copied over, sha256-checked; the host-state probe and the
stack's error explanations); :mod:`.modules` — ``nixl_variant`` (cu12/cu13 from the driver's CUDA),
``sglang_release`` (which SGLang: ``auto`` matches the host's torch) and ``venv_stack`` (uv or pip into a NEW
venv, then an atomic switch, under a build lock; converged in one round trip); :mod:`.releases` — the table of
SGLang releases and the choice; :mod:`.wheelhouse` — per-host download plans, the controller's ``pip
download`` and the manifest (used by ``provision wheelhouse``). Their host-side helpers are
``provision/remote/stack_*.py`` and ``pip_state.py``.

May import: :mod:`provision.modules.base` (the module contract), :mod:`provision.commands`,
:mod:`provision.errors`, :mod:`provision.remote`, :mod:`provision.transport`. Never the engine above the
modules (executor, task runner, playbook, CLI).
"""
