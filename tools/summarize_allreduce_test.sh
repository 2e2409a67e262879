#!/usr/bin/env bash
# Runs tools/summarize_allreduce_test.py (unittest) with the system's python3.
exec /usr/bin/python3 "$1"
