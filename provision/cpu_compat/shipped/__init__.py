"""Files shipped AS THEY ARE to a CPU-mode host's compat directory (see :mod:`provision.cpu_compat`).

They are not imported by provision itself; this ``__init__`` only makes the directory part of the package."""
