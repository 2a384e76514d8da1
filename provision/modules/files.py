"""``file``, ``copy`` and ``template``: one command reads the state (``remote/file_state.py stat``), at most
one changes it (``apply``), and file content is written atomically (``ctx.put``, or the helper's ``write``
under ``become`` so that sudo applies). A converged run costs exactly one command."""

from __future__ import annotations

import base64
import codecs
import difflib
import hashlib
import json
import os
import posixpath
import shlex
import stat
import time
from typing import Any

from .. import remote, vault
from ..commands import Command
from ..errors import ModuleError, TemplateError
from ..templating import FILE_OPTIONS
from .arg_types import to_bool
from .base import Arg, ArgError, Module, ModuleContext, ModuleResult, register
from .controller_files import find_controller_file
from .modes import PreserveMode, SymbolicMode, new_file_mode, resolve_mode

HELPER = "file_state.py"
DIFF_LIMIT = 1 << 20  # old content is fetched for --diff only up to this size


# ------------------------------------------------------------------------------------------ remote helper
def helper(ctx: ModuleContext, action: str, request: dict[str, Any], stdin: bytes | None = None) -> dict[str, Any]:
    """Run one action of the file-state helper (``stdin``: the data of ``write``); its JSON answer, or HelperError
    with the host's reason."""
    return ctx.call_helper(HELPER, action, stdin=remote.request(request, stdin), what=action)


def remote_stat(ctx: ModuleContext, paths: list[str], **request: Any) -> list[dict[str, Any]]:
    """States of ``paths`` in one command (options: follow, hash, glob, want, content_limit)."""
    return list(helper(ctx, "stat", {"paths": paths, **request})["states"])


def remote_apply(ctx: ModuleContext, ops: list[dict[str, Any]]) -> None:
    helper(ctx, "apply", {"ops": ops})


def ship_files(ctx: ModuleContext, dest: str, files: dict[str, bytes], mode: int = 0o644) -> ModuleResult:
    """Put ``files`` (name → content) into the directory ``dest`` on the host (made 0700 if missing): one stat
    with hashes, then only the writes of files that differ (atomic, created with ``mode``)."""
    paths = [f"{dest}/{name}" for name in files]
    states = remote_stat(ctx, [dest, *paths], hash=True)
    if not states[0]["exists"] and not ctx.check:
        ctx.run(Command.of("mkdir", "-p", "-m", "700", dest), check_rc=True, timeout=30)
    stale = [
        (path, data)
        for (path, data), st in zip(zip(paths, files.values(), strict=True), states[1:], strict=False)
        if not st["exists"] or st.get("sha256") != hashlib.sha256(data).hexdigest()
    ]
    names = [posixpath.basename(p) for p, _ in stale]
    if not stale:
        return ModuleResult(msg=f"{dest}: {len(files)} files up to date", data={"dest": dest, "written": []})
    if not ctx.check:
        for path, data in stale:
            write_file(ctx, path, data, mode)
    verb = "would write" if ctx.check else "wrote"
    return ModuleResult(changed=True, msg=f"{dest}: {verb} {', '.join(names)}", data={"dest": dest, "written": names})


