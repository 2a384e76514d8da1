"""The command line, as its own package: the engine never imports it.

* :mod:`.app`: the ``provision`` group, ``run``/``task``/``inventory``/``facts`` and ``main()`` (the entry
  point ``provision = "provision.cli:main"`` and ``python -m provision``).
* :mod:`.pd`: ``provision pd up|down|status|logs|verify``.
* :mod:`.common`: what both share: the option set, ``-e`` parsing, ``execute``, the debug log.

Imports run one way: app → pd → common → the engine (executor, plan, report, ...).
"""

from __future__ import annotations

from .app import cli, main

__all__ = ["cli", "main"]
