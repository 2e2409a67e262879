#!/usr/bin/env bash
# Runs char_lm_test.py with Debian's python3 (torch and bible-kjv where installed).
set -euo pipefail
export MPLCONFIGDIR="${TEST_TMPDIR:-$(mktemp -d)}/matplotlib"
exec /usr/bin/python3 experiments/char_lm/char_lm_test.py