def write_file(
    ctx: ModuleContext, path: str, data: bytes, mode: int | None, guard: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Atomic write; with become, or a ``guard`` (:func:`write_guard`), it goes through the helper (sudo, the
    backup, the validate command), else the connection's ``put``. The helper's answer (``backup_file``,
    ``invalid``), ``{}`` after a ``put``."""
    if ctx.become or guard:
        return helper(ctx, "write", {"path": path, "mode": mode, **(guard or {})}, stdin=data)
    ctx.put(data, path, mode)
    return {}


def validate_argv(validate: Any) -> list[str]:
    """ansible-core's ``validate`` as the words of a command (split as a shell splits them; no shell runs it; each
    ``%s`` becomes the new file's path on the host). ArgError, with ansible-core's words, without a ``%s``."""
    text = str(validate)
    if "%s" not in text:
        raise ArgError(f"validate must contain %s: {text}")
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ArgError(f"validate: {exc}: {text}") from None


def check_guard_args(module: str, args: Any, is_template: Any) -> None:
    """Before the run: a literal ``validate`` needs its ``%s`` and must split; ``follow: true`` is refused."""
    validate = args.get("validate")
    if validate is not None and not is_template(validate):
        try:
            validate_argv(validate)
        except ArgError as exc:
            raise ArgError(f"{module}: {exc}") from None
    follow = args.get("follow")
    if follow is not None and not is_template(follow) and to_bool(follow, "follow"):
        raise ArgError(f"{module}: follow: true is not supported by provision (a link at dest is replaced, never "
                       "written through; point dest at the link's target)")  # fmt: skip


def write_guard(args: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    """The write's ``backup`` and ``validate`` (file_state.py's ``write``): with ``validate``, the new file also
    gets the wanted owner and group before the command sees it, as ansible-core's ``copy`` does (they are then
    taken out of ``attrs``). ArgError for a ``validate`` without ``%s``."""
    guard: dict[str, Any] = {}
    if args.get("backup"):  # True, or the path to name the backup after (a link whose target is written)
        guard["backup"] = args["backup"] if isinstance(args["backup"], str) else True
    if args.get("validate") is not None:
        guard["validate"] = validate_argv(args["validate"])
        for key in ("owner", "group"):
            if attrs.get(key) is not None:
                guard[key] = attrs.pop(key)
    return guard


def guarded_result(result: ModuleResult, answer: dict[str, Any]) -> ModuleResult:
    """``result`` with what a guarded write answered: its ``backup_file``, or a failure ("failed to validate",
    with the command's ``exit_status``, ``stdout`` and ``stderr``, as ansible-core's ``copy``) when the validate
    command refused the new file."""
    invalid = answer.get("invalid")
    if invalid is not None:  # nothing changed (a backup made first stays, unnamed, as ansible-core's)
        result.failed, result.changed = True, False
        result.msg = "failed to validate"
        result.data.update(exit_status=invalid["rc"], stdout=invalid["stdout"], stderr=invalid["stderr"])
    elif answer.get("backup_file"):
        result.data["backup_file"] = answer["backup_file"]
    return result


# ---------------------------------------------------------------------------------------------- helpers
def fmt_mode(mode: int | None) -> str | None:
    return None if mode is None else format(mode, "04o")


def attr_changes(st: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The attributes (mode, owner, group) that differ from the wanted ones; all wanted ones when missing."""
    out: dict[str, Any] = {}
    for key in ("mode", "owner", "group"):
        want = args.get(key)
        if want is not None and (not st.get("exists") or st.get(key) != want):
            out[key] = want
    return out


def text_diff(before: bytes | None, after: bytes | None, path: str) -> str | None:
    """Unified diff of two texts; None for binary content."""
    texts = []
    for blob in (before or b"", after or b""):
        if b"\0" in blob:
            return None
        try:
            texts.append(blob.decode("utf-8"))
        except UnicodeDecodeError:
            return None
    lines = difflib.unified_diff(
        texts[0].splitlines(), texts[1].splitlines(), f"before: {path}", f"after: {path}", lineterm=""
    )
    text = "\n".join(lines)
    return text + "\n" if text else ""


def state_diff(before: dict[str, Any], after: dict[str, Any], path: str) -> str:
    def lines(d: dict[str, Any]) -> list[str]:
        return [f"{k}: {v}" for k, v in d.items() if v is not None]

    text = "\n".join(
        difflib.unified_diff(lines(before), lines(after), f"before: {path}", f"after: {path}", lineterm="")
    )
    return text + "\n" if text else ""


def read_controller_file(ctx: ModuleContext, src: str, *, decrypt: bool = True) -> tuple[str, bytes]:
    """A controller file's path and bytes; a vault-encrypted one decrypted (its text registered as a secret)
    unless ``decrypt`` is false (``copy: decrypt: false`` copies the envelope as it is)."""
    playbook_dir = ctx.variables.get("playbook_dir") if ctx.variables is not None else None
    found = find_controller_file(ctx.controller_dir, os.path.expanduser(src), also=str(playbook_dir or "") or None)
    path = str(found) if found else os.path.join(ctx.controller_dir, os.path.expanduser(src))
    if os.path.isdir(path):
        raise ModuleError(ctx.host, f"src {path} is a directory: only single files are supported")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ModuleError(ctx.host, f"could not read src={path}: {exc.strerror or exc}") from None
    try:
        return path, vault.reveal(data, path) if decrypt else data  # decrypted here, on the controller
    except vault.VaultError as exc:
        raise ModuleError(ctx.host, str(exc)) from None


