"""The host library (provision/remote/hostlib.py) and how it travels.

- THE atomic write: never through a planted link (at the target, or at any name a planter could guess), the
  final mode from creation whatever the umask, nothing left behind on failure; the link swap; the envelope.
- Shipping: a script that imports the library runs the same through every way of travel (``python3 -`` with
  the source on stdin, the bootstrap with request data after the source, the persistent agent, a copied file
  run from a directory without the library), with the host's Python; a bad request gets the same failure
  answer through each, and so does a failing process_ctl action (its own fields, exit 1), which the controller
  (``provision.pd.process.helper``) reads as the answer it is.
- The guard: no shipped script defines its own ``Failed``, umask reader, atomic write, envelope or pump (a select
  loop over pipes: THE pump is ``programs/pump.py``, shipped with the scripts that import it), except the
  scripts listed in BY_DESIGN with what they define and why it is not the library's thing (the agent's select
  loop is the resident's relay, not a pump; the "atomic writes" of make_tiny_model, model_sync and
  stack_fs are directory renames, no file written over). Every entry gives a reason, and a listed thing that
  is gone fails too: the list never lies. (Issue 24 ported every other script; the last was process_ctl.py.)
"""

from __future__ import annotations

import ast
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision import remote
from provision.commands import Command
from provision.modules.base import _BOOTSTRAP
from provision.transport.local import LocalConnection

sys.path.insert(0, str(remote.REMOTE_DIR))
sys.path.insert(0, str(remote.PROGRAMS_DIR))  # the host library's codec
import hostlib

HOST_PYTHON = "/usr/bin/python3"  # what a host has: not this venv's
LIBRARY_FILES = ("__init__.py", "hostlib.py", "codec.py")  # not scripts: the package, the host library and its codec
SCRIPTS = sorted(p.name for p in remote.REMOTE_DIR.glob("*.py") if p.name not in LIBRARY_FILES)
SERVED = [name for name in SCRIPTS if "hostlib.serve(" in remote.path(name).read_text()]

# what a shipped script defines for itself BY DESIGN (issue 24: every other script was ported onto hostlib), with
# why: the guard's ast matching cannot tell these from what the library has, the reason says what they really are
BY_DESIGN: dict[str, tuple[set[str], str]] = {
    "agent.py": (
        {"pump"},
        "it IS the transport (its framing, in _serve_stream, is a multi-request protocol over private copies of"
        " fds 0 and 1 running the helpers' envelopes, not an envelope of its own); its select loop is the"
        " resident's relay (--persist: the keeper's frames to each run's forked agent and back, as they come,"
        " for as long as runs come), not a command's outputs collected until they end (THE pump's job)",
    ),
    "make_tiny_model.py": (
        {"atomic write"},
        "a model DIRECTORY (built beside the target by save_pretrained) renamed into place: no file is written"
        " over another (its marker file goes through hostlib.atomic_write); the guard counts os.rename",
    ),
    "model_sync.py": (
        {"atomic write"},
        "commit moves what was staged into place: the model directory (os.rename of a directory) and its manifest"
        " cache (written whole by hostlib.atomic_write under the staged name, then os.replace-d over the old"
        " cache): renames of finished things, nothing is written through",
    ),
    "stack_fs.py": (
        {"atomic write"},
        "a hand-made venv directory moved aside (os.rename of a directory): no file is written over another",
    ),
}


# ---- the atomic write, the link swap ---------------------------------------------------------------------


@pytest.fixture
def umask_077() -> Iterator[None]:
    old = os.umask(0o077)
    yield
    os.umask(old)


def test_atomic_write_replaces_a_planted_link_and_never_writes_through_it(tmp_path: Path, umask_077: None) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "launch.sh"
    target.symlink_to(victim)
    hostlib.atomic_write(str(target), b"new", 0o755)
    assert victim.read_text() == "precious"
    assert not target.is_symlink() and target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755  # the final mode, not narrowed by the umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["launch.sh", "victim"]  # no temp file left


