#!/usr/bin/env bash
# Runs run_driver_test.py with Debian's python3.
set -euo pipefail
exec /usr/bin/python3 experiments/run_driver_test.py
