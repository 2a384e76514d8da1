#!/bin/sh
# prints its arguments, one a line, and where it ran
for a in "$@"; do echo "arg: $a"; done
pwd > ran-in.txt
