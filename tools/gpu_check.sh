#!/usr/bin/env bash
# One call on a GPU machine that has no Bazel: runs the test and benchmark
# binaries that tools/gpu_bundle.sh built elsewhere and carried here, and
# prints one summary (tests passed/failed/skipped per binary, then the
# allreduce table per backend, the nn CUDA-vs-CPU check and the training-step
# benchmark).
#   tools/gpu_check.sh [BIN_DIR]        (default: ./gpu_bin)
# The CUDA runtime, cuBLAS and NCCL come from PyTorch's wheels
# (site-packages/nvidia/*/lib of the python3 that imports torch), found by
# asking that python3; a CUDA toolkit under /usr/local/cuda* is the fallback.
# Environment: PYTHON (the python3 to ask), STEP_TIMEOUT (seconds for every
# step; by default 240 for gpu_backends_test, 90 per allreduce_bench run, 60
# for the others: under 10 minutes in all), ALLREDUCE_ARGS (more
# allreduce_bench flags).
set -u
bin=${1:-./gpu_bin}
log=$(mktemp -d /tmp/gpu_check.XXXXXX)
cd "$(dirname "$0")/.." 2>/dev/null || true  # tests read paths from the repo root
[[ -d "$bin" ]] || bin="$OLDPWD/$bin"
if [[ ! -d "$bin" ]]; then
  echo "error: no binaries in ${1:-./gpu_bin} (build them with tools/gpu_bundle.sh)" >&2
  exit 2
fi

section() { printf '\n===== %s =====\n' "$*"; }

# --- the python3 that imports torch, and its CUDA libraries ----------------
find_python() {
  local c
  for c in ${PYTHON:-} python3 /usr/bin/python3 /usr/local/bin/python3 \
    /opt/conda/bin/python3 /opt/*/bin/python3 /opt/*/*/bin/python3 \
    "$HOME"/.venv/bin/python3 "$HOME"/venv/bin/python3 "$HOME"/*/.venv/bin/python3 \
    /workspace/.venv/bin/python3 /venv/bin/python3; do
    [[ -n "$c" ]] || continue
    command -v "$c" >/dev/null 2>&1 || [[ -x "$c" ]] || continue
    if timeout 60 "$c" -c 'import torch' >/dev/null 2>&1; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

section "environment"
py=$(find_python)
libdirs=""
if [[ -n "$py" ]]; then
  info=$(timeout 120 "$py" - <<'PY' 2>/dev/null
import glob, os, site, sys
import torch
roots = set(site.getsitepackages() + [site.getusersitepackages()])
roots.add(os.path.dirname(os.path.dirname(torch.__file__)))
dirs = set()
for r in roots:
    for pattern in ("nvidia/*/lib", "nvidia/*/lib64", "nvidia/*/*/lib"):
        dirs.update(d for d in glob.glob(os.path.join(r, pattern)) if os.path.isdir(d))
print(":".join(sorted(dirs)))
print("torch %s (CUDA %s), %s" % (torch.__version__, torch.version.cuda, sys.executable))
PY
)
  libdirs=$(sed -n 1p <<<"$info")
  echo "python: $(sed -n 2p <<<"$info")"
else
  echo "python: none imports torch (tried \$PYTHON, python3, /usr/bin, /opt, ~/.venv)"
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64; do
  [[ -d "$d" ]] && libdirs="${libdirs:+$libdirs:}$d"
done
export LD_LIBRARY_PATH="${libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
else
  echo "gpu: nvidia-smi not found"
  gpus=0
fi
[[ -f "$bin/MANIFEST" ]] && sed 's/^/bundle: /' "$bin/MANIFEST"

# Libraries a binary needs that the loader cannot find (e.g. libcudart.so.13
# where the torch wheels bring CUDA 12's libcudart.so.12).
missing_libs() { ldd "$1" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' '; }

declare -A result
run_step() {  # name, default timeout (s), then the command
  local name=$1 limit=${STEP_TIMEOUT:-$2}
  shift 2
  local exe=$1
  if [[ ! -x "$exe" ]]; then
    result[$name]="absent"
    return
  fi
  local miss
  miss=$(missing_libs "$exe")
  if [[ -n "$miss" ]]; then
    result[$name]="NOT RUN: missing $miss"
    return
  fi
  timeout -k 10 "$limit" "$@" >"$log/$name.out" 2>&1
  local rc=$?
  if ((rc == 124 || rc == 137)); then
    result[$name]="TIMED OUT after ${limit}s"
  else
    result[$name]="exit $rc"
  fi
}

