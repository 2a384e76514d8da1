"""provision's stages as Fabric tasks: ``fab -H gpu1,gpu2 bootstrap install smoke preflight pd-up``.

Run ``fab --list`` here for the tasks; ``docs/api.md`` ("A Fabric task") says what each flag does. The roles:
the first ``-H`` host is prefill (and the router), the others decode; ``fabric.yaml`` beside this file may name
them, set vars for every stage (``provision: {extra_vars: {model_path: ...}}``) or point at an inventory.
"""

from provision.fabric import (  # noqa: F401  (the tasks Fabric finds in this module)
    bootstrap,
    install,
    pd_down,
    pd_status,
    pd_up,
    pd_verify,
    playbook,
    preflight,
    site,
    smoke,
)
