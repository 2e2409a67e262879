#!/usr/bin/env bash
# Everything GPU-side, in one call that fits a short loan of one GPU machine
# (an H200 without Bazel): the binaries tools/gpu_bundle.sh built elsewhere
# and carried here, each step under a time budget computed from its
# iteration caps, the environment printed first, a summary table last.
#   tools/gpu_check.sh [BIN_DIR]            (default: ./gpu_bin)
#   tools/gpu_check.sh --dry-run [BIN_DIR]  the plan: every step, its caps,
#                                           its budget and the total (<= 8
#                                           min); runs nothing, needs no GPU
# Steps: the cuBLAS MLP against the CPU backend and the kernels one by one;
# the conformance suite over nccl (world 1), ipc_ring with ranks as threads
# (all of it) and as processes (a subset: on one GPU their kernels
# time-slice, each wait costing a time slice); gpu_backends_test; the
# benchmarks (nccl, ipc_ring, ranks as threads against the device floor,
# the CUDA training step); the seed configuration trained with --device=cuda
# three ways and on the CPU, compared; Fashion-MNIST's once it exists.
# A machine where no GPU can be used fails ("nothing ran on a GPU"), as does
# any GPU case skipped for want of a device, a wrong element, a step over its
# budget or a step that could not run. Everything goes to one folder: $OUT
# when set (the device tool brings it back), else a temporary one: the plan,
# the environment, each step's complete output (and benchmark JSON, training
# outputs), summary.txt and gpu_check.txt (all of this output).
# The CUDA runtime, cuBLAS and NCCL come from PyTorch's wheels
# (site-packages/nvidia/*/lib, of a python3 that has torch), a toolkit under
# /usr/local/cuda* being the fallback, then BIN_DIR/lib.
# Environment: PYTHON (the python3 to ask first); GPU_CHECK_BUDGET_SCALE
# (multiplies every budget; for testing this script).
set -u
limit_s=480  # the whole check, on one H200
dry_run=0
if [[ "${1:-}" == "--dry-run" ]]; then
  dry_run=1
  shift
fi
if [[ "${1:-}" == -* ]]; then
  echo "usage: $0 [--dry-run] [BIN_DIR]" >&2
  exit 2
fi
bin=${1:-./gpu_bin}
here=$(cd "$(dirname "$0")" && pwd)
log=${OUT:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$log"
cd "$(dirname "$0")/.." 2>/dev/null || true  # tests read paths from the repo root
[[ -d "$bin" ]] || [[ ! -d "$OLDPWD/$bin" ]] || bin="$OLDPWD/$bin"
[[ -d "$bin" ]] && bin=$(cd "$bin" && pwd)

# --- budgets -----------------------------------------------------------------
# A step's budget is its work under these per-unit costs, x1.5, rounded up to
# 5 s (at least 5 s), each assumption a worst case on one H200:
job_s=1           # a process starting and creating its CUDA context
lib_job_s=2       # the same loading NCCL or cuBLAS (and making a handle)
proc_coll_ms=40   # a collective of ranks as processes sharing the GPU
                  # (their spinning kernels time-slice: <= 20 slices of 2 ms)
thr_coll_ms=1     # a collective of ranks as threads (side by side: us each)
kill_grace_s=2    # timeout's SIGKILL after SIGTERM, per step
scale=${GPU_CHECK_BUDGET_SCALE:-1}

# budget JOBS LIB_JOBS PROC_COLLECTIVES THREAD_COLLECTIVES FIXED_S
budget() {
  awk -v j="$1" -v jn="$2" -v p="$3" -v t="$4" -v f="$5" -v js="$job_s" \
    -v njs="$lib_job_s" -v pm="$proc_coll_ms" -v tm="$thr_coll_ms" -v k="$scale" '
    BEGIN { s = 1.5 * (j * js + jn * njs + p * pm / 1000 + t * tm / 1000 + f);
            s = 5 * int((s + 4.999) / 5); if (s < 5) s = 5;
            s = s * k; if (s < 1) s = 1; printf "%d", s }'
}

# IterationsFor (bench/rank_thread_pool.h) summed over a sweep: the
# iterations of one row per size from MIN to MAX bytes, capped at CAP.
sweep_iterations() {
  awk -v lo="$1" -v hi="$2" -v cap="$3" 'BEGIN {
    for (b = lo; b <= hi; b *= 4) {
      it = int(int(268435456 / b) / 4); if (it < 5) it = 5; if (it > cap) it = cap;
      if (it < 1) it = 1; n += it }
    print n }'
}

# --- the plan ------------------------------------------------------------------
names=() budgets=() caps=() cmds=() kinds=()
# add_step NAME KIND BUDGET CAPS COMMAND. KIND: gtest, bench, train, check,
# env, optional-* (absent is not a failure).
add_step() {
  names+=("$1")
  kinds+=("$2")
  budgets+=("$3")
  caps+=("$4")
  cmds+=("$5")
}

