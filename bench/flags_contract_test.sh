#!/usr/bin/env bash
# The command-line contract of every binary (cli/flags.h): bad input, whether
# an unknown flag, a malformed value, a stray argument or a Google Benchmark
# flag Benchmark cannot parse, ends in one "error: ..." line on stderr and
# exit status 2, before anything runs; --help exits 0. Nothing here measures
# or trains.
#   flags_contract_test.sh NAME=PATH...
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
declare -A bin
for arg in "$@"; do bin[${arg%%=*}]=${arg#*=}; done

# expect_usage_error NAME ARGS...: status 2, stderr's last line "error: ...",
# and no other line unless it is Benchmark's own complaint about a flag.
expect_usage_error() {
  local name=$1
  shift
  local err status
  err=$(timeout 60 "${bin[$name]}" "$@" 2>&1 >/dev/null)
  status=$?
  [[ $status == 2 ]] || fail "$name $*: status $status, not 2 (stderr: $err)"
  [[ $(tail -n 1 <<<"$err") == "error: "* ]] || fail "$name $*: no error line: $err"
  if [[ "$*" != *--benchmark_* ]]; then
    [[ $(wc -l <<<"$err") == 1 ]] || fail "$name $*: more than one line: $err"
  fi
  echo "ok: $name $* -> $(tail -n 1 <<<"$err")"
}

expect_help() {
  local name=$1 out status
  out=$(timeout 60 "${bin[$name]}" --help 2>&1)
  status=$?
  [[ $status == 0 ]] || fail "$name --help: status $status"
  [[ -n "$out" ]] || fail "$name --help printed nothing"
  echo "ok: $name --help"
}

for name in "${!bin[@]}"; do
  expect_usage_error "$name" --no_such_flag=1
  expect_usage_error "$name" stray
  expect_usage_error "$name" --flagfile=/dev/null
  expect_help "$name"
done

# Malformed values, and values out of range, per binary.
if [[ -v bin[allreduce_bench] ]]; then
  expect_usage_error allreduce_bench --nprocs=abc
  expect_usage_error allreduce_bench --step_factor=1
  expect_usage_error allreduce_bench --threads=-1
  expect_usage_error allreduce_bench --benchmark_repetitions=x
  expect_usage_error allreduce_bench --benchmark_no_such=1
  # Backend variants are typed tuning, checked before any rank starts.
  expect_usage_error allreduce_bench --backends=shm_ring:chunk=12
  expect_usage_error allreduce_bench --backends=shm_ring:bogus=1
  RINGLAB_SHM_CHUNK_BYTES=abc expect_usage_error allreduce_bench
fi
if [[ -v bin[allreduce_threads_bench] ]]; then
  expect_usage_error allreduce_threads_bench --ranks=two
  expect_usage_error allreduce_threads_bench --plan --min_bytes=0
  expect_usage_error allreduce_threads_bench --benchmark_min_time=abc
fi
if [[ -v bin[ddp_step_bench] ]]; then
  expect_usage_error ddp_step_bench --nprocs=abc
  expect_usage_error ddp_step_bench --nprocs=0
  expect_usage_error ddp_step_bench --benchmark_filter
fi
if [[ -v bin[train_step_bench] ]]; then
  expect_usage_error train_step_bench --benchmark_min_time=abc
fi
if [[ -v bin[conformance_mpi_main] ]]; then
  expect_usage_error conformance_mpi_main
  expect_usage_error conformance_mpi_main --list --case=exact_sum
  expect_usage_error conformance_mpi_main --list=maybe
  list=$("${bin[conformance_mpi_main]}" --list) || fail "--list exited $?"
  [[ -n "$list" ]] || fail "--list printed no case"
fi
if [[ -v bin[train] ]]; then
  expect_usage_error train --epochs=abc
  expect_usage_error train --lr
fi
echo PASS
