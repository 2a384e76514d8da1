"""The fixed programs provision runs on hosts (``provision/remote/programs/`` and the agent) and the spawn core.

- The guard: no Python program lives in a string of the controller's transport layer any more (commands.py,
  transport/, modules/base.py): each is a file under ``provision/remote/programs/``, linted and typed.
- What travels: each program, minified (:func:`provision.remote.program`), is the same program as its file (the
  same syntax tree, docstrings aside), parses as Python 3.6, and imports only what it may (the runner and the
  async job only cheap builtin modules: their start time is every command's).
- THE pump (``programs/pump.py``: the agent's ``exec`` and service.py read a child's pipes with it) keeps at most
  its limit of each pipe and still drains it (the writer never blocks), and stops when its caller says so.
- The spawn core kills a command's whole session at its deadline the same way through each of its three users
  (the runner, the agent's ``exec``, an async job): TERM first (a trap sees it), KILL 5 s later (a process
  that ignores TERM dies too, and so does what it started in the background).
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from provision import commands, remote
from provision.commands import RUNNER, Command, async_job
from provision.errors import CommandTimeout
from provision.transport import LocalConnection
from provision.transport.agent import PythonAgent

ROOT = Path(__file__).resolve().parents[2]
GUARDED = [ROOT / "provision/commands.py", ROOT / "provision/modules/base.py",
           *sorted((ROOT / "provision/transport").glob("*.py"))]  # fmt: skip
CORES = [f"{core}.py" for core in remote.CORES]  # the programs' own libraries (the pump, the spawn core)
PROGRAMS = sorted(p.name for p in remote.PROGRAMS_DIR.iterdir() if p.suffix == ".py" and p.name not in CORES)
CHEAP = {"_signal", "_thread", "os", "select", "sys", "time"}  # builtin or already loaded at start-up


STATEMENTS = (ast.Import, ast.ImportFrom, ast.Assign, ast.AugAssign, ast.If, ast.For, ast.While, ast.Try, ast.With,
              ast.FunctionDef, ast.ClassDef)  # fmt: skip


def python_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each string constant of ``path`` (docstrings aside) that is a Python program: it parses as
    more than one statement, or as one statement no word or phrase parses as (``"python3"`` parses too, as a
    name, and ``"kept:bootstrap+lock+home"`` as an annotation)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            try:
                body = ast.parse(node.value).body
            except (SyntaxError, ValueError):
                continue
            if len(body) > 1 or (body and isinstance(body[0], STATEMENTS)):
                found.append((node.lineno, node.value))
    return found


@pytest.mark.parametrize("path", GUARDED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_python_program_lives_in_a_string(path: Path) -> None:
    found = python_strings(path)
    assert not found, f"{path.name} holds Python in strings at lines {[line for line, _ in found]}: make it a file " \
                      "under provision/remote/programs/ and read it with remote.program()"  # fmt: skip


def test_the_guard_finds_a_program_in_a_string(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text('RUNNER = "import os;os._exit(0)"\nNAME = "python3"\nWORDS = "not a program: words"\n')
    assert [line for line, _ in python_strings(planted)] == [1]


def _without_docstrings(tree: ast.Module) -> str:
    seen: set[str] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                                 and isinstance(s.value.value, str))]  # fmt: skip
    kept = []
    for stmt in tree.body:  # a repeated top-level import (the core's and the program's) travels once
        text = ast.dump(stmt)
        if isinstance(stmt, ast.Import) and text in seen:
            continue
        seen.add(text)
        kept.append(stmt)
    tree.body = kept
    return ast.dump(tree)


@pytest.mark.parametrize("name", [*PROGRAMS, "agent.py"])
def test_what_travels_is_the_file_minified(name: str) -> None:
    file = remote.REMOTE_DIR / name if name == "agent.py" else remote.PROGRAMS_DIR / name
    text = file.read_text()
    ast.parse(text, feature_version=(3, 6))  # no syntax newer than the oldest host Python
    for core in reversed(remote.CORES):  # each core imported goes in front, the pump first
        if f"from {core} import" in text:
            core_file = remote.library(core) if core in remote.LIBRARIES else remote.PROGRAMS_DIR / f"{core}.py"
            text = core_file.read_text() + text.replace(
                text[text.index(f"from {core} import") :].split("\n", 1)[0] + "\n", ""
            )
    travels = remote.program(name)
    assert _without_docstrings(ast.parse(travels)) == _without_docstrings(ast.parse(text))
    assert "#" not in travels.replace("'#'", "") and "\n\n" not in travels  # no comment, no blank line
    assert len(travels) < len(text) * 0.6


def test_the_runner_and_the_async_job_import_only_cheap_builtins() -> None:
    for text in (commands.RUNNER, commands.ASYNC_JOB):
        imported = {a.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Import) for a in n.names}
        assert imported <= CHEAP | {"json"}, imported
    assert "json" not in commands.RUNNER


HEAVY = ("json", "re", "enum", "functools", "collections", "threading", "signal", "base64", "hashlib", "subprocess")


def test_a_fresh_agent_and_a_script_on_the_host_library_load_no_heavy_module() -> None:
    """Each host of a fresh run starts one agent, which runs its scripts on the host library: json, threading,
    signal and base64 (re, enum, functools, collections under them) were ~6 ms of its ~19 ms of CPU. The
    agent's frames and the library's envelope go through ``codec.py`` (json's C accelerator) instead."""
    probe = remote.bundle("probe.py", "import sys\nimport hostlib\n\nprint(' '.join(sorted(sys.modules)))\n")
    argv = PythonAgent.command("/usr/bin/python3", 0.0, {"name": "probe.py", "source": probe, "args": []}).argv
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        size = int(proc.stdout.readline())  # type: ignore[union-attr]
        answer = json.loads(proc.stdout.read(size))  # type: ignore[union-attr]
    finally:
        proc.communicate(timeout=30)  # our end of its stdin closes: the agent exits
    assert answer["rc"] == 0, base64.b64decode(answer["err"])
    loaded = set(base64.b64decode(answer["out"]).decode().split())
    assert {"hostlib", "codec", "_json"} <= loaded  # the probe ran on the library, and the codec on _json
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_the_shell_selector_travels_without_its_comments() -> None:
    assert commands.SELECTOR.startswith("if command -v python3")
    assert "#" not in commands.SELECTOR and commands.SELECTOR.endswith("PROVISION_EOF\n")


# ---- the pump ----------------------------------------------------------------------------------------------
sys.path.insert(0, str(remote.PROGRAMS_DIR))
from pump import pump  # noqa: E402  (the host-side module, by its plain name as on a host)


def _popen(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _fds(proc: subprocess.Popen[bytes]) -> list[int]:
    assert proc.stdout is not None and proc.stderr is not None
    return [proc.stdout.fileno(), proc.stderr.fileno()]


def test_the_pump_keeps_at_most_its_limit_of_each_pipe_and_drains_the_rest() -> None:
    """A child writing 8 MiB to stdout and 4 MiB to stderr (far more than a pipe holds) runs to its end: the
    pump reads everything and keeps the first ``limit`` bytes of each."""
    script = "import os; os.write(2, b'e' * (4 << 20)); [os.write(1, b'o' * (1 << 20)) for _ in range(8)]"
    with _popen([sys.executable, "-c", script]) as proc:
        out, err = pump(_fds(proc), limit=100_000)
        assert proc.wait(timeout=60) == 0  # never blocked on a full pipe
    assert out == b"o" * 100_000 and err == b"e" * 100_000
    with _popen([sys.executable, "-c", "import sys; sys.stdout.write('x' * 70000); sys.stderr.write('y')"]) as proc:
        assert pump(_fds(proc)) == [b"x" * 70000, b"y"]  # no limit: all of it


def test_the_pump_stops_when_its_caller_says_so_and_tells_it_when_nothing_came() -> None:
    """A daemon holding the pipes open: the caller's ``wake`` ends the reading (here: at the first quiet wake-up
    after the output), with what came until then."""
    calls: list[bool] = []

    def wake(quiet: bool) -> float | bool:
        calls.append(quiet)
        return False if quiet else 0.2

    with _popen(["sh", "-c", "echo started; exec sleep 60"]) as proc:
        try:
            assert pump(_fds(proc), wake) == [b"started\n", b""]
            assert calls[0] is False and calls[-1] is True
        finally:
            proc.kill()


# ---- the spawn core: TERM, then KILL, of the whole session, through each of its users ---------------------
STUBBORN = """\
trap 'echo term >> {dir}/term' TERM
sh -c 'trap "" TERM; while :; do sleep 0.2; done' &
echo $! > {dir}/child
echo $$ > {dir}/sh
while :; do sleep 0.2; done
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _until(check: Callable[[], object], limit: float = 60.0) -> object:
    end = time.monotonic() + limit
    while not (value := check()) and time.monotonic() < end:
        time.sleep(0.1)
    return value


def _through_runner(conn: LocalConnection, script: str) -> None:
    with pytest.raises(CommandTimeout):
        conn.run(Command.shell(script), timeout=1)


def _through_agent(conn: LocalConnection, script: str) -> None:
    rc, _, _ = conn.python_agent(sys.executable).try_exec(Command.shell(script).script_text().encode(), b"", 1)
    assert rc == 124


def _through_async_job(conn: LocalConnection, script: str) -> None:
    jid = f"j{os.getpid()}.{time.monotonic_ns()}"
    meta, body = b"{}", Command.shell(script).script_text().encode()
    started = conn.run(async_job(sys.executable, "start", jid, 1, len(meta), len(body)), stdin=meta + body)
    assert started.rc == 0, started.stderr

    def record() -> dict[str, object] | None:
        answer = json.loads(conn.run(async_job(sys.executable, "status", jid)).stdout)
        job = json.loads(answer["job"]) if answer["job"] else {}
        return job if job.get("finished") else None

    try:
        job = _until(record)
        assert isinstance(job, dict) and job["msg"] == "Timeout exceeded", job
    finally:
        conn.run(async_job(sys.executable, "cleanup", jid))


@pytest.mark.parametrize("way", [_through_runner, _through_agent, _through_async_job], ids=lambda f: f.__name__[9:])
def test_the_spawn_core_kills_the_whole_session_at_the_deadline(
    tmp_path: Path, way: Callable[[LocalConnection, str], None]
) -> None:
    conn = LocalConnection("local")
    try:
        way(conn, STUBBORN.format(dir=tmp_path))
        assert _until(lambda: (tmp_path / "child").exists() and (tmp_path / "sh").exists())
        pids = [int((tmp_path / name).read_text()) for name in ("sh", "child")]
        assert _until(lambda: not any(_alive(pid) for pid in pids)), "a process of the session outlived the KILL"
        assert (tmp_path / "term").read_text().startswith("term")  # TERM came first: the trap saw it
    finally:
        conn.close()


import spawn  # noqa: E402  (the host-side spawn core, as the pump above)

# sh prints its session id (field 6 of /proc/$$/stat), its ignored signals (SigIgn, hex), what came on its stdin
# (a byte count: data larger than a pipe's buffer went through a feeding thread), then exits 3
HOST_PYTHON = "/usr/bin/python3"  # a host's interpreter (the runner starts it -I -S; the agent -S)
REPORT = b"set -- $(cat /proc/$$/stat); echo sid=$6; grep SigIgn /proc/$$/status; echo in=$(wc -c); exit 3\n"


@pytest.mark.parametrize("way", ["posix_spawn", "fork"])
@pytest.mark.parametrize("size", [0, 200_000])
def test_a_child_is_sh_in_a_new_session_with_its_pipes_and_default_signals(
    way: str, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways of starting a command (``posix_spawn`` where the host's Python has it, else fork and exec) give
    the same child: its own session, the script on fd 3, the data on its stdin (also more than a pipe holds), its
    stdout and stderr, SIGPIPE/SIGXFSZ/SIGTERM/SIGALRM at their defaults (this Python ignores SIGPIPE), its exit
    code."""
    if way == "fork":
        monkeypatch.setattr(spawn, "_SPAWN", [])
    else:
        assert spawn._SPAWN, "this Python has posix_spawn with setsid"
    script = REPORT + b"#" + b"x" * (2 * spawn.PIPE_BUF) + b"\n" if size else REPORT  # a long script too
    outr, outw = os.pipe()
    errr, errw = os.pipe()
    child = spawn.Child(script, b"d" * size, outw, errw)
    out, err = pump([outr, errr])
    assert child.wait(60) and child.rc() == 3, err
    lines = dict(line.split("=", 1) if "=" in line else line.split(":\t") for line in out.decode().splitlines())
    assert int(lines["sid"]) == child.pid  # a session of its own: what it starts can be killed with it
    ignored = int(lines["SigIgn"], 16)
    assert not any(ignored & (1 << (sig - 1)) for sig in spawn.DEFAULT_SIGNALS), hex(ignored)
    assert int(lines["in"]) == size
    for fd in (outr, errr, child.done):
        os.close(fd)


@pytest.mark.parametrize("way", ["posix_spawn", "fork"])
def test_a_child_gets_its_script_when_the_pipe_already_is_fd_3(way: str) -> None:
    """In a fresh interpreter (the runner's) fd 3 is free, so the script's pipe IS fd 3: moved onto itself it
    would keep close-on-exec (posix_spawn before glibc 2.29): it is copied first, and the shell still reads it."""
    program = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); import spawn\n"
        "if sys.argv[2] == 'fork': spawn._SPAWN[:] = []\n"
        "o, i = os.pipe(); os.dup2(o, 10); os.dup2(i, 11); os.close(o); os.close(i)\n"
        "r, w = os.pipe(); os.close(r); os.close(w); assert r == 3, r  # the Child's first pipe: 3\n"
        "c = spawn.Child(b'echo read-it; exit 5\\n', b'', 11)\n"
        "c.wait(60); print(c.rc(), os.read(10, 100).decode().strip(), spawn._SPAWN)\n"
    )
    argv = [HOST_PYTHON, "-I", "-S", "-c", program, str(remote.PROGRAMS_DIR), way]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, close_fds=True)
    assert done.stdout.split() == ["5", "read-it", "[True]" if way == "posix_spawn" else "[]"], done.stderr