g="--gtest_color=no"
json() { echo "--benchmark_out=$log/$1.json --benchmark_out_format=json"; }
proc_conformance="Conformance/ipc_ring.exact_sums:Conformance/ipc_ring.unaligned_buffers"
proc_conformance+=":Conformance/ipc_ring.bitwise_identical_across_ranks"
proc_conformance+=":Conformance/ipc_ring.broadcast_from_every_root:Conformance/ipc_ring.bus_bytes"
proc_conformance+=":Conformance/ipc_ring.argument_errors:Conformance/ipc_ring.mismatched_count_ring"
proc_conformance+=":Conformance/ipc_ring.mismatched_op_one_shot:Conformance/ipc_ring.mismatched_root_inline"
proc_conformance+=":Conformance/ipc_ring.rank_killed_mid_collective/rank0"
proc_conformance+=":Conformance/ipc_ring.absent_rank_times_out_naming_it"
proc_conformance+=":Conformance/ipc_ring.dtype_exact_sums:Conformance/ipc_ring.mismatched_dtype_ring"
threads_args="--ranks=4 --variants=ipc_ring,ipc_ring:oneshot=0,ipc_ring:oneshot=1073741824"
threads_args+=" --min_bytes=4 --max_bytes=67108864 --iters_cap=200 --timeout_s=30"
threads_rows=$(sweep_iterations 4 67108864 200)  # per variant, and the floor
threads_coll=$((threads_rows * 3 * 2 + threads_rows))  # barrier + op; floor
nccl_iters=$(sweep_iterations 65536 67108864 2000)
ipc_iters=$(sweep_iterations 1048576 67108864 2000)
seed="--quiet --epochs=10"

add_step environment env 30 \
  "kernel, driver, compute/persistence mode, MPS, ldd, gpu_probe; bounded by its timeouts (nvidia-smi 3x3 s, python 2x6 s, probe 8 s)" \
  ":"
add_step cuda_kernels_test gtest "$(budget 1 0 0 0 10)" \
  "1 process; 6 kernels, shapes to 65536x257 and 16.8M elements (past one 65535x256 grid); CPU references ~7 s (6 s on a 2-core VM)" \
  "$bin/cuda_kernels_test $g"
add_step cuda_mlp_test gtest "$(budget 0 1 0 0 2)" \
  "1 process; nets 10,5,2 64,256,128,10 7,33,1 at batch 37, 3 SGD variants x 3 steps" \
  "$bin/cuda_mlp_test $g"
add_step conformance_nccl gtest "$(budget 0 6 0 400 2)" \
  "nccl at world 1 only (NCCL needs one GPU per rank): 6 jobs of 1 process, ~400 collectives" \
  "$bin/conformance_gpu_test $g --gtest_filter=Conformance/nccl.*"
add_step conformance_ipc_ring_threads gtest "$(budget 40 0 0 1200 12)" \
  "ranks as threads, worlds 1-4, the whole suite: 40 jobs (27 cases, 9 mismatches, 3 leaving ranks, 1 absent), ~1200 collectives per rank; 5 s join + 1 s op deadlines waited out" \
  "$bin/conformance_gpu_test $g --gtest_filter=Conformance/ipc_ring_threads.*"
add_step conformance_ipc_ring gtest "$(budget 16 0 81 0 6)" \
  "ranks as processes, world <= 2 (RINGLAB_TEST_MAX_PROCESS_RANKS=2), 11 of the cases (the rest runs as threads): 16 jobs, ~81 time-sliced collectives, 1 killed and 1 absent rank" \
  "env RINGLAB_TEST_MAX_PROCESS_RANKS=2 $bin/conformance_gpu_test $g --gtest_filter=$proc_conformance"
add_step gpu_backends_threads gtest "$(budget 17 0 0 300 5)" \
  "ipc_ring_threads, worlds 2-4: ring and one-shot orders bit for bit, pieces, 4 KiB chunks, mismatches: 17 jobs, ~300 collectives" \
  "$bin/gpu_backends_test $g --gtest_filter=*/ipc_ring_threads"
add_step gpu_backends_ipc_ring gtest "$(budget 8 0 103 0 3)" \
  "ipc_ring as processes, world 2 (RINGLAB_TEST_MAX_PROCESS_RANKS=2): the same checks, 8 jobs, ~103 time-sliced collectives" \
  "env RINGLAB_TEST_MAX_PROCESS_RANKS=2 $bin/gpu_backends_test $g --gtest_filter=*/ipc_ring"
add_step gpu_backends_other gtest "$(budget 1 1 0 0 2)" \
  "host checks, nccl (two ranks on one GPU refused): 2 jobs" \
  "$bin/gpu_backends_test $g --gtest_filter=-*/ipc_ring:*/ipc_ring_threads"
