"""The import graph of provision/: no circle at all, and nothing that runs back up the layers
(cli → api → executor → modules and the GPU domain → transport → commands/errors); every module file is in the
catalog's explicit list.

Every ``import`` counts, at module level and inside functions; only imports under ``if TYPE_CHECKING:`` do not.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "provision"

DOMAIN = ("provision.stack", "provision.nixl", "provision.sglang", "provision.pd", "provision.model")
# the task runner's three layers (task_vars <- module_call <- task_executor): they never import the executor
TASK_RUNNER = ("provision.executor.task_executor", "provision.executor.module_call", "provision.executor.task_vars")
ENGINE_ABOVE_MODULES = (  # what a task module (generic or domain) must never import
    "provision.cli",
    "provision.executor",
    "provision.playbook",
    "provision.plan",
    "provision.report",
    "provision.catalog",
    "provision.inventory",
)


def _under(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@functools.cache  # the sources do not change during a session; the tests only read the trees (~1.2 s to parse)
def _modules() -> dict[str, tuple[Path, bool, ast.Module]]:
    """Each module of provision/: its file, whether it is a package's ``__init__``, its parsed source."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package, tree)
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the import nodes under ``if TYPE_CHECKING:``."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
            if name == "TYPE_CHECKING":
                skip.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return skip


