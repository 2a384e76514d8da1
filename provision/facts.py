"""Facts: what a host IS, read in one round trip and parsed into typed records.

A fact is a command plus a parser. All of a host's facts come from ONE command: the POSIX sh script
``provision/remote/gather_facts.sh`` sent on stdin (:func:`facts_command`). It prints sections introduced by
``=====PROVISION:<name>=====`` lines (:func:`split_sections`); each section has a pure parser (here, or in
:mod:`provision.hardware` for the GPUs, their topology, RDMA devices and NICs: re-exported here), and
:func:`parse_facts` assembles them into a :class:`HostFacts`.

Nothing here depends on ``ip`` (some GPU hosts lack it): NICs come from ``/sys/class/net`` and IPv4 addresses
from an ``ioctl`` done by the host's python3 (or ``hostname -I`` without one). A host without a GPU, or
whose ``nvidia-smi`` fails or hangs, has ``gpus == []``, ``cuda_version is None`` and ``topology == []``:
not an error.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from . import remote
from .commands import Command, quote
from .errors import HostError
from .hardware import (
    GPU,
    MAX_DEVICES,
    MAX_GPUS,
    MAX_TOPO_DEVICES,
    NIC,
    GpuLink,
    RdmaDevice,
    RdmaPort,
    parse_cuda_version,
    parse_driver_version,
    parse_gpu_csv,
    parse_ipv4,
    parse_nics,
    parse_rdma,
    parse_topo,
)
from .transport.base import host_json

if TYPE_CHECKING:
    from .inventory import Inventory
    from .state import RunOptions
    from .transport import Connection

__all__ = [  # the hardware records and parsers (provision.hardware) were here first: re-exported
    "ANSIBLE_FACT_NAMES", "ANSIBLE_SCRIPT", "GATHER_SCRIPT", "GPU", "MAX_DEVICES", "MAX_GPUS", "MAX_TOPO_DEVICES",
    "NIC", "DiskInfo", "GpuLink", "HostFacts", "OSInfo", "PythonInfo", "RdmaDevice", "RdmaPort", "facts_command",
    "gather", "gather_hosts", "parse_ansible", "parse_cuda_version", "parse_df", "parse_driver_version",
    "parse_facts", "parse_gpu_csv", "parse_ipv4", "parse_nics", "parse_os_release", "parse_pythons", "parse_rdma",
    "parse_topo", "parse_uname", "split_sections",
]  # fmt: skip

GATHER_SCRIPT = "gather_facts.sh"
ANSIBLE_SCRIPT = "ansible_facts.py"
# Ansible's fact names that remote/ansible_facts.py gives (a host may lack some: no default route, no python3);
# each is also a top-level ``ansible_<name>`` variable after a play gathered facts, as in Ansible
ANSIBLE_FACT_NAMES = frozenset({
    "all_ipv4_addresses", "architecture", "default_ipv4", "distribution", "distribution_file_variety",
    "distribution_major_version", "distribution_minor_version", "distribution_release", "distribution_version",
    "domain", "effective_group_id", "effective_user_id", "env", "fqdn", "hostname", "kernel", "kernel_version",
    "machine", "machine_id", "memfree_mb", "memtotal_mb", "nodename", "os_family", "pkg_mgr", "processor_cores",
    "processor_count", "processor_nproc", "processor_threads_per_core", "processor_vcpus", "python",
    "python_version", "real_group_id", "real_user_id", "service_mgr", "swapfree_mb", "swaptotal_mb", "system",
    "user_dir", "user_gecos", "user_gid", "user_id", "user_shell", "user_uid", "userspace_bits",
})  # fmt: skip

_SECTION_RE = re.compile(r"^=====PROVISION:([A-Za-z0-9_.-]+)=====$")
_DF_LINE_RE = re.compile(r"^(\S.*?)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+%|-)\s+(/.*)$")
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTPE]?)i?B?$", re.IGNORECASE)


@dataclass
class OSInfo:
    system: str = ""  # uname -s: Linux
    release: str = ""  # uname -r: kernel release
    machine: str = ""  # uname -m: x86_64, aarch64
    distro_id: str = ""  # os-release ID: ubuntu, debian
    distro_version: str = ""  # os-release VERSION_ID: 24.04
    pretty_name: str = ""
    hostname: str = ""


@dataclass
class PythonInfo:
    path: str
    version: str  # "3.12.3"
    venv_ok: bool  # `import venv, ensurepip` works (Debian/Ubuntu need the python3-venv package)

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])


@dataclass
class DiskInfo:
    path: str  # the directory asked about (it may not exist yet)
    total_bytes: int
    free_bytes: int  # available to unprivileged users
    mount: str = ""  # the mount point holding it


@dataclass
class HostFacts:
    os: OSInfo = field(default_factory=OSInfo)
    pythons: list[PythonInfo] = field(default_factory=list)
    disk: DiskInfo | None = None
    gpus: list[GPU] = field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None  # the highest CUDA the driver supports, "13.0"
    topology: list[GpuLink] = field(default_factory=list)
    rdma: list[RdmaDevice] = field(default_factory=list)
    nics: list[NIC] = field(default_factory=list)
    ipv4: list[str] = field(default_factory=list)  # every IPv4 address of the host, whatever its NIC
    # Ansible's fact names without the prefix (distribution, os_family, hostname, python, default_ipv4, ...)
    ansible: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (for host vars and the JSON report): provision's typed facts, and next to them
        Ansible's names (``ansible_facts.distribution``; none of them is one of provision's)."""
        data = asdict(self)
        extra = data.pop("ansible")
        return {**{k: v for k, v in extra.items() if k not in data}, **data}

    def best_python(self, min_version: tuple[int, ...] = (3, 10), need_venv: bool = True) -> PythonInfo | None:
        """The newest interpreter at least ``min_version`` (that can make venvs, unless told otherwise);
        among equal versions the first found (``python3`` comes first)."""
        fit = [p for p in self.pythons if p.version_tuple >= tuple(min_version) and (p.venv_ok or not need_venv)]
        return max(fit, key=lambda p: p.version_tuple, default=None)

    @property
    def cuda_major(self) -> int | None:
        if not self.cuda_version:
            return None
        head = self.cuda_version.split(".", 1)[0]
        return int(head) if head.isdigit() else None

    def link_kind(self, gpu_a: int, gpu_b: int) -> str | None:
        """How GPU ``gpu_a`` reaches GPU ``gpu_b`` (NV18, PIX, SYS...), None when the matrix does not say."""
        a, b = f"GPU{gpu_a}", f"GPU{gpu_b}"
        if a == b:
            return "X" if any(g.index == gpu_a for g in self.gpus) else None
        for link in self.topology:
            if {link.a, link.b} == {a, b}:
                return link.kind
        return None