add_step allreduce_nccl bench "$(budget 0 1 0 $((nccl_iters * 2)) 3)" \
  "nccl, world 1, 64 KiB..64 MiB, $nccl_iters iterations (allreduce_bench's counts), a barrier and an allreduce each" \
  "$bin/allreduce_bench --nprocs=1 --backends=shm_ring,nccl --min_bytes=65536 --max_bytes=67108864 --timeout_s=30 --floor=false --benchmark_filter=allreduce/nccl/ $(json allreduce_nccl)"
add_step allreduce_ipc_ring bench "$(budget 2 0 $((ipc_iters * 2 + 4)) 0 2)" \
  "ipc_ring, 2 processes time-slicing the GPU, 1..64 MiB only, $ipc_iters iterations" \
  "$bin/allreduce_bench --nprocs=2 --backends=shm_ring,ipc_ring --min_bytes=1048576 --max_bytes=67108864 --timeout_s=30 --floor=false --benchmark_filter=allreduce/ipc_ring/ $(json allreduce_ipc_ring)"
add_step allreduce_threads bench "$(budget 1 0 0 "$threads_coll" 8)" \
  "4 ranks as threads, 3 variants (default, ring only, one-shot only) and the device floor, 4 B..64 MiB, at most 200 iterations per size: $threads_rows per row, $threads_coll collectives" \
  "$bin/allreduce_threads_bench $threads_args $(json allreduce_threads)"
add_step train_step_cuda bench "$(budget 0 1 0 0 3)" \
  "2 CUDA rows (10,5,2 at batch 50; 1024,4096,4096,10 at batch 256), 0.2 s each" \
  "$bin/train_step_bench --benchmark_filter=BM_CudaStep --benchmark_min_time=0.2 $(json train_step_cuda)"
add_step train_seed_cpu train "$(budget 0 0 0 0 4)" \
  "the seed configuration (10,5,2, 10 epochs) on the CPU over shm_ring, 2 ranks and 1 (the nccl run's world): the references" \
  "$bin/train $seed --device=cpu --comm=shm_ring --nprocs=2 --out_dir=$log/train_seed_cpu && $bin/train $seed --device=cpu --comm=shm_ring --nprocs=1 --out_dir=$log/train_seed_cpu_1rank"
add_step train_seed_threads train "$(budget 0 1 0 12 2)" \
  "the same, --device=cuda, 2 ranks as threads (ipc_ring_threads): 12 collectives" \
  "$bin/train $seed --device=cuda --comm=ipc_ring_threads --nprocs=2 --out_dir=$log/train_seed_threads"
add_step train_seed_ipc_ring train "$(budget 0 2 12 0 2)" \
  "the same, 2 ranks as processes (ipc_ring): 12 time-sliced collectives" \
  "$bin/train $seed --device=cuda --comm=ipc_ring --nprocs=2 --out_dir=$log/train_seed_ipc_ring"
add_step train_seed_nccl train "$(budget 0 1 0 12 2)" \
  "the same at world 1 over nccl (one GPU)" \
  "$bin/train $seed --device=cuda --comm=nccl --nprocs=1 --out_dir=$log/train_seed_nccl"
add_step train_seed_compare check 5 \
  "losses of the three CUDA runs against the CPU run's, within 1e-4 relative (cuda_mlp_test's tolerance); ranks bitwise equal" \
  "compare_seed_runs"
add_step train_fashion_mnist optional-train "$(budget 0 1 0 0 21)" \
  "the Fashion-MNIST configuration, short, once it exists (BIN_DIR/fashion_mnist.args: train's flags; at most ~20 s of training)" \
  "$bin/train \$(cat $bin/fashion_mnist.args) --device=cuda --out_dir=$log/train_fashion_mnist"

total=5  # the summary's own work
for i in "${!names[@]}"; do total=$((total + budgets[i] + kill_grace_s)); done

print_plan() {
  echo "gpu_check plan: ${#names[@]} steps; per-unit worst cases: process start" \
    "${job_s} s (${lib_job_s} s with NCCL or cuBLAS), collective ${proc_coll_ms} ms as processes" \
    "sharing a GPU, ${thr_coll_ms} ms as threads; budget = 1.5 x work, in 5 s steps" \
    "(scale $scale)"
  for i in "${!names[@]}"; do
    printf 'step %-30s budget %4d s  kind %-14s caps: %s\n' "${names[i]}" \
      "${budgets[i]}" "${kinds[i]}" "${caps[i]}"
    printf '     %-30s command: %s\n' "" "${cmds[i]}"
  done
  echo "total budget: $total s (steps + ${kill_grace_s} s kill grace each + 5 s), limit $limit_s s"
}

if ((dry_run)); then
  print_plan | tee "$log/plan.txt"
  if ((total > limit_s)); then
    echo "gpu_check: the plan needs $total s, more than the $limit_s s limit"
    exit 1
  fi
  exit 0
fi

# The real run: environment, steps, verdicts, summary.
source "$here/gpu_check_lib.sh"
main 2>&1 | tee "$log/gpu_check.txt"
exit "${PIPESTATUS[0]}"
