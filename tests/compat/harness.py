"""The differential harness: one case playbook under ``ansible-playbook`` and under ``provision run``.

A case is a folder ``cases/<name>/`` with ``playbook.yml`` and an optional ``case.yml``:

    hosts: 2              # lab hosts the case runs on (1 or 2; inventory group ``lab``)
    runs: 2               # runs per tool on the same remote dir (first run, converged rerun)
    check: false          # true: first a ``--check --diff`` run on the fresh dir, compared too
    args: []              # extra command line arguments for both tools (``-t``, ``-e``, ...)
    env: {}               # extra environment for both tools (``ANSIBLE_ROLES_PATH``); ``{dir}`` in a value is
                          # the tool's copy of the case folder
    host_vars: {}         # extra inventory vars for every host
    serve: files          # a folder of the case served over HTTP on loopback while the case runs (python's
                          # http.server, started by the harness); its base URL is the inventory var ``http_base``
    accept:               # accepted differences: a difference line containing ``match`` is expected
      - match: "run 1: exit code"
        reason: why provision deliberately differs
    source: {repo: ..., path: ..., commit: ..., edits: [...]}   # for playbooks taken from public repos
    sudo: false           # true: the case's lab users get passwordless sudo while the case runs (``become``);
                          # such cases run one at a time (they change the machine: packages, accounts)
    systemd: false        # true: the case's hosts run under a systemd of their own while the case runs (the
                          # lab's ``systemd_host``: PID 1 of the host's sessions is systemd); needs ``sudo``
    reset: reset.yml      # a playbook of the case, not compared but it must succeed: run by ansible-playbook
                          # before each tool's first run, and by the tool itself after its last run (so each
                          # tool's own removal is exercised): both tools start from the same machine state

Each tool gets its own remote working dir per case and host, ``~/compat/<case>/<tool>``, created empty before
the first run and passed as the inventory var ``wd`` (the absolute path). Compared per run: the exit code,
each host's ok/changed/failed/skipped/ignored/unreachable counts, the message of every ``debug`` task (by task
name and order), with ``--check``/``--diff`` which copy/template tasks showed a diff; after the runs, the
files left in ``wd`` on each host (type, mode, owner, content; the tool's own name in paths and text is normalised; what
is inside a ``.git`` directory is not compared: git stores times and stat data there).
"""

from __future__ import annotations

import contextlib
import functools
import grp
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.web import served_folder

CASES_DIR = Path(__file__).parent / "cases"
REPO = Path(__file__).resolve().parents[2]
TOOLS = ("ansible", "provision")
STAT_KEYS = ("ok", "changed", "failed", "skipped", "ignored", "unreachable")


@dataclass
class Case:
    name: str
    path: Path
    hosts: int = 2
    runs: int = 2
    check: bool = False
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    host_vars: dict[str, Any] = field(default_factory=dict)
    accept: list[dict[str, str]] = field(default_factory=list)
    serve: str | None = None
    sudo: bool = False
    systemd: bool = False
    reset: str | None = None

    @classmethod
    def load(cls, path: Path) -> Case:
        meta_path = path / "case.yml"
        meta = yaml.safe_load(meta_path.read_text()) if meta_path.exists() else {}
        meta = meta or {}
        known = {"hosts", "runs", "check", "args", "host_vars", "accept", "source", "about", "serve", "sudo", "systemd"}
        known |= {"reset", "env"}
        unknown = set(meta) - known
        if unknown:
            raise ValueError(f"{meta_path}: unknown keys {sorted(unknown)}")
        if meta.get("systemd") and not meta.get("sudo"):
            raise ValueError(f"{meta_path}: systemd: true needs sudo: true (systemctl acts as root)")
        for entry in meta.get("accept", []):
            if not entry.get("match") or not entry.get("reason"):
                raise ValueError(f"{meta_path}: every accepted difference needs a match and a reason")
        return cls(
            name=path.name,
            path=path,
            hosts=int(meta.get("hosts", 2)),
            runs=int(meta.get("runs", 2)),
            check=bool(meta.get("check", False)),
            args=[str(a) for a in meta.get("args", [])],
            env={str(k): str(v) for k, v in (meta.get("env") or {}).items()},
            host_vars=dict(meta.get("host_vars", {})),
            accept=list(meta.get("accept", [])),
            serve=str(meta["serve"]) if meta.get("serve") else None,
            sudo=bool(meta.get("sudo", False)),
            systemd=bool(meta.get("systemd", False)),
            reset=str(meta["reset"]) if meta.get("reset") else None,
        )


