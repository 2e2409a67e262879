#!/usr/bin/env bash
# `bazel run -c opt //experiments:compare -- [flags] -- COMMAND ARGS`: runs compare.py with
# Debian's python3 on the launcher and torch module from the runfiles.
set -euo pipefail
typed_in="$PWD"
runfiles="${RUNFILES_DIR:-$0.runfiles}"
if [[ -d "$runfiles/ringlab" ]]; then cd "$runfiles/ringlab"; fi
torch_module=()
if [[ -f torch_backend/ringlab_torch.so ]]; then torch_module=(--torch_module="$PWD/torch_backend"); fi
root="$PWD"
# Paths the user gives are relative to where they typed the command (bazel run says where).
cd "${BUILD_WORKING_DIRECTORY:-$typed_in}"
exec /usr/bin/python3 "$root/experiments/compare/compare.py" \
  --on_hosts="$root/comm/job/on_hosts" \
  "${torch_module[@]}" "$@"
