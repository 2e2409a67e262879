#!/usr/bin/env bash
# Runs cost_model_test.py with Debian's python3 (numpy).
set -euo pipefail
exec /usr/bin/python3 experiments/cost_model/cost_model_test.py
