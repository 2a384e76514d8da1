#!/bin/sh
# the prod vault id's password, from a script (as ansible-core runs one)
echo "prod pass w/ spaces"
