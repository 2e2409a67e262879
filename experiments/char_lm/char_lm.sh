#!/usr/bin/env bash
# `bazel run -c opt //experiments:char_lm`: runs char_lm.py with Debian's python3 (torch, numpy,
# matplotlib) on the launcher, bench and torch module from the runfiles.
set -euo pipefail
typed_in="$PWD"
runfiles="${RUNFILES_DIR:-$0.runfiles}"
if [[ -d "$runfiles/ringlab" ]]; then cd "$runfiles/ringlab"; fi
# ringlab_torch.so is in the runfiles where @local_torch found libtorch-dev (BUILD).
torch_module=()
if [[ -f torch_backend/ringlab_torch.so ]]; then torch_module=(--torch_module="$PWD/torch_backend"); fi
root="$PWD"
# Paths the user gives are relative to where they typed the command (bazel run says where).
cd "${BUILD_WORKING_DIRECTORY:-$typed_in}"
exec /usr/bin/python3 "$root/experiments/char_lm/char_lm.py" \
  --on_hosts="$root/comm/job/on_hosts" \
  --bench="$root/bench/allreduce_bench" "${torch_module[@]}" "$@"