def test_atomic_write_creates_its_temp_file_under_a_name_nobody_could_plant(tmp_path: Path) -> None:
    """Whatever names a planter prepared beside the target (the old fixed ``.rollout-tmp``, ``.tmp``), the
    write goes to a fresh O_EXCL name: the planted links are left alone, their targets untouched."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "s.sh"
    for planted in ("s.sh.tmp", "s.sh.rollout-tmp", "s.sh.new", f"s.sh.tmp-{os.getpid()}"):
        (tmp_path / planted).symlink_to(victim)
    hostlib.atomic_write(str(target), b"x", 0o600)
    assert victim.read_text() == "precious" and target.read_bytes() == b"x"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("old")

    def boom(fh: object) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        hostlib.atomic_write(str(target), fill=boom)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f"]


def test_copy_over_keeps_mode_and_times_and_replaces_a_link(tmp_path: Path) -> None:
    src, victim, dest = tmp_path / "src", tmp_path / "victim", tmp_path / "dest"
    src.write_text("content")
    src.chmod(0o700)
    os.utime(src, (1_000_000, 1_000_000))
    victim.write_text("precious")
    dest.symlink_to(victim)
    hostlib.copy_over(str(src), str(dest))
    assert victim.read_text() == "precious" and not dest.is_symlink() and dest.read_text() == "content"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700 and dest.stat().st_mtime == 1_000_000


def test_swap_link_replaces_a_link_in_one_step_and_refuses_a_directory(tmp_path: Path) -> None:
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    link = tmp_path / "venv"
    link.symlink_to(tmp_path / "A")
    hostlib.swap_link(str(link), str(tmp_path / "B"))
    assert os.readlink(link) == str(tmp_path / "B")
    (tmp_path / "real").mkdir()
    with pytest.raises(OSError):
        hostlib.swap_link(str(tmp_path / "real"), str(tmp_path / "B"))
    assert (tmp_path / "real").is_dir() and not (tmp_path / "real").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A", "B", "real", "venv"]


def test_a_name_of_the_longest_length_is_written_through_a_shortened_temp_name(tmp_path: Path) -> None:
    """255 bytes is the most a Linux filesystem takes in one name: the temp name beside it is shortened (the
    bare ``NAME.tmp-...`` would be too long, and the write failed with ENAMETOOLONG)."""
    longest = "日" * 85
    assert len(longest.encode()) == 255
    hostlib.atomic_write(str(tmp_path / longest), b"ok", 0o640)
    assert (tmp_path / longest).read_bytes() == b"ok" and [p.name for p in tmp_path.iterdir()] == [longest]
    assert all(len(os.path.basename(hostlib.temp_beside(str(tmp_path / n))).encode()) <= 255 for n in (longest, "x"))


def test_set_aside_and_put_back_keep_a_link_a_link_and_leave_nothing_beside(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("x")
    (tmp_path / "p").symlink_to(tmp_path / "real")
    kept = hostlib.set_aside(str(tmp_path / "p"))
    assert kept is not None and os.path.islink(tmp_path / "p")  # still there while it is kept
    hostlib.atomic_write(str(tmp_path / "p"), b"new", 0o755)  # replaced, not written through
    assert (tmp_path / "real").read_text() == "x"
    hostlib.put_back(kept, str(tmp_path / "p"))
    assert os.readlink(tmp_path / "p") == str(tmp_path / "real")
    assert sorted(os.listdir(tmp_path)) == ["p", "real"]
    assert hostlib.set_aside(str(tmp_path / "none")) is None


def test_digest_and_umask(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    assert hostlib.digest(str(tmp_path / "f")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    old = os.umask(0o027)
    try:
        assert hostlib.umask() == 0o027 and hostlib.umask() == 0o027  # read, not changed
    finally:
        os.umask(old)


# ---- the envelope --------------------------------------------------------------------------------------

BAD_REQUESTS = {
    "unknown action": (["no-such-action"], "{}"),
    "not JSON": (["probe"], "{"),
    "not an object": (["probe"], "[1, 2]"),
    "a missing field": (["probe"], "{}"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_the_envelope_answers_a_bad_request_as_a_failure(case: str) -> None:
    argv, text = BAD_REQUESTS[case]
    answer = hostlib.answer_of({"probe": lambda req: {"seen": req["needed"]}}, argv, text)
    assert answer["ok"] is False and answer["failed"] is True and answer["msg"].startswith("bad request: ")


def test_the_envelope_answers_ok_failed_and_raised_failures() -> None:
    def fails(req: dict[str, object]) -> dict[str, object]:
        raise hostlib.Failed("no such thing", name="x")

    actions = {"good": lambda req: {"n": 1}, "refused": lambda req: {"ok": False}, "fails": fails}
    assert hostlib.answer_of(actions, ["good"], "") == {"n": 1, "ok": True}
    assert hostlib.answer_of(actions, ["refused"], "{}") == {"ok": False, "failed": True, "msg": "refused failed"}
    assert hostlib.answer_of(actions, ["fails"], "{}") == {"name": "x", "ok": False, "failed": True,
                                                           "msg": "no such thing"}  # fmt: skip


def test_an_action_that_takes_data_gets_the_bytes_after_the_request_line() -> None:
    seen: list[tuple[object, bytes]] = []

    @hostlib.takes_data
    def put(req: dict[str, object], data: bytes) -> dict[str, object]:
        seen.append((req["path"], data))
        return {"size": len(data)}

    actions = {"put": put, "plain": lambda req: {"keys": sorted(req)}}
    assert hostlib.answer_of(actions, ["put"], '{"path": "/x"}\n', b"\x00bytes\n{") == {"size": 8, "ok": True}
    assert seen == [("/x", b"\x00bytes\n{")]
    assert hostlib.answer_of(actions, ["plain"], '{"a": 1}') == {"keys": ["a"], "ok": True}
    answer = hostlib.answer_of(actions, ["put"], "{", b"data")
    assert answer["ok"] is False and answer["msg"].startswith("bad request: the request is not JSON")


def test_an_answer_in_ansibles_shape_that_says_failed_is_not_ok() -> None:
    """One exit-code rule: a module's ``failed: true`` answer is a failure of the envelope too (exit 1)."""
    answer = hostlib.answer_of({"apply": lambda req: {"failed": True, "msg": "no such package"}}, ["apply"], "{}")
    assert answer == {"failed": True, "msg": "no such package", "ok": False}
    assert hostlib.answer_of({"apply": lambda req: {"changed": True}}, ["apply"], "{}") == {"changed": True, "ok": True}


