"""Facts parsers against outputs recorded on a real 2xH200 host (tests/fixtures/h200x2), on a host without
GPU (tests/fixtures/nogpu, made by gather_facts.sh on a Debian box), and the gather script run for real."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from provision import remote
from provision.facts import (
    GATHER_SCRIPT,
    GpuLink,
    HostFacts,
    PythonInfo,
    RdmaPort,
    facts_command,
    parse_cuda_version,
    parse_df,
    parse_driver_version,
    parse_facts,
    parse_gpu_csv,
    parse_ipv4,
    parse_nics,
    parse_os_release,
    parse_pythons,
    parse_rdma,
    parse_topo,
    parse_uname,
    split_sections,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
H200 = FIXTURES / "h200x2"
NOGPU = FIXTURES / "nogpu" / "gather.txt"
SCRIPT = remote.path(GATHER_SCRIPT)


def fixture(name: str) -> str:
    return (H200 / name).read_text()


def rdma_and_nics() -> tuple[str, str]:
    """The recording is `ls -la /sys/class/infiniband` followed by `ls /sys/class/net`."""
    lines = fixture("rdma-and-nics.txt").splitlines()
    ls_la = [ln for ln in lines if ln.startswith("total ") or ln.startswith("d")]
    names = [ln for ln in lines if ln not in ls_la]
    return "\n".join(ls_la), "\n".join(names)


def section(name: str, body: str) -> str:
    return f"=====PROVISION:{name}=====\n{body.rstrip()}\n" if body else f"=====PROVISION:{name}=====\n"


def h200_sectioned() -> str:
    """What gather_facts.sh would print on the recorded host, assembled from the recordings."""
    host = fixture("host.txt").splitlines()
    os_release = "\n".join(ln for ln in host if "=" in ln)
    uname_a = next(ln for ln in host if ln.startswith("Linux ")).split()
    df_h = "\n".join(host[host.index(next(ln for ln in host if ln.startswith("Filesystem"))) :])
    rdma_ls, nic_names = rdma_and_nics()
    return "".join(
        [
            "Welcome to Ubuntu (motd noise before the first marker)\n",
            section("uname", f"{uname_a[0]} {uname_a[2]} {uname_a[-2]}"),
            section("os_release", os_release),
            section("hostname", uname_a[1]),
            section("pythons", "/usr/bin/python3|Python 3.12.3|1"),
            section("venv_parent", "/opt/sglang"),
            section("disk", df_h),
            section("gpu_csv", fixture("nvidia-smi-query-gpu.csv")),
            section("nvidia_smi", fixture("nvidia-smi.txt")),
            section("topo", fixture("nvidia-smi-topo-m.txt")),
            section("rdma", rdma_ls),
            section("nics", nic_names),
            section("ipv4", ""),
            section("end", ""),
        ]
    )


# ------------------------------------------------------------------------------------------ sections
def test_split_sections_drops_preamble_and_keeps_empty_sections() -> None:
    text = "banner\n=====PROVISION:a=====\nx\ny\n=====PROVISION:b=====\n=====PROVISION:c=====\nz\n"
    assert split_sections(text) == {"a": "x\ny", "b": "", "c": "z"}
    assert split_sections("") == {}
    assert split_sections("no markers at all\n") == {}


# ------------------------------------------------------------------------------------------ os
def test_parse_os_release_recorded_ubuntu() -> None:
    osr = parse_os_release(fixture("host.txt"))  # other lines of the recording are ignored
    assert osr["ID"] == "ubuntu"
    assert osr["ID_LIKE"] == "debian"
    assert osr["VERSION_ID"] == "24.04"
    assert osr["PRETTY_NAME"] == "Ubuntu 24.04.3 LTS"
    assert osr["VERSION"] == "24.04.3 LTS (Noble Numbat)"
    assert osr["UBUNTU_CODENAME"] == "noble"


def test_parse_os_release_empty_and_broken_quotes() -> None:
    assert parse_os_release("") == {}
    assert parse_os_release('NAME="unterminated\n') == {"NAME": "unterminated"}


def test_parse_uname() -> None:
    assert parse_uname("Linux 6.18.44-fc-v657-gpu x86_64\n") == ("Linux", "6.18.44-fc-v657-gpu", "x86_64")
    assert parse_uname("") == ("", "", "")


# ------------------------------------------------------------------------------------------ python
def test_parse_pythons() -> None:
    text = (
        "/usr/bin/python3|Python 3.12.3|1\n"
        "/usr/bin/python3.10|Python 3.10.12|0\n"
        "/root/.pyenv/shims/python3.13|pyenv: python3.13: command not found|0\n"
        "garbage\n"
    )
    assert parse_pythons(text) == [
        PythonInfo("/usr/bin/python3", "3.12.3", True),
        PythonInfo("/usr/bin/python3.10", "3.10.12", False),
    ]
    assert parse_pythons("") == []


def test_best_python() -> None:
    facts = HostFacts(
        pythons=[
            PythonInfo("/usr/bin/python3", "3.10.12", True),
            PythonInfo("/usr/bin/python3.12", "3.12.3", False),
            PythonInfo("/usr/bin/python3.11", "3.11.9", True),
        ]
    )
    best = facts.best_python()
    assert best is not None and best.path == "/usr/bin/python3.11"
    any_py = facts.best_python(need_venv=False)
    assert any_py is not None and any_py.version == "3.12.3"
    assert facts.best_python((3, 13)) is None
    assert HostFacts().best_python() is None


# ------------------------------------------------------------------------------------------ disk
def test_parse_df_recorded_human_readable() -> None:
    host = fixture("host.txt")
    disk = parse_df(host[host.index("Filesystem") :], path="/opt/sglang")
    assert disk is not None
    assert disk.path == "/opt/sglang" and disk.mount == "/"
    assert disk.total_bytes == 252 * 1024**3
    assert disk.free_bytes == 128 * 1024**3


def test_parse_df_posix_kilobytes() -> None:
    text = (
        "Filesystem     1024-blocks     Used Available Capacity Mounted on\n"
        "/dev/vda         264212084 23106956  83283956      22% /\n"
    )
    disk = parse_df(text)
    assert disk is not None
    assert (disk.path, disk.total_bytes, disk.free_bytes) == ("/", 264212084 * 1024, 83283956 * 1024)
    assert parse_df("") is None
    assert parse_df("df: /nope: No such file or directory\n") is None


# ------------------------------------------------------------------------------------------ GPUs
def test_parse_gpu_csv_recorded() -> None:
    gpus = parse_gpu_csv(fixture("nvidia-smi-query-gpu.csv"))
    assert [g.index for g in gpus] == [0, 1]
    assert {g.name for g in gpus} == {"NVIDIA H200"}
    assert {g.memory_mib for g in gpus} == {143771}
    assert {g.driver_version for g in gpus} == {"580.159.04"}
    assert [g.pci_bus_id for g in gpus] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert gpus[0].uuid == "GPU-05f401b7-026f-ec7c-9d83-6a29e78bc538"
    assert gpus[1].uuid == "GPU-7ba957b0-7996-e20a-358d-a29b60d79297"
    assert {g.compute_capability for g in gpus} == {"9.0"}


def test_parse_gpu_csv_agrees_with_recorded_xml() -> None:
    root = ET.fromstring(fixture("nvidia-smi-q.xml"))
    gpus = parse_gpu_csv(fixture("nvidia-smi-query-gpu.csv"))
    assert [g.uuid for g in gpus] == [e.findtext("uuid") for e in root.iter("gpu")]
    assert [g.pci_bus_id for g in gpus] == [e.get("id") for e in root.iter("gpu")]
    assert gpus[0].driver_version == root.findtext("driver_version")
    assert parse_cuda_version(fixture("nvidia-smi.txt")) == root.findtext("cuda_version")


def test_parse_gpu_csv_absent_failed_or_old_driver() -> None:
    assert parse_gpu_csv("") == []
    failed = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    assert parse_gpu_csv(failed) == []
    old = "0, Tesla T4, GPU-abc, [N/A], 470.82.01, 00000000:00:1E.0\n"
    (gpu,) = parse_gpu_csv(old)
    assert (gpu.name, gpu.memory_mib, gpu.compute_capability) == ("Tesla T4", None, None)


def test_parse_cuda_and_driver_version_recorded() -> None:
    smi = fixture("nvidia-smi.txt")
    assert parse_cuda_version(smi) == "13.0"
    assert parse_driver_version(smi) == "580.159.04"
    assert parse_cuda_version("") is None
    assert parse_driver_version("sh: nvidia-smi: not found") is None


# ------------------------------------------------------------------------------------------ topology
def test_parse_topo_recorded_nvlink() -> None:
    assert parse_topo(fixture("nvidia-smi-topo-m.txt")) == [GpuLink("GPU0", "GPU1", "NV18")]
    assert parse_topo("") == []


TOPO_WITH_NICS = (
    "\t\x1b[4mGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\tPIX\tSYS\t0-47\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tSYS\tPXB\t48-95\t1\t\tN/A\n"
    "NIC0\tPIX\tSYS\t X \tSYS\t\t\t\t\n"
    "NIC1\tSYS\tPXB\tSYS\t X \t\t\t\t\n"
    "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n"
)


def test_parse_topo_with_nics_and_legend() -> None:
    assert parse_topo(TOPO_WITH_NICS) == [
        GpuLink("GPU0", "GPU1", "NV18"),
        GpuLink("GPU0", "mlx5_0", "PIX"),
        GpuLink("GPU0", "mlx5_1", "SYS"),
        GpuLink("GPU1", "mlx5_0", "SYS"),
        GpuLink("GPU1", "mlx5_1", "PXB"),
        GpuLink("mlx5_0", "mlx5_1", "SYS"),
    ]


def test_parse_topo_space_separated_old_format() -> None:
    text = (
        "        GPU0    GPU1    mlx5_0  CPU Affinity\n"
        "GPU0     X      PHB     NODE    0-11\n"
        "GPU1    PHB      X      NODE    0-11\n"
        "mlx5_0  NODE    NODE     X \n"
    )
    assert parse_topo(text) == [
        GpuLink("GPU0", "GPU1", "PHB"),
        GpuLink("GPU0", "mlx5_0", "NODE"),
        GpuLink("GPU1", "mlx5_0", "NODE"),
    ]


def test_link_kind_and_cuda_major() -> None:
    facts = parse_facts(h200_sectioned())
    assert facts.link_kind(0, 1) == "NV18"
    assert facts.link_kind(1, 0) == "NV18"
    assert facts.link_kind(0, 0) == "X"
    assert facts.link_kind(0, 7) is None
    assert facts.cuda_major == 13
    assert HostFacts().cuda_major is None
    assert HostFacts().link_kind(0, 0) is None


# ------------------------------------------------------------------------------------------ RDMA / NICs
def test_parse_rdma_recorded_empty_directory() -> None:
    ls_la, _ = rdma_and_nics()
    assert "total 0" in ls_la  # the directory exists but holds no device
    assert parse_rdma(ls_la) == []
    assert parse_rdma("") == []


def test_parse_rdma_ports() -> None:
    text = (
        "mlx5_0|1|4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand\n"
        "mlx5_1|1|1: DOWN|10 Gb/sec (1X QDR)|Ethernet\n"
        "mlx5_1|2|4: ACTIVE|100 Gb/sec (2X HDR)|Ethernet\n"
        "bnxt_re0\n"
    )
    devs = {d.name: d for d in parse_rdma(text)}
    assert devs["mlx5_0"].ports == [RdmaPort(1, "ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")]
    assert [p.state for p in devs["mlx5_1"].ports] == ["DOWN", "ACTIVE"]
    assert devs["bnxt_re0"].ports == []


def test_parse_nics_recorded_names() -> None:
    _, names = rdma_and_nics()
    nics = parse_nics(names)
    assert [n.name for n in nics] == ["eth0", "ifb0", "ifb1", "lo"]
    assert all(n.mac is None and n.ipv4 == [] for n in nics)


def test_parse_nics_with_sysfs_values_and_addresses() -> None:
    text = "eth0|up|9000|02:fc:00:00:00:01|100000\nlo|unknown|65536|00:00:00:00:00:00|\nib0|down|2044||-1\n"
    addrs = parse_ipv4("lo|127.0.0.1\neth0|10.0.0.5\neth0|10.0.0.6\n|192.0.2.9\nbad|fd00::2\n")
    assert addrs == {"lo": ["127.0.0.1"], "eth0": ["10.0.0.5", "10.0.0.6"], "": ["192.0.2.9"]}
    eth0, lo, ib0 = parse_nics(text, addrs)
    assert (eth0.state, eth0.mtu, eth0.mac, eth0.speed_mbps) == ("up", 9000, "02:fc:00:00:00:01", 100000)
    assert eth0.ipv4 == ["10.0.0.5", "10.0.0.6"]
    assert (lo.speed_mbps, lo.ipv4) == (None, ["127.0.0.1"])
    assert (ib0.mac, ib0.speed_mbps) == (None, None)
    assert parse_nics("") == []


# ------------------------------------------------------------------------------------------ whole
def test_parse_facts_recorded_h200() -> None:
    facts = parse_facts(h200_sectioned())
    assert facts.os.system == "Linux" and facts.os.machine == "x86_64"
    assert facts.os.release == "6.18.44-fc-v657-gpu"
    assert (facts.os.distro_id, facts.os.distro_version) == ("ubuntu", "24.04")
    assert facts.os.hostname == "vm"
    best = facts.best_python()
    assert best is not None and best.version == "3.12.3"
    assert facts.disk is not None and facts.disk.path == "/opt/sglang"
    assert facts.disk.free_bytes == 128 * 1024**3
    assert len(facts.gpus) == 2 and facts.gpus[1].name == "NVIDIA H200"
    assert facts.driver_version == "580.159.04"
    assert facts.cuda_version == "13.0"
    assert facts.topology == [GpuLink("GPU0", "GPU1", "NV18")]
    assert facts.rdma == []
    assert [n.name for n in facts.nics] == ["eth0", "ifb0", "ifb1", "lo"]
    assert facts.ipv4 == []
    data = json.loads(json.dumps(facts.to_dict()))
    assert data["gpus"][0]["memory_mib"] == 143771
    assert data["topology"] == [{"a": "GPU0", "b": "GPU1", "kind": "NV18"}]


def test_parse_facts_without_gpu_sections() -> None:
    text = section("uname", "Linux 6.1.0 aarch64") + section("gpu_csv", "") + section("end", "")
    facts = parse_facts(text)
    assert (facts.gpus, facts.cuda_version, facts.topology, facts.driver_version) == ([], None, [], None)
    assert facts.disk is None and facts.os.machine == "aarch64"


def test_parse_facts_refuses_truncated_output() -> None:
    with pytest.raises(ValueError, match="incomplete"):
        parse_facts(h200_sectioned().split("=====PROVISION:nics")[0])
    with pytest.raises(ValueError):
        parse_facts("")


def check_nogpu_debian_like(facts: HostFacts) -> None:
    assert facts.os.system == "Linux"
    assert facts.os.hostname
    assert facts.best_python((3, 10), need_venv=False) is not None
    assert facts.disk is not None and facts.disk.free_bytes > 0 and facts.disk.total_bytes > 0
    lo = next(n for n in facts.nics if n.name == "lo")
    assert "127.0.0.1" in lo.ipv4 and "127.0.0.1" in facts.ipv4
    assert lo.mtu and lo.mtu > 0


def test_parse_facts_recorded_nogpu() -> None:
    facts = parse_facts(NOGPU.read_text())
    check_nogpu_debian_like(facts)
    assert (facts.os.distro_id, facts.os.distro_version) == ("debian", "12")
    assert (facts.gpus, facts.cuda_version, facts.topology, facts.rdma) == ([], None, [], [])
    assert facts.disk is not None and facts.disk.path == "/tmp"
    assert [n.name for n in facts.nics] == ["eth0", "ifb0", "ifb1", "lo"]
    eth0 = facts.nics[0]
    assert (eth0.state, eth0.mtu, eth0.speed_mbps, eth0.ipv4) == ("up", 1400, None, ["192.0.2.2"])
    assert [p.version for p in facts.pythons] == ["3.11.7", "3.11.7", "3.11.2"]


# ------------------------------------------------------------------------------------------ the script
def test_facts_command() -> None:
    cmd, script = facts_command("/opt/my venvs")
    assert cmd.argv == ("sh", "-s", "--", "/opt/my venvs")
    assert cmd.render().stdin.endswith(b"\nexec sh -s -- '/opt/my venvs'\n")
    assert script.endswith(SCRIPT.read_bytes()) and b"=====PROVISION:" in script
    first = script[: len(script) - len(SCRIPT.read_bytes())].decode()
    assert first.startswith("PROVISION_ANSIBLE_FACTS='") and shlex.split(first.split("=", 1)[1]) == [
        remote.source("ansible_facts.py").decode()
    ]  # the Ansible-names program, one quoted shell word in front of the script: still one round trip


def run_script(arg: str, shell: str = "sh", path_prefix: Path | None = None) -> str:
    env = dict(os.environ)
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [shell, "-s", "--", arg], input=SCRIPT.read_bytes(), capture_output=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


needs_sh = pytest.mark.skipif(not Path("/sys/class/net").is_dir(), reason="needs a Linux host")


@needs_sh
@pytest.mark.parametrize("shell", [s for s in ("sh", "dash", "bash") if shutil.which(s)])
def test_gather_script_runs_here(shell: str) -> None:
    facts = parse_facts(run_script("/tmp", shell))
    check_nogpu_debian_like(facts)
    osr = parse_os_release(Path("/etc/os-release").read_text())
    assert facts.os.distro_id == osr["ID"]
    assert "debian" in (osr["ID"], *osr.get("ID_LIKE", "").split())
    if not shutil.which("nvidia-smi"):
        assert (facts.gpus, facts.cuda_version, facts.topology) == ([], None, [])
    assert facts.disk is not None and facts.disk.path == "/tmp"


@needs_sh
def test_gather_script_missing_dir_and_home() -> None:
    facts = parse_facts(run_script("/tmp/provision-does-not-exist/a/b"))
    assert facts.disk is not None and facts.disk.free_bytes > 0
    assert facts.disk.path == "/tmp/provision-does-not-exist/a/b"
    home = parse_facts(run_script("~/venvs"))
    assert home.disk is not None and home.disk.path == f"{os.environ['HOME']}/venvs"


FAKE_SMI = """#!/bin/sh
cat >/dev/null  # would swallow the rest of the gather script if it were given the script's stdin
case "$*" in
  *compute_cap*) [ -n "$OLD" ] && { echo 'Field "compute_cap" is not a valid field to query.'; exit 2; }
                 cat "$FIX/nvidia-smi-query-gpu.csv" ;;
  --query-gpu=*) cut -d, -f1-6 "$FIX/nvidia-smi-query-gpu.csv" ;;
  "topo -m") cat "$FIX/nvidia-smi-topo-m.txt" ;;
  "") cat "$FIX/nvidia-smi.txt" ;;