def test_a_child_whose_owner_stopped_waiting_leaves_no_error_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's ``exec`` closes ``done`` once it saw the status; the reaping thread's late write then finds no
    reader: nothing is printed (it was an ignored BrokenPipeError on the host's stderr)."""
    raised: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    child = spawn.Child(b"sleep 0.2; exit 4\n", b"")
    os.close(child.done)  # before the child exits
    assert _until(lambda: child.status is not None)
    time.sleep(0.5)  # the reaping thread's write, after the status
    assert child.rc() == 4 and raised == []


def test_the_exec_text_is_the_fixed_runner_without_user_values() -> None:
    inv = Command.of("echo", "s3cr3t").render(5, b"data", 1.0)
    assert commands.quote(RUNNER) in inv.text and "s3cr3t" not in inv.text and b"s3cr3t" in inv.stdin


# ---- the code a fresh agent keeps on the host (programs/agent_boot.py: _code) ---------------------------------


def _agent_run(home: Path, **env: str) -> tuple[int, dict[str, object] | None]:
    """A fresh agent (the real command line) answering one script call, with ``home`` as its HOME: its exit code
    and its answer (None when it gave none)."""
    probe = remote.bundle("probe.py", "import hostlib\n\nprint('ran')\n")
    argv = PythonAgent.command(HOST_PYTHON, 0.0, {"name": "probe.py", "source": probe, "args": []}).argv
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(home), **env})  # fmt: skip
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        answer = json.loads(proc.stdout.read(int(line))) if line.strip() else None  # type: ignore[union-attr]
    finally:
        proc.communicate(timeout=30)
    return proc.returncode, answer