# ---- shipping: every way of travel -----------------------------------------------------------------------


def _last_json(out: bytes) -> dict[str, object]:
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


def _fresh_process(script: str, argv: list[str], request: bytes) -> tuple[int, dict[str, object]]:
    """The source on stdin, the request after it (ModuleContext.run_script with stdin: the bootstrap)."""
    source = remote.source(script)
    cmd = Command.of(HOST_PYTHON, "-c", _BOOTSTRAP, *argv)
    result = LocalConnection("fresh").run(cmd, stdin=b"%d\n" % len(source) + source + request, timeout=60)
    return result.rc, _last_json(result.stdout.encode() if isinstance(result.stdout, str) else result.stdout)


def _stdin_source(script: str, argv: list[str], request: bytes) -> tuple[int, dict[str, object]]:
    """``python3 - ARGS``, the source on stdin (ModuleContext.run_script without data: the request is empty)."""
    assert request == b"{}"
    result = LocalConnection("stdin").run(Command.of(HOST_PYTHON, "-", *argv), stdin=remote.source(script), timeout=60)
    return result.rc, _last_json(result.stdout.encode() if isinstance(result.stdout, str) else result.stdout)


def _agent(script: str, argv: list[str], request: bytes) -> tuple[int, dict[str, object]]:
    conn = LocalConnection("agent")
    try:
        result = conn.python_agent(HOST_PYTHON).call(script, argv, request, 60)
    finally:
        conn.close()
    out = result.stdout.encode() if isinstance(result.stdout, str) else result.stdout
    return result.rc, _last_json(out)


