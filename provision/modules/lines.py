"""``lineinfile``, ``blockinfile`` and ``replace``: edit a text file on the host the way Ansible's modules do.

The file is read in one round trip (``file_state.py stat`` with its content), the new content is computed here
on the controller with Ansible's rules (which line matches, where a line or block goes, what counts as a
change, the messages), and :func:`provision.modules.files.converge_file` writes it atomically with the wanted
mode/owner/group (and does check mode and ``--diff``), with ``backup`` and ``validate`` as ansible-core's
(``files.write_guard``: the old file kept beside it first, the validate command run on the new file before it
replaces the old one). A link is edited where it points and kept (the target replaced atomically, the backup
named after the link), as ansible-core does, when the link and each link it leads through belong to root or to
the user writing; a link another user owns fails the task (ansible-core would edit what it names).
"""

from __future__ import annotations

import base64
import posixpath
import re
from typing import Any

from .base import Arg, ArgError, Module, ModuleContext, ModuleResult, register
from .files import attr_changes, check_guard_args, converge_file, remote_apply, remote_stat
from .modes import new_file_mode, resolve_mode

READ_LIMIT = 64 << 20  # a file larger than this is not edited (its content would travel whole)
NO_HASH = "0" * 64  # never a file's sha256: the stat always carries the content
ATTRS_CHANGED = "ownership, perms or SE linux context changed"

COMMON = {
    "path": Arg("path", required=True, aliases=("dest", "destfile", "name")),
    "mode": Arg("mode"),
    "owner": Arg(),
    "group": Arg(),
    "backup": Arg("bool", default=False),
    "validate": Arg(),
}


def _read(ctx: ModuleContext, path: str) -> tuple[dict[str, Any], bytes | None]:
    """The file's state and content (None when there is no file); :class:`_Refused` (with the module's failed
    result) for a directory or a file too large to edit."""
    st = remote_stat(ctx, [path], hash=True, want=NO_HASH, content_limit=READ_LIMIT)[0]
    if st.get("ftype") == "directory":
        raise _Refused(ModuleResult(failed=True, msg=f"Path {path} is a directory !", data={"rc": 256}))
    if st.get("type") == "link":  # ansible-core edits what the link names; provision too, from a trusted link
        if not st.get("link_trusted"):
            owners = ", ".join(st.get("link_owners") or ["?"])
            msg = (
                f"{path} is a link owned by {owners}, not by root or the user writing: provision does not edit "
                f"what it names ({st.get('real')}; ansible-core would)"
            )
            raise _Refused(ModuleResult(failed=True, msg=msg))
        if st.get("ftype") is None:  # a dangling link: its target is made (with create), as ansible-core does
            return {**st, "exists": False}, None
    if not st["exists"]:
        return st, None
    if st.get("ftype") == "file" and "content" not in st:
        raise _Refused(ModuleResult(failed=True, msg=f"{path} is larger than {READ_LIMIT >> 20} MiB: not edited"))
    return st, base64.b64decode(st.get("content", ""))


class _Refused(Exception):
    def __init__(self, result: ModuleResult) -> None:
        super().__init__(result.msg)
        self.result = result


def _write(
    ctx: ModuleContext, st: dict[str, Any], path: str, data: bytes, args: dict[str, Any], exists: bool
) -> ModuleResult:
    """Converge the file to ``data`` (``path``'s, or for a link what it names: ``st``'s ``real``, the backup
    named after the link, as ansible-core); a missing parent directory is made first (``create``)."""
    target = st["real"] if st.get("type") == "link" else path
    parent = posixpath.dirname(target.rstrip("/"))
    if not exists and parent and not ctx.check:
        remote_apply(ctx, [{"op": "mkdir", "path": parent}])
    wanted = {k: args[k] for k in ("mode", "owner", "group", "backup", "validate")}
    if wanted["backup"] and target != path:
        wanted["backup"] = path
    result = converge_file(ctx, target, data, wanted)
    if result.failed and "exit_status" in result.data:  # the validate command refused it: ansible-core's words
        rc, err = result.data.pop("exit_status"), result.data.pop("stderr", "")
        result.data.pop("stdout", None)
        result.msg = f"failed to validate: rc:{rc} error:{err}"
    return result