def parse_time(value: str | None, fmt: str, name: str) -> str | float | None:
    """``preserve`` → None (leave as is), ``now``, or a timestamp in ``fmt`` → epoch seconds (local time)."""
    if value is None or value == "preserve":
        return None
    if value == "now":
        return "now"
    try:
        return float(time.mktime(time.strptime(value, fmt)))
    except ValueError:
        raise ArgError(f"{name}={value!r} is not 'preserve', 'now' or a time like {fmt!r}") from None


# ------------------------------------------------------------------------------------------------- file
@register
class File(Module):
    name = "file"
    args = {
        "path": Arg("path", required=True, aliases=("dest", "name")),
        "state": Arg(choices=("file", "directory", "touch", "absent", "link")),
        "mode": Arg("mode"),
        "owner": Arg(),
        "group": Arg(),
        "src": Arg("path"),
        "force": Arg("bool", default=False),
        "recurse": Arg("bool", default=False),
        "modification_time": Arg(),
        "modification_time_format": Arg(default="%Y%m%d%H%M.%S"),
        "access_time": Arg(),
        "access_time_format": Arg(default="%Y%m%d%H%M.%S"),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        if args.get("state") == "link" and not args.get("src"):
            raise ArgError("file: state=link needs src")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        path, state = args["path"], args["state"]
        default_time = "now" if state == "touch" else "preserve"
        try:
            mtime = parse_time(
                args["modification_time"] or default_time,
                args["modification_time_format"],
                "modification_time",
            )
            atime = parse_time(args["access_time"] or default_time, args["access_time_format"], "access_time")
        except ArgError as exc:
            return ModuleResult(failed=True, msg=str(exc))
        paths = [path]
        if state == "link":
            src = args["src"]
            paths.append(src if src.startswith(("/", "~")) else posixpath.join(posixpath.dirname(path), src))
        states = remote_stat(ctx, paths, follow=state not in ("link", "absent"))
        st = states[0]
        if state is None:
            state = "directory" if st.get("ftype") == "directory" else "file"
        if isinstance(args["mode"], SymbolicMode) and state == "link":
            msg = f"file: a symbolic mode ({args['mode']}) with state=link is not supported"
            return ModuleResult(failed=True, msg=msg)
        given_mode = args["mode"]  # recurse resolves a symbolic mode per entry
        args = {**args, "mode": resolve_mode(given_mode, st, 0o777 if state == "directory" else 0o666)}
        before = {"state": _current(st), "mode": fmt_mode(st.get("mode")), "src": st.get("target")}
        if state == "absent":
            ops = [{"op": "absent", "path": path}] if st["exists"] else []
        elif state == "link":
            ops = self._link(ctx, path, args, st, states[1])
        else:
            ops = self._node(ctx, path, state, args, st, {"mtime": mtime, "atime": atime})
            if args["recurse"]:
                if state != "directory":
                    return ModuleResult(failed=True, msg="recurse option requires state to be 'directory'")
                ops += self._tree(ctx, path, args, st, given_mode)
        after = dict(before, state=state)
        if state == "link":
            after.update(src=args["src"], mode=None)
        elif state != "absent":
            after["mode"] = fmt_mode(args["mode"]) or before["mode"]
        else:
            after.update(mode=None, src=None)
        result = ModuleResult(changed=bool(ops), data={"path": path, "state": state, "mode": after["mode"]})
        if ctx.diff and ops:
            result.diff = state_diff(before, after, path)
        if ops and not ctx.check:
            remote_apply(ctx, ops)
        return result

    @staticmethod
    def _node(
        ctx: ModuleContext,
        path: str,
        state: str,
        args: dict[str, Any],
        st: dict[str, Any],
        times: dict[str, Any],
    ) -> list[dict[str, Any]]:
        ops: list[dict[str, Any]] = []
        kind = st.get("ftype")
        if st["exists"] and kind is None:
            raise ModuleError(ctx.host, f"{path} is a dangling symlink (to {st.get('target')})")
        if state == "directory":
            if st["exists"] and kind != "directory":
                raise ModuleError(ctx.host, f"{path} exists and is a {kind}, not a directory")
            if not st["exists"]:
                ops.append({"op": "mkdir", "path": path})
        elif state == "file":
            if not st["exists"]:
                raise ModuleError(ctx.host, f"file ({path}) is absent, cannot continue")
            if kind == "directory":
                raise ModuleError(ctx.host, f"file ({path}) is directory, cannot continue")
        elif state == "touch" and not st["exists"]:
            ops.append({"op": "touch", "path": path})
        attrs = attr_changes(st, args)
        for key, value in times.items():
            if value == "now" or (value is not None and abs(value - st.get(key, -1.0)) > 1e-3):
                attrs[key] = value
        if attrs:
            ops.append({"op": "attrs", "path": path, **attrs})
        return ops

    @staticmethod
    def _tree(
        ctx: ModuleContext, path: str, args: dict[str, Any], st: dict[str, Any], mode: Any
    ) -> list[dict[str, Any]]:
        """``recurse``: mode, owner and group on everything under the directory (a symbolic mode per entry, as
        chmod -R; links are left alone). One read of the tree, then the differing entries in the same apply."""
        wanted = {"mode": args["mode"], "owner": args["owner"], "group": args["group"]}
        if all(v is None for v in wanted.values()) or not st["exists"]:
            entries: list[dict[str, Any]] = []  # a directory made now has nothing under it
        else:
            entries = list(helper(ctx, "tree", {"path": path})["entries"])
        ops = []
        for entry in entries:
            if entry["ftype"] == "link":
                continue
            entry["umask"] = st.get("umask")
            attrs = attr_changes(entry, {**wanted, "mode": resolve_mode(mode, entry)})
            if attrs:
                ops.append({"op": "attrs", "path": entry["path"], **attrs})
        return ops

    @staticmethod
    def _link(
        ctx: ModuleContext, path: str, args: dict[str, Any], st: dict[str, Any], src_st: dict[str, Any]
    ) -> list[dict[str, Any]]:
        src, force = args["src"], args["force"]
        if st.get("type") == "link" and st.get("target") == src:
            return []
        if not src_st["exists"] and not force:
            msg = f"src file does not exist, use force=yes if you really want to create the link: {src}"
            raise ModuleError(ctx.host, msg)
        if st["exists"] and st["type"] != "link" and not force:
            raise ModuleError(ctx.host, f"refusing to convert from {st['type']} to symlink for {path}")
        if not st["parent"]:
            raise ModuleError(ctx.host, f"parent directory of {path} does not exist")
        return [{"op": "link", "path": path, "src": src}]


def _current(st: dict[str, Any]) -> str:
    if not st["exists"]:
        return "absent"
    return {"link": "link", "directory": "directory"}.get(st["type"], "file")


# ------------------------------------------------------------------------------------------ copy/template
def converge_file(
    ctx: ModuleContext, dest: str, data: bytes, args: dict[str, Any], src_name: str | None = None
) -> ModuleResult:
    """Make ``dest`` hold ``data`` with the wanted attributes: one stat, then a write and/or attrs change (the
    write with ``backup`` and ``validate``: :func:`write_guard`)."""
    if args.get("follow"):  # a templated `follow: true` (a literal one is refused before the run)
        return ModuleResult(failed=True, msg="follow: true is not supported by provision (a link at dest is replaced)")
    into_dir = dest.endswith("/")
    if into_dir and not src_name:
        return ModuleResult(failed=True, msg=f"can not use content with a dir as dest: {dest}")
    inner = posixpath.join(dest, posixpath.basename(src_name)) if src_name else None
    paths = [inner] if into_dir and inner else [dest] + ([inner] if inner else [])
    sha = hashlib.sha256(data).hexdigest()
    limit = DIFF_LIMIT if ctx.diff else 0
    states = remote_stat(ctx, paths, hash=True, want=sha, content_limit=limit)
    st, target = states[0], paths[0]
    if not into_dir and st.get("ftype") == "directory":
        if inner is None:
            return ModuleResult(failed=True, msg=f"can not use content with a dir as dest: {dest}")
        st, target = states[1], inner
    if st.get("ftype") == "directory":
        return ModuleResult(failed=True, msg=f"dest {target} is a directory")
    if not st["parent"]:
        parent = posixpath.dirname(target.rstrip("/")) or "."
        if ctx.check:  # an earlier task of the run may create it: predict, don't break the check run
            msg = f"would create {target} (its directory {parent} does not exist yet)"
            diff = text_diff(b"", data, target) if ctx.diff else None
            return ModuleResult(changed=True, msg=msg, diff=diff, data={"dest": target})
        return ModuleResult(failed=True, msg=f"Destination directory {parent} does not exist")
    data_info = {"dest": target, "checksum": sha, "size": len(data)}
    if src_name:
        data_info["src"] = src_name
    if st["exists"] and not args.get("force", True):
        return ModuleResult(msg="dest exists and force=no: left as it is", data=data_info)
    write = not st["exists"] or st.get("sha256") != sha
    args = {**args, "mode": resolve_mode(args.get("mode"), st)}
    attrs = attr_changes(st, args)
    mode = args.get("mode")
    data_info["mode"] = fmt_mode(mode if mode is not None else st.get("mode", 0o644))
    result = ModuleResult(changed=write or bool(attrs), data=data_info)
    if ctx.diff and write:
        old = base64.b64decode(st["content"]) if "content" in st else (b"" if not st["exists"] else None)
        result.diff = text_diff(old, data, target) if old is not None else None
    if ctx.check or not result.changed:
        return result
    if write:
        try:
            guard = write_guard(args, attrs)
        except ArgError as exc:
            return ModuleResult(failed=True, msg=str(exc), data=data_info)
        guarded_result(result, write_file(ctx, target, data, args.get("mode"), guard))
        if result.failed:
            return result
        attrs.pop("mode", None)
    if attrs:
        remote_apply(ctx, [{"op": "attrs", "path": target, **attrs}])
    return result


def preserved(args: dict[str, Any], src: str) -> dict[str, Any]:
    """``mode: preserve``: the controller source file's own mode."""
    if not isinstance(args.get("mode"), PreserveMode):
        return args
    return {**args, "mode": stat.S_IMODE(os.stat(src).st_mode)}


FILE_ARGS = {
    "dest": Arg("path", required=True),
    "mode": Arg("mode"),
    "owner": Arg(),
    "group": Arg(),
    "force": Arg("bool", default=True),
    "backup": Arg("bool", default=False),
    "validate": Arg("str"),
    "follow": Arg("bool", default=False),
}


def converge_remote_copy(ctx: ModuleContext, src: str, dest: str, args: dict[str, Any]) -> ModuleResult:
    """``copy`` with ``remote_src``: a file on the host made the content of ``dest`` (with the source's mode and
    times, as Ansible's copystat), then the wanted attributes; one stat of both, then one apply."""
    source, st = remote_stat(ctx, [src, dest], hash=True)
    if not source["exists"]:
        return ModuleResult(failed=True, msg=f"Source {src} not found")
    if source.get("ftype") == "directory":
        return ModuleResult(failed=True, msg=f"copy: remote_src of a directory ({src}) is not supported by provision")
    if source.get("ftype") != "file":
        return ModuleResult(failed=True, msg=f"Cannot copy invalid source '{src}': not a file")
    if st.get("ftype") == "directory":
        dest = posixpath.join(dest, posixpath.basename(src))
        st = remote_stat(ctx, [dest], hash=True)[0]
    if not st["parent"]:
        return ModuleResult(failed=True, msg=f"Destination directory {posixpath.dirname(dest)} does not exist")
    if isinstance(args.get("mode"), PreserveMode):
        args = {**args, "mode": source["mode"]}
    data = {"dest": dest, "src": src, "checksum": source["sha256"], "size": source["size"]}
    if st["exists"] and not args["force"]:
        return ModuleResult(msg="dest exists and force=no: left as it is", data=data)
    write = not st["exists"] or st.get("type") == "link" or st.get("sha256") != source["sha256"]
    after = st  # a copy brings the source's mode along to a file that exists; a new one gets 0666 less the umask
    if write:
        after = {**source, "mode": source["mode"] if st["exists"] else new_file_mode(st), "umask": st.get("umask")}
    args = {**args, "mode": resolve_mode(args.get("mode"), after)}
    if write:  # a new file belongs to whoever copies: every wanted attribute is set on it
        attrs = {k: args[k] for k in ("mode", "owner", "group") if args.get(k) is not None}
    else:
        attrs = attr_changes(st, args)
    data["mode"] = fmt_mode(args["mode"] if args["mode"] is not None else after.get("mode"))
    result = ModuleResult(changed=write or bool(attrs), data=data)
    if result.changed and not ctx.check:
        if not write:
            remote_apply(ctx, [{"op": "attrs", "path": dest, **attrs}])
            return result
        try:
            guard = write_guard(args, {})
        except ArgError as exc:
            return ModuleResult(failed=True, msg=str(exc), data=data)
        op = {"op": "copy", "src": src, "path": dest, **attrs, **guard}
        guarded_result(result, helper(ctx, "apply", {"ops": [op]}))
    return result


@register
class Copy(Module):
    name = "copy"
    args = {
        "content": Arg("raw"), "src": Arg("path"), "remote_src": Arg("bool", default=False),
        "decrypt": Arg("bool", default=True), "directory_mode": Arg("mode"), "local_follow": Arg("bool", default=True),
        **FILE_ARGS,
    }  # fmt: skip

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        if ("content" in args) == ("src" in args):
            raise ArgError("copy: give exactly one of content or src")
        check_guard_args(cls.name, args, is_template)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        content, src = args["content"], args["src"]
        if args["remote_src"]:
            if src is None:
                return ModuleResult(failed=True, msg="copy: remote_src needs src (a file on the host)")
            return converge_remote_copy(ctx, src, args["dest"], args)
        if src is not None:
            tree = controller_dir_of(ctx, src)
            if tree is not None:
                return copy_tree(ctx, tree, src, args)
            path, data = read_controller_file(ctx, src, decrypt=args["decrypt"])
            args = preserved(args, path)
        elif content is None:  # `content: null`, or a template whose value is None: as ansible-core
            return ModuleResult(failed=True, msg="copy: src (or content) is required")
        elif isinstance(content, (dict, list)):
            data = json.dumps(content).encode()
        elif isinstance(content, bytes):
            data = content
        else:
            data = str(content).encode()
        return converge_file(ctx, args["dest"], data, args, src_name=src)


def controller_dir_of(ctx: ModuleContext, src: str) -> str | None:
    """The controller directory a ``copy`` ``src`` names (looked up as a file is), or None for a file."""
    base = ctx.controller_dir
    src = os.path.expanduser(src)
    candidates = [src] if os.path.isabs(src) else [os.path.join(base, d, src) for d in ("files", "")]
    return next((c for c in candidates if os.path.isdir(c)), None)


def copy_tree(ctx: ModuleContext, local: str, src: str, args: dict[str, Any]) -> ModuleResult:
    """``copy`` of a controller directory, as Ansible's: ``src/`` (trailing slash) copies what is inside into
    ``dest``, ``src`` copies the directory itself (``dest/NAME``); ``dest`` and its missing parents are created,
    empty directories too; new directories get ``directory_mode`` (the host's default without it; an existing
    one keeps its mode), files get ``mode`` (or the host's default; ``preserve``: each source file's), links
    in the source are followed (``local_follow``). One stat of every target, then the writes; vaulted files
    are decrypted. Result: ``dest`` (with a trailing slash) and ``src``."""
    dest = str(args["dest"])
    root = dest.rstrip("/") or "/"
    base = root if src.endswith("/") else posixpath.join(root, os.path.basename(local.rstrip("/")))
    dirs: list[str] = []
    parent = posixpath.dirname(root)
    while parent not in ("", "/", ".") and parent != posixpath.dirname(parent):
        dirs.insert(0, parent)
        parent = posixpath.dirname(parent)
    dirs += [root] + ([base] if base != root else [])
    files: list[tuple[str, str]] = []  # (target, local path)
    for top, subdirs, names in os.walk(local, followlinks=bool(args.get("local_follow", True))):
        subdirs.sort()
        rel = os.path.relpath(top, local)
        here = base if rel == "." else posixpath.join(base, *rel.split(os.sep))
        if here not in dirs:
            dirs.append(here)
        for name in sorted(names):
            path = os.path.join(top, name)
            if os.path.isfile(path):
                files.append((posixpath.join(here, name), path))
    states = remote_stat(ctx, dirs + [t for t, _ in files], hash=True)
    ops: list[dict[str, Any]] = []
    for path, st in zip(dirs, states, strict=False):
        if st["exists"] and st.get("ftype") != "directory":
            return ModuleResult(failed=True, msg=f"dest {path} exists and is not a directory")
        if not st["exists"]:
            ops.append({"op": "mkdir", "path": path})
            mode = resolve_mode(args.get("directory_mode"), st, 0o777)
            if mode is not None:
                ops.append({"op": "attrs", "path": path, "mode": mode})
    writes: list[tuple[str, bytes, dict[str, Any]]] = []
    for (target, path), st in zip(files, states[len(dirs) :], strict=True):
        try:
            with open(path, "rb") as fh:
                data = fh.read()
            data = vault.reveal(data, path) if args.get("decrypt", True) else data
        except OSError as exc:
            raise ModuleError(ctx.host, f"could not read src={path}: {exc.strerror or exc}") from None
        except vault.VaultError as exc:
            raise ModuleError(ctx.host, str(exc)) from None
        wanted = preserved(args, path) if isinstance(args.get("mode"), PreserveMode) else args
        wanted = {**wanted, "mode": resolve_mode(wanted.get("mode"), st)}
        if st.get("ftype") == "directory":
            return ModuleResult(failed=True, msg=f"dest {target} is a directory")
        write = not st["exists"] or st.get("sha256") != hashlib.sha256(data).hexdigest()
        if write and st["exists"] and not args.get("force", True):
            write = False
        attrs = attr_changes(st, wanted)
        if write or attrs:
            writes.append((target, data if write else b"", {**attrs, "_write": write, "_mode": wanted.get("mode")}))
    changed = bool(ops or writes)
    result = ModuleResult(changed=changed, data={"dest": root + "/" if root != "/" else "/", "src": src})
    if ctx.check or not changed:
        return result
    if ops:
        remote_apply(ctx, ops)
    for target, data, attrs in writes:
        write, mode = attrs.pop("_write"), attrs.pop("_mode")
        if write:
            try:
                guard = write_guard(args, attrs)
            except ArgError as exc:
                return ModuleResult(failed=True, msg=str(exc), data=result.data)
            if guarded_result(result, write_file(ctx, target, data, mode, guard)).failed:
                return result
            attrs.pop("mode", None)
        if attrs:
            remote_apply(ctx, [{"op": "attrs", "path": target, **attrs}])
    return result


# ansible-core's newline_sequence values, also as written escaped ("\\n") in a playbook
NEWLINES = {"\n": "\n", "\r": "\r", "\r\n": "\r\n", "\\n": "\n", "\\r": "\r", "\\r\\n": "\r\n"}


@register
class Template(Module):
    name = "template"
    args = {
        "src": Arg("path", required=True), **FILE_ARGS,
        **{name: Arg("bool" if kind is bool else "str") for name, kind in FILE_OPTIONS.items()},
        "output_encoding": Arg("str", default="utf-8"),
    }  # fmt: skip

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        check_guard_args(cls.name, args, is_template)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        if ctx.render is None:
            return ModuleResult(failed=True, msg="template: no template renderer in this context")
        options = {name: args[name] for name in FILE_OPTIONS if args.get(name) is not None}
        if "newline_sequence" in options:
            if options["newline_sequence"] not in NEWLINES:
                return ModuleResult(
                    failed=True, msg="template: newline_sequence needs to be one of: \\n, \\r or \\r\\n"
                )
            options["newline_sequence"] = NEWLINES[options["newline_sequence"]]
        try:
            codecs.lookup(args["output_encoding"])
        except LookupError:
            return ModuleResult(failed=True, msg=f"template: unknown output_encoding {args['output_encoding']!r}")
        path, raw = read_controller_file(ctx, args["src"])
        args = preserved(args, path)
        try:
            source = raw.decode("utf-8")
            if ctx.render_file is not None:
                extra = {"template_path": str(path), "template_fullpath": str(path), "template_destpath": args["dest"]}
                text = ctx.render_file(source, extra, options)
            else:
                text = ctx.render(source)
            data = text.encode(args["output_encoding"])
        except UnicodeDecodeError:
            return ModuleResult(failed=True, msg=f"template {path} is not UTF-8 text")
        except UnicodeEncodeError as exc:
            return ModuleResult(failed=True, msg=f"template {path}: not {args['output_encoding']} text: {exc.reason}")
        except TemplateError as exc:
            return ModuleResult(failed=True, msg=f"template {path}: {exc}")
        return converge_file(ctx, args["dest"], data, args, src_name=args["src"])


__all__ = ["Copy", "File", "Template", "converge_file", "remote_apply", "remote_stat", "write_file"]
