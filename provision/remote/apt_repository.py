"""Host side of ``apt_repository`` (ansible-core's): the one-line ``deb``/``deb-src`` sources of APT added or
removed as that module does it, stdlib only (no python3-apt needed).

``python3 - apply`` with the request as JSON on stdin; one JSON answer with the module's keys (``changed``,
``repo``, ``state``, ``sources_added``, ``sources_removed``; ``before``/``after`` per added or removed file for a
diff). As ansible-core's module:

- where the sources are: ``apt-config shell`` (``Dir::Etc::sourcelist``, ``Dir::Etc::sourceparts``), so
  ``APT_CONFIG`` in the task's environment points it elsewhere, as it points python-apt;
- every line of ``sources.list`` and ``sources.list.d/*.list`` parsed the module's way: a leading ``#`` disables,
  a later ``#`` starts a comment, a line whose first word is ``deb``/``deb-src`` is a source (its whitespace
  squeezed); written back as ``[# ]SOURCE[ # COMMENT]``;
- ``present``: every line of the same source enabled, else the source appended to ``filename``.list, or to a file
  named after the URI (options, scheme and credentials dropped, other characters made ``_``);
- ``absent``: every enabled line of the source removed; a file left with no line is deleted;
- on a change every file is written back (atomically: mode kept; a new file 0666 less the umask, or ``mode`` for a
  file that got a line), then with ``update_cache`` ``apt-get update`` (``update_cache_retries`` tries, Ansible's
  backoff); when it fails the files are put back as they were and the task fails.
"""

import glob
import os
import random
import re
import shlex
import sys
import time

import hostlib
from hostlib import Failed

SOURCE_TYPES = ("deb", "deb-src")


def _apt_dirs():
    """(sources.list, sources.list.d) as APT resolves them (``APT_CONFIG`` honoured)."""
    rc, out, err = hostlib.run(
        [hostlib.find_bin("apt-config"), "shell", "LIST", "Dir::Etc::sourcelist/f", "PARTS", "Dir::Etc::sourceparts/d"],
        timeout=60,
    )  # fmt: skip
    if rc != 0:
        raise Failed("apt-config failed: %s" % (err or out).strip())
    found = {}
    for line in out.splitlines():
        name, _, value = line.partition("=")
        words = shlex.split(value)
        found[name] = words[0] if words else ""
    return found.get("LIST") or "/etc/apt/sources.list", (found.get("PARTS") or "/etc/apt/sources.list.d/").rstrip("/")


def parse(line):
    """(valid, enabled, source, comment) of one line, as the module reads it."""
    line = line.strip()
    enabled = not line.startswith("#")
    if not enabled:
        line = line[1:]
    comment = ""
    cut = line.find("#")
    if cut > 0:
        comment, line = line[cut + 1 :].strip(), line[:cut]
    source = line.strip()
    words = source.split()
    valid = bool(words) and words[0] in SOURCE_TYPES
    return valid, enabled, " ".join(words) if valid else source, comment


def render(entries):
    return "".join(("" if on else "# ") + src + (" # " + com if com else "") + "\n" for _v, on, src, com in entries)


def suggest_filename(source, filename):
    """The file a new source goes to: ``filename``.list, else one named after its URI."""
    if filename is not None:
        return "%s.list" % filename
    line = re.sub(r"\w+://", "", re.sub(r"\[[^\]]+\]", "", source))
    parts = [p for p in line.split() if p not in SOURCE_TYPES]
    first = parts[0].split("@", 1)[-1] if parts else ""
    return "%s.list" % "_".join(re.sub("[^a-zA-Z0-9]", " ", first).split())


def _load(default_file, parts_dir):
    files, links = {}, {}
    paths = [default_file] if os.path.isfile(default_file) else []
    paths += sorted(glob.glob(parts_dir + "/*.list"))  # as the module: glob's order, sorted for a stable answer
    for path in paths:
        if os.path.islink(path):
            links[path] = os.path.join(os.path.dirname(path), os.readlink(path))
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            files[path] = [parse(line) for line in fh]
    return files, links