esac
[ -n "$BROKEN" ] && { echo "NVIDIA-SMI has failed because it couldn't communicate with the driver"; exit 9; }
exit 0
"""


@needs_sh
@pytest.mark.parametrize("mode", ["ok", "old", "broken"])
def test_gather_script_with_fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("FIX", str(H200))
    if mode != "ok":
        monkeypatch.setenv(mode.upper(), "1")
    facts = parse_facts(run_script("/tmp", path_prefix=tmp_path))
    assert facts.nics  # the sections after nvidia-smi are there: it did not eat the script
    if mode == "broken":
        assert (facts.gpus, facts.cuda_version, facts.topology) == ([], None, [])
        return
    assert [g.name for g in facts.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert facts.gpus[0].compute_capability == (None if mode == "old" else "9.0")
    assert (facts.driver_version, facts.cuda_version, facts.cuda_major) == ("580.159.04", "13.0", 13)
    assert facts.link_kind(0, 1) == "NV18"


# ---- recorded by scripts/gpu_validation.sh on the validation machines (docs/gpu-validation.md)
@pytest.mark.parametrize(
    ("folder", "gpus", "links"),
    [("h200x2-validation", 2, [("GPU0", "GPU1", "NV18")]), ("h200x1", 1, [])],
)
def test_parsers_on_the_validation_machines(folder: str, gpus: int, links: list[tuple[str, str, str]]) -> None:
    base = FIXTURES / folder
    parsed = parse_gpu_csv((base / "nvidia-smi-query-gpu.csv").read_text())
    assert [g.index for g in parsed] == list(range(gpus))
    assert {g.name for g in parsed} == {"NVIDIA H200"}
    assert {g.memory_mib for g in parsed} == {143771}
    assert {g.driver_version for g in parsed} == {"580.159.04"}
    assert {g.compute_capability for g in parsed} == {"9.0"}
    assert parse_cuda_version((base / "nvidia-smi.txt").read_text()) == "13.0"
    assert [(link.a, link.b, link.kind) for link in parse_topo((base / "nvidia-smi-topo-m.txt").read_text())] == links
