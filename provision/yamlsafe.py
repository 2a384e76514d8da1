"""The one way provision reads YAML: bounded.

YAML aliases share nodes: ``a: &a [x, x]`` and ``b: &b [*a, *a]`` ... doubles the size of the value at each
level, so a few hundred bytes describe a value of gigabytes once it is walked (templated, dumped, merged,
compared). Every reader of YAML — playbooks, roles, inventories, ``group_vars``/``host_vars``, vars files,
``include_vars``, ``-e @file`` and the ``from_yaml``/``from_yaml_all`` filters over host output — loads through
a loader of this module, which counts the nodes of each document WITH every alias expanded before a single
value is built, and refuses the document past :data:`NODES_MAX` (:class:`YAMLTooLarge`, a ``yaml.YAMLError``
with the position of the document, so every caller's existing error handling names ``file:line``). Recursive
aliases (an anchor used inside its own node) are refused the same way. Counting is linear in the size of the
document as written (each distinct node is visited once; the expanded sizes are summed, never built).

:func:`read_text` reads a YAML (or JSON) file from disk: at most :data:`BYTES_MAX` bytes (``-e @/dev/zero``
is refused after that many, not read for ever), UTF-8.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from . import vault

NODES_MAX = 2_000_000  # nodes of one YAML document (all documents of one stream) with every alias expanded
BYTES_MAX = 64 << 20  # bytes of one YAML or JSON file read from disk


class YAMLTooLarge(yaml.MarkedYAMLError):
    """A document whose aliases expand past :data:`NODES_MAX` nodes, or that contains itself."""


class FileTooLarge(OSError):
    """A file past :data:`BYTES_MAX` bytes (``strerror`` says so, as for any unreadable file)."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def expanded_size(root: yaml.Node, limit: int = NODES_MAX) -> int:
    """The number of nodes of ``root`` with every alias expanded; YAMLTooLarge past ``limit`` or for an alias
    inside its own anchor. Each distinct node is visited once (no recursion: any depth)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # expansion started, not finished: meeting one again is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_nodes.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _children(node))
            if total > limit:
                raise YAMLTooLarge(None, None, f"aliases expand past {limit} nodes (an alias bomb?)", node.start_mark)
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise YAMLTooLarge(None, None, "an alias refers to its own anchor (recursive YAML)", node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack += [(child, False) for child in _children(node) if id(child) not in sizes]
    return sizes[id(root)]


class Bounded:
    """Mixin for a PyYAML loader (before the loader class in the bases): every document is measured by
    :func:`expanded_size` before it is constructed; the budget is shared by all documents of one stream."""

    budget = NODES_MAX

    def construct_document(self, node: yaml.Node) -> Any:
        used = expanded_size(node, self.budget)
        self.budget -= used
        return super().construct_document(node)  # type: ignore[misc]


class SafeLoader(Bounded, yaml.SafeLoader):
    """PyYAML's safe loader, bounded (pure Python: node marks for every value)."""


class FastSafeLoader(Bounded, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader when PyYAML has it (about 10x faster on big files), bounded."""


def load(text: str) -> Any:
    """One YAML document, as ``yaml.safe_load``, bounded (``yaml.YAMLError`` as PyYAML raises them)."""
    loader = FastSafeLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_all(text: str) -> list[Any]:
    """Every document of a YAML stream, as ``yaml.safe_load_all``, bounded together."""
    loader = FastSafeLoader(text)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
        return docs
    finally:
        loader.dispose()


def read_text(path: str | Path) -> str:
    """A YAML or JSON file's text: UTF-8 (UnicodeDecodeError otherwise), at most :data:`BYTES_MAX` bytes
    (FileTooLarge past it: a device or a FIFO that never ends is not read for ever); OSError as ``open``.
    A vault-encrypted file is decrypted (:func:`provision.vault.reveal`: VaultError without the password)."""
    with open(path, "rb") as fh:
        data = fh.read(BYTES_MAX + 1)
    if len(data) > BYTES_MAX:
        raise FileTooLarge(27, f"larger than {BYTES_MAX >> 20} MiB", str(path))  # 27: EFBIG
    return vault.reveal(data, str(path)).decode("utf-8")
