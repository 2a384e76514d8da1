"""Runs a shipped helper whose stdin carries data (``python3 -c BOOTSTRAP ARGS``, ``ModuleContext.run_script``):
reads the length-prefixed source from stdin and runs it; the rest of stdin is the script's."""

import sys

size = int(sys.stdin.buffer.readline())
exec(compile(sys.stdin.buffer.read(size), "<provision>", "exec"))
