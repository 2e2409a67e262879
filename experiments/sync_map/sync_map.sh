#!/usr/bin/env bash
# `bazel run -c opt //experiments:sync_map`: sync_map.py with Debian's python3 on the trainer,
# allreduce_bench, on_hosts and the torch module from the runfiles.
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
exec /usr/bin/python3 "$root/experiments/sync_map/sync_map.py" \
  --train="$root/train/train" \
  --on_hosts="$root/comm/job/on_hosts" --bench="$root/bench/allreduce_bench" \
  "${torch_module[@]}" "$@"
