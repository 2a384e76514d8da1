"""Ansible's common fact names, computed on the host (stdlib only; Python 3.6+).

Run by ``gather_facts.sh`` (in the same single round trip as every other fact) with the host's first python3,
as ``python3 -c PROGRAM gather`` in the host library's envelope (``hostlib.serve``); answers ``{"ok": true,
"facts": {...}}``: the keys of Ansible's ``setup`` module WITHOUT the ``ansible_`` prefix, with Ansible's
values and formats (``distribution``, ``os_family``, ``hostname``, ``python``, ``user_id``, ``default_ipv4``,
``processor_vcpus``, ``memtotal_mb``, ``pkg_mgr``, ...). A key it cannot tell is left out, never guessed.
"""

import fcntl
import os
import platform
import pwd
import socket
import struct
import sys

import hostlib

# /etc/os-release ID -> Ansible's distribution name; name -> os_family
NAMES = {
    "debian": "Debian", "ubuntu": "Ubuntu", "raspbian": "Raspbian", "linuxmint": "Linux Mint", "pop": "Pop!_OS",
    "kali": "Kali", "devuan": "Devuan", "rhel": "RedHat", "centos": "CentOS", "rocky": "Rocky",
    "almalinux": "AlmaLinux", "fedora": "Fedora", "amzn": "Amazon", "ol": "OracleLinux", "sles": "SLES",
    "sled": "SLED", "opensuse-leap": "openSUSE Leap", "opensuse-tumbleweed": "openSUSE Tumbleweed",
    "arch": "Archlinux", "manjaro": "Manjaro", "alpine": "Alpine", "gentoo": "Gentoo",
}  # fmt: skip
FAMILIES = {
    "Debian": ("Debian", "Ubuntu", "Raspbian", "Linux Mint", "Pop!_OS", "Kali", "Devuan"),
    "RedHat": ("RedHat", "CentOS", "Rocky", "AlmaLinux", "Fedora", "Amazon", "OracleLinux"),
    "Suse": ("SLES", "SLED", "openSUSE Leap", "openSUSE Tumbleweed"),
    "Archlinux": ("Archlinux", "Manjaro"),
    "Alpine": ("Alpine",),
    "Gentoo": ("Gentoo",),
}
PKG_MGRS = (("apt-get", "apt"), ("dnf5", "dnf5"), ("dnf", "dnf"), ("yum", "yum"), ("zypper", "zypper"),
            ("apk", "apk"), ("pacman", "pacman"), ("emerge", "portage"))  # fmt: skip


def _read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def _os_release():
    text = _read("/etc/os-release") or _read("/usr/lib/os-release") or ""
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip().strip("\"'")
    return out


def distribution(f):
    osr = _os_release()
    name = NAMES.get(osr.get("ID", "").lower(), osr.get("NAME") or platform.system())
    version = osr.get("VERSION_ID", "")
    if name == "Debian":
        full = (_read("/etc/debian_version") or "").strip()
        if full[:1].isdigit():
            version = full
    f["distribution"] = name
    f["distribution_version"] = version
    f["distribution_major_version"] = version.split(".")[0] if version else ""
    if "." in version:
        f["distribution_minor_version"] = version.split(".")[1]
    release = osr.get("VERSION_CODENAME") or osr.get("UBUNTU_CODENAME")
    if release:
        f["distribution_release"] = release
    family = next((fam for fam, names in FAMILIES.items() if name in names), name)
    f["os_family"] = family
    if family in ("Debian", "RedHat"):
        f["distribution_file_variety"] = family


def system(f):
    u = platform.uname()
    f["system"], f["kernel"], f["kernel_version"], f["machine"] = u[0], u[2], u[3], u[4]
    f["architecture"] = {"i686": "i386", "i586": "i386", "armv7l": "armv7l"}.get(u[4], u[4])
    f["userspace_bits"] = str(struct.calcsize("P") * 8)
    node = platform.node()
    f["nodename"] = node
    f["hostname"] = node.split(".")[0]
    fqdn = socket.getfqdn()
    f["fqdn"] = fqdn
    f["domain"] = ".".join(fqdn.split(".")[1:])
    machine_id = (_read("/etc/machine-id") or "").strip()
    if machine_id:
        f["machine_id"] = machine_id


def python(f):
    v = sys.version_info
    try:
        import ssl  # noqa: F401

        has_ssl = True
    except ImportError:
        has_ssl = False
    f["python_version"] = "%d.%d.%d" % (v[0], v[1], v[2])
    f["python"] = {
        "executable": sys.executable,
        "has_sslcontext": has_ssl,
        "type": platform.python_implementation().lower(),
        "version": {"major": v[0], "minor": v[1], "micro": v[2], "releaselevel": v[3], "serial": v[4]},
        "version_info": [v[0], v[1], v[2], v[3], v[4]],
    }


