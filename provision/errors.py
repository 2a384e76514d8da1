"""The error tree of provision.

Every error a user can see is one of these; foreign exceptions (paramiko, socket, yaml, jinja2) are mapped
at the boundary that meets them (``raise XError(...) from exc``), so none of them reaches the CLI.

    ProvisionError                  base: one clear line via ``str()``; ``exit_code`` for the CLI
    ├── InputError                  exit 5: bad input found before any host was touched
    │   ├── InventoryError          inventory files, group_vars/host_vars, limit patterns
    │   ├── PlaybookError           playbook YAML, unknown keys/modules, bad module arguments
    │   │   └── UnsupportedTask     a module provision lacks, or arguments one refuses: deferred in a dynamic include
    │   └── TemplateError           Jinja2 syntax or an undefined variable
    ├── UsageError                  exit 3: bad flag combination
    ├── HostError                   something went wrong on one host (carries ``host``)
    │   ├── UnreachableError        the host could not be reached (connect, auth, host key, lost session)
    │   │   ├── HostKeyUnknown      host key not in known_hosts and accept-new was not asked for
    │   │   ├── HostKeyChanged      host key differs from known_hosts: always refused
    │   │   └── HostBusy            another provision run holds the host's run lock (nothing was run on it)
    │   ├── CommandTimeout          a remote command outlived its timeout (its process group was killed)
    │   ├── OutputTooLarge          a host sent more for one command or answer than the controller accepts
    │   └── ModuleError             a module could not do its job (task fails with this message)
    └── Interrupted                 exit 130 (SIGINT / Ctrl-C)
        └── Terminated              exit 143 (SIGTERM)

Exit codes follow the contract in ``interface.md``: 0 ok, 2 failed hosts, 3 usage, 4 unreachable,
5 invalid input, 130 interrupted (SIGINT), 143 terminated (SIGTERM).

A name that is not known (a variable, a module, a filter, a playbook, a command-line word) gets the nearest
known one in its message: :func:`did_you_mean`, the one place that picks it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

EXIT_OK = 0
EXIT_FAILED = 2
EXIT_USAGE = 3
EXIT_UNREACHABLE = 4
EXIT_INPUT = 5
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports it


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``" (did you mean 'site.yml'?)"``: the known name nearest to ``name`` (difflib's ratio: two thirds of their
    letters in common, in order; ``rnu`` gets ``run``, ``nothere`` gets no ``router``), or ``""`` when none is
    near enough."""
    close = difflib.get_close_matches(name, sorted({k for k in known if k != name}), n=1, cutoff=0.66)
    return f" (did you mean {close[0]!r}?)" if close else ""


class ProvisionError(Exception):
    """Base of every error provision raises on purpose."""

    exit_code = EXIT_FAILED


class InputError(ProvisionError):
    """Invalid input, detected before any host is contacted. Names the file and line when known."""

    exit_code = EXIT_INPUT

    def __init__(self, msg: str, *, file: str | None = None, line: int | None = None) -> None:
        self.msg = msg
        self.file = file
        self.line = line
        super().__init__(self.__str__())

    def where(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or ""

    def __str__(self) -> str:
        where = self.where()
        return f"{where}: {self.msg}" if where else self.msg


class InventoryError(InputError):
    pass


class PlaybookError(InputError):
    pass


class UnsupportedTask(PlaybookError):
    """A task naming a module provision does not have, or arguments its module refuses. Refused before the run,
    unless the task may never run: in what an ``include_tasks``/``include_role`` reads, or under a ``when`` (and
    then only a module ansible-core knows, ``ansible_has``): it is then a warning before the run and a task that
    fails a host that runs it (a role's ``setup-FreeBSD.yml`` on Debian hosts)."""

    def __init__(self, msg: str, *, file: str | None = None, line: int | None = None, ansible_has: bool = True):
        super().__init__(msg, file=file, line=line)
        self.ansible_has = ansible_has


class TemplateError(InputError):
    pass


class UsageError(ProvisionError):
    exit_code = EXIT_USAGE


class Interrupted(ProvisionError):
    exit_code = EXIT_INTERRUPTED


class Terminated(Interrupted):
    exit_code = EXIT_TERMINATED


class SigTerm(KeyboardInterrupt):
    """Raised in the main thread by the CLI's SIGTERM handler: unwinds like Ctrl-C (every connection is
    closed on the way out), then exits 143."""


class HostError(ProvisionError):
    """Something went wrong on one host."""

    def __init__(self, host: str, msg: str) -> None:
        self.host = host
        self.msg = msg
        super().__init__(f"{host}: {msg}")


class UnreachableError(HostError):
    exit_code = EXIT_UNREACHABLE


class HostKeyUnknown(UnreachableError):
    pass


class HostKeyChanged(UnreachableError):
    pass


class HostBusy(UnreachableError):
    """Another run holds the host's run lock. Counted as unreachable: nothing of this run touched the host,
    ``ignore_errors`` cannot hide it, and the retry file names the host for a rerun once the other run ends."""


class CommandTimeout(HostError):
    def __init__(self, host: str, command: str, timeout: float) -> None:
        self.command = command
        self.timeout = timeout
        super().__init__(host, f"command timed out after {timeout:g}s (its processes were killed): {command}")


class OutputTooLarge(HostError):
    """A host sent more than the controller accepts for one command (stdout and stderr together), one helper
    answer or one file read: the command or read was stopped, the task fails; nothing of it was kept."""

    def __init__(self, host: str, size: int, limit: int, what: str = "one command") -> None:
        self.size = size
        self.limit = limit
        super().__init__(host, f"the host sent {size} bytes or more for {what} (the limit is {limit >> 20} MiB)")


class ModuleError(HostError):
    """A module failed; ``data`` holds what it returned so far (rc, stdout, stderr...)."""

    def __init__(self, host: str, msg: str, **data: object) -> None:
        self.data = data
        super().__init__(host, msg)
