#!/usr/bin/env bash
# The trainer's threads mode (--comm=ipc_ring_threads: the ranks as threads of
# one process on one GPU). Without a GPU: its refusals, each one "error:"
# line and status 2. With one: the seed example's configuration on 2 ranks as
# threads, every rank ending with the same bits, losses next to the CPU
# run's within 1e-4 (cuda_mlp_test's tolerance for cuBLAS against OpenBLAS:
# the same operations summed in other orders).
set -uo pipefail
train=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }

# expect_usage_error <what the message must contain> <args...>
expect_usage_error() {
  local want=$1
  shift
  local out rc
  out=$("$train" "$@" 2>&1)
  rc=$?
  [[ $rc == 2 ]] || fail "'$*' exited $rc, not 2: $out"
  [[ $(grep -c '^error: ' <<<"$out") == 1 ]] || fail "'$*': not one error line: $out"
  grep -q -- "$want" <<<"$out" || fail "'$*': no '$want' in: $out"
  echo "ok: $* -> $(grep '^error: ' <<<"$out")"
}

help=$("$train" --help 2>&1)
if ! grep -q "ipc_ring_threads: .*ranks as threads" <<<"$help"; then
  # A build without CUDA has no threads backend: naming it is bad input.
  expect_usage_error "unknown communicator 'ipc_ring_threads' (linked into this binary: " \
    --comm=ipc_ring_threads
  echo "PASS (this build has no CUDA: no ranks-as-threads backend)"
  exit 0
fi
expect_usage_error "works on GPU memory: add --device=cuda" --comm=ipc_ring_threads
expect_usage_error "every rank is a thread" \
  --comm=ipc_ring_threads --device=cuda --fault_after_step=1
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 \
  expect_usage_error "start it once" --comm=ipc_ring_threads --device=cuda

out=$("$train" --comm=ipc_ring_threads --device=cuda --nprocs=2 --quiet \
  --out_dir="$tmp/threads" 2>&1)
rc=$?
if ((rc != 0)); then
  # No usable GPU: refused before any rank starts, saying why.
  [[ $rc == 2 ]] || fail "without a GPU: status $rc, not 2: $out"
  grep -q "no usable device" <<<"$out" || fail "without a GPU: $out"
  echo "no usable GPU here: $(grep '^error: ' <<<"$out")"
  echo PASS
  exit 0
fi
grep -q '"ranks_bitwise_equal": true' "$tmp/threads/summary.json" ||
  fail "ranks differ: $(cat "$tmp/threads/summary.json")"
[[ $(tail -n +2 "$tmp/threads/losses.csv" | cut -d, -f1 | sort -u | tr '\n' ' ') == "0 1 " ]] ||
  fail "losses.csv does not hold ranks 0 and 1"
"$train" --comm=shm_ring --device=cpu --nprocs=2 --quiet --out_dir="$tmp/cpu" ||
  fail "the CPU run failed"
# rank,epoch,step,loss,...: the same steps, losses within 1e-4 relative.
paste -d, <(cut -d, -f1-4 "$tmp/threads/losses.csv") <(cut -d, -f4 "$tmp/cpu/losses.csv") |
  tail -n +2 | awk -F, '
    { d = $4 - $5; if (d < 0) d = -d; m = $5 < 0 ? -$5 : $5; if (m < 1) m = 1;
      if (d / m > worst) worst = d / m; n++ }
    END { printf "%d losses, largest relative difference %.3g (tolerance 1e-4)\n", n, worst;
          exit !(n > 0 && worst <= 1e-4) }' || fail "losses differ from the CPU run's"
echo PASS