def _agent_entry(home: Path) -> Path:
    """The cache entry of the agent's own code (named as _code names it, with the host Python's magic)."""
    show = "import importlib.util as u, sys; sys.stdout.write(u.MAGIC_NUMBER.hex())"
    magic = subprocess.run([HOST_PYTHON, "-c", show], capture_output=True, text=True, check=True).stdout
    from provision.transport.agent import agent_source

    digest = hashlib.sha256(bytes.fromhex(magic) + b"provision-agent\0" + agent_source()).hexdigest()[:48]
    return home / ".cache/provision-code" / f"{digest}.code"


def _plant(entry: Path, mode: int = 0o600) -> None:
    """An entry whose code leaves a mark and exits 7: the agent never answers when it runs it."""
    code = "import os, sys; open(os.path.join(os.environ['HOME'], 'ran-the-cache'), 'w').close(); sys.exit(7)"
    blob = subprocess.run([HOST_PYTHON, "-c", f"import marshal, sys; sys.stdout.buffer.write(marshal.dumps("
                           f"compile({code!r}, 'provision-agent', 'exec')))"],
                          capture_output=True, check=True).stdout  # fmt: skip
    entry.unlink(missing_ok=True)
    entry.write_bytes(blob)
    entry.chmod(mode)


def test_a_fresh_agent_keeps_its_code_privately_and_the_next_one_runs_it(tmp_path: Path) -> None:
    """The first fresh agent compiles the agent, the host library and the script and keeps the code in a folder
    of its own (0700, entries 0600); the next fresh agent runs what the folder holds, without compiling."""
    rc, answer = _agent_run(tmp_path)
    assert rc == 0 and answer is not None and answer["rc"] == 0
    folder = tmp_path / ".cache/provision-code"
    assert folder.stat().st_mode & 0o777 == 0o700
    entries = sorted(folder.iterdir())
    assert len(entries) >= 4  # the agent, the bundle, the host library, the codec, the script
    assert all(e.stat().st_mode & 0o777 == 0o600 and not e.name.endswith(".tmp") for e in entries)
    entry = _agent_entry(tmp_path)
    assert entry in entries
    assert _agent_run(tmp_path) == (0, answer)  # from the kept code: the same answer
    _plant(entry)
    assert _agent_run(tmp_path) == (7, None) and (tmp_path / "ran-the-cache").exists()


