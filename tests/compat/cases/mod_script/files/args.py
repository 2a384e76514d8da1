"""Prints its arguments and leaves a mark in its working directory (the script case)."""

import sys

print("python", " ".join(sys.argv[1:]))
with open("py-ran", "w") as fh:
    fh.write("yes\n")
