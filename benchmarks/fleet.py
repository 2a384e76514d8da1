"""Re-apply a converged 9-task play to N lab hosts with provision, pyinfra and ansible-core, side by side.

    python benchmarks/fleet.py [--hosts 8 64] [--repeat 3] [--tools provision pyinfra ansible]

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

Ansible runs with forks 50, pipelining and ControlPersist (its fastest documented setup).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.lab import Lab  # noqa: E402

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


def _run(tool: str, argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = _machine_busy()
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    CPU.setdefault(tool, []).append((own, _machine_busy() - busy))
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc


class Tools:
    """The three command lines, set up for one lab in ``work``."""

    def __init__(self, lab: Lab, work: Path) -> None:
        self.lab = lab
        self.work = work
        (work / "motd.j2").write_text(TEMPLATE)
        for tool in ("provision", "ansible"):
            (work / f"{tool}.yml").write_text(PLAYBOOK.format(tool=tool))
        (work / "deploy.py").write_text(PYINFRA_DEPLOY.replace("TEMPLATE", repr(str(work / "motd.j2"))))
        hosts = [
            (h.address, {"ssh_port": h.port, "ssh_user": h.user, "ssh_key": str(lab.client_key),
                         "ssh_known_hosts_file": str(lab.known_hosts_path),
                         "ssh_strict_host_key_checking": "yes"})
            for h in lab.hosts
        ]  # fmt: skip
        (work / "pyinfra_inventory.py").write_text(f"hosts = {hosts!r}\n")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: .pyc used
        self.env = {**env, "PROVISION_SSH_CONFIG": str(lab.ssh_config_path), "PYTHONPATH": str(ROOT)}
        control = work / "cp"
        control.mkdir()
        self.ansible_env = {
            **self.env,
            "ANSIBLE_FORKS": "50",
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_SSH_ARGS": f"-F {lab.ssh_config_path} -o ControlMaster=auto -o ControlPersist=600s",
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
            "ANSIBLE_NOCOLOR": "1",
        }

    def provision(self) -> tuple[float, int, int]:
        """(wall, changed, peak RSS bytes of the provision process)."""
        argv = [sys.executable, "-c", RSS_WRAPPER, "run", "provision.yml",
                "-i", str(self.lab.inventory_path), "-f", "50", "--json"]  # fmt: skip
        wall, proc = _run("provision", argv, self.env, self.work)
        doc = json.loads(proc.stdout)
        changed = sum(s.get("changed", 0) for s in doc["stats"].values())
        return wall, changed, int(proc.stderr.strip().splitlines()[-1])

    def ansible(self) -> tuple[float, int]:
        argv = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(self.lab.inventory_path),
                "ansible.yml"]  # fmt: skip
        wall, proc = _run("ansible", argv, self.ansible_env, self.work)
        recap = proc.stdout[proc.stdout.rindex("PLAY RECAP") :]  # the json callback is in ansible.posix now
        return wall, sum(int(m) for m in re.findall(r"changed=(\d+)", recap))

    def pyinfra(self) -> tuple[float, int]:
        argv = [shutil.which("pyinfra") or "pyinfra", "pyinfra_inventory.py", "deploy.py", "-y",
                "--parallel", "50", "--no-wait"]  # fmt: skip
        wall, _ = _run("pyinfra", argv, self.env, self.work)
        return wall, -1  # pyinfra's shell operations always run: it has no "changed" to compare


# run provision in this interpreter, then print its peak RSS (bytes) on the last stderr line
RSS_WRAPPER = (
    "import resource,runpy,sys\n"
    "sys.argv=['provision']+sys.argv[1:]\n"
    "code=0\n"
    "try:\n runpy.run_module('provision',run_name='__main__')\n"
    "except SystemExit as e:\n code=e.code or 0\n"
    "sys.stderr.write('\\n%d\\n'%(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss*1024))\n"
    "sys.exit(code)\n"
)


def bench(n: int, repeat: int, tools: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="provision-fleet-") as tmp, Lab(n, Path(tmp) / "lab") as lab:
        work = Path(tmp) / "work"
        work.mkdir()
        t = Tools(lab, work)
        runs = {"provision": t.provision, "pyinfra": t.pyinfra, "ansible": t.ansible}
        converge = {tool: runs[tool]()[0] for tool in tools}
        CPU.clear()  # the re-runs only
        walls: dict[str, list[float]] = {tool: [] for tool in tools}
        rss: list[int] = []
        for _ in range(repeat):
            for tool in tools:
                out = runs[tool]()
                walls[tool].append(out[0])
                if tool != "pyinfra" and out[1] != 0:
                    raise SystemExit(f"{tool}: a converged re-run reported {out[1]} changes")
                if tool == "provision":
                    rss.append(int(out[2]))  # type: ignore[misc]
        medians = {tool: statistics.median(w) for tool, w in walls.items()}
        result: dict[str, object] = {"hosts": n, "converge_s": converge, "rerun_median_s": medians,
                                     "rerun_all_s": walls}  # fmt: skip
        result["cpu_s"] = {
            tool: {
                "own": statistics.median(c[0] for c in CPU[tool]),
                "machine": statistics.median(c[1] for c in CPU[tool]),
            }
            for tool in tools
        }  # the tool's own process tree, and the whole machine (the lab's sshds and host-side work too)
        if rss:
            result["provision_peak_rss_mb"] = max(rss) / 2**20
            result["provision_rss_per_host_kb"] = max(rss) / n / 1024
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tools", nargs="+", default=["provision", "pyinfra", "ansible"])
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    args = parser.parse_args()
    missing = [
        t for t in args.tools if t != "provision" and not shutil.which("ansible-playbook" if t == "ansible" else t)
    ]
    if missing:
        raise SystemExit(f"not installed: {', '.join(missing)} (pip install -e '.[bench]')")
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    results = [bench(n, args.repeat, args.tools) for n in args.hosts]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"no-op re-run of a converged 9-task play, median of {args.repeat} (seconds); cores: {os.cpu_count()}")
    print(f"{'hosts':>6} " + " ".join(f"{t:>10}" for t in args.tools) + "   ratios (x provision)      provision RSS")
    for r in results:
        med = r["rerun_median_s"]
        assert isinstance(med, dict)
        ratios = "  ".join(f"{t} {med[t] / med['provision']:.1f}x" for t in args.tools if t != "provision")
        rss = (
            f"{r['provision_peak_rss_mb']:.0f} MB ({r['provision_rss_per_host_kb']:.0f} KB/host)"
            if "provision_peak_rss_mb" in r
            else ""
        )
        print(f"{r['hosts']:>6} " + " ".join(f"{med[t]:>10.2f}" for t in args.tools) + f"   {ratios:<24} {rss}")
        cpu = r["cpu_s"]
        assert isinstance(cpu, dict)
        print("   CPU s (own / whole machine): "
              + "  ".join(f"{t} {cpu[t]['own']:.2f} / {cpu[t]['machine']:.2f}" for t in args.tools))  # fmt: skip


if __name__ == "__main__":
    main()
