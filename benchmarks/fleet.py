"""Re-apply a converged 9-task play to N lab hosts with provision, pyinfra and ansible-core, side by side.

    python benchmarks/fleet.py [--hosts 8 64] [--repeat 3] [--tools provision floor pyinfra ansible]
                                [--profile DIR] [--perf DIR]

Needs root (the lab makes one Unix user and one real sshd per host, on loopback) and the benchmark extra
(`pip install -e '.[bench]'`: pyinfra 3.x, ansible-core 2.19). For each host count it starts a lab, converges
the same play once with each tool (each tool in its own directory on the hosts), then times the no-op re-run
of each tool, alternating tools round by round (median of ``--repeat``), each through its own command line
(`provision run`, `pyinfra`, `ansible-playbook`: Python start and imports count, as they do for a user). It
prints the medians, the ratios, provision's peak RSS (its own process, so per host it is an upper bound) and the
CPU seconds of each re-run: the tool's own process tree, and the whole machine's (the lab's sshd processes and
what runs on the hosts share the same cores, so the machine's figure divided by the core count bounds the wall).

The play: a directory, a private sub-directory, a file with content (notifies a handler), a template, a command
with ``creates``, a shell with ``changed_when: false``, a skipped task, a tagged task, the handler. pyinfra has no
``creates``/``changed_when``/``when``/handlers; its deploy does the same work with its own idioms (a ``test -e ||``
shell, a plain shell, a Python ``if``, ``_if=`` on the handler-like operation): see ``PYINFRA_DEPLOY``.

Every tool runs with as many forks as hosts (provision ``-f``, pyinfra ``--parallel``, Ansible's ``forks``);
Ansible with pipelining and ControlPersist (its fastest documented setup).

Three floors run beside the tools (``--tools ... floor floor-shell floor-python``): the least any paramiko-based
tool can do on this machine. ``floor`` opens one SSH connection per host (one thread each, host keys checked
against the same known_hosts), runs ``true`` and closes; ``floor-shell`` runs one shell line that reads what the
converged play reads, as ``file_state.py`` reads it (the umask, ``stat`` of its six paths with owner names and
times to the ns, ``sha256sum`` of its two files, the shell task's ``test``): what a tool whose converged run starts
no Python on a host pays at least (its files are made once, in ``fleet-floor``; no run lock is taken and no pending
handlers are read, which such a run would add); ``floor-python`` runs ``python3 -c pass`` (what a tool that runs
any Python on each host pays at least). Each is its own command line, as the tools are: its Python start and
imports count. ``pyinfra / floor`` is the most any SSH tool could be faster than pyinfra on this machine, where
every lab host's sshd runs on the same cores as the tool.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROFILE_DIR: Path | None = None  # --profile DIR
PERF_DIR: Path | None = None  # --perf DIR
sys.path.insert(0, str(ROOT))

from tests.support.lab import Lab  # noqa: E402
from tests.support.rtt_proxy import RttProxy  # noqa: E402

PLAYBOOK = """\
- hosts: all
  gather_facts: false
  vars:
    base: "fleet-{tool}"
  tasks:
    - file: {{path: "{{{{ base }}}}", state: directory, mode: "0755"}}
    - file: {{path: "{{{{ base }}}}/etc", state: directory, mode: "0700"}}
    - copy: {{content: "port = 30000\\n", dest: "{{{{ base }}}}/etc/app.conf", mode: "0644"}}
      notify: restart app
    - template: {{src: motd.j2, dest: "{{{{ base }}}}/motd", mode: "0644"}}
    - command: {{cmd: "touch {{{{ base }}}}/marker", creates: "{{{{ base }}}}/marker"}}
    - shell: "test -d {{{{ base }}}}/etc"
      changed_when: false
    - command: /bin/false
      when: false
    - file: {{path: "{{{{ base }}}}/extra", state: directory, mode: "0755"}}
      tags: [extra]
  handlers:
    - name: restart app
      command: "touch {{{{ base }}}}/restarted"
"""

PYINFRA_DEPLOY = """\
from io import StringIO

