"""One module run as a task runs it, without a playbook: for tests, and for tools that drive one module.

``run_module("copy", {"content": "{{ greeting }}", "dest": "/tmp/x"}, variables={"greeting": "hi"})`` does what
the task runner (:mod:`provision.executor`) does for one task on one host: the module found in the catalog, its
arguments normalized (a free-form string included), checked (:meth:`Module.validate_static`), rendered with the
host's variables by provision's own renderer (``omit`` dropped), coerced, and the module run with a
:class:`~provision.modules.base.ModuleContext` built as the runner builds it (:func:`module_context`: the
variables as a layered :class:`~provision.templating.Vars`, ``render``/``render_file``/``evaluate`` bound to them,
the modes, the environment). The connection is ``ansible_connection: local``'s unless one is given.

Errors are the engine's: ``ArgError`` for bad arguments, ``TemplateError`` for a template that fails,
``ModuleError`` from the module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import templating
from .catalog import lookup
from .errors import ProvisionError
from .modules.base import ModuleContext, ModuleResult
from .transport import Connection
from .transport.local import LocalConnection


def module_context(
    host: str = "local",
    variables: Mapping[str, Any] | None = None,
    conn: Connection | None = None,
    *,
    check: bool = False,
    diff: bool = False,
    become: bool = False,
    become_user: str = "root",
    verbosity: int = 0,
    environment: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    controller_dir: str = ".",
    peer: Callable[[str], Connection] | None = None,
    progress: Callable[[str], None] | None = None,
    where: str = "",
) -> ModuleContext:
    """The context a module gets on ``host``, built as ``TaskRunner._context`` builds it."""
    values = variables if isinstance(variables, templating.Vars) else templating.Vars(dict(variables or {}))
    connection = conn if conn is not None else LocalConnection(host)
    return ModuleContext(
        host=host,
        conn=connection,
        variables=values,
        check=check,
        diff=diff,
        become=become,
        become_user=become_user or "root",
        verbosity=verbosity,
        environment={k: str(v) for k, v in (environment or {}).items()},
        timeout=timeout or float(values.get("command_timeout", 1800.0)),
        controller_dir=controller_dir,
        render=lambda text: templating.render_text(text, values, where),
        render_file=lambda text, extra, options: templating.render_file(text, values.child(**extra), where, options),
        evaluate=lambda expr: templating.evaluate_expression(expr, values, where),
        peer=peer if peer is not None else (lambda name: connection if name == host else LocalConnection(name)),
        progress=progress,
    )


def prepare_args(name: str, raw: Any, variables: Mapping[str, Any], where: str = "") -> tuple[Any, dict[str, Any]]:
    """The module class of ``name`` and its arguments as the runner hands them over: normalized, checked,
    rendered (expression arguments such as assert's ``that`` are left for the module), ``omit`` dropped,
    coerced."""
    cls = lookup(name)
    if cls is None:
        raise ProvisionError(f"no module named {name!r}")
    args = cls.validate_static(cls.normalize(raw), templating.is_template)
    expressions = {k: v for k, v in args.items() if k in cls.expression_args}
    rendered = templating.render({k: v for k, v in args.items() if k not in expressions}, variables, where)
    rendered = templating.drop_omitted(rendered)
    return cls, cls.coerce({**rendered, **expressions})


def run_module(
    name: str,
    args: Any = None,
    *,
    host: str = "local",
    variables: Mapping[str, Any] | None = None,
    conn: Connection | None = None,
    **context: Any,
) -> ModuleResult:
    """Run the module ``name`` with ``args`` (a mapping or a free-form string) on ``host`` as one task would;
    ``context`` takes :func:`module_context`'s keywords (``check``, ``become``, ``controller_dir``, ...)."""
    ctx = module_context(host, variables, conn, **context)
    cls, coerced = prepare_args(name, args, ctx.variables)
    result: ModuleResult = cls().run(ctx, coerced)
    return result