def user(f):
    entry = pwd.getpwuid(os.getuid())
    f["user_id"] = entry.pw_name
    f["user_uid"], f["user_gid"] = entry.pw_uid, entry.pw_gid
    f["user_dir"], f["user_shell"], f["user_gecos"] = entry.pw_dir, entry.pw_shell, entry.pw_gecos
    f["effective_user_id"], f["effective_group_id"] = os.geteuid(), os.getegid()
    f["real_user_id"], f["real_group_id"] = os.getuid(), os.getgid()
    f["env"] = dict(os.environ)


def hardware(f):
    text = _read("/proc/cpuinfo") or ""
    vcpus = 0
    sockets = {}  # type: dict[str, int]
    physical = None
    siblings = cores = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            vcpus += 1
        elif key == "physical id":
            physical = value
            sockets.setdefault(value, 1)
        elif key == "cpu cores":
            cores = int(value)
            if physical is not None:
                sockets[physical] = cores
        elif key == "siblings":
            siblings = int(value)
    if vcpus:
        if sockets:
            f["processor_count"] = len(sockets)
            f["processor_cores"] = cores or 1
            f["processor_threads_per_core"] = (siblings // cores) if siblings and cores else 1
        else:
            f["processor_count"], f["processor_cores"], f["processor_threads_per_core"] = vcpus, 1, 1
        f["processor_vcpus"] = f["processor_threads_per_core"] * f["processor_cores"] * f["processor_count"]
    try:
        f["processor_nproc"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    mem = {}  # type: dict[str, int]
    for line in (_read("/proc/meminfo") or "").splitlines():
        key, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            mem[key.strip()] = int(value.split()[0]) // 1024
    for key, name in (("MemTotal", "memtotal_mb"), ("MemFree", "memfree_mb"), ("SwapTotal", "swaptotal_mb"),
                      ("SwapFree", "swapfree_mb")):  # fmt: skip
        if key in mem:
            f[name] = mem[key]


def _ioctl_addr(sock, request, name):
    try:
        raw = fcntl.ioctl(sock.fileno(), request, struct.pack("256s", name.encode()[:15]))
        return socket.inet_ntoa(raw[20:24])
    except OSError:
        return None


def network(f):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    addresses = []
    for _, name in socket.if_nameindex():
        address = _ioctl_addr(sock, 0x8915, name)  # SIOCGIFADDR
        if address and not address.startswith("127."):
            addresses.append(address)
    f["all_ipv4_addresses"] = addresses
    route = None
    for line in (_read("/proc/net/route") or "").splitlines()[1:]:
        words = line.split()
        if len(words) > 7 and words[1] == "00000000" and words[7] == "00000000":
            route = words
            break
    if route is None:
        return
    iface = route[0]
    default = {"interface": iface, "alias": iface}
    default["gateway"] = socket.inet_ntoa(struct.pack("<L", int(route[2], 16)))
    address = _ioctl_addr(sock, 0x8915, iface)
    netmask = _ioctl_addr(sock, 0x891B, iface)  # SIOCGIFNETMASK
    if address and netmask:
        a = struct.unpack("!L", socket.inet_aton(address))[0]
        m = struct.unpack("!L", socket.inet_aton(netmask))[0]
        default.update(address=address, netmask=netmask)
        default["network"] = socket.inet_ntoa(struct.pack("!L", a & m))
        default["prefix"] = str(bin(m).count("1"))
        broadcast = _ioctl_addr(sock, 0x8919, iface)  # SIOCGIFBRDADDR
        if broadcast:
            default["broadcast"] = broadcast
    mac = (_read("/sys/class/net/%s/address" % iface) or "").strip()
    if mac:
        default["macaddress"] = mac
    mtu = (_read("/sys/class/net/%s/mtu" % iface) or "").strip()
    if mtu.isdigit():
        default["mtu"] = int(mtu)
    kind = (_read("/sys/class/net/%s/type" % iface) or "").strip()
    default["type"] = {"1": "ether", "772": "loopback", "32": "infiniband"}.get(kind, "unknown")
    f["default_ipv4"] = default


def managers(f):
    path = os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) + ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]

    def have(cmd):
        return any(os.access(os.path.join(d, cmd), os.X_OK) for d in path)

    f["pkg_mgr"] = next((name for cmd, name in PKG_MGRS if have(cmd)), "unknown")
    if os.path.isdir("/run/systemd/system"):
        f["service_mgr"] = "systemd"
    else:
        init = (_read("/proc/1/comm") or "").strip()
        f["service_mgr"] = {"systemd": "systemd", "init": "sysvinit", "openrc-init": "openrc"}.get(
            init, init or "unknown"
        )


def gather(req):
    facts = {}  # type: dict[str, object]
    for part in (distribution, system, python, user, hardware, network, managers):
        try:
            part(facts)
        except Exception:  # one part that cannot tell must not cost the others
            pass
    return {"facts": facts}


ACTIONS = {"gather": gather}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