def all_cases() -> list[Case]:
    return [Case.load(p) for p in sorted(CASES_DIR.iterdir()) if (p / "playbook.yml").is_file()]


# The cases run in CHUNKS, each on a lab and a thread pool of its own (tests/compat/test_compat.py); under
# pytest-xdist each chunk is an xdist group (tests/conftest.py), so the chunks run at once on several workers.
# Every ``sudo`` case (it changes the machine: packages, accounts, units) is in chunk 0, where they run one after
# another, with the unit tests that change this machine's package database.
# one by default: with 2, the full parallel run left facts_names unreachable on two lab hosts
CHUNKS = max(1, int(os.environ.get("PROVISION_COMPAT_CHUNKS", "1")))
# What each case cost in a measured run (seconds of wall time on its pool worker, 4 workers on 2 cores under
# load: ``scripts/compat_costs.py REPORT`` rewrites it from a chunk report): the chunks are dealt by cost, and
# each pool starts its longest cases first. A case not in it (a new one) counts as the median.
COSTS_PATH = Path(__file__).parent / "costs.json"


@functools.cache
def costs() -> dict[str, float]:
    known: dict[str, float] = json.loads(COSTS_PATH.read_text()) if COSTS_PATH.is_file() else {}
    ordered = sorted(known.values())
    median = ordered[len(ordered) // 2] if ordered else 1.0
    return {c.name: float(known.get(c.name, median)) for c in all_cases()}


def deal(cases: list[Case], cost: dict[str, float], chunks: int) -> dict[str, int]:
    """Each case's chunk: 0 for every ``sudo`` case; then each other case, the costliest first, to the chunk whose
    total is the smallest so far, so that the chunks end at about the same time."""
    out = {c.name: 0 for c in cases if c.sudo}
    totals = [sum(cost[n] for n in out)] + [0.0] * (chunks - 1)
    for name in sorted((c.name for c in cases if not c.sudo), key=lambda n: (-cost[n], n)):
        out[name] = min(range(chunks), key=lambda i: (totals[i], i))
        totals[out[name]] += cost[name]
    return out


@functools.cache
def _chunks() -> dict[str, int]:
    return deal(all_cases(), costs(), CHUNKS)


def chunk_of(name: str) -> int:
    """The chunk of the case ``name``: 0 for a ``sudo`` case, the others dealt by cost (:func:`_chunks`)."""
    return _chunks()[name]


def lanes(cases: list[Case]) -> list[list[Case]]:
    """A chunk's cases as its pool's jobs, the longest first: the ``sudo`` cases one job, run one after another
    on one pool worker (they hold the machine's lock: spread over workers, they kept three workers waiting on
    it), every other case a job of its own."""
    cost = costs()
    jobs = [[c for c in cases if c.sudo]] if any(c.sudo for c in cases) else []
    jobs += [[c] for c in cases if not c.sudo]
    return sorted(jobs, key=lambda job: -sum(cost[c.name] for c in job))


# folders where ansible-core finds a case's own modules and module_utils (Harness.ansiballz_dir)
_OWN_MODULES = frozenset({"library", "module_utils", "modules", "collections", "ansible_collections"})


@dataclass
class RunRecord:
    """One run of one tool: exit code, per-host stats, debug messages, diffed tasks, output tail."""

    rc: int
    stats: dict[str, dict[str, int]]
    messages: list[tuple[str, str, Any]]  # (task name #n, host, msg)
    diffs: set[tuple[str, str]]  # (task name #n, host) of copy/template tasks that showed a diff
    output: str
    seconds: float


@dataclass
class Outcome:
    case: str
    differences: list[str]
    accepted: list[str]
    unused_accepts: list[str]
    records: dict[str, list[RunRecord]]
    seconds: float


class Harness:
    """Runs cases on lab hosts; ``slot`` hosts (a list of LabHost) are used by one case at a time."""

    _machine_lock = threading.Lock()  # held by a ``sudo`` case: one case at a time changes the machine

    def __init__(self, lab: Any, work: Path) -> None:
        self.lab = lab
        self.work = work
        self.ansible_home = work / "ansible-home"
        self.ansible_home.mkdir(parents=True, exist_ok=True)
        # ansible-core's controller polls its workers' results every internal_poll_interval seconds: at its
        # default, 0.001, the polling cost a fifth of ansible-playbook's CPU in a case (the doc of the setting
        # says to raise it where CPU matters more than UI latency); results and their order are unchanged
        (work / "ansible.cfg").write_text("[defaults]\ninternal_poll_interval = 0.01\n")
        # ssh's control sockets: a short path of their own (a Unix socket's path has at most 107 bytes; the
        # work dir under pytest-xdist's base temp is longer than that with ssh's %C and its random suffix)
        self.control = Path(tempfile.mkdtemp(prefix="cmp-cp-"))

    def close(self) -> None:
        """Stop ansible's ssh control masters (ControlPersist) before the lab deletes its users."""
        control = self.control
        if not control.is_dir():
            return
        for sock in control.iterdir():
            subprocess.run(
                ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "lab"], capture_output=True, timeout=10, check=False
            )
        shutil.rmtree(control, ignore_errors=True)

    # -------------------------------------------------------------------------------- environment
    def ansible_env(self, case_dir: Path) -> dict[str, str]:
        env = dict(os.environ)
        control = self.control
        env.update(
            ANSIBLE_CONFIG=str(self.work / "ansible.cfg"),
            ANSIBLE_HOME=str(self.ansible_home),
            ANSIBLE_LOCAL_TEMP=str(case_dir / "ansible-tmp"),
            ANSIBLE_REMOTE_TMP="~/.ansible/tmp",
            ANSIBLE_STDOUT_CALLBACK="compat_json",
            ANSIBLE_CALLBACK_PLUGINS=str(Path(__file__).parent / "plugins"),
            # each module's AnsiballZ payload built once per chunk, not once per run (plugins/compat_ansiballz.py)
            ANSIBLE_CALLBACKS_ENABLED="compat_ansiballz",
            PROVISION_COMPAT_ANSIBALLZ=str(self.ansiballz_dir(case_dir)),
            ANSIBLE_HOST_KEY_CHECKING="True",
            ANSIBLE_PIPELINING="True",
            ANSIBLE_SSH_ARGS=(
                f"-F {self.lab.ssh_config_path} -o ControlMaster=auto -o ControlPersist=30s -o ControlPath={control}/%C"
            ),
            ANSIBLE_RETRY_FILES_ENABLED="False",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_DEPRECATION_WARNINGS="False",
            ANSIBLE_SYSTEM_WARNINGS="False",
            ANSIBLE_FORKS="5",
            ANSIBLE_INVENTORY_ENABLED="yaml",  # no probing of the other inventory plugins: faster start
            ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="False",
            # ansible.posix and community.general (scripts/reference_collections.py, from scripts/setup test)
            ANSIBLE_COLLECTIONS_PATH=str(Path(sys.prefix) / "collections"),
        )
        return env

    def ansiballz_dir(self, case_dir: Path) -> Path:
        """The AnsiballZ cache of ansible's runs in ``case_dir`` (a tool's copy of a case): the chunk's, or the
        case's own where the case brings modules or ``module_utils`` (the cache's key is a module's name)."""
        own = _OWN_MODULES & {p.name for p in case_dir.rglob("*") if p.is_dir()}
        meta = case_dir / "case.yml"
        if meta.is_file() and any(w in meta.read_text() for w in ("LIBRARY", "MODULE_UTILS", "COLLECTIONS")):
            own = {"env"}
        path = case_dir.parent / "ansiballz" if own else self.work / "ansiballz"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def provision_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(self.lab.ssh_env())
        env.pop("PROVISION_PLAYBOOKS", None)
        return env

    # -------------------------------------------------------------------------------- one case
    def run_case(self, case: Case, slot: list[Any]) -> Outcome:
        started = time.monotonic()
        hosts = slot[: case.hosts]
        local = self.work / "cases" / case.name
        if local.exists():
            shutil.rmtree(local)
        records: dict[str, list[RunRecord]] = {}
        resets: list[str] = []
        with self._sudo(case, hosts), self._systemd(case, hosts), _http_server(case) as http_base:
            for tool in TOOLS:
                records[tool] = self._run_tool(case, hosts, local, tool, http_base, resets)
        differences = resets + self._compare(case, hosts, records)
        accepted, unexplained, used = [], [], set()
        for diff in differences:
            hit = next((a for a in case.accept if a["match"] in diff), None)
            if hit is None:
                unexplained.append(diff)
            else:
                accepted.append(f"{diff}  [accepted: {hit['reason']}]")
                used.add(hit["match"])
        unused = [a["match"] for a in case.accept if a["match"] not in used]
        return Outcome(case.name, unexplained, accepted, unused, records, time.monotonic() - started)

    @contextmanager
    def _sudo(self, case: Case, hosts: list[Any]) -> Iterator[None]:
        """For a ``sudo`` case: its hosts' users get sudo, and no other ``sudo`` case runs meanwhile."""
        if not case.sudo:
            yield
            return
        with self._machine_lock:
            indexes = [self.lab.hosts.index(h) for h in hosts]
            try:
                for i in indexes:
                    self.lab.grant_sudo(i)
                yield
            finally:
                for i in indexes:
                    self.lab.revoke_sudo(i)

    @contextmanager
    def _systemd(self, case: Case, hosts: list[Any]) -> Iterator[None]:
        """For a ``systemd`` case: its hosts run under a systemd of their own (``Lab.systemd_host``)."""
        with contextlib.ExitStack() as stack:
            if case.systemd:
                for h in hosts:
                    stack.enter_context(self.lab.systemd_host(self.lab.hosts.index(h)))
            yield

    def _run_tool(
        self, case: Case, hosts: list[Any], local: Path, tool: str, http_base: str | None, resets: list[str]
    ) -> list[RunRecord]:
        tool_dir = local / tool
        shutil.copytree(case.path, tool_dir)
        inventory = self._inventory(case, hosts, tool, tool_dir, http_base)
        for h in hosts:
            wd = self.wd(h, case, tool)
            if case.sudo:  # a become case may have left root's files there
                subprocess.run(["rm", "-rf", "--one-file-system", str(wd)], check=False, timeout=60)
            self._as_user(h, ["rm", "-rf", str(wd), ".provision/pending_handlers.json"])
            self._as_user(h, ["mkdir", "-p", str(wd)])
        self._reset(case, "ansible", tool_dir, inventory, f"before {tool}", resets)
        runs: list[RunRecord] = []
        if case.check:
            runs.append(self._run(tool, tool_dir, inventory, [*case.args, "--check", "--diff"], case.env))
        for _ in range(case.runs):
            runs.append(self._run(tool, tool_dir, inventory, case.args, case.env))
        self._reset(case, tool, tool_dir, inventory, f"after {tool}", resets)
        return runs

    def _reset(self, case: Case, tool: str, tool_dir: Path, inventory: Path, when: str, resets: list[str]) -> None:
        """Run the case's ``reset`` playbook with ``tool``; a failure is reported as a difference."""
        if not case.reset:
            return
        if tool == "ansible":
            argv = ["ansible-playbook", "-i", str(inventory), case.reset]
            env = self.ansible_env(tool_dir)
            env["ANSIBLE_STDOUT_CALLBACK"] = "default"
        else:
            argv = [sys.executable, "-m", "provision", "run", case.reset, "-i", str(inventory)]
            env = self.provision_env()
        proc = subprocess.run(argv, cwd=tool_dir, env=env, capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            resets.append(f"reset {when}: exit code {proc.returncode}: {proc.stdout[-1500:]}{proc.stderr[-500:]}")

    def wd(self, host: Any, case: Case, tool: str) -> Path:
        return Path(host.home) / "compat" / case.name / tool

    def _as_user(self, host: Any, argv: list[str]) -> None:
        idx = self.lab.hosts.index(host)
        self.lab.run_as(idx, argv)

    def _inventory(self, case: Case, hosts: list[Any], tool: str, tool_dir: Path, http_base: str | None) -> Path:
        extra = {
            h.name: {
                "wd": str(self.wd(h, case, tool)),
                "ansible_python_interpreter": "/usr/bin/python3",
                # python-debian for ansible-core's deb822_repository (scripts/reference_collections.py): a case
                # puts it on that module's PYTHONPATH through the task's environment
                "reference_pythonpath": str(Path(sys.prefix) / "reference-pylib"),
                **({"http_base": http_base} if http_base else {}),
                **case.host_vars,
            }
            for h in hosts
        }
        return self.lab.write_inventory(tool_dir / "inventory.yml", [h.name for h in hosts], extra_host_vars=extra)

    def _run(
        self, tool: str, tool_dir: Path, inventory: Path, args: list[str], extra_env: dict[str, str] | None = None
    ) -> RunRecord:
        if tool == "ansible":
            argv = ["ansible-playbook", "-i", str(inventory), "playbook.yml", *args]
            env = self.ansible_env(tool_dir)
        else:
            argv = [sys.executable, "-m", "provision", "run", "playbook.yml", "-i", str(inventory), "--json", *args]
            env = self.provision_env()
        env.update({k: v.replace("{dir}", str(tool_dir)) for k, v in (extra_env or {}).items()})
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=tool_dir, env=env, capture_output=True, text=True, timeout=300, check=False)
        seconds = time.monotonic() - started
        output = f"$ {' '.join(argv)}\n[rc={proc.returncode}]\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
        start = re.search(r"^\{$", proc.stdout, re.MULTILINE)  # -v lines may come before the document
        try:
            doc = json.loads(proc.stdout[start.start() :]) if start else {}
        except json.JSONDecodeError:
            doc = {}
        return RunRecord(proc.returncode, _stats(doc), *_messages(doc), output, seconds)

    # -------------------------------------------------------------------------------- comparison
    def _compare(self, case: Case, hosts: list[Any], records: dict[str, list[RunRecord]]) -> list[str]:
        out: list[str] = []
        labels = (["check"] if case.check else []) + [f"run {i + 1}" for i in range(case.runs)]
        names = {h.name for h in hosts}
        for label, a, p in zip(labels, records["ansible"], records["provision"], strict=True):
            if a.rc != p.rc:
                out.append(f"{label}: exit code ansible={a.rc} provision={p.rc}")
            for host in sorted(names):
                sa, sp = a.stats.get(host), p.stats.get(host)
                if sa != sp:
                    out.append(f"{label}: stats {host}: ansible={_fmt(sa)} provision={_fmt(sp)}")
            ma = {(t, h): m for t, h, m in a.messages}
            mp = {(t, h): m for t, h, m in p.messages}
            for key in sorted(ma.keys() | mp.keys()):
                if key not in mp:
                    out.append(f"{label}: debug {key[0]!r} on {key[1]}: ansible={ma[key]!r} provision=<none>")
                elif key not in ma:
                    out.append(f"{label}: debug {key[0]!r} on {key[1]}: ansible=<none> provision={mp[key]!r}")
                elif _norm(ma[key]) != _norm(mp[key]):
                    out.append(f"{label}: debug {key[0]!r} on {key[1]}: ansible={ma[key]!r} provision={mp[key]!r}")
            if "--diff" in label or label == "check":
                for key in sorted(a.diffs ^ p.diffs):
                    who = "ansible" if key in a.diffs else "provision"
                    out.append(f"{label}: diff shown for {key[0]!r} on {key[1]} only by {who}")
        for h in hosts:
            ta = _tree(self.wd(h, case, "ansible"), "ansible")
            tp = _tree(self.wd(h, case, "provision"), "provision")
            for rel in sorted(ta.keys() | tp.keys()):
                if ta.get(rel) != tp.get(rel):
                    out.append(f"files {h.name}:{rel}: ansible={_short(ta.get(rel))} provision={_short(tp.get(rel))}")
        return out