# gtest's own counts: "[  PASSED  ] 3 tests." etc.
gtest_counts() {
  local f=$1 p s fl
  p=$(grep -oE '^\[  PASSED  \] [0-9]+' "$f" | tail -1 | grep -oE '[0-9]+$')
  s=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$f" | tail -1 | grep -oE '[0-9]+')
  fl=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$f" | tail -1 | grep -oE '[0-9]+')
  echo "passed ${p:-0}, skipped ${s:-0}, failed ${fl:-0}"
}

section "running"
echo "test gpu_backends_test ..."
run_step gpu_backends_test 240 "$bin/gpu_backends_test" --gtest_color=no
echo "test cuda_mlp_test ..."
run_step cuda_mlp_test 60 "$bin/cuda_mlp_test" --gtest_color=no
# ipc_ring shares GPUs between ranks, NCCL needs one per rank: on a one-GPU
# machine NCCL runs at world size 1 (and the summary says so).
ranks=$((gpus >= 2 ? (gpus < 4 ? gpus : 4) : 2))
nccl_ranks=$((gpus >= 1 ? (gpus < ranks ? gpus : ranks) : 1))
echo "bench allreduce_bench (shm_ring, ipc_ring at $ranks ranks) ..."
run_step allreduce_bench 90 "$bin/allreduce_bench" --nprocs="$ranks" \
  --backends=shm_ring,ipc_ring --max_bytes=$((64 << 20)) ${ALLREDUCE_ARGS:-}
echo "bench allreduce_bench (nccl at $nccl_ranks ranks) ..."
run_step allreduce_bench_nccl 90 "$bin/allreduce_bench" --nprocs="$nccl_ranks" \
  --backends=nccl --max_bytes=$((64 << 20)) ${ALLREDUCE_ARGS:-}
echo "bench train_step_bench ..."
run_step train_step_bench 60 "$bin/train_step_bench"

section "summary"
status=0
for t in gpu_backends_test cuda_mlp_test; do
  line="${result[$t]}"
  if [[ -f "$log/$t.out" ]]; then
    line="$line; $(gtest_counts "$log/$t.out")"
    grep -q '^\[  FAILED  \]' "$log/$t.out" && status=1
    # A GPU that the binaries could not use skips everything: say why.
    if ((gpus > 0)) && grep -q 'no CUDA device' "$log/$t.out"; then
      line="$line; WARNING GPU present but skipped: $(grep -m1 -o 'no CUDA device.*' "$log/$t.out")"
      status=1
    fi
  fi
  [[ "${result[$t]}" == "exit 0" ]] || status=1
  printf '%-20s %s\n' "$t" "$line"
done
for t in allreduce_bench allreduce_bench_nccl train_step_bench; do
  [[ "${result[$t]}" == "exit 0" ]] || status=1
  line="${result[$t]}"
  # A backend not linked into the binary is skipped, not an error: say so.
  if [[ -f "$log/$t.out" ]] && grep -q 'skipping backend' "$log/$t.out"; then
    line="$line; $(grep -m1 -o 'skipping backend.*' "$log/$t.out")"
  fi
  printf '%-20s %s\n' "$t" "$line"
done

if [[ -f "$log/gpu_backends_test.out" ]]; then
  section "gpu_backends_test: failures and notes"
  grep -E '^\[  FAILED  \]|^\[   INFO   \]|rank [0-9]+ failed|Failure' "$log/gpu_backends_test.out" | sort -u | head -40
fi
if [[ -f "$log/cuda_mlp_test.out" ]]; then
  section "nn: CUDA vs CPU (cuda_mlp_test)"
  grep -E '^\[ *(OK|FAILED|SKIPPED) *\]|max|ulp|diff|tolerance' "$log/cuda_mlp_test.out" | head -40
fi
((nccl_ranks < ranks)) && echo "note: nccl ran at world size $nccl_ranks" \
  "(NCCL needs one GPU per rank; this machine has $gpus), ipc_ring at $ranks"
for b in allreduce_bench allreduce_bench_nccl train_step_bench; do
  if [[ -f "$log/$b.out" ]]; then
    section "$b"
    # Google Benchmark's table (and the binary's own summary), not its banner.
    grep -vE '^\*\*\*|^WARNING|Library was built as DEBUG|^Run on|CPU Caches|L[123] |^Load Average' "$log/$b.out" | head -120
  fi
done
echo
echo "full logs: $log"
exit $status
