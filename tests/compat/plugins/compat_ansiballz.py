"""A callback for the differential harness that prints nothing and changes no result: it shares ansible-core's
AnsiballZ cache among the ansible-playbook runs of one compat chunk.

ansible-core builds each Python module's payload (the module and the ``module_utils`` it imports, found by
compiling them all: tenths of a second of CPU per module) once per run, into ``<local tmp>/ansiballz_cache``, a
folder its controller makes anew for every run (``ANSIBLE_LOCAL_TEMP``'s ``ansible-local-*``). Loaded in the
controller before the first worker forks, this makes that folder a link to ``$PROVISION_COMPAT_ANSIBALLZ``, so
each module is built once per chunk instead of once per run: ansible-core still builds, sends and runs every
module the same way (its own cache, its own lock and atomic write), only the cache lives longer. The cache's key
is the module's name, not its source: the harness gives a case that brings modules or ``module_utils`` of its
own a folder of its own (``Harness.ansiballz_dir``). At the run's end ansible-core removes the link, not the
folder."""

from __future__ import annotations

import os

from ansible import constants as C
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: compat_ansiballz
    type: aggregate
    short_description: one AnsiballZ cache for the differential harness's runs
    description: links this run's AnsiballZ cache folder to $PROVISION_COMPAT_ANSIBALLZ
    requirements: [enabled in callbacks_enabled]
"""

ENV = "PROVISION_COMPAT_ANSIBALLZ"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "compat_ansiballz"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        shared = os.environ.get(ENV)
        if shared:
            link = os.path.join(C.DEFAULT_LOCAL_TMP, "ansiballz_cache")  # type: ignore[attr-defined]
            if not os.path.lexists(link):  # nothing built yet: the callbacks load before the first task
                os.symlink(shared, link)
