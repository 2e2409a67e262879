#!/usr/bin/env bash
# allreduce_threads_bench without a GPU: its plan (rows, order, iteration
# caps, the nccl row that says why it is empty), its refusal of bad flags,
# and, where no GPU can be used, a failure that says why instead of rows.
set -uo pipefail
bin=$1
fail() { echo "FAIL: $*"; exit 1; }

plan=$("$bin" --plan --ranks=4 --min_bytes=4 --max_bytes=1048576 --iters_cap=300 \
  --variants=ipc_ring,ipc_ring:oneshot=0) || fail "--plan exited $?"
echo "$plan"
# 4 B .. 1 MiB by 4x is 10 sizes; floor + 2 variants each; then nccl.
[[ $(grep -c '^allreduce_threads/floor/' <<<"$plan") == 10 ]] || fail "floor rows"
[[ $(grep -c '^allreduce_threads/ipc_ring/' <<<"$plan") == 10 ]] || fail "ipc_ring rows"
[[ $(grep -c '^allreduce_threads/ipc_ring:oneshot=0/' <<<"$plan") == 10 ]] || fail "variant rows"
grep -q '^allreduce_threads/nccl 0$' <<<"$plan" || fail "no nccl row"
# The floor comes first at every size (xfloor needs it).
first=$(grep -m1 '^allreduce_threads/' <<<"$plan")
[[ "$first" == "allreduce_threads/floor/4 300" ]] || fail "first row: $first"
# Caps: 256 MiB / 4 / bytes, 5..cap.
grep -q '^allreduce_threads/ipc_ring/16384 300$' <<<"$plan" || fail "cap at 16 KiB"
grep -q '^allreduce_threads/ipc_ring/65536 300$' <<<"$plan" || fail "cap at 64 KiB"
grep -q '^allreduce_threads/ipc_ring/1048576 64$' <<<"$plan" || fail "64 at 1 MiB"
total=$(awk '/^total iterations/ {print $3}' <<<"$plan")
sum=$(awk '/^allreduce_threads/ {s += $2} END {print s}' <<<"$plan")
[[ "$total" == "$sum" ]] || fail "total $total != sum of rows $sum"

"$bin" --plan --variants=bogus >/dev/null 2>&1
[[ $? == 2 ]] || fail "an unknown variant is not refused with status 2"
"$bin" --plan --min_bytes=0 >/dev/null 2>&1
[[ $? == 2 ]] || fail "--min_bytes=0 is not refused"

# A real run: without a usable GPU it must fail, saying why, not print rows.
out=$(timeout 120 "$bin" --max_bytes=64 --iters_cap=5 2>&1)
rc=$?
if ((rc != 0)); then
  grep -q '^error: ' <<<"$out" || fail "failed without an error line: $out"
  grep -q 'allreduce_threads/ipc_ring/4 ' <<<"$out" && fail "printed rows: $out"
  echo "no usable GPU here (status $rc): $(grep -m1 '^error: ' <<<"$out")"
else
  grep -q 'allreduce_threads/ipc_ring/64' <<<"$out" || fail "no rows: $out"
  echo "a GPU ran it:"
  echo "$out"
fi
echo PASS
