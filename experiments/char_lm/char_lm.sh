#!/usr/bin/env bash
# `bazel run -c opt //experiments:char_lm`: runs char_lm.py with Debian's python3 (torch, numpy,
# matplotlib) on the launcher, bench and torch module from the runfiles.
set -euo pipefail
runfiles="${RUNFILES_DIR:-$0.runfiles}"
if [[ -d "$runfiles/ringlab" ]]; then cd "$runfiles/ringlab"; fi
# ringlab_torch.so is in the runfiles where @local_torch found libtorch-dev (BUILD).
torch_module=()
if [[ -f torch_backend/ringlab_torch.so ]]; then torch_module=(--torch_module="$PWD/torch_backend"); fi
exec /usr/bin/python3 experiments/char_lm/char_lm.py --on_hosts="$PWD/comm/job/on_hosts" \
  --bench="$PWD/bench/allreduce_bench" "${torch_module[@]}" "$@"
