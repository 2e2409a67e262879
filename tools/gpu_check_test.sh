#!/usr/bin/env bash
# tools/gpu_check.sh without a GPU: its plan (every step, caps, budgets, the
# total within 8 minutes, the threads benchmark's iterations as the binary
# counts them), its verdict where no GPU can be used (FAIL, nothing ran), and
# its verdicts over a bundle of stubs that behave as a passing GPU would
# (PASS) or fail one way at a time (a failed test, a skipped GPU case, a
# wrong element, a step over its budget).
#   gpu_check_test.sh GPU_CHECK STUB GPU_PROBE THREADS_BENCH
set -uo pipefail
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
check=$(abs "$1") stub=$(abs "$2") probe=$(abs "$3") threads_bench=$(abs "$4")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }
steps=(environment cuda_kernels_test cuda_mlp_test conformance_nccl
  conformance_ipc_ring_threads conformance_ipc_ring gpu_backends_threads
  gpu_backends_ipc_ring gpu_backends_other allreduce_nccl allreduce_ipc_ring
  allreduce_threads train_step_cuda train_seed_cpu train_seed_threads
  train_seed_ipc_ring train_seed_nccl train_seed_compare train_fashion_mnist)

# --- the plan ------------------------------------------------------------------
plan=$(OUT="$tmp/dry" bash "$check" --dry-run "$tmp/none") || fail "--dry-run exited $?"
echo "$plan" | head -3
for s in "${steps[@]}"; do
  grep -qE "^step $s +budget +[0-9]+ s +kind [a-z-]+ +caps: .{20,}" <<<"$plan" ||
    fail "no step '$s' with a budget and its caps"
