"""What installing the stack costs: a fresh venv up to a passed NIXL gate, and the idempotent rerun, on one
lab host and on four at once, with uv and with pip, next to the bare installer doing the same install.

    python benchmarks/install.py [--full] [--installers uv,pip] [--hosts 4]

Default: the NIXL-only stack of the lab tests (numpy, nixl-cu13 + nixl with --no-deps: ~0.3 GB). ``--full``:
the pinned SGLang stack (sglang, sglang-router, nixl-cu13 + nixl: ~11 GB; with pip that takes many minutes).
Needs root: it starts a lab of real sshd hosts (tests/support/lab.py), one Unix user each.

Caches, so that each comparison is fair: uv uses one cache shared by every lab user (warmed once before the
measurements, as a lab's shared cache would be); pip uses each user's own cache, warmed on every host by the
bare-pip run before provision runs. Prints seconds and bytes; asserts nothing. Targets: a fresh host within
1.2x of the bare installer, four hosts within 1.5x of one, an idempotent rerun under 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.cli import run_cli  # noqa: E402
from tests.support.lab import Lab  # noqa: E402
from tests.support.stack import CACHE_ROOT, shared_dir, stack_inventory  # noqa: E402

PYTHON = "/usr/bin/python3"
VENV_TASK = "Venv with the pinned stack"


def stack(full: bool) -> tuple[dict[str, Any], list[str], list[str]]:
    """(inventory vars, packages, no-deps packages): what install.yml installs on a CPU host (cu13)."""
    if full:
        packages = ["sglang==0.5.23", "sglang-router==0.3.2", "nixl-cu13==1.5.1"]
        return {"install_sglang": True, "nixl_no_deps": False}, packages, ["nixl==1.5.1"]
    return {"install_sglang": False, "nixl_no_deps": True}, ["numpy"], ["nixl-cu13==1.5.1", "nixl==1.5.1"]


class Bench:
    def __init__(self, lab: Lab, work: Path, full: bool) -> None:
        self.lab, self.work, self.full = lab, work, full
        self.vars, self.packages, self.no_deps = stack(full)
        self.uv_cache = shared_dir("uv")
        self.uv = shared_dir("bin") / "uv"  # the controller's uv where lab users can run it (bare runs)
        import uv

        shutil.copy2(uv.find_uv_bin(), self.uv)
        os.chmod(self.uv, 0o755)

    # -- helpers
    def clean(self, hosts: list[int]) -> None:
        for i in hosts:
            self.lab.run_as(i, ["rm", "-rf", ".provision", "bare-venv"], timeout=600)

    def size(self, i: int, path: str) -> int:
        out = self.lab.run_as(i, ["du", "-sb", path.rstrip("/") + "/"], timeout=600)
        return int(out.stdout.split()[0]) if out.returncode == 0 else 0

    def provision(self, playbook: str, hosts: list[int], installer: str) -> tuple[float, dict[str, Any]]:
        directory = Path(tempfile.mkdtemp(dir=self.work))
        inv = stack_inventory(
            self.lab, directory, hosts, python=PYTHON, installer=installer, uv_cache_dir=str(self.uv_cache), **self.vars
        )
        argv = ["run", str(ROOT / "playbooks" / playbook), "-i", str(inv), "--json", "-f", "20"]
        old = Path.cwd()
        os.chdir(directory)
        started = time.perf_counter()
        try:
            result = run_cli(argv)
        finally:
            os.chdir(old)
        wall = time.perf_counter() - started
        report = json.loads(result.out)
        if result.code != 0:
            raise SystemExit(f"{playbook} failed ({result.code}): {result.err[-2000:]}")
        return wall, report

    def bare(self, i: int, installer: str) -> float:
        """The installer alone, as the host's user: create the venv, install, install the no-deps part."""
        env = ["env", f"UV_CACHE_DIR={self.uv_cache}", "UV_SYSTEM_CERTS=1", "UV_PYTHON_DOWNLOADS=never"]
        if installer == "uv":
            steps = [[*env, str(self.uv), "venv", "-q", "--python", PYTHON, "bare-venv"]]
            pip = [*env, str(self.uv), "pip", "install", "-q", "--python", "bare-venv/bin/python"]
        else:
            steps = [[PYTHON, "-m", "venv", "bare-venv"]]
            pip = ["bare-venv/bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        steps += [[*pip, *self.packages], [*pip, "--no-deps", *self.no_deps]]
        started = time.perf_counter()
        for argv in steps:
            out = self.lab.run_as(i, argv, timeout=3600)
            if out.returncode != 0:
                raise SystemExit(f"bare {installer} failed: {out.stderr[-2000:]}")
        return time.perf_counter() - started

    # -- one installer
    def run(self, installer: str, n: int) -> dict[str, Any]:
        hosts, out = list(range(n)), {}
        self.clean(hosts)
        if installer == "uv":  # warm the shared cache once (a lab's cache is warm after its first host)
            self.provision("install.yml", [0], installer)
        else:  # warm every user's own pip cache
            for i in hosts:
                self.bare(i, installer)
        self.clean(hosts)
        out["bare_s"] = self.bare(0, installer)
        out["bare_bytes"] = self.size(0, "bare-venv")
        self.clean(hosts)
        out["bare_all_s"] = out["bare_s"]
        if n > 1:
            started = time.perf_counter()  # what the machine allows: the bare installer on every host at once
            with ThreadPoolExecutor(n) as pool:
                list(pool.map(lambda i: self.bare(i, installer), hosts))
            out["bare_all_s"] = time.perf_counter() - started
            self.clean(hosts)
        for label, chosen in (("one", [0]), ("all", hosts))[: 2 if n > 1 else 1]:
            install_s, report = self.provision("install.yml", chosen, installer)
            gate_s, _ = self.provision("smoke.yml", chosen, installer)
            rerun_s, again = self.provision("install.yml", chosen, installer)
            step = next(t for t in report["plays"][0]["tasks"] if t["task"]["name"] == VENV_TASK)["hosts"]["lab0"]
            out[label] = {
                "install_s": install_s, "gate_s": gate_s, "fresh_s": install_s + gate_s, "rerun_s": rerun_s,
                "installer_s": sum(step.get("seconds", {}).values()), "bytes": self.size(0, ".provision/venv"),
                "rerun_changed": sum(s["changed"] for s in again["stats"].values()),
            }  # fmt: skip
            self.clean(hosts)
        out.setdefault("all", out["one"])
        return out


def show(results: dict[str, dict[str, Any]], n: int, full: bool) -> None:
    print(f"\nstack: {'full SGLang (sglang 0.5.23, sglang-router, nixl-cu13, nixl)' if full else 'NIXL only'}")
    print(f"{'':44}" + "".join(f"{k:>12}" for k in results))
    rows = [
        ("bare installer, 1 host (s)", lambda r: r["bare_s"]),
        (f"bare installer, {n} hosts at once (s)", lambda r: r["bare_all_s"]),
        ("provision install.yml, 1 host (s)", lambda r: r["one"]["install_s"]),
        ("  of which the installer ran (s)", lambda r: r["one"]["installer_s"]),
        ("provision install + smoke gate, 1 host (s)", lambda r: r["one"]["fresh_s"]),
        (f"provision install + smoke gate, {n} hosts (s)", lambda r: r["all"]["fresh_s"]),
        ("idempotent rerun, 1 host (s)", lambda r: r["one"]["rerun_s"]),
        (f"idempotent rerun, {n} hosts (s)", lambda r: r["all"]["rerun_s"]),
        ("changed tasks in the reruns", lambda r: r["one"]["rerun_changed"] + r["all"]["rerun_changed"]),
        ("bytes installed, bare (MB)", lambda r: r["bare_bytes"] / 1e6),
        ("bytes installed, provision (MB)", lambda r: r["one"]["bytes"] / 1e6),
        ("install.yml / bare (target <= 1.2)", lambda r: r["one"]["install_s"] / r["bare_s"]),
        (f"{n} hosts / 1 host (target <= 1.5)", lambda r: r["all"]["fresh_s"] / r["one"]["fresh_s"]),
        (f"  bare installer: {n} hosts / 1 host", lambda r: r["bare_all_s"] / r["bare_s"]),
    ]
    for label, value in rows:
        print(f"{label:44}" + "".join(f"{value(r):>12.2f}" for r in results.values()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="the full SGLang stack (~11 GB) instead of NIXL only")
    parser.add_argument("--installers", default="uv,pip", help="comma-separated: uv, pip")
    parser.add_argument("--hosts", type=int, default=4)
    opts = parser.parse_args()
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="provision-bench-") as tmp, Lab(opts.hosts, Path(tmp) / "lab") as lab:
        os.environ["PROVISION_SSH_CONFIG"] = str(lab.ssh_config_path)
        bench = Bench(lab, Path(tmp), opts.full)
        results = {}
        for installer in opts.installers.split(","):
            started = time.perf_counter()
            results[installer] = bench.run(installer.strip(), opts.hosts)
            print(f"{installer}: measured in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        show(results, opts.hosts, opts.full)
    return 0


if __name__ == "__main__":
    sys.exit(main())