def _copied_file(script: str, argv: list[str], request: bytes, tmp: Path) -> tuple[int, dict[str, object]]:
    """The source copied to a file in a directory without the library (as a kept helper is), then run."""
    copy = tmp / "copied" / script
    copy.parent.mkdir(exist_ok=True)
    copy.write_bytes(remote.source(script))
    proc = subprocess.run([HOST_PYTHON, str(copy), *argv], input=request, capture_output=True, timeout=60,
                          cwd=tmp)  # fmt: skip
    return proc.returncode, _last_json(proc.stdout)


WAYS = ("fresh process", "source on stdin", "agent", "copied file")
BAD = {"unknown action": (["no-such-action"], b"{}"), "not an object": (None, b"[1]"), "not JSON": (None, b"{")}


@pytest.mark.parametrize("script", SERVED)
@pytest.mark.parametrize("bad", list(BAD))
def test_a_bad_request_gets_the_same_failure_answer_through_every_way_of_travel(
    script: str, bad: str, tmp_path: Path
) -> None:
    argv, request = BAD[bad]
    if argv is None:  # a real action of the script
        argv = [sorted(ast.literal_eval(_actions_literal(script)))[0]]
    answers = {
        "fresh process": _fresh_process(script, argv, request),
        "source on stdin": _stdin_source(script, argv, b"{}") if request == b"{}" else None,
        "agent": _agent(script, argv, request),
        "copied file": _copied_file(script, argv, request, tmp_path),
    }
    assert set(answers) == set(WAYS)
    answers = {way: answer for way, answer in answers.items() if answer is not None}  # (no request data there)
    first = answers["fresh process"]
    assert first[0] == 1 and first[1]["ok"] is False and first[1]["failed"] is True, answers
    assert str(first[1]["msg"]).startswith("bad request: "), answers
    assert all(answer == first for answer in answers.values()), answers


def _process_ctl_failures(tmp: Path) -> dict[str, tuple[list[str], bytes, dict[str, object]]]:
    """Failing process_ctl actions that change nothing: (argv, request, the answer's fields every way must give)."""
    never = {"name": "never", "piddir": str(tmp / "run"), "url": "http://127.0.0.1:9/health", "log": str(tmp / "n.log")}
    script = str(tmp / "no-such-launch.sh")
    return {
        "a start of a missing script": (
            ["start"], json.dumps({"name": "svc", "piddir": str(tmp / "run"), "script": script}).encode(),
            {"ok": False, "failed": True, "msg": f"script {script} does not exist or is not readable"},
        ),
        "a wait on a process that is not running": (
            ["wait"], json.dumps({"procs": [never], "timeout": 5, "log_lines": 5}).encode(),
            {"ok": False, "failed": True, "msg": "never exited while starting", "why": "exited", "name": "never",
             "pid": None, "log": never["log"], "log_tail": [], "ready": {}},
        ),
    }  # fmt: skip


@pytest.mark.parametrize("case", ["a start of a missing script", "a wait on a process that is not running"])
def test_a_failing_process_ctl_action_is_the_same_failure_and_exit_1_through_every_way(
    case: str, tmp_path: Path
) -> None:
    """process_ctl.py answers in the envelope: a failure answer (ok false, failed true, msg, its own fields) and
    exit 1, the same whichever way it travels (it exited 0 whenever it answered before it was ported)."""
    argv, request, expected = _process_ctl_failures(tmp_path)[case]
    answers = {
        "fresh process": _fresh_process("process_ctl.py", argv, request),
        "agent": _agent("process_ctl.py", argv, request),
        "copied file": _copied_file("process_ctl.py", argv, request, tmp_path),
    }
    for way, (rc, answer) in answers.items():
        assert rc == 1, (way, rc, answer)
        assert {k: answer.get(k) for k in expected} == expected, (way, answer)
    timeless = [{k: v for k, v in answer.items() if k != "elapsed"} for _, answer in answers.values()]
    assert all(answer == timeless[0] for answer in timeless), answers
    # `python3 - ACTION`, the source on stdin, carries no request: an action refused for want of one instead
    rc, answer = _stdin_source("process_ctl.py", ["start"], b"{}")
    assert rc == 1 and answer["ok"] is False and answer["failed"] is True, answer
    assert (
        answer == _fresh_process("process_ctl.py", ["start"], b"{}")[1] == _agent("process_ctl.py", ["start"], b"{}")[1]
    )
    assert str(answer["msg"]).startswith("bad request: missing field"), answer


