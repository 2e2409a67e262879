#!/bin/bash
# The document's run under mpirun (--comm=mpi) ends with parameters bitwise
# equal to the same run over shm_ring: with 2 ranks both average gradients as
# (g0 + g1) / 2, which is exact whatever the order. Fresh TMPDIR and vader
# directory per run: Bazel's sandboxes share PIDs and so OpenMPI's paths.
set -euo pipefail
# Under --config=asan: OpenMPI's own allocations (many from MCA components it
# dlopens and unloads, so unsymbolisable) are reported as leaks at exit; they
# are not ours. Everything else of ASan/UBSan stays on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
train="$1"
reference="experiments/seed_ddp/reference"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/train_mpi.XXXXXX")"
common=(--quiet --timeout=30 --data_dir="$reference" --init_dir="$reference/init")

timeout -k 5 60 "$train" "${common[@]}" --comm=shm_ring --out_dir="$work/shm_ring"
TMPDIR="$work" OMPI_MCA_btl_vader_backing_directory="$work" \
  timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$train" "${common[@]}" --comm=mpi --out_dir="$work/mpi"

for tensor in fc1.weight fc1.bias fc2.weight fc2.bias; do
  if ! cmp -s "$work/shm_ring/final/$tensor.npy" "$work/mpi/final/$tensor.npy"; then
    echo "FAILED: $tensor differs between --comm=mpi and --comm=shm_ring" >&2
    exit 1
  fi
done
grep -q '"ranks_bitwise_equal": true' "$work/mpi/summary.json" || {
  echo "FAILED: MPI ranks ended with different parameters" >&2
  exit 1
}
if [[ "$(wc -l <"$work/mpi/losses.csv")" != 21 ]]; then
  echo "FAILED: losses.csv of the MPI run does not hold 2 x 10 steps" >&2
  exit 1
fi
echo "train_mpi_test: PASSED"
