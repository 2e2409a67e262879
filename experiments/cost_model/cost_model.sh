#!/usr/bin/env bash
# `bazel run //experiments:cost_model -- --bench=FILE`: cost_model.py with Debian's python3.
set -euo pipefail
runfiles="${RUNFILES_DIR:-$0.runfiles}"
script="$runfiles/ringlab/experiments/cost_model/cost_model.py"
cd "${BUILD_WORKING_DIRECTORY:-.}"
exec /usr/bin/python3 "$script" "$@"
