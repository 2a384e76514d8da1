#!/usr/bin/env bash
# benchmarks/fleet.py on the device machine (16 cores), where the lab's 64 sshd hosts no longer share the
# controller's 2 cores (issue 29; docs/performance.md). Two steps:
#   scripts/fleet_device.sh bundle DIR         # here: this machine's sshd (Debian 12, OpenSSH 9.2p1) and the
#                                              # libraries it links, and cp312 wheels of provision, pyinfra,
#                                              # ansible-core and their needs (DIR is carried: ~31 MB)
#   scripts/fleet_device.sh run DIR ARGS...    # there (root): sshd installed as /usr/sbin/sshd (a wrapper that
#                                              # sets LD_LIBRARY_PATH), the wheels into its python3, then
#                                              # `python3 benchmarks/fleet.py ARGS...`; output also in $OUT/log
# The first `run` on a fresh machine also prints what it found (OS, cores, python3, a lab host reached by ssh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
step=$1 dir=$2
shift 2
case $step in
  bundle)
    mkdir -p "$dir/sshd/lib" "$dir/whl"
    cp /usr/sbin/sshd "$dir/sshd/sshd.real"
    # the client side too: the device has none of them (ssh-keygen for the lab's keys, ssh for the lab's check
    # and Ansible, sftp/scp for Ansible's file transfers; sshd serves sftp itself: internal-sftp)
    cp /usr/bin/ssh /usr/bin/ssh-keygen /usr/bin/sftp /usr/bin/scp "$dir/sshd/"
    for bin in /usr/sbin/sshd /usr/bin/ssh /usr/bin/ssh-keygen /usr/bin/sftp /usr/bin/scp; do
      for lib in $(ldd "$bin" | awk '/=>/ {print $3}'); do
        case $lib in *libc.so* | *libresolv*) ;; *) cp -L "$lib" "$dir/sshd/lib/" ;; esac  # glibc: the device's own
      done
    done
    pip=(python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp -d "$dir/whl"
         --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
         --platform manylinux2014_x86_64)
    # the versions this machine's venv runs, so that both labs compare the same tools
    mapfile -t pins < <(python3 -m pip freeze 2>/dev/null |
      grep -i -E '^(fabric|paramiko|cryptography|pyinfra|ansible-core|invoke|gevent|jinja2|pyyaml|click)==')
    "${pip[@]}" "${pins[@]}" || exit 1
    python3 -m pip wheel -q --no-deps -w "$dir/whl" . || exit 1
    du -sh "$dir"
    ;;
  run)
    export PYTHONUNBUFFERED=1
    mkdir -p "${OUT:-/tmp/out}"
    exec > >(tee -a "${OUT:-/tmp/out}/log") 2>&1
    if [ ! -e /usr/sbin/sshd.real ]; then
      echo "== setup $(date -u +%T)"; uname -r; grep PRETTY /etc/os-release; nproc; id -un
      command -v useradd runuser python3 || exit 1
      # what the lab hosts' users run (ANSIBLE_PYTHON_INTERPRETER too)
      [ -x /usr/bin/python3 ] || { ln -s "$(command -v python3)" /usr/bin/python3 && echo "/usr/bin/python3 -> $(command -v python3)"; }
      /usr/bin/python3 -V || exit 1
      install -m 755 "$dir/sshd/sshd.real" /usr/sbin/sshd.real
      mkdir -p /opt/sshdlib && cp "$dir"/sshd/lib/* /opt/sshdlib/
      printf '#!/bin/sh\nLD_LIBRARY_PATH=/opt/sshdlib exec /usr/sbin/sshd.real "$@"\n' >/usr/sbin/sshd
      chmod 755 /usr/sbin/sshd
      for bin in ssh ssh-keygen sftp scp; do  # the device's own where it has one
        command -v "$bin" >/dev/null && continue
        install -m 755 "$dir/sshd/$bin" "/usr/bin/$bin.real"
        printf '#!/bin/sh\nLD_LIBRARY_PATH=/opt/sshdlib exec /usr/bin/%s.real "$@"\n' "$bin" >"/usr/bin/$bin"
        chmod 755 "/usr/bin/$bin" && echo "/usr/bin/$bin: this machine's, bundled"
      done
      id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd
      mkdir -p /run/sshd
      /usr/sbin/sshd -V 2>&1
      python3 -m pip install -q --no-index --no-deps "$dir"/whl/*.whl 2>&1 | tail -3
      command -v pyinfra ansible-playbook || exit 1
    fi
    # a kernel that binds no loopback address but 127.0.0.1 (gVisor's netstack may not): every lab host there
    if ! python3 -c 'import socket; socket.socket().bind(("127.0.100.10", 2222))' 2>/dev/null; then
      export PROVISION_LAB_ONE_ADDRESS=127.0.0.1
      echo "127.0.100.10 does not bind: the lab's hosts on 127.0.0.1, a port each"
    fi
    if [ ! -e /tmp/fleet-device-ready ]; then
      python3 - <<'PY' || exit 1
import pathlib, subprocess, sys, tempfile
sys.path.insert(0, ".")
from tests.support.lab import Lab
with tempfile.TemporaryDirectory() as d, Lab(2, pathlib.Path(d) / "lab") as lab:
    r = subprocess.run(["ssh", "-F", str(lab.ssh_config_path), lab.host(1).name, "python3 -c 'import sys; print(sys.executable, sys.version)'"],
                       capture_output=True, text=True, timeout=60)
    print("a lab host by ssh:", r.returncode, r.stdout.strip(), r.stderr[-2000:])
    sys.exit(r.returncode)
PY
      touch /tmp/fleet-device-ready
    fi
    echo "== fleet.py $* ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
    python3 benchmarks/fleet.py "$@"
    echo "== done $(date -u +%T)"
    ;;
  *) echo "usage: $0 bundle|run DIR ..." >&2; exit 2 ;;
esac