from pyinfra import host
from pyinfra.facts.server import Home
from pyinfra.operations import files, server

base = host.get_fact(Home) + "/fleet-pyinfra"
files.directory(name="base", path=base, mode="755")
files.directory(name="etc", path=base + "/etc", mode="700")
conf = files.put(name="conf", src=StringIO("port = 30000\\n"), dest=base + "/etc/app.conf", mode="644")
files.template(name="motd", src=TEMPLATE, dest=base + "/motd", mode="644", inventory_hostname=host.name)
server.shell(name="marker", commands=["test -e " + base + "/marker || touch " + base + "/marker"])
server.shell(name="check", commands=["test -d " + base + "/etc"])
if False:
    server.shell(name="skipped", commands=["/bin/false"])
files.directory(name="extra", path=base + "/extra", mode="755")
server.shell(name="restart app", commands=["touch " + base + "/restarted"], _if=conf.did_change)
"""

TEMPLATE = "welcome to {{ inventory_hostname }}\n"


def _machine_busy() -> float:
    """CPU seconds the whole machine has spent busy (every core, every process: the lab's sshds too)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


CPU: dict[str, list[tuple[float, float]]] = {}  # tool -> (its own CPU s, the machine's busy CPU s) per run
PEAK_RSS: dict[str, int] = {}  # tool -> the peak RSS (bytes) of its process tree in its latest run


def _wait4(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run ``argv`` to its end; its output, and the resource usage of that process alone (its CPU, and the peak
    RSS of it and its children: ``os.wait4``), not of every child this benchmark has waited for."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: dict[str, str] = {}
    readers = [threading.Thread(target=lambda n=n, f=f: out.__setitem__(n, f.read()))
               for n, f in (("out", proc.stdout), ("err", proc.stderr))]  # fmt: skip
    for reader in readers:
        reader.start()
    deadline = threading.Timer(3600, proc.kill)  # as subprocess.run(timeout=3600) bounded it
    deadline.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        deadline.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join(3600)
    return subprocess.CompletedProcess(argv, proc.returncode, out.get("out", ""), out.get("err", "")), usage


def _run(tool: str, argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    perf = None
    if PERF_DIR is not None:  # --perf: the whole machine sampled during the run (perf record -a), by command name
        PERF_DIR.mkdir(parents=True, exist_ok=True)
        data = PERF_DIR / f"{tool}-{len(list(PERF_DIR.glob(tool + '-*.data')))}.data"
        perf = subprocess.Popen(["perf", "record", "-a", "-F", "499", "-o", str(data)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(0.5)  # perf's own start, before the run
    busy = _machine_busy()
    started = time.perf_counter()
    proc, usage = _wait4(argv, env, cwd)
    wall = time.perf_counter() - started
    if perf is not None:
        perf.send_signal(signal.SIGINT)
        perf.wait(60)
        report = subprocess.run(["perf", "report", "-i", str(data), "--sort", "comm", "--stdio"],
                                capture_output=True, text=True, check=False).stdout  # fmt: skip
        data.with_suffix(".txt").write_text(report)
    CPU.setdefault(tool, []).append((usage.ru_utime + usage.ru_stime, _machine_busy() - busy))
    PEAK_RSS[tool] = usage.ru_maxrss * 1024
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc


class Tools:
    """The three command lines, set up for one lab in ``work``."""

    def __init__(self, lab: Lab, work: Path, proxy: RttProxy) -> None:
        self.lab = lab
        self.work = work
        files = proxy.write_files(work / "proxied")  # every tool goes through the same delaying proxy
        self.inventory = files["inventory"]
        forks = str(len(lab.hosts))
        self.forks = forks
        (work / "motd.j2").write_text(TEMPLATE)
        for tool in ("provision", "ansible"):
            (work / f"{tool}.yml").write_text(PLAYBOOK.format(tool=tool))
        (work / "deploy.py").write_text(PYINFRA_DEPLOY.replace("TEMPLATE", repr(str(work / "motd.j2"))))
        hosts = proxy.pyinfra_hosts(files["known_hosts"])
        self.pyinfra_hosts, self.known = hosts, files["known_hosts"]
        (work / "pyinfra_inventory.py").write_text(f"hosts = {hosts!r}\n")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: .pyc used
        self.env = {**env, "PROVISION_SSH_CONFIG": str(files["ssh_config"]), "PYTHONPATH": str(ROOT)}
        control = work / "cp"
        control.mkdir()
        self.ansible_env = {
            **self.env,
            "ANSIBLE_FORKS": forks,
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_SSH_ARGS": f"-F {files['ssh_config']} -o ControlMaster=auto -o ControlPersist=600s",
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
            "ANSIBLE_NOCOLOR": "1",
        }

    def provision(self, persist: bool = False) -> tuple[float, int, int]:
        """(wall, changed, peak RSS bytes of the provision process)."""
        args = ["run", "provision.yml", "-i", str(self.inventory), "-f", self.forks, "--json"]
        if persist:
            args += ["--persist", "120"]
        argv = [sys.executable, "-m", "provision", *args]  # as `provision` runs: its own process, its own exit
        env = self.env
        if PROFILE_DIR is not None:  # --profile: each run's cProfile stats, numbered
            PROFILE_DIR.mkdir(parents=True, exist_ok=True)
            name = f"{len(self.lab.hosts)}h-{'persisted' if persist else 'fresh'}-{len(list(PROFILE_DIR.iterdir()))}"
            argv = [sys.executable, "-c", PROFILED, str(PROFILE_DIR / f"{name}.prof"), *args]
        tool = "provision-persisted" if persist else "provision"
        wall, proc = _run(tool, argv, env, self.work)
        doc = json.loads(proc.stdout)
        changed = sum(s.get("changed", 0) for s in doc["stats"].values())
        return wall, changed, PEAK_RSS[tool]

    def ansible(self) -> tuple[float, int]:
        argv = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(self.inventory),
                "ansible.yml"]  # fmt: skip
        wall, proc = _run("ansible", argv, self.ansible_env, self.work)
        recap = proc.stdout[proc.stdout.rindex("PLAY RECAP") :]  # the json callback is in ansible.posix now
        return wall, sum(int(m) for m in re.findall(r"changed=(\d+)", recap))

    def pyinfra(self) -> tuple[float, int]:
        argv = [shutil.which("pyinfra") or "pyinfra", "pyinfra_inventory.py", "deploy.py", "-y",
                "--parallel", self.forks, "--no-wait"]  # fmt: skip
        wall, _ = _run("pyinfra", argv, self.env, self.work)
        return wall, -1  # pyinfra's shell operations always run: it has no "changed" to compare

    def floor(self, tool: str = "floor", command: str = "true") -> tuple[float, int]:
        hosts = [[p["ssh_hostname"], p["ssh_port"], p["ssh_user"]] for _, p in self.pyinfra_hosts]
        argv = [sys.executable, "-c", FLOOR, json.dumps(hosts), str(self.lab.client_key), str(self.known), command]
        wall, proc = _run(tool, argv, self.env, self.work)
        if proc.stdout.split() != [str(len(hosts))]:
            raise SystemExit(f"floor: {proc.stdout[-300:]}")
        return wall, 0


# floor-shell: the converged play's reads as one shell line (its files made once by FLOOR_SHELL_SETUP)
FLOOR_SHELL_SETUP = ("mkdir -p fleet-floor/etc fleet-floor/extra && printf 'port = 30000\\n' > fleet-floor/etc/app.conf"
                     " && echo welcome > fleet-floor/motd && touch fleet-floor/marker")  # fmt: skip
# (as file_state.py's stat reads them: type and mode, owner and group names, size, times to the ns, the umask)
FLOOR_SHELL = ("cd fleet-floor && umask && stat -c '%n %f %U %G %s %.9Y %.9X' . etc etc/app.conf motd marker extra"
               " && sha256sum etc/app.conf motd && test -d etc")  # fmt: skip

# the least a paramiko tool does: known_hosts read once; one thread per host opens a transport, checks the host's
# key, authenticates, runs COMMAND in one channel, closes
FLOOR = """
import json, socket, sys, threading
import paramiko
hosts, key, known, command = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
pkey = paramiko.Ed25519Key.from_private_key_file(key)
keys = paramiko.HostKeys(known)
done = []
def one(host, port, user):
    transport = paramiko.Transport(socket.create_connection((host, port), timeout=60))
    transport.start_client(timeout=60)
    offered = transport.get_remote_server_key()
    if keys.lookup(f"[{host}]:{port}").get(offered.get_name()) != offered:
        raise SystemExit(f"host key of {host}:{port} not known")
    transport.auth_publickey(user, pkey)
    channel = transport.open_session(timeout=60)
    channel.exec_command(command)
    while channel.recv(65536):
        pass
    done.append(channel.recv_exit_status())
    transport.close()
threads = [threading.Thread(target=one, args=h) for h in hosts]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(done.count(0))
"""


# --profile: provision under cProfile in this interpreter (main() with its arguments returns through SystemExit:
# the stats are written before the process ends); argv: FILE, then provision's arguments
PROFILED = (
    "import cProfile,sys\n"
    "from provision.cli import main\n"
    "prof=cProfile.Profile()\n"
    "prof.enable()\n"
    "try:\n main(sys.argv[2:])\n"
    "except SystemExit as e:\n code=e.code or 0\n"
    "prof.disable()\n"
    "prof.dump_stats(sys.argv[1])\n"
    "sys.exit(code)\n"
)


def bench(n: int, rtts: list[float], repeat: int, tools: list[str]) -> list[dict[str, object]]:
    """One lab of ``n`` hosts behind the proxy; per RTT, the re-run medians of each tool (``provision`` fresh,
    ``provision-persisted``: ``--persist``, after one run that leaves the connections kept)."""
    out: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="provision-fleet-") as tmp, Lab(n, Path(tmp) / "lab") as lab, \
            RttProxy(lab) as proxy:  # fmt: skip
        work = Path(tmp) / "work"
        work.mkdir()
        t = Tools(lab, work, proxy)
        runs = {"provision": t.provision, "provision-persisted": partial(t.provision, persist=True),
                "pyinfra": t.pyinfra, "ansible": t.ansible, "floor": t.floor,
                "floor-shell": partial(t.floor, "floor-shell", FLOOR_SHELL),
                "floor-python": partial(t.floor, "floor-python", "python3 -c pass")}  # fmt: skip
        try:
            for tool in tools:
                if tool == "floor-shell":
                    t.floor("floor-shell", FLOOR_SHELL_SETUP)
                runs[tool]()  # converge (and, persisted, leave the connections kept)
            for rtt in rtts:
                proxy.set_rtt(rtt)
                if "provision-persisted" in tools:
                    runs["provision-persisted"]()  # connections made at this RTT
                CPU.clear()  # the re-runs only
                walls: dict[str, list[float]] = {tool: [] for tool in tools}
                rss: list[int] = []
                for _ in range(repeat):
                    for tool in tools:
                        res = runs[tool]()
                        walls[tool].append(res[0])
                        print(f"{n} hosts, RTT {rtt:g}, {tool}: {res[0]:.2f} s", file=sys.stderr, flush=True)
                        if res[1] > 0:  # (pyinfra has no count: -1; a floor changes nothing: 0)
                            raise SystemExit(f"{tool}: a converged re-run reported {res[1]} changes")
                        if tool == "provision":
                            rss.append(int(res[2]))  # type: ignore[misc]
                result: dict[str, object] = {"hosts": n, "rtt_ms": rtt, "load": os.getloadavg()[0],
                                             "rerun_median_s": {k: statistics.median(w) for k, w in walls.items()},
                                             "rerun_all_s": walls}  # fmt: skip
                result["cpu_s"] = {
                    tool: {"own": statistics.median(c[0] for c in CPU[tool]),
                           "machine": statistics.median(c[1] for c in CPU[tool])}
                    for tool in tools
                }  # fmt: skip  # the tool's own process tree, and the whole machine (sshds, host-side work)
                if rss:
                    result["provision_peak_rss_mb"] = max(rss) / 2**20
                out.append(result)
                print(json.dumps(result), file=sys.stderr, flush=True)  # progress: a long matrix
        finally:
            if "provision-persisted" in tools:
                subprocess.run([sys.executable, "-m", "provision", "persist", "stop"], env=t.env, check=False,
                               capture_output=True, timeout=60)  # fmt: skip
    return out


def slope(results: list[dict[str, object]], n: int, tool: str) -> float | None:
    """Sequential round trips: the least-squares slope of the wall time against the RTT (seconds per second)."""
    pts = [(float(r["rtt_ms"]) / 1000, r["rerun_median_s"][tool]) for r in results  # type: ignore[index]
           if r["hosts"] == n]  # fmt: skip
    if len(pts) < 2:
        return None
    mx = statistics.mean(x for x, _ in pts)
    my = statistics.mean(y for _, y in pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--rtt", type=float, nargs="+", default=[0.0], help="round-trip times to add (ms)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tools", nargs="+", default=["provision", "provision-persisted", "floor", "floor-shell",
                                                       "floor-python", "pyinfra", "ansible"])  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--profile", type=Path, help="write each provision run's cProfile stats into this dir")
    parser.add_argument(
        "--perf",
        type=Path,
        help="sample the whole machine during each re-run (perf record -a): "
        "DIR/TOOL-N.data and its CPU by command name, DIR/TOOL-N.txt",
    )
    args = parser.parse_args()
    global PROFILE_DIR, PERF_DIR
    PROFILE_DIR, PERF_DIR = args.profile, args.perf
    missing = [t for t in args.tools if not t.startswith(("provision", "floor"))
               and not shutil.which("ansible-playbook" if t == "ansible" else t)]  # fmt: skip
    if missing:
        raise SystemExit(f"not installed: {', '.join(missing)} (pip install -e '.[bench]')")
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    results = [r for n in args.hosts for r in bench(n, args.rtt, args.repeat, args.tools)]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"no-op re-run of a converged 9-task play, median of {args.repeat} (seconds); cores: {os.cpu_count()}")
    names = {
        "provision": "prov",
        "provision-persisted": "prov-kept",
        "floor-python": "floor-py",
        "floor-shell": "floor-sh",
    }
    print(f"{'hosts':>5} {'RTT':>4} " + " ".join(f"{names.get(t, t):>9}" for t in args.tools)
          + "  ratios (x provision fresh / kept)   prov CPU ms/host/task  load")  # fmt: skip
    for r in results:
        med = r["rerun_median_s"]
        cpu = r["cpu_s"]
        assert isinstance(med, dict) and isinstance(cpu, dict)
        base = [t for t in ("provision", "provision-persisted") if t in med]
        ratios = "  ".join(f"{t} " + "/".join(f"{med[t] / med[b]:.1f}x" for b in base)
                           for t in args.tools if not t.startswith("provision"))  # fmt: skip
        per = f"{cpu['provision']['own'] * 1000 / int(r['hosts']) / 9:.2f}" if "provision" in cpu else "-"  # type: ignore[arg-type]
        print(f"{r['hosts']:>5} {r['rtt_ms']:>4g} " + " ".join(f"{med[t]:>9.2f}" for t in args.tools)
              + f"  {ratios:<36} {per:>8}  {r['load']:.1f}")  # fmt: skip
        if "pyinfra" in med:
            floors = "  ".join(f"pyinfra / {f} {med['pyinfra'] / med[f]:.1f}x"
                               for f in ("floor", "floor-shell", "floor-python") if f in med)  # fmt: skip
            if floors:
                print(f"{'':>11}the most a tool could gain over pyinfra here: {floors}")
    for n in args.hosts:
        for tool in args.tools:
            k = slope(results, n, tool)
            if k is not None:
                print(f"{n} hosts, {tool}: {k:.1f} sequential RTT (slope of wall against RTT)")


if __name__ == "__main__":
    main()