@pytest.mark.parametrize("how", ["group-readable entry", "entry is a link", "open folder", "folder is a link",
                                 "garbage entry"])  # fmt: skip
def test_code_the_agent_did_not_keep_privately_is_never_run(tmp_path: Path, how: str) -> None:
    """An entry another user could have written (or read), behind a link, in a folder that is not private, or
    that does not decode is compiled over instead: the agent answers as if there were no cache."""
    assert _agent_run(tmp_path)[0] == 0
    folder = tmp_path / ".cache/provision-code"
    entry = _agent_entry(tmp_path)
    if how == "group-readable entry":
        _plant(entry, 0o640)
    elif how == "entry is a link":
        _plant(tmp_path / "planted", 0o600)
        entry.unlink()
        entry.symlink_to(tmp_path / "planted")
    elif how == "open folder":
        _plant(entry)
        folder.chmod(0o755)
    elif how == "folder is a link":
        _plant(entry)
        folder.rename(tmp_path / "elsewhere")
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        entry.write_bytes(b"\xe3not marshal data")
    rc, answer = _agent_run(tmp_path)
    assert rc == 0 and answer is not None and answer["rc"] == 0, answer
    assert not (tmp_path / "ran-the-cache").exists()


def test_no_code_is_kept_without_bytecode_writes_nor_where_home_cannot_hold_it(tmp_path: Path) -> None:
    """PYTHONDONTWRITEBYTECODE (Python's own switch for its caches) keeps the agent from writing any; a home that
    does not exist is not made, and one that cannot hold the folder costs only the compile."""
    assert _agent_run(tmp_path, PYTHONDONTWRITEBYTECODE="1")[0] == 0
    assert not (tmp_path / ".cache").exists()
    _agent_run(tmp_path / "no-such-home")  # (the agent then fails on its own: it works in its home)
    assert not (tmp_path / "no-such-home").exists()  # a home is never made for the code
    (tmp_path / ".cache").write_text("")  # a file where the folder's parent would be: no folder can be made
    rc, answer = _agent_run(tmp_path)
    assert rc == 0 and answer is not None and answer["rc"] == 0


