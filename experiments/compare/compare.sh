#!/usr/bin/env bash
# `bazel run -c opt //experiments:compare -- [flags] -- COMMAND ARGS`: runs compare.py with
# Debian's python3 on the launcher and torch module from the runfiles.
set -euo pipefail
runfiles="${RUNFILES_DIR:-$0.runfiles}"
if [[ -d "$runfiles/ringlab" ]]; then cd "$runfiles/ringlab"; fi
torch_module=()
if [[ -f torch_backend/ringlab_torch.so ]]; then torch_module=(--torch_module="$PWD/torch_backend"); fi
exec /usr/bin/python3 experiments/compare/compare.py --on_hosts="$PWD/comm/job/on_hosts" \
  "${torch_module[@]}" "$@"