# ---------------------------------------------------------------------------------------------- gathering
def facts_command(venv_parent: str) -> tuple[Command, bytes]:
    """The one command that gathers every fact, and the script to feed it on stdin (with the Ansible-names
    program in a shell variable in front of it: still one round trip)."""
    program = remote.source(ANSIBLE_SCRIPT).decode()
    script = f"PROVISION_ANSIBLE_FACTS={quote(program)}\n".encode() + remote.source(GATHER_SCRIPT)
    return Command.of("sh", "-s", "--", venv_parent), script


def split_sections(text: str) -> dict[str, str]:
    """``=====PROVISION:name=====`` delimited output → {name: body}; text before the first marker is
    dropped (login banners)."""
    sections: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        m = _SECTION_RE.match(line.rstrip("\r"))
        if m:
            if name is not None:
                sections[name] = "\n".join(lines)
            name, lines = m.group(1), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        sections[name] = "\n".join(lines)
    return sections


def parse_facts(text: str) -> HostFacts:
    """The whole output of gather_facts.sh → :class:`HostFacts`.

    Raises ValueError when the output is cut short (no ``end`` section): a host that lost its session
    half-way must not look like a host without GPUs.
    """
    s = split_sections(text)
    if "end" not in s:
        raise ValueError("facts output is incomplete (no end marker): the gather script did not finish")
    system, release, machine = parse_uname(s.get("uname", ""))
    osr = parse_os_release(s.get("os_release", ""))
    os_info = OSInfo(
        system=system,
        release=release,
        machine=machine,
        distro_id=osr.get("ID", ""),
        distro_version=osr.get("VERSION_ID", ""),
        pretty_name=osr.get("PRETTY_NAME", ""),
        hostname=s.get("hostname", "").strip(),
    )
    gpus = parse_gpu_csv(s.get("gpu_csv", ""))
    smi = s.get("nvidia_smi", "")
    addresses = parse_ipv4(s.get("ipv4", ""))
    driver = gpus[0].driver_version if gpus and gpus[0].driver_version else parse_driver_version(smi)
    return HostFacts(
        os=os_info,
        pythons=parse_pythons(s.get("pythons", "")),
        disk=parse_df(s.get("disk", ""), path=s.get("venv_parent", "").strip()),
        gpus=gpus,
        driver_version=driver,
        cuda_version=parse_cuda_version(smi),
        topology=parse_topo(s.get("topo", "")),
        rdma=parse_rdma(s.get("rdma", "")),
        nics=parse_nics(s.get("nics", ""), addresses),
        ipv4=list(dict.fromkeys(a for addrs in addresses.values() for a in addrs)),
        ansible=parse_ansible(s.get("ansible", "")),
    )


