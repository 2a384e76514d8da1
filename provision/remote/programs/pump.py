"""THE pump: a child's output pipes read together until they end, bounded in size, under the caller's clock.

Used by the python agent's ``exec`` (``../agent.py``: the controller puts this text in front of it with the
spawn core, ``provision.remote.program``) and by the helper scripts that run commands whose output they must
read while a daemon they start may keep the pipes open (``../service.py``: ``from pump import pump``, bundled
with the script as the host library is, ``provision.remote.source``). Its own file, not the spawn core's: the
runner and async jobs, whose command lines carry the spawn core on every command, never read a pipe this way.
Builtins only (``os``, ``select``), Python 3.6+.
"""

import os
import select


def pump(fds, wake=None, limit=None):
    """The bytes read from each of ``fds`` (in their order) until each has ended: read together (select: no
    pipe fills while another is read), at most ``limit`` bytes kept of each (None: all; the rest is read and
    dropped, so the writer never blocks on a full pipe). ``wake(quiet)``, when given, is called first and after
    every wake-up (``quiet``: nothing was read): it answers the seconds to wait next (None: until something
    comes) or False to stop reading now (a deadline, a daemon left holding the pipes). The fds stay open."""
    chunks = {fd: [] for fd in fds}  # type: dict[int, list[bytes]]
    sizes = dict.fromkeys(fds, 0)
    open_fds = list(fds)
    wait = wake(False) if wake is not None else None
    while open_fds and wait is not False:
        ready = select.select(open_fds, [], [], wait)[0]
        for fd in ready:
            got = os.read(fd, 65536)
            if not got:
                open_fds.remove(fd)
            elif limit is None or sizes[fd] < limit:
                chunks[fd].append(got if limit is None else got[: limit - sizes[fd]])
                sizes[fd] += len(got)
        if wake is not None:
            wait = wake(not ready)
    return [b"".join(chunks[fd]) for fd in fds]
