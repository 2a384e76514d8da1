"""What ``provision model sync --src`` names, and the controller's manifest of a model directory.

Three forms, tried in this order:

* ``HOST:DIR`` — ``HOST`` is an inventory host (a seed that already has the model): its own manifest is read
  there and it serves the files;
* a directory on the controller;
* a hub id ``org/name`` (``org/name@REVISION``, default ``main``): resolved in the controller's Hugging Face
  cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``) to its snapshot
  directory, without any network access: a model not in the cache is an error that says how to get it there.
  No host ever downloads from a hub here.

The controller's manifest of a directory is cached under ``~/.cache/provision/model-manifests/`` (by size, mtime
and inode of each file, as on the hosts: :mod:`provision.remote.model_sync` is the one implementation).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..remote import model_sync as host_side

HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96})(?:@(?P<rev>[\w./-]{1,128}))?$")
SHA = re.compile(r"^[0-9a-f]{40}$")


class SourceError(Exception):
    """One line: why ``--src`` names no model."""


@dataclass(frozen=True)
class Source:
    kind: str  # "controller" | "host"
    path: str  # the directory (on the controller, or on ``host``)
    host: str | None = None
    hub: str | None = None  # "org/name@rev" when resolved from the hub cache

    def describe(self) -> str:
        if self.kind == "host":
            return f"{self.host}:{self.path}"
        return f"{self.hub} ({self.path})" if self.hub else self.path


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def resolve_hub(repo: str, revision: str = "main", cache: Path | None = None) -> Path:
    """The snapshot directory of ``repo`` at ``revision`` in the local cache (a branch or tag through
    ``refs/``, a commit sha directly). Nothing is downloaded."""
    cache = cache or hub_cache()
    base = cache / ("models--" + repo.replace("/", "--"))
    hint = (
        f"download it on the controller first (huggingface-cli download {repo} --revision {revision}), or pass "
        "a directory: provision never downloads from a hub"
    )
    if not base.is_dir():
        raise SourceError(f"{repo} is not in the controller's Hugging Face cache {cache}: {hint}")
    commit = revision
    if not SHA.match(revision):
        ref = base / "refs" / revision
        try:
            commit = ref.read_text().strip()
        except OSError:
            raise SourceError(f"{repo}@{revision}: no such revision in {base} ({hint})") from None
    snap = base / "snapshots" / commit
    if not SHA.match(commit) or not snap.is_dir():
        raise SourceError(f"{repo}@{revision}: snapshot {commit[:40]} is missing from {base} ({hint})")
    return snap


def resolve(src: str, hosts: list[str]) -> Source:
    """``--src`` as a :class:`Source` (``hosts``: the inventory's host names)."""
    head, sep, tail = src.partition(":")
    if sep and head in hosts:
        if not tail:
            raise SourceError(f"--src {src}: name the directory on {head} (HOST:DIR)")
        return Source("host", tail, host=head)
    path = Path(src).expanduser()
    if path.is_dir():
        return Source("controller", str(path.resolve()))
    m = HUB_ID.match(src)
    if m and not src.startswith((".", "/", "~")):
        rev = m.group("rev") or "main"
        return Source("controller", str(resolve_hub(m.group("repo"), rev)), hub=f"{m.group('repo')}@{rev}")
    if sep:
        raise SourceError(f"--src {src}: {head} is not an inventory host, and {src} is no directory here")
    raise SourceError(f"--src {src}: no such directory on the controller (nor a hub id org/name[@revision])")


def cache_file(path: str) -> str:
    base = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "provision" / "model-manifests"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return str(base / (hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:24] + ".json"))


def local_manifest(path: str) -> dict[str, list[object]]:
    """``{relative path: [size, sha256]}`` of a controller directory (hashed once, then cached)."""
    files, _ = host_side.manifest_of(path, cache_file(path))
    if not files:
        raise SourceError(f"{path} holds no model files")
    return files


__all__ = ["Source", "SourceError", "cache_file", "hub_cache", "local_manifest", "resolve", "resolve_hub"]
