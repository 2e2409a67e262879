#!/usr/bin/env bash
# `bazel run -c opt //experiments:fashion_mnist`: runs fashion_mnist.py with Debian's python3
# (numpy, matplotlib, torch) on the //train:train binary from the runfiles.
set -euo pipefail
runfiles="${RUNFILES_DIR:-$0.runfiles}"
if [[ -d "$runfiles/ringlab" ]]; then cd "$runfiles/ringlab"; fi
exec /usr/bin/python3 experiments/fashion_mnist/fashion_mnist.py --train="$PWD/train/train" \
  --on_hosts="$PWD/comm/job/on_hosts" \
  --bench="$PWD/bench/allreduce_bench" "$@"