@contextmanager
def _http_server(case: Case) -> Iterator[str | None]:
    """Serve the case's ``serve`` folder on loopback while the case runs (its base URL), or nothing."""
    if not case.serve:
        yield None
        return
    with served_folder(case.path / case.serve) as url:
        yield url


# ------------------------------------------------------------------------------------ parsing results
def _stats(doc: dict[str, Any]) -> dict[str, dict[str, int]]:
    out = {}
    for host, st in (doc.get("stats") or {}).items():
        st = dict(st)
        if "failures" in st:
            st["failed"] = st.pop("failures")
        out[host] = {k: int(st.get(k, 0)) for k in STAT_KEYS}
    return out


def _messages(doc: dict[str, Any]) -> tuple[list[tuple[str, str, Any]], set[tuple[str, str]]]:
    messages: list[tuple[str, str, Any]] = []
    diffs: set[tuple[str, str]] = set()
    seen: dict[str, int] = {}
    for play in doc.get("plays") or []:
        for task in play.get("tasks") or []:
            name = str(task.get("task", {}).get("name", ""))
            seen[name] = seen.get(name, 0) + 1
            label = name if seen[name] == 1 else f"{name} #{seen[name]}"
            for host, res in (task.get("hosts") or {}).items():
                if not isinstance(res, dict):
                    continue
                items = res.get("results")
                if _failed(res) and not res.get("ignored"):
                    messages.append((label, host, "<failed>"))  # where a host failed matters, for any task
                elif _is_debug(res):
                    if isinstance(items, list):
                        msg: Any = [_debug_value(r) for r in items if isinstance(r, dict) and not r.get("skipped")]
                        if msg:  # an empty loop: nothing to compare (provision's result has no items to mark it)
                            messages.append((label, host, msg))
                    elif not res.get("skipped"):  # skipped tasks are compared by the counts
                        messages.append((label, host, _debug_value(res)))
                if res.get("diff") and _shows_diff(res):
                    diffs.add((label, host))
    return messages, diffs


