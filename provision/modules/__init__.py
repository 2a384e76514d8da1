"""Modules: what a task does on a host. Importing this package registers every module."""

from .base import REGISTRY, Arg, ArgError, Module, ModuleContext, ModuleResult, lookup, register

__all__ = ["REGISTRY", "Arg", "ArgError", "Module", "ModuleContext", "ModuleResult", "lookup", "register"]


def load_all() -> None:
    """Import every module file so that each registers itself."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        if info.name != "base":
            importlib.import_module(f"{__name__}.{info.name}")