done
[[ $(grep -c '^step ' <<<"$plan") == ${#steps[@]} ]] || fail "steps other than expected"
total=$(sed -n 's/^total budget: \([0-9]*\) s.*/\1/p' <<<"$plan")
sum=$(awk '/^step / {s += $4 + 2} END {print s + 5}' <<<"$plan")
[[ -n "$total" && "$total" == "$sum" ]] || fail "total '$total' is not the steps' sum $sum"
((total <= 480)) || fail "total $total s over 8 minutes"
grep -q '^total budget: .* limit 480 s$' <<<"$plan" || fail "no limit line"
[[ -f "$tmp/dry/plan.txt" ]] || fail "the plan is not left in the output folder"
# The threads benchmark's iterations as the binary counts them.
args=$(grep -A1 '^step allreduce_threads ' <<<"$plan" | sed -n 's/.*allreduce_threads_bench \(.*\) --benchmark_out.*/\1/p')
per_row=$(sed -n 's/^step allreduce_threads .* \([0-9]*\) per row.*/\1/p' <<<"$plan")
# shellcheck disable=SC2086
binary_total=$("$threads_bench" --plan $args | sed -n 's/^total iterations //p')
rows=$("$threads_bench" --plan $args | grep -c '^allreduce_threads/.*/[0-9]* [0-9]*$')
sizes=$("$threads_bench" --plan $args | grep -c '^allreduce_threads/floor/')
[[ -n "$per_row" && "$binary_total" == $((per_row * rows / sizes)) ]] ||
  fail "the plan counts $per_row per row, the binary $binary_total over $rows rows of $sizes sizes"
echo "plan: ${#steps[@]} steps, $total s; threads bench $binary_total iterations, as the binary counts"
# A plan over the limit is refused.
out=$(GPU_CHECK_BUDGET_SCALE=2 OUT="$tmp/dry2" bash "$check" --dry-run "$tmp/none") &&
  fail "a plan of twice the budgets passed"
grep -q "more than the 480 s limit" <<<"$out" || fail "no word of the limit: $out"

# The probe takes no arguments: one refused is one `error:` line, status 2.
err=$("$probe" --verbose 2>&1 >/dev/null)
(($? == 2)) && [[ "$err" == "error: "* ]] || fail "gpu_probe --verbose: $err"

# --- a machine without a usable GPU --------------------------------------------
mkdir -p "$tmp/nogpu"
cp "$probe" "$tmp/nogpu/gpu_probe"
for b in cuda_kernels_test cuda_mlp_test conformance_gpu_test gpu_backends_test \
  allreduce_bench allreduce_threads_bench train_step_bench train; do
  ln -sf "$stub" "$tmp/nogpu/$b"
done
# The real probe says whether this machine has a usable GPU; a stub that
# fails stands in for it where one exists.
if "$probe" >/dev/null 2>&1; then
  printf '#!/bin/sh\necho "probe: FAIL no CUDA device (stub)"\nexit 1\n' >"$tmp/nogpu/gpu_probe"
  chmod +x "$tmp/nogpu/gpu_probe"
fi
out=$(PATH=/usr/bin:/bin OUT="$tmp/nogpu_out" bash "$check" "$tmp/nogpu" 2>&1)
rc=$?
((rc == 1)) || fail "without a GPU: exit $rc: $out"
last=$(tail -1 <<<"$out")
[[ "$last" == "gpu_check: FAIL: no usable GPU ("*"); nothing ran on a GPU" ]] ||
  fail "without a GPU, the last line is: $last"
grep -qE '^cuda_kernels_test +NOT RUN' <<<"$out" || fail "a step ran without a GPU"
grep -q "gpu_check: PASS" <<<"$out" && fail "PASS without a GPU"
for f in plan.txt env.txt summary.txt gpu_check.txt gpu_probe.out; do
  [[ -s "$tmp/nogpu_out/$f" ]] || fail "no $f in the output folder"
done
grep -q '^gpu_probe: ' "$tmp/nogpu_out/env.txt" || fail "the environment lacks the probe"
echo "without a GPU: $last"

# --- a bundle of stubs that pass, then fail one way at a time -------------------
mkdir -p "$tmp/gpu"
for b in gpu_probe cuda_kernels_test cuda_mlp_test conformance_gpu_test gpu_backends_test \
  allreduce_bench allreduce_threads_bench train_step_bench train; do
  ln -sf "$stub" "$tmp/gpu/$b"
done
run() { OUT="$tmp/out_$1" bash "$check" "$tmp/gpu" 2>&1; }
out=$(run pass)
rc=$?
((rc == 0)) || fail "stubs that pass: exit $rc: $(tail -30 <<<"$out")"
[[ $(tail -1 <<<"$out") == "gpu_check: PASS ("*")" ]] || fail "last line: $(tail -1 <<<"$out")"
# The environment comes first, the summary table last, with every step.
[[ $(grep -n '===== environment' <<<"$out" | cut -d: -f1) -lt \
  $(grep -n '===== summary' <<<"$out" | cut -d: -f1) ]] || fail "environment after the summary"
for s in "${steps[@]}"; do
  grep -qE "^$s +(PASS|NOT RUN) " <<<"$(sed -n '/===== summary/,$p' <<<"$out")" ||
    fail "no summary line for $s"
done
grep -qE '^train_fashion_mnist +NOT RUN .*optional' <<<"$out" || fail "fashion-mnist line"
grep -qE '^train_seed_compare +PASS' <<<"$out" || fail "the seed runs were not compared"
[[ -s "$tmp/out_pass/allreduce_threads.json" && -s "$tmp/out_pass/cuda_mlp_test.out" ]] ||
  fail "raw outputs are not in the output folder"
echo "stubs that pass: $(tail -1 <<<"$out")"

expect_fail() {  # VARIABLE=VALUE STEP WHAT
  local out
  out=$(env "$1" bash -c "$(declare -f run); tmp='$tmp' check='$check'; run '$2'")
  [[ $(tail -1 <<<"$out") == "gpu_check: FAIL: "*"$2"* ]] ||
    fail "$1: not a failure naming $2: $(tail -1 <<<"$out")"
  grep -qE "^$2 .*$3" <<<"$out" || fail "$1: the $2 line does not say '$3'"
  echo "$1: $(grep -E "^$2 " <<<"$out" | tail -1 | cut -c1-150)"
}
expect_fail STUB_CUDA_MLP_TEST=fail cuda_mlp_test "failed 1|exit 1"
expect_fail STUB_CUDA_KERNELS_TEST=skip_no_gpu cuda_kernels_test "skipped for want of a device"
expect_fail STUB_ALLREDUCE_THREADS_BENCH=wrong allreduce_threads "WRONG elements"
out=$(STUB_CUDA_MLP_TEST=sleep GPU_CHECK_BUDGET_SCALE=0.2 OUT="$tmp/out_slow" bash "$check" "$tmp/gpu" 2>&1)
grep -qE '^cuda_mlp_test +TIMED OUT' <<<"$out" || fail "no TIMED OUT: $(grep cuda_mlp_test <<<"$out")"
[[ $(tail -1 <<<"$out") == "gpu_check: FAIL: "*cuda_mlp_test* ]] || fail "slow step: $(tail -1 <<<"$out")"
echo "a step over its budget: $(grep -E '^cuda_mlp_test ' <<<"$out" | tail -1)"
echo PASS
