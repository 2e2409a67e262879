#!/usr/bin/env bash
# Runs process_group_test.py with Debian's Python (where torch lives) on the built module.
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/process_group_test.py" "$1" "$2"