def parse_ansible(text: str) -> dict[str, Any]:
    """The ``ansible`` section: ``ansible_facts.py``'s answer, its ``facts`` an object of Ansible's fact names;
    {} when absent or not an object (a host without python3, or output that is not ours: facts are data, never
    trusted further)."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                value = host_json(line)
            except ValueError:
                return {}
            facts = value.get("facts") if isinstance(value, dict) else None
            return facts if isinstance(facts, dict) else {}
    return {}


# ---------------------------------------------------------------------------------------------- parsers
def parse_uname(text: str) -> tuple[str, str, str]:
    """``uname -srm`` → (system, release, machine); empty strings when absent."""
    words = text.split()
    if len(words) < 3:
        return ("", "", "")
    return (words[0], " ".join(words[1:-1]), words[-1])


def parse_os_release(text: str) -> dict[str, str]:
    """``/etc/os-release`` → {KEY: value}, quotes removed. Lines that are not KEY=VALUE are ignored."""
    result: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if not m:
            continue
        raw = m.group(2)
        try:
            words = shlex.split(raw)
            value = words[0] if len(words) == 1 else raw.strip("\"'")
        except ValueError:
            value = raw.strip("\"'")
        result[m.group(1)] = value
    return result


def parse_pythons(text: str) -> list[PythonInfo]:
    """``path|Python 3.12.3|1`` lines → interpreters (lines without a version are skipped)."""
    found: list[PythonInfo] = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        m = re.match(r"^Python\s+(\d+\.\d+\S*)$", parts[1].strip())
        if not parts[0] or not m:
            continue
        found.append(PythonInfo(path=parts[0], version=m.group(1), venv_ok=parts[2].strip() == "1"))
    return found


def _size_bytes(token: str, unit: int) -> int | None:
    if token.isdigit():
        return int(token) * unit
    m = _SIZE_RE.match(token)
    if not m:
        return None
    power = "KMGTPE".find(m.group(2).upper()) + 1 if m.group(2) else 0
    return int(float(m.group(1)) * 1024**power)


def parse_df(text: str, path: str = "") -> DiskInfo | None:
    """``df -Pk`` (or ``df -h``) of one directory → DiskInfo; None when there is no data line.

    ``path`` is the directory that was asked about (defaults to the mount point)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("Filesystem"):
        return None
    blocks = re.search(r"\b(1024|1K|512)-blocks\b", lines[0])
    unit = {"1024": 1024, "1K": 1024, "512": 512}[blocks.group(1)] if blocks else 1  # else: df -h sizes
    for line in reversed(lines[1:]):
        m = _DF_LINE_RE.match(line.strip())
        if not m:
            continue
        total, avail = _size_bytes(m.group(2), unit), _size_bytes(m.group(4), unit)
        if total is None or avail is None:
            continue
        mount = m.group(6)
        return DiskInfo(path=path or mount, total_bytes=total, free_bytes=avail, mount=mount)
    return None


# ------------------------------------------------------------------------------------------------ gathering
def gather(conn: Connection, venv_path: str, timeout: float = 60.0) -> dict[str, Any]:
    """One round trip: run the gather script on the host and parse it into a JSON-able dict."""
    parent = posixpath.dirname(venv_path.rstrip("/")) or venv_path
    command, script = facts_command(parent)
    result = conn.run(command, timeout=timeout, stdin=script)
    if result.rc != 0:
        raise HostError(conn.name, f"fact gathering failed (rc={result.rc}): {result.tail()}")
    try:
        return parse_facts(result.stdout).to_dict()
    except ValueError as exc:  # what a host returns is not trusted: bad output fails that host, nothing more
        raise HostError(conn.name, f"fact gathering: {exc}") from None


def gather_hosts(inventory: Inventory, options: RunOptions) -> dict[str, dict[str, Any] | HostError]:
    """Gather the facts of every host selected by ``options.limit`` in parallel (``provision facts``): name →
    facts, or the :class:`HostError` (an :class:`~provision.errors.UnreachableError` when unreachable)."""
    from .transport import open_connection

    def one(host: Any) -> tuple[str, dict[str, Any] | HostError]:
        conn = open_connection(host.name, host.vars, options.connect)
        try:
            return host.name, gather(conn, str(host.vars.get("venv_path", options.defaults.get("venv_path", "~"))))
        except HostError as exc:
            return host.name, exc
        finally:
            conn.close()

    with ThreadPoolExecutor(max_workers=options.forks) as pool:
        return dict(pool.map(one, inventory.select(options.limit or "all")))