def _valid_source(repo):
    valid, enabled, source, _ = parse(repo)
    if not valid or not enabled:
        line = repo.strip()
        line = line[1:] if line.startswith("#") else line
        cut = line.find("#")
        raise Failed("Invalid repository string: %s" % (line[:cut] if cut > 0 else line))
    return source


def _add(files, source, target):
    """Enable every line of ``source``; none: append it to ``target``. The files that got a line."""
    found = False
    for entries in files.values():
        for i, (valid, _on, src, com) in enumerate(entries):
            if valid and src == source:
                entries[i] = (valid, True, src, com)
                found = True
    if found:
        return set()
    files.setdefault(target, []).append((True, True, source, ""))
    return {target}


def _remove(files, source):
    for path, entries in files.items():
        files[path] = [e for e in entries if not (e[0] and e[1] and e[2] == source)]


def _dump(files):
    return {path: render(entries) for path, entries in files.items() if entries}


def _save(dump, loaded, links, new_repos, mode):
    """The files whose text is not ``dump``'s written (a link's target, as the module does); a file that was read
    (``loaded``) and has no line now is deleted."""
    for path in set(loaded) - set(dump):
        if os.path.exists(path):
            os.remove(path)
    for path, text in dump.items():
        target = links.get(path, path)
        try:
            old = os.stat(target)
            keep, exists = old.st_mode & 0o7777, True
        except FileNotFoundError:
            keep, exists = 0o666 & ~hostlib.umask(), False
        want = mode if (path in new_repos and mode is not None) else keep
        data = text.encode("utf-8", "surrogateescape")
        if exists and keep == want and _read(target) == data:
            continue
        folder = os.path.dirname(target)
        if folder and not os.path.isdir(folder):
            os.makedirs(folder)
        hostlib.atomic_write(target, data, mode=want)


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


def _update_cache(retries, max_delay):
    """``apt-get update`` until it works, at most ``retries`` times; the last error, or None."""
    jitter, err = random.random(), "unknown reason"
    apt_get = hostlib.find_bin("apt-get")
    for attempt in range(max(retries, 0)):
        rc, out, stderr = hostlib.run([apt_get, "-q", "update"], timeout=600)
        errors = [line for line in stderr.splitlines() if line.startswith(("E:", "W: Failed", "Err:"))]
        if rc == 0 and not [line for line in errors if line.startswith("E:")]:
            return None
        err = "; ".join(errors) or (stderr or out).strip()
        time.sleep(min(2**attempt, max_delay) + jitter)
    return err


def apply(req):
    repo, state, check = req["repo"], req["state"], req.get("check")
    if not repo:
        raise Failed("Please set argument 'repo' to a non-empty value")
    default_file, parts_dir = _apt_dirs()
    files, links = _load(default_file, parts_dir)
    before = _dump(files)
    source = _valid_source(repo)
    new_repos = set()
    if state == "present":
        name = suggest_filename(source, req.get("filename"))
        target = name if "/" in name else os.path.abspath(os.path.join(parts_dir, name))
        new_repos = _add(files, source, target)
    else:
        _remove(files, source)
    after = _dump(files)
    changed = before != after
    added = sorted(set(after) - set(before)) if changed else []
    removed = sorted(set(before) - set(after)) if changed else []
    if changed and not check:
        _save(after, files, links, new_repos, req.get("mode"))
        if req.get("update_cache"):
            retries = int(req.get("update_cache_retries", 5))
            err = _update_cache(retries, int(req.get("update_cache_retry_max_delay", 12)))
            if err is not None:
                for path in added:
                    if os.path.exists(path):
                        os.remove(path)
                _save(before, files, links, set(), None)
                raise Failed("Failed to update apt cache after %s retries: %s" % (retries, err))
    diffs = [{"path": p, "before": before.get(p, ""), "after": after.get(p, "")} for p in added + removed]
    return {"changed": changed, "repo": repo, "state": state, "sources_added": added, "sources_removed": removed,
            "diffs": diffs}  # fmt: skip


ACTIONS = {"apply": apply}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
