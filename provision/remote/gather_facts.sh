# provision: gather a host's facts in ONE round trip.
#
# Run as `sh -s -- VENV_PARENT` with this file on stdin. Prints sections, each introduced by a line
# `=====PROVISION:<name>=====`; provision/facts.py parses them. A missing command gives an empty section,
# never an error: the script always exits 0. Commands that can hang (nvidia-smi) run under `timeout 20`.
# Needs only POSIX sh and coreutils: no `ip`, no bash, python3 optional.
#
# Sections: uname, os_release, hostname, pythons (path|--version|venv_ok), venv_parent, disk (df -Pk),
# gpu_csv, nvidia_smi, topo, rdma (dev|port|state|rate|link_layer), nics (name|state|mtu|mac|speed),
# ipv4 (iface|address; iface empty when only `hostname -I` could tell), ansible (one JSON object: Ansible's
# fact names, from ansible_facts.py with the first python3), end.

main() {
    section() { printf '=====PROVISION:%s=====\n' "$1"; }
    have() { command -v "$1" >/dev/null 2>&1; }
    if have timeout; then
        t() { timeout 20 "$@"; }
    else
        t() { "$@"; }
    fi
    rd() { cat "$1" 2>/dev/null | head -n 1; }

    section uname
    uname -srm 2>/dev/null

    section os_release
    if [ -r /etc/os-release ]; then
        cat /etc/os-release
    elif [ -r /usr/lib/os-release ]; then
        cat /usr/lib/os-release
    fi

    section hostname
    hostname 2>/dev/null || uname -n 2>/dev/null

    section pythons
    PY=
    seen=" "
    for cand in python3 python3.13 python3.12 python3.11 python3.10 /usr/bin/python3; do
        p=$(command -v "$cand" 2>/dev/null) || continue
        [ -n "$p" ] || continue
        case "$seen" in *" $p "*) continue ;; esac
        seen="$seen$p "
        # pyenv shims exist for versions that are not selected: --version fails, skip them
        v=$(t "$p" --version 2>&1 | head -n 1)
        case "$v" in Python\ *) ;; *) continue ;; esac
        if t "$p" -c 'import venv, ensurepip' >/dev/null 2>&1; then ok=1; else ok=0; fi
        printf '%s|%s|%s\n' "$p" "$v" "$ok"
        [ -n "$PY" ] || PY=$p
    done

    dir=${1:-$HOME}
    case "$dir" in
        "~") dir=$HOME ;;
        "~/"*) dir=$HOME/${dir#"~/"} ;;
    esac
    section venv_parent
    printf '%s\n' "$dir"

    section disk
    d=$dir
    while [ ! -d "$d" ]; do
        case "$d" in
            */*) d=${d%/*}; [ -n "$d" ] || d=/ ;;
            *) d=. ;;
        esac
    done
    df -Pk "$d" 2>/dev/null

    section gpu_csv
    smi_ok=0
    if have nvidia-smi; then
        q=index,name,uuid,memory.total,driver_version,pci.bus_id
        if out=$(t nvidia-smi --query-gpu="$q,compute_cap" --format=csv,noheader,nounits 2>/dev/null); then
            smi_ok=1
        else
            rc=$?
            # 124: it hung; anything else: maybe an old driver that lacks compute_cap
            if [ "$rc" != 124 ] &&
                out=$(t nvidia-smi --query-gpu="$q" --format=csv,noheader,nounits 2>/dev/null); then
                smi_ok=1
            fi
        fi
        [ "$smi_ok" = 1 ] && printf '%s\n' "$out"
    fi

    section nvidia_smi
    [ "$smi_ok" = 1 ] && t nvidia-smi 2>/dev/null

    section topo
    [ "$smi_ok" = 1 ] && t nvidia-smi topo -m 2>/dev/null

    section rdma
    for dev in /sys/class/infiniband/*; do
        [ -e "$dev" ] || continue
        name=${dev##*/}
        found=0
        for port in "$dev"/ports/*; do
            [ -e "$port" ] || continue
            found=1
            printf '%s|%s|%s|%s|%s\n' "$name" "${port##*/}" "$(rd "$port/state")" \
                "$(rd "$port/rate")" "$(rd "$port/link_layer")"
        done
        [ "$found" = 1 ] || printf '%s\n' "$name"
    done

    section nics
    for nic in /sys/class/net/*; do
        [ -e "$nic" ] || continue
        printf '%s|%s|%s|%s|%s\n' "${nic##*/}" "$(rd "$nic/operstate")" "$(rd "$nic/mtu")" \
            "$(rd "$nic/address")" "$(rd "$nic/speed")"
    done

    section ipv4
    addrs=
    if [ -n "$PY" ]; then
        addrs=$(t "$PY" -c '
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _, name in socket.if_nameindex():
    try:
        r = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
    except OSError:
        continue
    print(name + "|" + socket.inet_ntoa(r[20:24]))
' 2>/dev/null)
    fi
    if [ -n "$addrs" ]; then
        printf '%s\n' "$addrs"
    elif have hostname; then
        for a in $(hostname -I 2>/dev/null); do
            case "$a" in *:*) ;; *) printf '|%s\n' "$a" ;; esac
        done
    fi

    # Ansible's common fact names (distribution, os_family, hostname, python, user, default_ipv4, ...):
    # provision/remote/ansible_facts.py, put in $PROVISION_ANSIBLE_FACTS by provision/facts.py
    section ansible
    if [ -n "$PY" ] && [ -n "${PROVISION_ANSIBLE_FACTS:-}" ]; then
        t "$PY" -c "$PROVISION_ANSIBLE_FACTS" gather 2>/dev/null
    fi

    section end
}

# The whole body is parsed before it runs, and runs with stdin from /dev/null: no command can swallow
# the rest of this script from the pipe that `sh -s` reads it from.
main "$@" </dev/null
exit 0