def _finish(result: ModuleResult, msg: str, st: dict[str, Any], args: dict[str, Any]) -> ModuleResult:
    """Ansible's message: the content's, then " and " the attributes' when they changed too."""
    if result.failed:
        return result
    args = {**args, "mode": resolve_mode(args.get("mode"), st)}
    if st.get("exists"):
        attrs = bool(attr_changes(st, args))
    else:  # a new file is made 0666 less the umask, then given the wanted attributes
        mode_differs = args.get("mode") is not None and args["mode"] != new_file_mode(st)
        attrs = mode_differs or bool(args.get("owner") or args.get("group"))
    if attrs and result.changed:
        msg = f"{msg} and {ATTRS_CHANGED}" if msg else ATTRS_CHANGED
    result.msg = msg
    return result


# -------------------------------------------------------------------------------------------- lineinfile
@register
class LineInFile(Module):
    name = "lineinfile"
    args = {
        **COMMON,
        "state": Arg(default="present", choices=("present", "absent")),
        "regexp": Arg(aliases=("regex",)),
        "search_string": Arg(),
        "line": Arg("raw", aliases=("value",)),
        "insertafter": Arg(),
        "insertbefore": Arg(),
        "backrefs": Arg("bool", default=False),
        "create": Arg("bool", default=False),
        "firstmatch": Arg("bool", default=False),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        check_guard_args(cls.name, args, is_template)
        for a, b in (("insertbefore", "insertafter"), ("regexp", "search_string"), ("backrefs", "search_string")):
            if args.get(a) is not None and args.get(b) is not None and args.get(a) is not False:
                raise ArgError(f"lineinfile: parameters are mutually exclusive: {a}|{b}")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        path = args["path"]
        if args["line"] is not None and not isinstance(args["line"], str):
            args["line"] = str(args["line"])
        try:
            st, content = _read(ctx, path)
        except _Refused as exc:
            return exc.result
        if args["state"] == "absent":
            if content is None:
                return ModuleResult(msg="file not present", data={"found": 0})
            lines, found = _absent(content, args)
            msg = f"{found} line(s) removed" if found else ""
            new = b"".join(lines)
            result = _write(ctx, st, path, new, args, True) if found or _attrs_wanted(args) else ModuleResult()
            result.data["found"] = found
            if not result.failed:
                result.data["backup"] = result.data.pop("backup_file", "")
            return _finish(result, msg, st, args)
        if args["backrefs"] and args["regexp"] is None:
            return ModuleResult(failed=True, msg="regexp is required with backrefs=true")
        if args["line"] is None:
            return ModuleResult(failed=True, msg="line is required with state=present")
        if content is None and not args["create"]:
            return ModuleResult(failed=True, msg=f"Destination {path} does not exist !", data={"rc": 257})
        try:
            new, msg = _present(content or b"", args)
        except re.error as exc:
            return ModuleResult(failed=True, msg=f"lineinfile: bad regular expression: {exc}")
        if content is not None and new == content and not _attrs_wanted(args):
            return ModuleResult(data={"backup": ""})
        result = _write(ctx, st, path, new, args, content is not None)
        if not result.failed:
            result.data["backup"] = result.data.pop("backup_file", "")
        return _finish(result, msg, st, args)


def _attrs_wanted(args: dict[str, Any]) -> bool:
    return any(args.get(k) is not None for k in ("mode", "owner", "group"))


def _absent(content: bytes, args: dict[str, Any]) -> tuple[list[bytes], int]:
    regexp = re.compile(args["regexp"].encode()) if args["regexp"] is not None else None
    search = args["search_string"].encode() if args["search_string"] is not None else None
    line = str(args["line"]).encode() if args["line"] is not None else None
    kept, found = [], 0
    for cur in content.splitlines(True):
        if regexp is not None:
            hit = bool(regexp.search(cur))
        elif search is not None:
            hit = search in cur
        else:
            hit = line == cur.rstrip(b"\r\n")
        if hit:
            found += 1
        else:
            kept.append(cur)
    return kept, found


def _present(content: bytes, args: dict[str, Any]) -> tuple[bytes, str]:
    """Ansible's ``lineinfile`` state=present on ``content``: (new content, message)."""
    lines = content.splitlines(True)
    line = args["line"].encode()
    after, before = args["insertafter"], args["insertbefore"]
    if after is None and before is None:
        after = "EOF"
    regexp = re.compile(args["regexp"].encode()) if args["regexp"] is not None else None
    search = args["search_string"].encode() if args["search_string"] is not None else None
    if after not in (None, "BOF", "EOF"):
        insert_re: re.Pattern[bytes] | None = re.compile(after.encode())
    elif before not in (None, "BOF"):
        insert_re = re.compile(before.encode())
    else:
        insert_re = None
    first = args["firstmatch"]
    found, insert_at = -1, -1  # the matching line; where the insertafter/insertbefore pattern matched
    match: re.Match[bytes] | bool | None = None
    if regexp is not None:
        for i, cur in enumerate(lines):
            m = regexp.search(cur)
            if m:
                found, match = i, m
                if first:
                    break
    if search is not None:
        for i, cur in enumerate(lines):
            if search in cur:
                found, match = i, True
                if first:
                    break
    if not match:
        for i, cur in enumerate(lines):
            if line == cur.rstrip(b"\r\n"):
                found = i
            elif insert_re is not None and insert_re.search(cur):
                insert_at = i + 1 if after else i
                if first:
                    break
    sep = b"\n"
    added = "line added"
    if found != -1:
        new_line = match.expand(line) if args["backrefs"] and isinstance(match, re.Match) else line
        if not new_line.endswith(sep):
            new_line += sep
        if lines[found] != new_line:
            lines[found] = new_line
            return b"".join(lines), "line replaced"
        return b"".join(lines), ""
    if args["backrefs"]:
        return content, ""  # no match: nothing is safe to write without the backreferences
    if before == "BOF" or after == "BOF":
        lines.insert(0, line + sep)
        return b"".join(lines), added
    if after == "EOF" or insert_at == -1:
        if lines and lines[-1][-1:] not in (b"\n", b"\r"):
            lines.append(sep)
        lines.append(line + sep)
        return b"".join(lines), added
    if after:
        if len(lines) == insert_at:
            if lines[insert_at - 1].rstrip(b"\r\n") != line:
                lines.append(line + sep)
                return b"".join(lines), added
            return b"".join(lines), ""
        if line != lines[insert_at].rstrip(b"\r\n"):
            lines.insert(insert_at, line + sep)
            return b"".join(lines), added
        return b"".join(lines), ""
    lines.insert(insert_at, line + sep)
    return b"".join(lines), added


# ------------------------------------------------------------------------------------------- blockinfile
@register
class BlockInFile(Module):
    name = "blockinfile"
    args = {
        **COMMON,
        "state": Arg(default="present", choices=("present", "absent")),
        "marker": Arg(default="# {mark} ANSIBLE MANAGED BLOCK"),
        "block": Arg("raw", default="", aliases=("content",)),
        "insertafter": Arg(),
        "insertbefore": Arg(),
        "create": Arg("bool", default=False),
        "marker_begin": Arg(default="BEGIN"),
        "marker_end": Arg(default="END"),
        "append_newline": Arg("bool", default=False),
        "prepend_newline": Arg("bool", default=False),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        check_guard_args(cls.name, args, is_template)
        if args.get("insertbefore") is not None and args.get("insertafter") is not None:
            raise ArgError("blockinfile: parameters are mutually exclusive: insertbefore|insertafter")

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        path = args["path"]
        try:
            st, content = _read(ctx, path)
        except _Refused as exc:
            return exc.result
        present = args["state"] == "present"
        if content is None and not args["create"]:
            return ModuleResult(failed=True, msg=f"Path {path} does not exist !", data={"rc": 257})
        if content is None and not present:
            return ModuleResult(msg=f"File {path} not present")
        try:
            new = _block(content, args)
        except re.error as exc:
            return ModuleResult(failed=True, msg=f"blockinfile: bad regular expression: {exc}")
        if new == content:
            msg = ""
        elif content is None:
            msg = "File created"
        elif not (present and args["block"]):
            msg = "Block removed"
        else:
            msg = "Block inserted"
        if new == content and not _attrs_wanted(args):
            return ModuleResult()
        result = _write(ctx, st, path, new, args, content is not None)
        return _finish(result, msg, st, args)


def _block(content: bytes | None, args: dict[str, Any]) -> bytes:
    """Ansible's ``blockinfile`` on ``content``: the new content."""
    sep = b"\n"
    lines = content.splitlines(True) if content is not None else []
    marker = str(args["marker"]).encode()
    begin = marker.replace(b"{mark}", str(args["marker_begin"]).encode()) + sep
    end = marker.replace(b"{mark}", str(args["marker_end"]).encode()) + sep
    block = str(args["block"] or "").encode()
    present = args["state"] == "present"
    after, before = args["insertafter"], args["insertbefore"]
    if after is None and before is None:
        after = "EOF"
    if after not in (None, "EOF"):
        insert_re: re.Pattern[bytes] | None = re.compile(after.encode())
    elif before not in (None, "BOF"):
        insert_re = re.compile(before.encode())
    else:
        insert_re = None
    blocklines: list[bytes] = []
    if present and block:
        if not block.endswith(sep):
            block += sep
        blocklines = [begin, *block.splitlines(True), end]
    n0 = n1 = None
    for i, cur in enumerate(lines):
        if cur == begin:
            n0 = i
        if cur == end:
            n1 = i
    if n0 is None or n1 is None:
        n0 = None
        if insert_re is not None:
            if insert_re.flags & re.MULTILINE and content is not None:
                m = insert_re.search(content)
                if m:
                    n0 = content.count(b"\n", 0, m.end() if after else m.start())
            else:
                for i, cur in enumerate(lines):
                    if insert_re.search(cur):
                        n0 = i
            if n0 is None:
                n0 = len(lines)
            elif after is not None:
                n0 += 1
        elif before is not None:
            n0 = 0
        else:
            n0 = len(lines)
    elif n0 < n1:
        del lines[n0 : n1 + 1]
    else:
        del lines[n1 : n0 + 1]
        n0 = n1
    if n0 > 0 and not lines[n0 - 1].endswith(sep):
        lines[n0 - 1] += sep
    if args["prepend_newline"] and present and n0 != 0 and lines[n0 - 1] != sep:
        lines[n0:n0] = [sep]
        n0 += 1
    lines[n0:n0] = blocklines
    if args["append_newline"] and present:
        after_block = n0 + len(blocklines)
        if after_block < len(lines) and lines[after_block] != sep:
            lines[after_block:after_block] = [sep]
    return b"".join(lines)


# ----------------------------------------------------------------------------------------------- replace
@register
class Replace(Module):
    name = "replace"
    args = {
        **COMMON,
        "regexp": Arg(required=True),
        "replace": Arg(default=""),
        "after": Arg(),
        "before": Arg(),
        "encoding": Arg(default="utf-8"),
    }

    @classmethod
    def check_combination(cls, args: Any, is_template: Any) -> None:
        check_guard_args(cls.name, args, is_template)

    def run(self, ctx: ModuleContext, args: dict[str, Any]) -> ModuleResult:
        path = args["path"]
        try:
            st, raw = _read(ctx, path)
        except _Refused as exc:
            return exc.result
        if raw is None:
            return ModuleResult(failed=True, msg=f"Path {path} does not exist !", data={"rc": 257})
        encoding = args["encoding"]
        try:
            contents = raw.decode(encoding, errors="surrogateescape")
        except LookupError:
            return ModuleResult(failed=True, msg=f"replace: unknown encoding {encoding!r}")
        pattern = ""
        after, before = args["after"], args["before"]
        if after and before:
            pattern = f"{after}(?P<subsection>.*?){before}"
        elif after:
            pattern = f"{after}(?P<subsection>.*)"
        elif before:
            pattern = f"(?P<subsection>.*){before}"
        try:
            if pattern:
                section_match = re.search(re.compile(pattern, re.DOTALL), contents)
                if not section_match:
                    msg = f"Pattern for before/after params did not match the given file: {pattern}"
                    return ModuleResult(msg=msg, data={"rc": 0})
                section = section_match.group("subsection")
                span = (section_match.start("subsection"), section_match.end("subsection"))
            else:
                section, span = contents, (0, len(contents))
            new_section, count = re.subn(re.compile(args["regexp"], re.MULTILINE), args["replace"], section)
        except re.error as exc:
            return ModuleResult(failed=True, msg=f"Unable to process replace due to error: {exc}")
        changed = count > 0 and new_section != section
        new = contents[: span[0]] + new_section + contents[span[1] :] if changed else contents
        msg = f"{count} replacements made" if changed else ""
        if not changed and not _attrs_wanted(args):
            return ModuleResult(data={"rc": 0})
        result = _write(ctx, st, path, new.encode(encoding, errors="surrogateescape"), args, True)
        result.data["rc"] = 0
        return _finish(result, msg, st, args)


__all__ = ["BlockInFile", "LineInFile", "Replace"]