def _failed(res: dict[str, Any]) -> bool:
    return bool(res.get("failed") or "exception" in res)


def _is_debug(res: dict[str, Any]) -> bool:
    if res.get("action") in ("debug", "ansible.builtin.debug"):
        return True
    if res.get("_show_msg"):  # provision marks debug-style results
        return True
    items = res.get("results")
    return isinstance(items, list) and any(isinstance(r, dict) and r.get("_show_msg") for r in items)


_META = {
    "msg",
    "changed",
    "failed",
    "skipped",
    "verbosity",
    "action",
    "item",
    "item_label",
    "ansible_loop_var",
    "ansible_index_var",
    "ansible_loop",
    "skip_reason",
    "false_condition",
    "invocation",
    "warnings",
    "deprecations",
    "ignored",
}


def _debug_value(res: dict[str, Any]) -> Any:
    """A debug result's message, or ``{var: value}`` for ``debug: var=``; ``<failed>`` for a failed one."""
    if _failed(res):
        return "<failed>"
    loop_keys = {res.get("ansible_loop_var"), res.get("ansible_index_var")}
    extra = {k: v for k, v in res.items() if k not in _META and not k.startswith("_") and k not in loop_keys}
    return extra if extra else res.get("msg")


def _shows_diff(res: dict[str, Any]) -> bool:
    diff = res["diff"]
    if isinstance(diff, str):
        return bool(diff.strip())
    parts = diff if isinstance(diff, list) else [diff]
    return any(
        isinstance(d, dict) and ("before" in d or "after" in d) and d.get("before") != d.get("after") for d in parts
    )


