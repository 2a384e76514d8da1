# provision: which Pythons a host has, and how it installs packages (for the python_check module).
#
# Run as `sh -s -- CANDIDATE...` with this file on stdin; POSIX sh only (a host without any Python must
# still answer). Prints one line per candidate found: `py|NAME|PATH|VERSION|VENV_OK` (VENV_OK is 1 when
# `import venv, ensurepip` works: Debian/Ubuntu ship ensurepip in the separate pythonX.Y-venv package),
# then `pm|apt-get|dnf|yum|` (the first package manager found), `uid|N`, `sudo|0|1` (passwordless sudo works).

main() {
    for cand in "$@"; do
        p=$(command -v "$cand" 2>/dev/null) || continue
        [ -n "$p" ] || continue
        # one interpreter start per candidate: its version, then whether venv and ensurepip import
        a=$("$p" -c 'import platform
print(platform.python_version())
try:
    import venv, ensurepip
    print(1)
except Exception:
    print(0)' 2>/dev/null) || continue
        set -- $a  # the loop's list was expanded when it started: resetting "$@" here does not change it
        [ $# -eq 2 ] || continue
        printf 'py|%s|%s|%s|%s\n' "$cand" "$p" "$1" "$2"
    done
    pm=
    for m in apt-get dnf yum; do
        if command -v "$m" >/dev/null 2>&1; then pm=$m; break; fi
    done
    printf 'pm|%s\n' "$pm"
    printf 'uid|%s\n' "$(id -u)"
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then s=1; else s=0; fi
    printf 'sudo|%s\n' "$s"
}

main "$@" </dev/null
exit 0