def test_the_kept_code_stays_bounded(tmp_path: Path) -> None:
    """Each version of provision brings its own entries: past 256 the oldest half go, the new ones stay."""
    folder = tmp_path / ".cache/provision-code"
    folder.mkdir(parents=True, mode=0o700)
    for i in range(300):
        old = folder / f"{i:048x}.code"
        old.write_bytes(b"old")
        old.chmod(0o600)
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    assert _agent_run(tmp_path)[0] == 0
    left = {p.name for p in folder.iterdir()}
    assert len(left) <= 256 and _agent_entry(tmp_path).name in left
    assert f"{0:048x}.code" not in left and f"{299:048x}.code" in left  # the oldest went, the newest stayed


def test_a_program_minified_once_is_kept_privately_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Minifying the agent and the bootstraps cost ~40 ms of CPU at the start of every run: the controller keeps
    what it made (0700 folder, 0600 entries) and the next run reads it instead of minifying again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # (a shell's PYTHONDONTWRITEBYTECODE)
    text = (remote.REMOTE_DIR / "agent.py").read_text()
    made = remote.kept_minified(text)
    assert made == remote.minified(text)
    folder = tmp_path / "provision/programs"
    assert folder.stat().st_mode & 0o777 == 0o700
    [entry] = folder.iterdir()
    assert entry.stat().st_mode & 0o777 == 0o600 and entry.read_text() == made
    monkeypatch.setattr(remote, "minified", lambda text: pytest.fail("minified again"))
    assert remote.kept_minified(text) == made
    with pytest.raises(pytest.fail.Exception):  # another text is another entry
        remote.kept_minified(text + "x = 1\n")