@functools.cache  # each test reads the graph, none changes it
def import_graph() -> dict[str, set[str]]:
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, (_, is_package, tree) in modules.items():
        skip = _type_checking_only(tree)
        package = name if is_package else name.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:  # `from . import templating` imports the submodule
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in modules else known(base))
        graph[name] = {t for t in targets if t and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_the_graph_sees_the_imports() -> None:
    graph = import_graph()
    assert "provision.executor.task_executor" in graph["provision.executor.linear"]
    assert {"provision.cli.app", "provision.cli.pd", "provision.cli.common"} <= graph.keys()
    assert "provision.cli.common" in graph["provision.cli.pd"]
    assert "provision.facts" in graph["provision.executor.task_executor"]  # a function-level import counts
    assert "provision.transport.base" in graph["provision.transport.local"]  # `from .base import` resolves


def test_there_is_no_import_circle() -> None:
    found = cycles(import_graph())
    assert not found, f"import circles: {[' <-> '.join(sorted(c)) for c in found]}"


def test_nothing_imports_back_up() -> None:
    graph = import_graph()
    for name, targets in graph.items():
        if not _under(name, "provision.cli") and name != "provision.__main__":  # `python -m provision`
            assert not {t for t in targets if _under(t, "provision.cli")}, f"{name} imports the CLI"
    for name, targets in graph.items():  # the executor (linear) is imported by its package's __init__ alone
        if name != "provision.executor":
            assert "provision.executor.linear" not in targets, f"{name} imports the executor"
        if _under(name, TASK_RUNNER):  # the task runner's layers import one another only, never up
            inside = {t for t in targets if _under(t, "provision.executor")}
            assert inside <= set(TASK_RUNNER), f"{name} imports {sorted(inside)}"
    assert "provision.cli.app" not in graph["provision.cli.pd"] | graph["provision.cli.common"]
    assert "provision.cli.pd" not in graph["provision.cli.common"]


def test_modules_and_the_gpu_domain_stay_below_the_engine() -> None:
    graph = import_graph()
    for name, targets in graph.items():
        if _under(name, ("provision.modules", *DOMAIN)):
            above = {t for t in targets if _under(t, ENGINE_ABOVE_MODULES)}
            assert not above, f"{name} imports {sorted(above)}"
        if _under(name, "provision.modules"):  # the generic modules know nothing of the GPU domain
            domain = {t for t in targets if _under(t, DOMAIN)}
            assert not domain, f"{name} imports {sorted(domain)}"


def test_the_transport_and_the_bottom_layer_import_only_downwards() -> None:
    graph = import_graph()
    for name, targets in graph.items():
        if _under(name, "provision.transport"):
            allowed = ("provision.transport", "provision.commands", "provision.errors", "provision.remote")
            assert all(_under(t, allowed) for t in targets), f"{name} imports {sorted(targets)}"
        if _under(name, "provision.remote"):  # shipped to hosts: never imports provision
            assert not targets, f"{name} imports {sorted(targets)}"
    assert graph["provision.errors"] == set()
    assert graph["provision.commands"] <= {"provision.errors", "provision.remote"}  # remote: the fixed programs


# the engine's stage packages (Ansible's names) and what each may import outside itself: package prefixes, so a
# new file in a package is covered without an edit here
STAGE_IMPORTS = {
    "provision.templating": (
        "provision.commands",
        "provision.errors",
        "provision.localfiles",
        "provision.vault",
        "provision.yamlsafe",
    ),
    "provision.inventory": ("provision.errors", "provision.yamlfile", "provision.yamlsafe"),
    "provision.playbook": (
        "provision.catalog",
        "provision.data",
        "provision.errors",
        "provision.modules",
        "provision.plugins",
        "provision.templating",
        "provision.yamlfile",
    ),
    "provision.executor": (
        "provision.commands",
        "provision.errors",
        "provision.facts",
        "provision.inventory",
        "provision.magic",
        "provision.masking",
        "provision.modules",
        "provision.plan",
        "provision.playbook",
        "provision.report",
        "provision.results",
        "provision.state",
        "provision.templating",
        "provision.transport",
    ),
}


def test_the_stage_packages_import_only_their_inputs() -> None:
    graph = import_graph()
    for package, allowed in STAGE_IMPORTS.items():
        members = [name for name in graph if _under(name, package)]
        assert len(members) > 1, f"{package} is not a package"
        for name in members:
            outside = {t for t in graph[name] if not _under(t, (package, *allowed))}
            assert not outside, f"{name} imports {sorted(outside)}"
            if name != package:  # the package's __init__ re-exports; its modules never import it back
                assert package not in graph[name], f"{name} imports its own package's __init__"


def test_every_module_file_is_in_the_catalog() -> None:
    from provision import catalog
    from provision.modules.base import REGISTRY

    registering = set()
    for name, (_, _, tree) in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(d, ast.Name) and d.id == "register" for d in node.decorator_list
            ):
                registering.add(name)
    assert registering == set(catalog.FILES)
    catalog.load_all()
    offered = {n for n in REGISTRY if not n.startswith(catalog.BUILTIN_PREFIX)}
    assert offered >= set(catalog.MODULES), sorted(set(catalog.MODULES) - offered)
    missing = {n for n in offered - set(catalog.MODULES) if REGISTRY[n].__module__.startswith("provision.")}
    assert not missing, f"modules registered but not in catalog.MODULES: {sorted(missing)}"
    for name, file in catalog.MODULES.items():  # each name is defined in the file that lookup() imports
        assert REGISTRY[name].__module__ == file, (name, REGISTRY[name].__module__, file)


def test_a_play_of_generic_modules_loads_no_gpu_module() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from provision.catalog import lookup\n"
        "assert lookup('copy') and lookup('ansible.builtin.shell') and lookup('nope') is None\n"
        "print(sorted(m for m in sys.modules if m.startswith(('provision.stack', 'provision.nixl', "
        "'provision.sglang', 'provision.pd', 'provision.model'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_ssh_transport_loads_fabric_and_paramiko_only_for_a_connection_of_its_own() -> None:
    """A run whose hosts are all reached through the keeper (--persist) never makes an SSH connection itself:
    importing the SSH transport must not load Fabric or paramiko (and cryptography: ~0.1 s of every start);
    matching one of paramiko's exceptions, or opening a connection, does."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from provision.transport.ssh import SSHConnection, connect_reason\n"
        "from provision.transport import sftp, channels, ssh_agents\n"
        "print(sorted(m for m in ('paramiko', 'fabric', 'cryptography') if m in sys.modules))\n"
        "print(connect_reason(OSError(111, 'Connection refused')))\n"
        "print('paramiko' in sys.modules and channels.paramiko.SSHException.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]", out
    assert "Connection refused" in out[1]
    assert out[2] == "SSHException"
