"""THE reader of provision's YAML input files: one loader for every entry point.

Playbooks, task and handler files, roles' files, ``vars_files``, inventories, ``group_vars``/``host_vars``,
``include_vars`` and ``-e @file`` are all read by :func:`read` (or :func:`loads`), so they all get the same:

- line numbers: every mapping is a :class:`LineDict` (its ``file``, its ``line`` and each key's line);
- the tags, registered in ONE place (:data:`TAGS`): ``!unsafe`` (the value is data, never rendered:
  :class:`provision.templating.Unsafe` for every string inside it) and ``!vault`` (decrypted
  when read: :func:`provision.vault.construct`, the value registered as a secret);
- ONE duplicate-key policy: a key written twice in one mapping is refused (``duplicate key 'x'`` at the second
  one's line), in every file. Ansible 2.19 warns and keeps the last value; provision refuses, because a silent
  last-wins is how a typo'd override goes unnoticed. Keys that a merge key (``<<: *base``) brings in may be
  overridden by the mapping's own keys, as YAML's merge says;
- the bounds of :mod:`provision.yamlsafe` (alias bombs, file size) and libyaml's speed when PyYAML has it.

Errors are :class:`YAMLFileError` (``problem``, ``file``, ``line``, ``kind``); each front end words them in its
own error type (PlaybookError, InventoryError, InputError), never with PyYAML's multi-line text (which quotes the
offending line: a secret's line must not reach a message).

``from_yaml`` over host output does NOT use this reader: a host's text gets no tags (:func:`yamlsafe.load`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from . import templating, vault, yamlsafe

MERGE_TAG = "tag:yaml.org,2002:merge"


class LineDict(dict[Any, Any]):
    """A mapping loaded from YAML that remembers where it came from (``file``, ``line``) and where each of its
    keys is (``key_lines``: ``str(key)`` to line)."""

    file: str = ""
    line: int = 0
    key_lines: dict[str, int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key_lines = {}


class YAMLFileError(ValueError):
    """A YAML file that cannot be read. ``kind``: ``read`` (OSError), ``encoding`` (not UTF-8), ``syntax``,
    ``refused`` (an alias bomb, a recursive alias), ``duplicate`` (a key written twice), ``depth`` (nested too
    deeply for Python). ``problem`` is one line without the file's text."""

    def __init__(self, kind: str, problem: str, file: str, line: int | None = None, column: int | None = None):
        super().__init__(f"{file}{f':{line}' if line else ''}: {problem}")
        self.kind, self.problem, self.file, self.line, self.column = kind, problem, file, line, column


class Loader(yamlsafe.FastSafeLoader):
    """libyaml's parser when PyYAML has it, Python's otherwise; bounded (:mod:`provision.yamlsafe`); mappings
    are :class:`LineDict`; the tags of :data:`TAGS`."""

    name: str


def _construct_mapping(loader: Loader, node: yaml.MappingNode) -> LineDict:
    own = sum(1 for key_node, _ in node.value if key_node.tag != MERGE_TAG)
    loader.flatten_mapping(node)  # merged pairs first, then the mapping's own
    merged = len(node.value) - own
    result = LineDict()
    result.file = loader.name
    result.line = node.start_mark.line + 1
    seen: set[Any] = set()
    for index, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, "found unhashable key", key_node.start_mark
            ) from None
        if index >= merged:
            if key in seen:
                raise YAMLFileError("duplicate", f"duplicate key {key!r}", loader.name, line)
            seen.add(key)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[str(key)] = line
    return result


def _unsafe(value: Any) -> Any:
    if isinstance(value, str):
        return templating.Unsafe(value)
    if isinstance(value, dict):
        out = LineDict({k: _unsafe(v) for k, v in value.items()})
        out.file, out.line = getattr(value, "file", ""), getattr(value, "line", 0)
        out.key_lines = dict(getattr(value, "key_lines", {}))
        return out
    if isinstance(value, list):
        return [_unsafe(v) for v in value]
    return value


def _construct_unsafe(loader: Loader, node: yaml.Node) -> Any:
    """``!unsafe``: the value (every string inside it) is data, never rendered as a template."""
    if isinstance(node, yaml.ScalarNode):
        return templating.Unsafe(loader.construct_scalar(node))
    if isinstance(node, yaml.SequenceNode):
        return _unsafe(loader.construct_sequence(node, deep=True))
    if isinstance(node, yaml.MappingNode):
        return _unsafe(_construct_mapping(loader, node))
    raise YAMLFileError("syntax", "!unsafe: expected a scalar, a list or a mapping", loader.name, _line(node))


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


# Every constructor of the reader, in one place: the standard mapping tag, then provision's own tags.
TAGS: dict[str, Callable[[Loader, Any], Any]] = {
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG: _construct_mapping,
    "!unsafe": _construct_unsafe,
    "!vault": vault.construct,  # decrypted when the trusted file is read (a secret from then on)
}
for _tag, _constructor in TAGS.items():
    Loader.add_constructor(_tag, _constructor)


def loads(text: str, name: str) -> Any:
    """One YAML document of the file ``name`` (for its messages); :class:`YAMLFileError` when it is not one."""
    loader = Loader(text)
    loader.name = name
    try:
        return loader.get_single_data()
    except YAMLFileError:
        raise
    except yamlsafe.YAMLTooLarge as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise YAMLFileError("refused", f"YAML refused: {exc.problem}", name, line) from None
    except yaml.MarkedYAMLError as exc:
        if "maximum nesting depth" in str(exc.problem):  # libyaml's own bound on nesting
            raise YAMLFileError("depth", "nested too deeply", name) from None
        # an unclosed bracket is reported at the end of the stream: the context mark says where it opened
        flow = str(exc.context or "").startswith("while parsing a flow")
        mark = (exc.context_mark if flow else None) or exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        what = f"{exc.context}, {exc.problem}" if exc.context and exc.problem else str(exc.problem or exc.context)
        column = exc.problem_mark.column + 1 if exc.problem_mark else None
        raise YAMLFileError("syntax", what, name, line, column) from None
    except yaml.YAMLError as exc:
        raise YAMLFileError("syntax", str(exc).splitlines()[0] if str(exc) else type(exc).__name__, name) from None
    except RecursionError:
        raise YAMLFileError("depth", "nested too deeply", name) from None
    finally:
        loader.dispose()


def read_text(path: str | Path) -> str:
    """The file's text (:func:`yamlsafe.read_text`); :class:`YAMLFileError` (``read``, ``encoding``) otherwise."""
    name = str(path)
    try:
        return yamlsafe.read_text(name)
    except OSError as exc:
        raise YAMLFileError("read", f"cannot read: {exc.strerror or exc}", name) from None
    except UnicodeDecodeError as exc:
        line = _text_line_of(Path(name).read_bytes(), exc.start)
        raise YAMLFileError("encoding", f"not UTF-8 text (byte {exc.object[exc.start]:#04x})", name, line) from None


def read(path: str | Path) -> Any:
    """The YAML file ``path``: its one document (None when empty); :class:`YAMLFileError` otherwise."""
    return loads(read_text(path), str(path))


def plain(value: Any) -> Any:
    """A deep copy of a loaded value with every :class:`LineDict` turned into a plain dict."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _text_line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1
