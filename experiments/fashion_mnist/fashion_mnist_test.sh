#!/usr/bin/env bash
# Runs fashion_mnist_test.py with Debian's python3 (numpy, matplotlib); no torch needed.
set -euo pipefail
export MPLCONFIGDIR="${TEST_TMPDIR:-$(mktemp -d)}/matplotlib"
exec /usr/bin/python3 experiments/fashion_mnist/fashion_mnist_test.py
