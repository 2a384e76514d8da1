"""The runner: every command on a host that does not go through the python agent (``python3 -c RUNNER N M T H``).

It reads the N-byte shell script and M bytes of the command's stdin data from its own stdin, starts ``/bin/sh``
on the script in a NEW session (:class:`spawn.Child`), and waits for the first of: the child exits (exit with
its rc), the deadline T (TERM its session, KILL it 5 s later, exit 124), its own stdin ends (the controller
closed the channel or died) or, when H > 0, stays silent for 3 H seconds (the controller sends a heartbeat
every H seconds after the script and data: silence is a frozen controller or a link that dropped without a FIN
ever arriving): TERM, KILL 2 s later, exit 129 (125 when that happens before the script arrived). H = 0: no
heartbeats expected (LocalConnection). The controller's text of it is what every host's ``ps`` shows: it holds
no user value.
"""

import _thread
import os
import sys

from spawn import Child, ended, exactly, watch

EXIT = {"deadline": 124, "gone": 129}


def main():
    n, m, limit, beat = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    script = exactly(0, n, beat)
    data = exactly(0, m, beat)
    if script is None or data is None:
        os._exit(125)
    child = Child(script, data)
    gone, said = os.pipe()  # the watch thread says so when stdin ends or goes silent; this thread decides
    _thread.start_new_thread(watch, (0, beat, None, lambda: os.write(said, b"x")))
    how = ended(child, limit, gone)
    os._exit(child.rc() if how == "exited" else EXIT[how])


if __name__ == "__main__":
    main()
