#!/usr/bin/env bash
# Runs suite_test.py with Debian's Python (where torch lives) on the built module.
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/torch_suite/suite_test.py" "$1"
