#!/usr/bin/env bash
# `bazel run //experiments:seed_ddp`: runs seed_ddp.py with Debian's python3
# (numpy, matplotlib, torch) on the //train:train binary from the runfiles.
set -euo pipefail
typed_in="$PWD"
runfiles="${RUNFILES_DIR:-$0.runfiles}"
if [[ -d "$runfiles/ringlab" ]]; then cd "$runfiles/ringlab"; fi
root="$PWD"
# Paths the user gives are relative to where they typed the command (bazel run says where).
cd "${BUILD_WORKING_DIRECTORY:-$typed_in}"
exec /usr/bin/python3 "$root/experiments/seed_ddp/seed_ddp.py" \
  --train="$root/train/train" \
  --reference="$root/testdata/seed_ddp/reference" "$@"
