"""``include_vars``: variables from YAML/JSON files on the controller (a file, or a directory walked in name
order), set on the host at Ansible's include_vars precedence: over task, block, play and role vars, under
``set_fact``/``register``, role parameters and ``-e`` (the executor keeps them in their own layer,
:attr:`provision.state.HostState.included_vars`).

The files are the controller's (trusted, like the playbook): their values are templates, rendered when used.
A relative path is looked up as Ansible does: the role's ``vars/`` and the role, then the playbook's ``vars/``
and the playbook's directory (:func:`vars_file_candidates`). The task result carries ``ansible_facts`` (the
variables) and ``ansible_included_var_files``, as Ansible's.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import vault, yamlfile, yamlsafe
from .args import parse_kv
from .base import Arg, ArgError, Module, ModuleContext, ModuleResult, register

INCLUDED = "ansible_facts"  # the key of the result that holds the variables (the task runner moves them)


def vars_file_candidates(source: str, role_dir: str | None, task_file: str, playbook_dir: str) -> list[Path]:
    """Where a relative ``include_vars`` file may be, in Ansible's order: the role (its ``vars/``, itself), the
    directory of the task's file, the playbook's directory (each with ``vars/`` first)."""
    path = Path(os.path.expanduser(source))
    if path.is_absolute():
        return [path]
    bases = [Path(b) for b in (role_dir, str(Path(task_file).parent) if task_file else None, playbook_dir) if b]
    return [c for base in dict.fromkeys(bases) for c in (base / "vars" / path, base / path)]


def vars_dir(source: str, role_dir: str | None, task_file: str, playbook_dir: str) -> Path:
    """Where an ``include_vars`` ``dir`` is: under the role's ``vars/`` (or the role, for ``vars/...``), else
    relative to the task's file, as Ansible's."""
    path = Path(os.path.expanduser(source))
    if path.is_absolute():
        return path
    if role_dir:
        if path.parts[0] == "vars" and (Path(role_dir) / path).exists():
            return Path(role_dir) / path
        return Path(role_dir) / "vars" / path
    return (Path(task_file).parent if task_file else Path(playbook_dir)) / path


def read_vars_file(path: Path) -> dict[str, Any]:
    """One vars file: a mapping (YAML or JSON); an empty file is no variables. ValueError says what is wrong."""
    try:
        text = yamlsafe.read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read: {exc}") from None
    try:
        # YAML through THE reader (provision.yamlfile: !unsafe, !vault, duplicate keys refused), as vars_files
        data = json.loads(text) if path.suffix == ".json" else yamlfile.plain(yamlfile.loads(text, str(path)))
    except yamlfile.YAMLFileError as exc:
        where = f" (line {exc.line})" if exc.line else ""
        raise ValueError(f"{path}: not valid YAML/JSON: {exc.problem}{where}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not valid YAML/JSON: {str(exc).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"{path} must be stored as a dictionary/hash")
    return data


def _merge(old: Any, new: Any) -> Any:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out = dict(old)
        for key, value in new.items():
            out[key] = _merge(out.get(key), value) if key in out else value
        return out
    return new


@register
class IncludeVars(Module):
    """``include_vars: FILE`` / ``{file|dir: ..., name, files_matching, ignore_files, depth, extensions,
    ignore_unknown_extensions, hash_behaviour}``."""

    name = "include_vars"
    free_form = "file"
    controller_only = True
    args = {
        "file": Arg("str", aliases=("_raw_params",)),
        "dir": Arg("str"),
        "name": Arg("str"),
        "files_matching": Arg("str"),
        "ignore_files": Arg("list", default=[]),
        "depth": Arg("int", default=0),
        "extensions": Arg("list", default=["yaml", "yml", "json"]),
        "ignore_unknown_extensions": Arg("bool", default=False),
        "hash_behaviour": Arg("str", choices=("replace", "merge")),
        "_origin": Arg("str"),  # the task's file (set when the task is read): relative paths start there
    }

    @classmethod
    def normalize(cls, raw: Any) -> dict[str, Any]:
        if isinstance(raw, str) and re.match(r"^\s*\w+=", raw):  # `include_vars: file=x.yml name=y`
            return parse_kv(raw)
        return super().normalize(raw)

    @classmethod
    def check_combination(cls, args: Mapping[str, Any], is_template: Any) -> None:
        if ("file" in args) == ("dir" in args):
            raise ArgError("include_vars: give exactly one of file (or a free-form path) or dir")
        name = args.get("name")
        if isinstance(name, str) and not is_template(name) and not name.isidentifier():
            raise ArgError(f"include_vars: name {name!r} is not a valid variable name")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        playbook_dir = str(ctx.variables.get("playbook_dir") or ctx.controller_dir)
        role_dir = ctx.variables.get("role_path") if ctx.variables.get("role_name") else None
        task_file = str(args.get("_origin") or "")
        try:
            if args.get("dir"):
                files = self._walk(vars_dir(str(args["dir"]), role_dir, task_file, playbook_dir), args, role_dir)
            else:
                source = str(args["file"])
                candidates = vars_file_candidates(source, role_dir, task_file, playbook_dir)
                found = next((c for c in candidates if c.is_file()), None)
                if found is None:
                    raise ValueError(f"Could not find or access '{source}' on the controller")
                files = [found]
            data: dict[str, Any] = {}
            for path in files:
                data.update(read_vars_file(path))
        except (ValueError, vault.VaultError) as exc:  # a file named only at run time: the task fails
            return ModuleResult(failed=True, msg=str(exc))
        if args.get("name"):
            data = {str(args["name"]): data}
        if args.get("hash_behaviour") == "merge":
            data = {k: _merge(ctx.variables.get(k), v) if k in ctx.variables else v for k, v in data.items()}
        return ModuleResult(data={INCLUDED: data, "ansible_included_var_files": [str(p) for p in files]})

    @staticmethod
    def _walk(top: Path, args: dict[str, Any], role_dir: str | None) -> list[Path]:
        """The files of ``dir`` as Ansible walks them: directories in path order, names sorted in each; a role's
        ``vars/main.yml`` is never included again."""
        if not top.exists():
            raise ValueError(f"{top} directory does not exist")
        if not top.is_dir():
            raise ValueError(f"{top} is not a directory")
        extensions = [str(e).lstrip(".") for e in args.get("extensions") or []]
        ignore = [str(i) for i in args.get("ignore_files") or []]
        matching = re.compile(str(args["files_matching"])) if args.get("files_matching") else None
        depth_limit = int(args.get("depth") or 0)
        skip = Path(role_dir) / "vars" / "main.yml" if role_dir else None
        out: list[Path] = []
        for root, _dirs, names in sorted(os.walk(top, followlinks=True), key=lambda entry: entry[0]):
            if depth_limit and len(Path(root).relative_to(top).parts) + 1 > depth_limit:
                continue
            for name in sorted(names):
                path = Path(root) / name
                if path == skip or (matching is not None and not matching.search(name)):
                    continue
                if any(re.search(f"{pattern}$", name) for pattern in ignore):
                    continue
                if Path(name).suffix.lstrip(".") not in extensions:
                    if args.get("ignore_unknown_extensions"):
                        continue
                    raise ValueError(f"{path} does not have a valid extension: {', '.join(extensions)}")
                out.append(path)
        return out
