#!/bin/sh
echo before-failing
touch failed-once
exit 3
