#!/bin/bash
# Runs mpi_test_main under mpirun with 2 and 3 ranks (3 > the cores here).
# Each run gets a fresh TMPDIR and vader backing directory: concurrent MPI
# jobs in Bazel sandboxes share PIDs, and with them OpenMPI's default paths.
set -euo pipefail
# Under --config=asan: OpenMPI's own allocations (many from MCA components it
# dlopens and unloads, so unsymbolisable) are reported as leaks at exit; they
# are not ours. Everything else of ASan/UBSan stays on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
bin="$1"
for np in 2 3; do
  dir="$(mktemp -d "${TEST_TMPDIR:-/tmp}/mpi.XXXXXX")"
  TMPDIR="$dir" OMPI_MCA_btl_vader_backing_directory="$dir" \
    timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe -np "$np" "$bin"
  rm -rf "$dir"
done
echo "mpi_test: PASSED"
