"""Starts the python agent (``python3 -c BOOTSTRAP H [SOURCE REQUEST]``): its source from argv (zlib, base64:
it travels with the first request in the exec line, see ``PythonAgent.command``), else read from stdin,
length-prefixed and unbuffered (nothing of the first request may be swallowed by a buffer); then runs it.
"""

import os
import sys

if len(sys.argv) > 2:
    import binascii  # not base64: it imports re (~4 ms of every agent's start)
    import zlib

    source = zlib.decompress(binascii.a2b_base64(sys.argv[2]))
else:
    header = b""
    while not header.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk:
            raise SystemExit(1)
        header += chunk
    size = int(header)
    source = b""
    while len(source) < size:
        chunk = os.read(0, size - len(source))
        if not chunk:
            raise SystemExit(1)
        source += chunk
exec(compile(source, "provision-agent", "exec"))