def _norm(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _fmt(st: dict[str, int] | None) -> str:
    if st is None:
        return "<none>"
    return " ".join(f"{k}={st[k]}" for k in STAT_KEYS)


def _short(entry: tuple[str, str, str] | None) -> str:
    if entry is None:
        return "<missing>"
    kind, mode, body = entry
    return f"{kind} {mode} {body[:120]!r}"


def _tree(root: Path, tool: str) -> dict[str, tuple[str, str, str]]:
    """Relative path -> (kind, mode, content) of everything under root (the tool's name normalised); the mode
    carries the owner and group where they are not the wd's own (files a ``become`` task made)."""
    out: dict[str, tuple[str, str, str]] = {}
    if not root.exists():
        return out
    home_owner = (root.stat().st_uid, root.stat().st_gid)
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if ".git" in path.relative_to(root).parts[:-1]:  # a repository's internals hold times and stat data
            continue
        st = path.lstat()
        mode = oct(stat.S_IMODE(st.st_mode))
        if (st.st_uid, st.st_gid) != home_owner:
            mode += f" {_name(pwd.getpwuid, st.st_uid)}:{_name(grp.getgrgid, st.st_gid)}"
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", "", os.readlink(path).replace(f"/{tool}", "/TOOL"))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", mode, "")
        else:
            data = path.read_bytes().decode("utf-8", "replace").replace(f"/{tool}", "/TOOL")
            out[rel] = ("file", mode, data)
    return out


def _name(lookup: Any, ident: int) -> str:
    try:
        return str(lookup(ident)[0])
    except KeyError:
        return str(ident)
