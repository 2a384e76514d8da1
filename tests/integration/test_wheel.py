"""A built wheel, installed non-editable, carries the shipped playbooks, templates and defaults and runs
``provision pd``; from an empty directory it finds the shipped playbooks by name and works with an inventory of
the user's own that has no group_vars/ (issue 10).

The checkout's ``playbooks`` and ``templates`` are links into ``provision/data``: the same files, one copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_checkout_links_are_the_package_data() -> None:
    for name in ("playbooks", "templates"):
        link = REPO / name
        assert link.is_symlink(), f"{name} should be a link into provision/data"
        assert link.resolve() == (REPO / "provision" / "data" / name).resolve()


def install_wheel(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """Build the wheel from a clean copy of the checkout and install it non-editable into a fresh venv:
    (wheel, venv, its python, its provision)."""
    # built from a clean copy: setuptools reuses build/ and never removes a stale module from it
    src = tmp_path / "src"
    junk = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "provision", src / "provision", ignore=junk)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    wheels = tmp_path / "wheels"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src)], src)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("provision-*.whl")

    # the dependencies (fabric, jinja2, click) come from the site-packages this test runs with, named in a .pth
    # file: --system-site-packages would give the BASE interpreter's (a distribution's, when the suite runs in a
    # venv), which lacks them. A path in a .pth file is not a site dir: the editable install's hook there is
    # not run, so provision is the wheel's alone.
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    assert made.returncode == 0, made.stderr
    python, provision = venv / "bin" / "python", venv / "bin" / "provision"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).stdout.strip()
    )
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "outer-site-packages.pth").write_text("".join(f"{p}\n" for p in ours))
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--force-reinstall"]
    installed = _run([*pip, str(wheel)], tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return wheel, venv, python, provision


def test_a_non_editable_wheel_finds_its_playbooks(tmp_path: Path) -> None:
    wheel, venv, python, provision = install_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"provision/data/playbooks/pd-up.yml", "provision/data/templates/pd.env.j2"} <= names
    assert {"provision/data/defaults.yml", "provision/data/inventories/two-host.yml"} <= names
    assert "provision/data/playbooks/examples/templates/motd.j2" in names  # nested folders too
    assert "provision/data/roles/provision.sglang_pd/tasks/main.yml" in names  # the roles, dotted names too

    # nothing of the checkout: no PYTHONPATH, no PROVISION_PLAYBOOKS, run from elsewhere
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PROVISION_PLAYBOOKS")}
    where = _run([str(python), "-c", "import provision.data as d; print(d.playbook_path('pd-up.yml'))"], tmp_path, env)
    assert where.returncode == 0, where.stderr
    pd_up = Path(where.stdout.strip())
    assert pd_up.is_relative_to(venv) and "site-packages" in pd_up.parts, pd_up
    assert (pd_up.parent.parent / "templates" / "pd.env.j2").is_file()

    helped = _run([str(provision), "pd", "up", "--help"], tmp_path, env)
    assert helped.returncode == 0, helped.stderr
    assert "prefill" in helped.stdout

    shutil.copytree(REPO / "inventory", tmp_path / "inventory")  # the README's local inventory, group_vars too
    site = str(pd_up.parent / "site.yml")
    listed = _run([str(provision), "run", site, "--list-tasks", "-i", "inventory/local.yml"], tmp_path, env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "pd-up.yml" in listed.stdout and str(venv) in listed.stdout
    assert "A real generation through the router" in listed.stdout  # the playbooks' roles, from the wheel

    # a new user: an empty directory, an inventory elsewhere with two roles and no group_vars/ (issue 10)
    empty, fleet = tmp_path / "empty", tmp_path / "fleet"
    empty.mkdir()
    fleet.mkdir()
    (fleet / "gpu.yml").write_text(
        "all:\n  vars: {sglang_device: cpu, ansible_connection: local}\n  children:\n"
        "    prefill: {hosts: {p1: {ansible_host: 10.0.0.1}}}\n    decode: {hosts: {d1: {ansible_host: 10.0.0.2}}}\n"
    )
    shown = _run([str(provision), "playbooks"], empty, env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("bootstrap.yml") and "\nsite.yml " in shown.stdout, shown.stdout
    site_run = _run([str(provision), "run", "site.yml", "--list-tasks", "-i", str(fleet / "gpu.yml")], empty, env)
    assert site_run.returncode == 0, site_run.stdout + site_run.stderr
    assert f"playbook: the shipped site.yml ({pd_up.parent / 'site.yml'})" in site_run.stdout
    assert "pd-up.yml" in site_run.stdout
    # the user's own playbook lists provision's roles by name: found on the roles path, from the wheel
    (fleet / "mine.yml").write_text("- hosts: all\n  roles: [provision.bootstrap, provision.nixl_smoke]\n")
    mine = _run([str(provision), "run", str(fleet / "mine.yml"), "--list-tasks", "-i", str(fleet / "gpu.yml")],
                empty, env)  # fmt: skip
    assert mine.returncode == 0, mine.stdout + mine.stderr
    assert "Python 3.10+ with venv/ensurepip\n    NIXL loads its plugins" in mine.stdout, mine.stdout
    host = _run([str(provision), "inventory", "-i", str(fleet / "gpu.yml"), "--host", "p1"], empty, env)
    assert host.returncode == 0, host.stderr
    doc = json.loads(host.stdout)
    assert doc["venv_path"] == "~/.provision/venv" and doc["_sources"]["venv_path"] == "default"
    assert doc["sglang_device"] == "cpu" and doc["_sources"]["sglang_device"].startswith("inventory ")
    assert sorted(os.listdir(empty)) == []  # nothing written where it ran
    starter = tmp_path / "starter"
    made = _run([str(provision), "init", str(starter), "--layout", "two-host"], empty, env)
    assert made.returncode == 0, made.stderr
    starter_run = _run(
        [str(provision), "run", "site.yml", "--list-tasks", "-i", str(starter / "inventory.yml")], empty, env
    )
    assert starter_run.returncode == 0, starter_run.stdout + starter_run.stderr


def test_the_wheel_runs_smoke_and_pd_status_on_lab_hosts_from_an_empty_directory(
    lab: Any, sglang_stack: Any, tmp_path: Path
) -> None:
    """Issue 10's new user, from the wheel: an inventory of their own with two roles (no router group, no
    group_vars/), an empty working directory, the shipped playbooks by name, real sshd hosts. The NIXL gate
    runs on the session's stack venv (lab host 0, named twice: one inventory host per server)."""
    _, _, _, provision = install_wheel(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PROVISION_PLAYBOOKS")}
    env.update(lab.ssh_env())
    empty, fleet = tmp_path / "empty", tmp_path / "fleet"
    empty.mkdir()
    fleet.mkdir()
    name = sglang_stack.name
    one = {"venv_path": sglang_stack.venv, "sglang_device": "cpu"}
    inv = lab.write_inventory(fleet / "gpu.yml", names=[name], extra_host_vars={name: one}, groups={"prefill": [name]})
    doc = yaml.safe_load(inv.read_text())
    prefill_vars = doc["all"]["children"]["prefill"]["hosts"][name]
    doc["all"]["children"]["decode"] = {"hosts": {f"{name}-decode": dict(prefill_vars)}}
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))

    for attempt in (1, 2):  # twice: the second run changes nothing
        smoke = _run([str(provision), "run", "smoke.yml", "-i", str(inv), "--json"], empty, env)
        assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
        assert "playbook: the shipped smoke.yml" in smoke.stderr
        stats = json.loads(smoke.stdout)["stats"]
        assert set(stats) == {name, f"{name}-decode"} and all(s["failed"] == 0 for s in stats.values()), stats
        if attempt == 2:
            assert all(s["changed"] == 0 for s in stats.values()), stats
    status = _run([str(provision), "pd", "status", "-i", str(inv), "--json"], empty, env)
    assert status.returncode == 2, status.stdout + status.stderr  # reachable, nothing started
    procs = json.loads(status.stdout)["procs"]
    assert sorted(p["role"] for p in procs) == ["decode", "prefill", "router"]  # the router: the first prefill host
    assert not any(p.get("unreachable") for p in procs), procs
    assert sorted(os.listdir(empty)) == []
