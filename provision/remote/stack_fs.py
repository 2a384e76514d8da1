"""Filesystem steps of a stack install, run ON the host (stdlib only; Python 3.6+).

    python - ACTION < REQUEST_JSON

in the host library's envelope (``hostlib.serve``: ONE JSON answer; ``{"ok": false, "msg": ...}`` and exit 1 on
failure). Actions:

* ``prepare {"dirs": [...]}``: create directories (parents too).
* ``switch {"venv", "new", "envs"}``: make ``venv`` a symlink to ``new`` atomically (a temp link renamed over
  the old one). A plain directory at ``venv`` (a manual install) is moved aside into ``envs`` first. Keeps
  the previous environment for rollback and deletes older ones inside ``envs`` (nothing outside it).
  Answer: ``{"previous", "moved_aside", "removed": [...]}``.
* ``discard {"path", "envs"}``: delete a failed build (only a direct child of ``envs``).
* ``list {"dir"}``: ``{"files": {name: [size, mtime]}}`` of the regular files in ``dir`` (flat).
* ``utime {"dir", "times": {name: mtime}}``: set modification times (after a sync: the next ``list`` matches).
* ``verify {"dir", "sha256": {name: hex}, "times": {name: mtime}}``: check sent files; a mismatch is deleted.
  Answer: ``{"bad": [names]}``.
"""

import glob
import os
import shutil
import site
import sys
import time

import hostlib


def prepare(req):
    for path in req["dirs"]:
        os.makedirs(path, exist_ok=True)
    return {}


def _inside(path, envs):
    return os.path.dirname(os.path.normpath(path)) == os.path.normpath(envs)


def switch(req):
    venv, new, envs = req["venv"], req["new"], req["envs"]
    if not os.path.isfile(os.path.join(new, "bin", "python")) and not os.path.islink(
        os.path.join(new, "bin", "python")
    ):
        raise hostlib.Failed(f"refusing to switch to {new}: it has no bin/python")
    previous = moved = None
    if os.path.islink(venv):
        target = os.readlink(venv)
        previous = os.path.normpath(os.path.join(os.path.dirname(venv), target))
    elif os.path.isdir(venv):
        moved = os.path.join(envs, "manual-" + time.strftime("%Y%m%d-%H%M%S"))
        os.rename(venv, moved)  # same filesystem: envs is the venv's sibling
        previous = moved
    elif os.path.lexists(venv):
        raise hostlib.Failed(f"{venv} exists and is not a directory or a symlink: move it away")
    hostlib.swap_link(venv, new)  # rename(2) over a symlink is atomic: readers see the old or the new env
    removed = []
    keep = {os.path.normpath(new), os.path.normpath(previous or new)}
    for name in sorted(os.listdir(envs)):
        path = os.path.join(envs, name)
        if os.path.normpath(path) in keep or os.path.islink(path) or not os.path.isdir(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return {"previous": previous, "moved_aside": moved, "removed": removed}


def discard(req):
    path, envs = req["path"], req["envs"]
    if not _inside(path, envs):
        raise hostlib.Failed(f"refusing to delete {path}: not inside {envs}")
    shutil.rmtree(path, ignore_errors=True)
    return {"removed": not os.path.exists(path)}


def list_files(req):
    files = {}
    try:
        names = os.listdir(req["dir"])
    except OSError:
        names = []
    for name in names:
        try:
            st = os.stat(os.path.join(req["dir"], name))
        except OSError:
            continue
        if os.path.isfile(os.path.join(req["dir"], name)):
            files[name] = [st.st_size, int(st.st_mtime)]
    return {"files": files}


def utime(req):
    for name, mtime in req["times"].items():
        os.utime(os.path.join(req["dir"], name), (mtime, mtime))
    return {}


def verify(req):
    """After a sync: each sent file's sha256 against the controller's; a file that differs is deleted (the
    next sync sends it again), the others get the controller's mtime (the next ``list`` matches)."""
    bad = []
    for name, want in req["sha256"].items():
        path = os.path.join(req["dir"], name)
        try:
            digest = hostlib.digest(path)
        except OSError:
            bad.append(name)
            continue
        if digest != want:
            os.unlink(path)
            bad.append(name)
        elif name in req.get("times", {}):
            os.utime(path, (req["times"][name], req["times"][name]))
    return {"bad": sorted(bad)}


def lock(req):
    """Take the venv's build lock (an atomic mkdir), waiting up to ``wait`` seconds: two inventory hosts that
    are one machine and one user (inventory/local.yml) must not build the same venv at once. A lock older
    than ``stale`` seconds was left by a killed run and is taken over."""
    deadline = time.time() + float(req["wait"])
    waited = False
    while True:
        try:
            os.mkdir(req["path"], 0o700)
            return {"waited": waited}
        except FileExistsError:
            try:
                if time.time() - os.stat(req["path"]).st_mtime > float(req["stale"]):
                    os.rmdir(req["path"])
                    continue
            except OSError:
                continue
        if time.time() > deadline:
            raise hostlib.Failed("another install holds {} for more than {}s".format(req["path"], req["wait"]))
        waited = True
        time.sleep(0.5)


def unlock(req):
    try:
        os.rmdir(req["path"])
    except FileNotFoundError:
        pass
    return {}


def inherit(req):
    """Run by the BASE interpreter: when it is itself a venv (a GPU image's /opt/.../.venv with torch),
    ``--system-site-packages`` would only reach ITS base; a .pth file in the new venv adds the base venv's
    site-packages after the new venv's own (the new venv's packages still win)."""
    if sys.prefix == getattr(sys, "base_prefix", sys.prefix):
        return {"inherited": []}
    paths = [p for p in site.getsitepackages() if os.path.isdir(p)]
    found = glob.glob(os.path.join(req["new"], "lib", "python*", "site-packages"))
    if not found:
        raise hostlib.Failed("no site-packages in {}".format(req["new"]))
    with open(os.path.join(found[0], "_provision_base_venv.pth"), "w") as fh:
        fh.write("\n".join(paths) + "\n")
    return {"inherited": paths}


ACTIONS = {
    "prepare": prepare,
    "switch": switch,
    "discard": discard,
    "list": list_files,
    "utime": utime,
    "verify": verify,
    "inherit": inherit,
    "lock": lock,
    "unlock": unlock,
}


if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
