#!/usr/bin/env bash
# `bazel run -c opt //experiments:fashion_mnist`: runs fashion_mnist.py with Debian's python3
# (numpy, matplotlib, torch) on the //train:train binary from the runfiles, and PyTorch DDP
# over ringlab through the torch backend's module where it was built.
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
exec /usr/bin/python3 "$root/experiments/fashion_mnist/fashion_mnist.py" \
  --train="$root/train/train" \
  --on_hosts="$root/comm/job/on_hosts" \
  --bench="$root/bench/allreduce_bench" "${torch_module[@]}" "$@"
