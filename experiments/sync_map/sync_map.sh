#!/usr/bin/env bash
# `bazel run -c opt //experiments:sync_map`: sync_map.py with Debian's python3 on the trainer,
# allreduce_bench, on_hosts and the torch module from the runfiles.
set -euo pipefail
runfiles="${RUNFILES_DIR:-$0.runfiles}"
if [[ -d "$runfiles/ringlab" ]]; then cd "$runfiles/ringlab"; fi
# ringlab_torch.so is in the runfiles where @local_torch found libtorch-dev (BUILD).
torch_module=()
if [[ -f torch_backend/ringlab_torch.so ]]; then torch_module=(--torch_module="$PWD/torch_backend"); fi
exec /usr/bin/python3 experiments/sync_map/sync_map.py --train="$PWD/train/train" \
  --on_hosts="$PWD/comm/job/on_hosts" --bench="$PWD/bench/allreduce_bench" \
  "${torch_module[@]}" "$@"
