"""The host side of the ``git`` module: a checkout brought to a version, as Ansible's ``git`` does (stdlib only).

``python3 - apply`` with the request on stdin (the host library's envelope, ``hostlib.serve``; never in an
argv: a repo URL may carry a token) with
``repo``, ``dest``, ``version``, ``remote``, ``force``, ``depth``, ``clone``, ``update``, ``single_branch``,
``recursive``, ``executable``, ``umask``, ``ssh_command``, ``check``. Prints one JSON answer: ``before``,
``after`` (commit ids; ``before`` is null for a new clone), ``changed``, ``remote_url_changed``, and ``msg``
with ``failed`` when it cannot. Every git run is an argv (no shell) with a bounded wait.
"""

import os
import subprocess
import sys

import hostlib
from hostlib import Failed

TIMEOUT = 1800  # one git command (a large clone); the controller's own task timeout bounds the whole


class Git:
    def __init__(self, req):
        self.exe = req.get("executable") or "git"
        self.dest = req["dest"]
        self.remote = req["remote"]
        self.env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
        if req.get("ssh_command"):
            self.env["GIT_SSH_COMMAND"] = req["ssh_command"]

    def run(self, *args, cwd=None, check=True):
        try:
            proc = subprocess.run(  # noqa: UP022 (capture_output is 3.7+; hosts may have 3.6)
                [self.exe, *args], cwd=cwd or self.dest, env=self.env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT,
            )  # fmt: skip
        except FileNotFoundError:
            raise Failed("Failed to find required executable %s" % self.exe) from None
        except subprocess.TimeoutExpired:
            raise Failed("git %s did not finish within %d s" % (args[0], TIMEOUT)) from None
        out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
        if check and proc.returncode != 0:
            raise Failed("git %s failed (rc=%d): %s" % (args[0], proc.returncode, (err or out).strip()[-2000:]))
        return proc.returncode, out

    def head(self):
        return self.run("rev-parse", "HEAD", check=False)[1].strip()

    def ls_remote(self, url, kind, ref, cwd):
        return self.run("ls-remote", url, kind, ref, cwd=cwd)[1]

    def remote_ref(self, url, version, cwd):
        """(kind, sha): what ``version`` names on the remote: a branch, a tag (peeled to its commit), the
        default branch for HEAD, else a commit id as given."""
        if version == "HEAD":
            out = self.run("ls-remote", url, "HEAD", cwd=cwd)[1]
            if not out.strip():
                raise Failed("Could not determine remote revision for HEAD")
            return "head", out.split()[0]
        out = self.ls_remote(url, "-h", "refs/heads/" + version, cwd)
        if out.strip():
            return "branch", out.split()[0]
        out = self.ls_remote(url, "-t", "refs/tags/" + version + "*", cwd)
        peeled = [line for line in out.splitlines() if line.endswith("refs/tags/" + version + "^{}")]
        plain = [line for line in out.splitlines() if line.endswith("refs/tags/" + version)]
        if peeled or plain:
            return "tag", (peeled or plain)[0].split()[0]
        return "commit", version

    def default_branch(self):
        """The branch the remote's HEAD names (``refs/remotes/REMOTE/HEAD``), else the checked-out one."""
        rc, out = self.run("symbolic-ref", "--quiet", "refs/remotes/%s/HEAD" % self.remote, check=False)
        if rc == 0 and out.strip():
            return out.strip().rsplit("/", 1)[-1]
        rc, out = self.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        if rc == 0 and out.strip():
            return out.strip()
        raise Failed("cannot tell the default branch of %s" % self.dest)


def clone(git, req, kind):
    parent = os.path.dirname(os.path.abspath(git.dest))
    os.makedirs(parent, exist_ok=True)
    cmd = ["clone", "--origin", git.remote]
    named = kind in ("branch", "tag")
    if req.get("depth"):
        if req["version"] == "HEAD":
            cmd += ["--depth", str(req["depth"])]
        elif named:
            cmd += ["--depth", str(req["depth"]), "--branch", req["version"]]
    if req.get("single_branch"):
        cmd.append("--single-branch")
        if named and "--branch" not in cmd:
            cmd += ["--branch", req["version"]]
    git.run(*cmd, req["repo"], git.dest, cwd=parent)


def switch(git, req, kind):
    version = req["version"]
    if version == "HEAD":
        branch = git.default_branch()
        git.run("checkout", "--force", branch)
        git.run("reset", "--hard", "%s/%s" % (git.remote, branch), "--")
    elif kind == "branch":
        rc, _ = git.run("rev-parse", "--verify", "--quiet", "refs/heads/" + version, check=False)
        if rc != 0:
            git.run("checkout", "--track", "-b", version, "%s/%s" % (git.remote, version))
        else:
            git.run("checkout", "--force", version)
            git.run("reset", "--hard", "%s/%s" % (git.remote, version))
    else:
        git.run("checkout", "--force", version)


def submodules(git, req):
    if req.get("recursive", True) and os.path.exists(os.path.join(git.dest, ".gitmodules")):
        git.run("submodule", "sync", "--recursive")
        git.run("submodule", "update", "--init", "--recursive")


def apply(req):
    git = Git(req)
    repo, dest, check = req["repo"], git.dest, req.get("check", False)
    result = {"before": None, "changed": False}  # type: dict[str, object]
    if req.get("umask") is not None:
        os.umask(int(req["umask"], 8))
    parent = os.path.dirname(os.path.abspath(dest)) if os.path.isdir(os.path.dirname(os.path.abspath(dest))) else "/"
    if not os.path.exists(os.path.join(dest, ".git", "config")):
        kind, remote_head = git.remote_ref(repo, req["version"], parent)
        if check or not req.get("clone", True):
            result.update(changed=True, after=remote_head)
            return result
        clone(git, req, kind)
        if kind == "commit" or req["version"] != "HEAD":
            switch(git, req, kind)
        submodules(git, req)
        result.update(after=git.head(), changed=True)
        return result
    result["before"] = git.head()
    if not req.get("update", True):
        result["after"] = result["before"]
        return result
    status = git.run("status", "--porcelain")[1]
    local_mods = [line for line in status.splitlines() if line and not line.startswith("??")]
    if local_mods:
        if not req.get("force"):
            result.update(failed=True, msg="Local modifications exist in the destination: %s (force=no)." % dest)
            return result
        if not check:
            git.run("reset", "--hard", "HEAD")
            result.update(changed=True, msg="Local modifications exist in the destination: %s" % dest)
    rc, url = git.run("config", "--get", "remote.%s.url" % git.remote, check=False)
    url = url.strip() if rc == 0 else None
    url_changed = bool(url) and url != repo
    result["remote_url_changed"] = url_changed
    if check:
        _, remote_head = git.remote_ref(repo, req["version"], dest)
        result.update(changed=result["before"] != remote_head or url_changed or bool(local_mods), after=remote_head)
        return result
    if url != repo:
        git.run("remote", "set-url" if url is not None else "add", git.remote, repo)
    kind, _ = git.remote_ref(repo, req["version"], dest)
    fetch = ["fetch", "--tags", git.remote]
    if req.get("force"):
        fetch.insert(1, "--force")
    git.run(*fetch)
    switch(git, req, kind)
    submodules(git, req)
    result["after"] = git.head()
    if result["before"] != result["after"] or local_mods or url_changed:
        result["changed"] = True
    return result


def apply_request(req):
    try:
        return apply(req)
    except OSError as exc:
        raise Failed("%s: %s" % (exc.filename or req.get("dest"), exc.strerror)) from None


ACTIONS = {"apply": apply_request}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
