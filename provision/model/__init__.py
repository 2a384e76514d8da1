"""Model weights where they must be: ``provision model sync`` and the same weights on prefill and decode.

:mod:`.source` — what ``--src`` names (a controller directory, ``HOST:DIR`` on a seed host, or a hub id resolved
in the controller's own Hugging Face cache, offline) and the controller's manifest of it; :mod:`.sync` — the
sync of a fleet: each host's plan (one round trip), the free-disk check, per-file resumable transfers from the
controller (over SSH) or host to host (fan-out: a host that completed serves the others over the fleet's links,
with a one-time token), the commit (one rename); :mod:`.modules` — the task modules: ``model_sync`` (one host
from a controller directory: the shipped ``model-sync.yml``), ``model_manifest`` and ``model_same`` (pd-up's
identity check). The host side of all of it is ``provision/remote/model_sync.py`` (one file).

May import: :mod:`provision.modules.base` (the module contract), :mod:`provision.commands`,
:mod:`provision.errors`, :mod:`provision.remote`, :mod:`provision.transport`. Never the engine above the
modules (executor, task runner, playbook, CLI).
"""