def test_the_controller_reads_process_ctls_failure_answer_with_its_exit_1(tmp_path: Path) -> None:
    """pd.process.helper (every controller call of process_ctl) reads the answer whatever the rc: exit 1 is the
    answer's failure, never an error of the call (which would lose ``why`` and ``log_tail``)."""
    from provision.modules.base import ModuleContext
    from provision.pd.process import helper

    conn = LocalConnection("h")
    try:
        ctx = ModuleContext(host="h", conn=conn, variables={"ansible_python_interpreter": HOST_PYTHON})
        for argv, request, expected in _process_ctl_failures(tmp_path).values():
            answer = helper(ctx, argv[0], json.loads(request))
            assert {k: answer.get(k) for k in expected} == expected, answer
    finally:
        conn.close()


# the actions that take data after their request line (hostlib.takes_data), and their data travels with them
DATA_ACTIONS = {"file_state.py": "write", "transfer.py": "unarchive", "run_script.py": "run", "model_sync.py": "recv"}


def test_the_data_actions_are_all_listed() -> None:
    marked = {name for name in SERVED if "hostlib.takes_data" in remote.path(name).read_text()}
    assert marked == set(DATA_ACTIONS)


@pytest.mark.parametrize("script", sorted(DATA_ACTIONS))
def test_a_bad_request_to_an_action_that_takes_data_is_the_same_failure_through_every_way(
    script: str, tmp_path: Path
) -> None:
    """The request's line is not JSON; the data after it is never read as the request."""
    argv, request = [DATA_ACTIONS[script]], b'{"path": \n{"ok": true}\n'
    answers = {
        "fresh process": _fresh_process(script, argv, request),
        "agent": _agent(script, argv, request),
        "copied file": _copied_file(script, argv, request, tmp_path),
    }
    first = answers["fresh process"]
    assert first[0] == 1 and first[1]["ok"] is False, answers
    assert str(first[1]["msg"]).startswith("bad request: the request is not JSON"), answers
    assert all(answer == first for answer in answers.values()), answers


