"""The generic, Ansible-compatible task modules (``command``, ``shell``, ``file``, ``copy``, ``template``,
``wait_for``, ``uri``, ``pip``, ``debug``, ``set_fact``, ``fail``, ``assert``) and the module contract
(:mod:`.base`: ``Module``, ``ModuleContext`` with the helper-call contract, ``ModuleResult``, ``register``).

May import: :mod:`provision.transport`, :mod:`provision.commands`, :mod:`provision.errors`,
:mod:`provision.remote`, :mod:`provision.data`, :mod:`provision.templating`. The GPU domain's modules
(``stack/``, ``nixl/``, ``sglang/``, ``pd/``) build on :mod:`.base`; nothing here imports them.
:mod:`provision.catalog` lists every module file.
"""

from .base import REGISTRY, Arg, ArgError, Module, ModuleContext, ModuleResult, lookup, may_omit, register

__all__ = [
    "REGISTRY", "Arg", "ArgError", "Module", "ModuleContext", "ModuleResult", "lookup", "may_omit", "register",
]  # fmt: skip
