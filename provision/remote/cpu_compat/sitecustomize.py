"""Shipped by provision for CPU mode: applies :mod:`provision_cpu_compat` at interpreter start.

Python imports ``sitecustomize`` in every interpreter, including the children SGLang spawns (its scheduler and
detokenizer), as long as this directory is on ``PYTHONPATH``. The patches apply only when
``PROVISION_CPU_COMPAT=1``. Afterwards the ``sitecustomize`` this file shadows (Debian ships one) still runs.
"""

import os
import sys


def _apply() -> None:
    if os.environ.get("PROVISION_CPU_COMPAT") != "1":
        return
    try:
        import provision_cpu_compat

        provision_cpu_compat.install()
    except Exception as exc:  # never break interpreter start: the server's own errors say more
        sys.stderr.write("provision cpu compat: not applied: %s: %s\n" % (type(exc).__name__, exc))


def _chain() -> None:
    """Run the next ``sitecustomize.py`` on sys.path (the one this file shadows), if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.abspath(entry or ".") == here or not os.path.isfile(candidate):
            continue
        try:
            with open(candidate, "rb") as fh:
                code = compile(fh.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})
        except Exception:
            pass
        return


_apply()
_chain()
