#!/bin/bash
# Runs every conformance case (conformance_mpi_main --list) over the mpi
# backend under mpirun, at 2 and 3 ranks (3 > the cores here). A mismatch
# case must print, on every rank, an error naming both values (MPI checks
# each call on every rank). Each run gets a fresh TMPDIR and vader backing
# directory: concurrent MPI jobs in Bazel sandboxes share PIDs, and with them
# OpenMPI's default paths.
#   conformance_mpi_test.sh BIN [--hosts=H]
# With --hosts=H the ranks run on H emulated hosts (comm/cluster), the binary
# its own launcher (mpirun on host 0, the other hosts' daemons through
# nsenter), at 1 and 2 ranks per host; the whole test skips, saying why,
# where the hosts cannot be made. The launcher fails a job after which a
# namespace of its hosts is still held (a daemon or rank left behind). (The check of ranks given different
# environments needs mpirun's own command line: it runs on one host only.)
set -uo pipefail
# Under --config=asan: OpenMPI's own allocations (many from MCA components it
# dlopens and unloads, so unsymbolisable) are reported as leaks at exit; they
# are not ours. Everything else of ASan/UBSan stays on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
bin="$1"
hosts="${2:-}"
hosts="${hosts#--hosts=}"
hosts="${hosts:-1}"
passed=0
failed=0
# One case at np ranks: its output in $out, mpirun's (or the launcher's)
# status in $status.
run_case() {
  local name="$1" np="$2"
  if ((hosts > 1)); then
    out="$(timeout -k 5 120 "$bin" --hosts="$hosts" --nprocs="$np" \
      --case="$name" </dev/null 2>&1)"
    status=$?
    return
  fi
  local dir
  dir="$(mktemp -d "${TEST_TMPDIR:-/tmp}/mpi.XXXXXX")"
  out="$(TMPDIR="$dir" OMPI_MCA_btl_vader_backing_directory="$dir" \
    timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np "$np" \
    "$bin" --case="$name" </dev/null 2>&1)"
  status=$?
  rm -rf "$dir"
}
if ((hosts > 1)); then
  ranks=("$hosts" "$((2 * hosts))")
  # The launcher exits 77 where this machine cannot make the hosts.
  run_case "$("$bin" --list | head -n 1 | cut -d' ' -f1)" "$hosts"
  if ((status == 77)); then
    echo "conformance_mpi: SKIPPED at --hosts=${hosts}: $out"
    exit 0
  fi
else
  ranks=(2 3)
fi
while read -r name first second; do
  for np in "${ranks[@]}"; do
    run_case "$name" "$np"
    ok=1
    [[ $status -eq 0 ]] || ok=0
    if [[ -n "$first" ]]; then
      # Every rank's "[mismatch]" line names both values.
      lines="$(grep -c '^\[mismatch\]' <<<"$out")"
      both="$(grep '^\[mismatch\]' <<<"$out" | grep -F -- "$first" |
        grep -cF -- "$second")"
      [[ "$lines" -eq "$np" && "$both" -eq "$np" ]] || ok=0
    fi
    if ((ok)); then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
      echo "FAILED: $name at $np ranks on $hosts host(s) (exit $status)"
      echo "$out"
    fi
  done
done < <("$bin" --list)
if ((hosts > 1)); then
  echo "conformance_mpi at ${hosts} hosts: ${passed} passed, ${failed} failed"
  ((failed == 0 && passed > 0))
  exit
fi
# Ranks given different RINGLAB_MPI_CHECK_CALLS take rank 0's: with rank 0
# checking, a mismatch is still named on both ranks (without the agreement,
# rank 1 skipped the check's MPI_Allreduce and the ranks' calls crossed).
dir="$(mktemp -d "${TEST_TMPDIR:-/tmp}/mpi.XXXXXX")"
out="$(TMPDIR="$dir" OMPI_MCA_btl_vader_backing_directory="$dir" \
  timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe \
  -np 1 -x RINGLAB_MPI_CHECK_CALLS=1 "$bin" --case=mismatched_count_ring : \
  -np 1 -x RINGLAB_MPI_CHECK_CALLS=0 "$bin" --case=mismatched_count_ring \
  </dev/null 2>&1)"
rm -rf "$dir"
if [[ "$(grep '^\[mismatch\]' <<<"$out" | grep -F count=1048576 |
  grep -cF count=1048577)" -eq 2 ]]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAILED: ranks with different RINGLAB_MPI_CHECK_CALLS"
  echo "$out"
fi
echo "conformance_mpi: ${passed} passed, ${failed} failed"
((failed == 0 && passed > 0))
