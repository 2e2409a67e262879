#!/usr/bin/env bash
# Runs tools/docs/check_docs_test.py (unittest) with the system's python3.
exec /usr/bin/env python3 "$1"
