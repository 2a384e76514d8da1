"""The host side of the rollout (provision/remote/pd_rollout.py), run here as on a host: a stack change is seen
in a REAL process's ``/proc/PID/maps`` (the venv link switched under a running server), the previous venv and
launch files are kept, put back and removed; a drain of a server that does not answer times out, bounded."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

import pytest

from tests.support.pd import helper
from tests.support.web import QuietFiles, served_folder


def extension_module() -> tuple[str, Path]:
    """A stdlib extension module this Python loads from a shared library, and that file. Which ones are files
    depends on the build: Debian's Python has _csv (and others) built into the interpreter, with no file."""
    for name in ("_csv", "_json", "_bisect", "_heapq", "_random", "_queue", "array", "_struct"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(tuple(EXTENSION_SUFFIXES)):
            return name, Path(spec.origin)
    raise AssertionError("this Python loads none of the usual stdlib extension modules from a file")


MODULE, MODULE_FILE = extension_module()


def fake_env(root: Path, name: str) -> Path:
    """A venv-like dir whose site-packages holds a real extension module (a copy of a stdlib one)."""
    site = root / "venv.envs" / name / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    so = MODULE_FILE
    (site / so.name).write_bytes(so.read_bytes())
    (root / "venv.envs" / name / "bin").mkdir()
    return site


@pytest.fixture
def server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A process that loaded an extension module from env A's site-packages; ``venv`` links to env A."""
    site = fake_env(tmp_path, "A")
    fake_env(tmp_path, "B")
    venv = tmp_path / "venv"
    venv.symlink_to(tmp_path / "venv.envs" / "A")
    code = f"import sys; sys.path.insert(0, {str(site)!r}); sys.modules.pop({MODULE!r}, None); " \
           f"import {MODULE} as m; print(m.__file__, flush=True); import time; time.sleep(60)"  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and str(site) in proc.stdout.readline()
    pidfile = tmp_path / "server.json"
    pidfile.write_text(json.dumps({"pid": proc.pid}))
    try:
        yield {"venv": venv, "python": str(venv / "bin" / "python"), "pidfile": str(pidfile), "root": tmp_path}
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_switched_venv_is_seen_kept_and_put_back(server: dict[str, Any]) -> None:
    venv, root = server["venv"], server["root"]
    req = {"python": server["python"], "pidfile": server["pidfile"]}
    same = helper("stack", req)
    assert same["changed"] is False and same["loaded"] == [str(root / "venv.envs" / "A")]
    venv.unlink()
    venv.symlink_to(root / "venv.envs" / "B")  # what an install does: the link now points at the new env
    switched = helper("stack", req)
    assert switched["changed"] is True and switched["venv"] == str(root / "venv.envs" / "B")
    script = root / "s.sh"
    script.write_text("old")
    files = {**req, "paths": [str(script)]}
    assert helper("files", {**files, "op": "backup"})["done"] == [str(venv), str(script)]
    script.write_text("new")
    assert helper("files", {**files, "op": "restore"})["done"] == [str(venv), str(script)]
    assert os.readlink(venv) == str(root / "venv.envs" / "A") and script.read_text() == "old"
    assert helper("stack", req)["changed"] is False
    helper("files", {**files, "op": "discard"})
    assert sorted(p.name for p in root.iterdir() if "rollout" in p.name) == []


def test_kept_and_restored_files_never_go_through_a_planted_link(tmp_path: Path) -> None:
    """Another user of the host plants links at the names the rollout writes (PATH.rollout-prev, and the old
    fixed temp name PATH.rollout-tmp): a backup and a restore replace the file, never write through a link."""
    script = tmp_path / "s.sh"
    script.write_text("old")
    script.chmod(0o700)
    victims = {name: tmp_path / f"victim-{name}" for name in ("prev", "tmp")}
    for name, victim in victims.items():
        victim.write_text("root's file")
        (tmp_path / f"s.sh.rollout-{name}").symlink_to(victim)
    files = {"paths": [str(script)]}
    assert helper("files", {**files, "op": "backup"})["done"] == [str(script)]
    prev = tmp_path / "s.sh.rollout-prev"
    assert not prev.is_symlink() and prev.read_text() == "old" and prev.stat().st_mode & 0o777 == 0o700
    script.write_text("new")
    assert helper("files", {**files, "op": "restore"})["done"] == [str(script)]
    assert script.read_text() == "old" and not script.is_symlink() and script.stat().st_mode & 0o777 == 0o700
    assert all(v.read_text() == "root's file" for v in victims.values())
    leftovers = sorted(p.name for p in tmp_path.iterdir() if ".tmp-" in p.name)
    assert leftovers == []


def test_no_running_server_is_no_stack_change(tmp_path: Path) -> None:
    answer = helper("stack", {"python": str(tmp_path / "venv/bin/python"), "pidfile": str(tmp_path / "none.json")})
    assert answer["ok"] and answer["changed"] is False and answer["loaded"] is None


def test_a_drain_of_a_server_that_does_not_answer_is_bounded() -> None:
    started = time.monotonic()
    answer = helper("drain", {"url": "http://127.0.0.1:9", "timeout": 1.5, "interval": 0.2, "settle": 0.5})
    assert answer["ok"] and answer["drained"] is False and answer["last"] is None
    print(f"drain gave up after {time.monotonic() - started:.1f}s")


@pytest.fixture
def worker_api(tmp_path: Path) -> Iterator[tuple[str, list[dict[str, Any]], str]]:
    """A stand-in for the router's worker API (``GET``/``POST /workers``, as sglang-router 0.3.x answers: a POSTed
    worker is listed healthy at once) and a server that answers ``/health``: (router URL, the POSTs, server URL)."""
    posted: list[dict[str, Any]] = []

    class Api(QuietFiles):
        def answer(self, code: int, doc: object) -> None:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            workers = [{"id": str(i), "url": w["url"], "is_healthy": True} for i, w in enumerate(posted)]
            self.answer(200, {"workers": workers} if self.path == "/workers" else {})

        def do_POST(self) -> None:
            posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.answer(202, {})

    with served_folder(tmp_path, Api) as router, served_folder(tmp_path, Api) as healthy:
        yield router, posted, healthy


def test_an_interrupted_batch_puts_back_only_the_servers_that_answer(
    worker_api: tuple[str, list[dict[str, Any]], str],
) -> None:
    """``router_add`` with ``healthy_only`` (an interrupted rollout's batch): a server that does not answer
    ``/health`` (here a closed port) is skipped: not POSTed, not waited for."""
    router, posted, healthy = worker_api
    down = "http://127.0.0.1:9"
    workers = [{"url": down, "worker_type": "decode"}, {"url": healthy, "worker_type": "decode"}]
    answer = helper("router_add", {"router": router, "workers": workers, "healthy_only": True, "wait": "added",
                                   "timeout": 30})  # fmt: skip
    assert answer["ok"] and answer["added"] == [healthy] and answer["skipped"] == [down], answer
    assert [p["url"] for p in posted] == [healthy]
