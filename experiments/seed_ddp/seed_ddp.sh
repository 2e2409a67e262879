#!/usr/bin/env bash
# `bazel run //experiments:seed_ddp`: runs seed_ddp.py with Debian's python3
# (numpy, matplotlib, torch) on the //train:train binary from the runfiles.
set -euo pipefail
runfiles="${RUNFILES_DIR:-$0.runfiles}"
if [[ -d "$runfiles/ringlab" ]]; then cd "$runfiles/ringlab"; fi
exec /usr/bin/python3 experiments/seed_ddp/seed_ddp.py --train="$PWD/train/train" \
  --reference="$PWD/testdata/seed_ddp/reference" "$@"
