#!/usr/bin/env bash
# One call on a GPU machine that has no Bazel: runs the test and benchmark
# binaries that tools/gpu_bundle.sh built elsewhere and carried here (with the
# libraries they need in BIN_DIR/lib), and ends with one summary (tests
# passed/failed/skipped per binary, benchmark exit codes), printed last so
# that a tool that keeps only the tail of the output keeps it.
#   tools/gpu_check.sh [BIN_DIR]        (default: ./gpu_bin)
# Logs (7 files: one per step, and gpu_check.txt, all of this output) go to
# $OUT when set (the device tool brings that folder back), else a temporary
# folder. The CUDA runtime, cuBLAS and NCCL come from PyTorch's wheels
# (site-packages/nvidia/*/lib, e.g. nvidia/cu13/lib, of a python3 that has
# torch), a CUDA toolkit under /usr/local/cuda* being the fallback; BIN_DIR/lib
# comes after them on LD_LIBRARY_PATH. Worst case about 5 minutes: every step
# has its own timeout (STEP_TIMEOUT overrides them all). Environment: PYTHON
# (the python3 to ask first), ALLREDUCE_ARGS (more allreduce_bench flags).
set -u
bin=${1:-./gpu_bin}
log=${OUT:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$log"
cd "$(dirname "$0")/.." 2>/dev/null || true  # tests read paths from the repo root

# Everything below goes through tee into gpu_check.txt (main is not indented:
# it holds a here-document).
main() {
[[ -d "$bin" ]] || bin="$OLDPWD/$bin"
if [[ ! -d "$bin" ]]; then
  echo "error: no binaries in $bin (build them with tools/gpu_bundle.sh)"
  return 2
fi
bin=$(cd "$bin" && pwd)

section() { printf '\n===== %s =====\n' "$*"; }

section "machine"
echo "kernel: $(uname -r)"
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 30 nvidia-smi -L 2>&1 | sed 's/^/gpu: /'
  timeout 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total \
    --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  gpus=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU')
else
  echo "gpu: nvidia-smi not found"
  gpus=0
fi

# --- CUDA libraries: the torch wheels' folders (found without importing
# torch, which takes seconds), then a toolkit, then the bundle's own --------
section "environment"
libdirs=""
for c in ${PYTHON:-} python3 /usr/bin/python3 /usr/local/bin/python3 \
  /opt/conda/bin/python3 /opt/*/bin/python3 "$HOME"/.venv/bin/python3 \
  "$HOME"/venv/bin/python3 /workspace/.venv/bin/python3 /venv/bin/python3; do
  [[ -n "$c" ]] || continue
  command -v "$c" >/dev/null 2>&1 || [[ -x "$c" ]] || continue
  info=$(timeout 30 "$c" - <<'PY' 2>/dev/null
import glob, importlib.metadata, importlib.util, os, site, sys
spec = importlib.util.find_spec("torch")
if spec is None:
    sys.exit(1)
roots = set(site.getsitepackages() + [site.getusersitepackages()])
roots.add(os.path.dirname(os.path.dirname(spec.origin)))
dirs = set()
for r in roots:
    for pattern in ("nvidia/*/lib", "nvidia/*/lib64", "nvidia/*/*/lib"):
        dirs.update(d for d in glob.glob(os.path.join(r, pattern)) if os.path.isdir(d))
print(":".join(sorted(dirs)))
print("torch %s, %s" % (importlib.metadata.version("torch"), sys.executable))
PY
  ) || continue
  libdirs=$(sed -n 1p <<<"$info")
  echo "python: $(sed -n 2p <<<"$info")"
  break
done
[[ -n "$libdirs" ]] || echo "python: none with torch's CUDA wheels (tried \$PYTHON, python3, /usr, /opt, ~/.venv)"
for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64; do
  [[ -d "$d" ]] && libdirs="${libdirs:+$libdirs:}$d"
done
# The bundle's libraries: big ones travel gzipped; unpack them outside the
# bundle (which must stay small enough to carry again).
lib="$bin/lib"
[[ -d "$lib" ]] && libdirs="${libdirs:+$libdirs:}$lib"
if compgen -G "$lib/*.gz" >/dev/null; then
  unpacked=$(mktemp -d /tmp/gpu_lib.XXXXXX)
  for z in "$lib"/*.gz; do
    u="$unpacked/$(basename "${z%.gz}")"
    gunzip -c "$z" >"$u" || echo "error: cannot unpack $z"
  done
  libdirs="$libdirs:$unpacked"
fi
export LD_LIBRARY_PATH="${libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
[[ -f "$bin/MANIFEST" ]] && grep '^#' "$bin/MANIFEST" | head -3 | sed 's/^/bundle: /'

# Libraries a binary needs that the loader cannot find (e.g. libcudart.so.13
# where the torch wheels bring CUDA 12's libcudart.so.12).
missing_libs() { ldd "$1" 2>/dev/null | awk '/not found/ {print $1}' | sort -u | tr '\n' ' '; }

declare -A result
steps=()
run_step() {  # name, timeout (s), then the command
  local name=$1 limit=${STEP_TIMEOUT:-$2}
  shift 2
  steps+=("$name")
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
  echo "$(date -u +%T) $name (timeout ${limit}s) ..."
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" >"$log/$name.out" 2>&1
  local rc=$?
  if ((rc == 124 || rc == 137)); then
    result[$name]="TIMED OUT after ${limit}s"
  else
    result[$name]="exit $rc in $((SECONDS - t0))s"
  fi
}

# gtest's own counts: "[  PASSED  ] 3 tests." etc.
gtest_counts() {
  local f=$1 p s fl ok
  p=$(grep -oE '^\[  PASSED  \] [0-9]+' "$f" | tail -1 | grep -oE '[0-9]+$')
  s=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$f" | tail -1 | grep -oE '[0-9]+')
  fl=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$f" | tail -1 | grep -oE '[0-9]+')
  # A run cut short prints no totals: count the finished tests instead.
  ok=$(grep -cE '^\[       OK \]' "$f")
  if [[ -z "$p" ]]; then
    echo "cut short: ${ok} tests finished OK"
  else
    echo "passed $p, skipped ${s:-0}, failed ${fl:-0}"
  fi
}

section "running"
gtest=(--gtest_color=no)
ipc_filter='*ipc_ring*:IpcRingTest.*'
run_step gpu_backends_test_ipc 100 "$bin/gpu_backends_test" "${gtest[@]}" \
  --gtest_filter="$ipc_filter"
run_step gpu_backends_test_rest 60 "$bin/gpu_backends_test" "${gtest[@]}" \
  --gtest_filter="-$ipc_filter"
run_step cuda_mlp_test 40 "$bin/cuda_mlp_test" "${gtest[@]}"
# The conformance suite over nccl and ipc_ring (every backend's checks).
run_step conformance_gpu_test 120 "$bin/conformance_gpu_test" "${gtest[@]}"
# ipc_ring shares GPUs between ranks, NCCL needs one per rank: on a one-GPU
# machine NCCL runs at world size 1 (and the summary says so). Times go
# through a host backend, so shm_ring runs alongside.
ranks=$((gpus >= 2 ? (gpus < 4 ? gpus : 4) : 2))
nccl_ranks=$((gpus >= 1 ? (gpus < ranks ? gpus : ranks) : 1))
bench=(--max_bytes=$((64 << 20)) --timeout_s=30 ${ALLREDUCE_ARGS:-})
run_step allreduce_bench 45 "$bin/allreduce_bench" --nprocs="$ranks" \
  --backends=shm_ring,ipc_ring "${bench[@]}"
run_step allreduce_bench_nccl 30 "$bin/allreduce_bench" --nprocs="$nccl_ranks" \
  --backends=shm_ring,nccl "${bench[@]}"
run_step train_step_bench 30 "$bin/train_step_bench" --benchmark_min_time=0.1

# --- details first, the summary last ----------------------------------------
for t in allreduce_bench allreduce_bench_nccl train_step_bench; do
  if [[ -f "$log/$t.out" ]]; then
    section "$t"
    # Google Benchmark's table (and the binary's own summary), not its banner.
    sed 's/^\[rank 0\] //' "$log/$t.out" |
      grep -vE '^\*\*\*|^WARNING|Library was built as DEBUG|^Run on|CPU Caches|L[123] |^Load Average|^-+$' |
      cut -c1-170 | head -70
  fi
done
if [[ -f "$log/cuda_mlp_test.out" ]]; then
  section "nn: CUDA vs CPU (cuda_mlp_test)"
  grep -E '^\[ *(OK|FAILED|SKIPPED) *\]|max|ulp|diff|tolerance' "$log/cuda_mlp_test.out" | head -30
fi
for t in conformance_gpu_test gpu_backends_test_ipc gpu_backends_test_rest; do
  if [[ -f "$log/$t.out" ]]; then
    section "$t: results and failures"
    # Each test once (the lines with its time), then what failed and why.
    grep -E '^\[ *(OK|FAILED|SKIPPED) *\].*\([0-9]+ ms\)$|^\[   INFO   \]' "$log/$t.out" | head -40
    grep -E 'rank [0-9]+ failed|Failure|what\(\)|error' "$log/$t.out" | sort -u | head -30
  fi
done

section "summary"
status=0
for t in "${steps[@]}"; do
  line="${result[$t]}"
  [[ "$line" == "exit 0"* ]] || status=1
  f="$log/$t.out"
  if [[ -f "$f" && "$t" == *test* ]]; then
    line="$line; $(gtest_counts "$f")"
    grep -q '^\[  FAILED  \]' "$f" && status=1
    # A GPU that the binaries could not use skips everything: say why.
    if ((gpus > 0)) && grep -q 'no CUDA device' "$f"; then
      line="$line; WARNING GPU present but skipped: $(grep -m1 -o 'no CUDA device.*' "$f")"
      status=1
    fi
  fi
  # A backend that could not start is skipped by the benchmark: say so.
  if [[ -f "$f" ]] && grep -q 'skipping backend' "$f"; then
    line="$line; $(grep -m1 -o 'skipping backend.*' "$f" | cut -c1-200)"
  fi
  printf '%-24s %s\n' "$t" "$line"
done
((nccl_ranks < ranks)) && echo "note: nccl ran at world size $nccl_ranks" \
  "(NCCL needs one GPU per rank; this machine has $gpus), ipc_ring at $ranks"
echo "kernel $(uname -r); gpus: $gpus ($(timeout 10 nvidia-smi -L 2>/dev/null | head -1 | cut -c1-60))"
echo "logs: $log ($(ls "$log" | tr '\n' ' '))"
echo "gpu_check: $( ((status == 0)) && echo PASS || echo FAIL)"
return $status
}

main 2>&1 | tee "$log/gpu_check.txt"
exit "${PIPESTATUS[0]}"