@pytest.mark.parametrize("how", ["entry writable by others", "entry is a link", "open folder", "folder is a link",
                                 "no folder can be made"])  # fmt: skip
def test_a_kept_program_another_user_could_have_written_is_never_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """What travels to every host is never read from an entry or a folder that is not this user's alone, nor
    through a link: the program is minified again instead."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    text = (remote.PROGRAMS_DIR / "agent_boot.py").read_text()
    made = remote.kept_minified(text)
    folder = tmp_path / "cache/provision/programs"
    [entry] = folder.iterdir()
    planted = "import os; os.system('touch /tmp/planted')\n"
    if how == "entry writable by others":
        entry.write_text(planted)
        entry.chmod(0o666)
    elif how == "entry is a link":
        (tmp_path / "planted").write_text(planted)
        (tmp_path / "planted").chmod(0o600)
        entry.unlink()
        entry.symlink_to(tmp_path / "planted")
    elif how == "open folder":
        entry.write_text(planted)
        folder.chmod(0o777)
    elif how == "folder is a link":
        entry.write_text(planted)
        folder.rename(tmp_path / "elsewhere")
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
        (tmp_path / "a-file").write_text("")
    assert remote.kept_minified(text) == made
    if how == "entry is a link":
        assert (tmp_path / "planted").read_text() == planted  # replaced, never written through


def test_the_kept_programs_stay_bounded_and_none_is_written_under_python_b(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert remote.kept_minified("x = 1\n") == "x=1\n" and not (tmp_path / "provision").exists()
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    folder = tmp_path / "provision/programs"
    folder.mkdir(parents=True, mode=0o700)
    for i in range(70):
        old = folder / f"{i:064x}.py"
        old.write_text("old\n")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    remote.kept_minified("y = 2\n")
    left = {p.name for p in folder.iterdir()}
    assert len(left) <= 33 and f"{0:064x}.py" not in left and f"{69:064x}.py" in left