def _actions_literal(script: str) -> str:
    """The names of the script's ACTIONS table, as a Python literal of a set (read from its source)."""
    tree = ast.parse(remote.path(script).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ACTIONS" for t in node.targets):
            assert isinstance(node.value, ast.Dict)
            return repr({k.value for k in node.value.keys if isinstance(k, ast.Constant)})
    raise AssertionError(f"{script} has no ACTIONS table")


def test_a_script_that_imports_the_library_travels_with_it_and_keeps_its_line_numbers(tmp_path: Path) -> None:
    assert remote.libraries_of(remote.path("pd_rollout.py").read_text()) == ["codec", "hostlib"]  # and its codec
    assert "def atomic_write" in remote.source("pd_rollout.py").decode()  # the library is inside
    program = "import sys\nimport hostlib\n\nsys.exit(sys._getframe().f_lineno + (hostlib.umask() & 0))\n"
    (tmp_path / "t.py").write_text(remote.bundle("t.py", program))
    proc = subprocess.run([HOST_PYTHON, str(tmp_path / "t.py")], capture_output=True, timeout=30, cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr  # line 4 of the script, as written
    plain = "import sys\n\nsys.exit(0)\n"
    assert remote.bundle("plain.py", plain) == plain  # a script without the library travels as it is


def test_importing_the_library_costs_no_heavy_module() -> None:
    """Every helper script imports hostlib on every host of every run: urllib.request (http.client, email, ssl),
    subprocess and hashlib come only with the functions that use them (half a host agent's start, measured);
    its JSON codec imports neither json nor what json imports (re, enum: ~5 ms of the start)."""
    heavy = ("urllib", "http", "email", "ssl", "subprocess", "hashlib", "shutil", "json", "re", "enum")
    probe = f"import sys, hostlib; print([m for m in {heavy!r} if m in sys.modules])"
    proc = subprocess.run([HOST_PYTHON, "-S", "-c", probe], capture_output=True, text=True, timeout=30,
                          cwd=remote.REMOTE_DIR)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


def test_a_bundled_script_is_compiled_once_per_interpreter(tmp_path: Path) -> None:
    """The agent runs a helper many times a run (six state reads of file_state.py in one batch): the library
    and the script are compiled once, each run gets fresh modules all the same."""
    program = "import hostlib\nhostlib.RUNS = getattr(hostlib, 'RUNS', 0) + 1\nprint(hostlib.RUNS)\n"
    runner = (
        "import builtins, io, contextlib, sys\n"
        "real = builtins.compile\n"
        "count = []\n"
        "def counting(*a, **k):\n    count.append(a[1])\n    return real(*a, **k)\n"
        "builtins.compile = counting\n"
        "code = real(open(sys.argv[1]).read(), 't.py', 'exec')\n"
        "for _ in range(3):\n    exec(code, {'__name__': '__main__', '__builtins__': builtins})\n"
        "print(sorted(set(count)), len(count))\n"
    )
    (tmp_path / "t.py").write_text(remote.bundle("t.py", program))
    proc = subprocess.run([HOST_PYTHON, "-c", runner, str(tmp_path / "t.py")], capture_output=True, text=True,
                          timeout=30, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    compiled = "['<provision:codec>', '<provision:hostlib>', 't.py'] 3"
    assert proc.stdout.splitlines() == ["1", "1", "1", compiled], proc.stdout


# ---- the guard ---------------------------------------------------------------------------------------------


def _defines(script: str) -> set[str]:
    """What ``script`` writes for itself that the libraries have: Failed, a umask reader, an atomic write (O_EXCL
    or a temp name renamed over a target), its own envelope (a main() printing a JSON answer), a pump (select or
    selectors: THE pump is ``programs/pump.py``)."""
    text = remote.path(script).read_text()
    tree = ast.parse(text)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Failed":
            found.add("Failed")
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "umask":
            found.add("umask")
        if isinstance(node, ast.Attribute) and (
            node.attr == "O_EXCL"
            or (node.attr in ("rename", "replace") and isinstance(node.value, ast.Name) and node.value.id == "os")
        ):
            found.add("atomic write")  # an O_EXCL temp file, or a file renamed over another: the write's parts
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "select") or (
            isinstance(node, (ast.Import, ast.ImportFrom)) and "selectors" in ast.unparse(node)
        ):
            found.add("pump")
        entry = (isinstance(node, ast.FunctionDef) and node.name == "main") or (
            isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)
        )
        if entry and "json.dumps" in ast.unparse(node):
            found.add("envelope")  # its entry point prints a JSON answer itself
    return found


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_shipped_script_writes_what_the_host_library_has(script: str) -> None:
    found = _defines(script)
    allowed = BY_DESIGN.get(script, (set(), ""))[0]
    assert found <= allowed, f"{script} defines {sorted(found - allowed)} itself: use hostlib or pump instead"
    assert allowed <= found, f"{script} no longer defines {sorted(allowed - found)}: drop it from BY_DESIGN"


@pytest.mark.parametrize("script", sorted(BY_DESIGN))
def test_each_exception_by_design_is_a_shipped_script_with_a_reason(script: str) -> None:
    """An exception to the guard says why, and names a script that exists and something it is excused from."""
    things, reason = BY_DESIGN[script]
    assert script in SCRIPTS, f"{script} is not a shipped script: drop it from BY_DESIGN"
    assert things and things <= {"Failed", "umask", "atomic write", "envelope", "pump"}, things
    assert isinstance(reason, str) and reason.strip(), f"{script}'s BY_DESIGN entry gives no reason"


@pytest.mark.parametrize("library", ["hostlib.py", "codec.py"])
def test_the_library_itself_runs_on_the_hosts_python(library: str) -> None:
    proc = subprocess.run([HOST_PYTHON, str(remote.path(library))], capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    source = remote.path(library).read_text()
    ast.parse(source, feature_version=(3, 6))  # no syntax newer than the oldest host Python
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0)  # not the controller's
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    allowed = set(sys.stdlib_module_names) | set(remote.LIBRARIES)  # the stdlib, and the host libraries it ships with
    assert imported <= allowed, imported - allowed
