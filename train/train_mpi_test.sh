#!/bin/bash
# The seed example's run under mpirun (--comm=mpi) leaves every rank with
# parameters bitwise equal to the same run over shm_ring: with 2 ranks both
# average gradients as (g0 + g1) / 2, which is exact whatever the order. Fresh
# TMPDIR and vader directory per run: Bazel's sandboxes share PIDs and so
# OpenMPI's paths.
set -euo pipefail
# Under --config=asan: OpenMPI's own allocations (many from MCA components it
# dlopens and unloads, so unsymbolisable) are reported as leaks at exit; they
# are not ours. Everything else of ASan/UBSan stays on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
train="$1"
reference="testdata/seed_ddp/reference"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/train_mpi.XXXXXX")"
# One step more than the seed example's 10, with a checkpoint after its 10th: only
# rank 0 writes final/, but every rank writes its own parameters into the
# checkpoint, so the ranks' parameters are compared here, not by the trainer's
# own summary.
common=(--quiet --timeout=30 --data_dir="$reference"
  --init_dir="$reference/init" --epochs=11 --checkpoint_every=10)

timeout -k 5 60 "$train" "${common[@]}" --comm=shm_ring --out_dir="$work/shm_ring"
TMPDIR="$work" OMPI_MCA_btl_vader_backing_directory="$work" \
  timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$train" "${common[@]}" --comm=mpi --out_dir="$work/mpi"

after_ten="checkpoints/step_00000010"
expected="$work/shm_ring/$after_ten/rank0"
for tensor in fc1.weight fc1.bias fc2.weight fc2.bias; do
  for run in shm_ring/$after_ten/rank1 mpi/$after_ten/rank0 mpi/$after_ten/rank1; do
    if ! cmp -s "$expected/$tensor.npy" "$work/$run/$tensor.npy"; then
      echo "FAILED: $tensor of $run differs from shm_ring's rank 0 after 10 steps" >&2
      exit 1
    fi
  done
  if ! cmp -s "$work/shm_ring/final/$tensor.npy" "$work/mpi/final/$tensor.npy"; then
    echo "FAILED: final $tensor differs between --comm=mpi and --comm=shm_ring" >&2
    exit 1
  fi
done
grep -q '"ranks_bitwise_equal": true' "$work/mpi/summary.json" || {
  echo "FAILED: the MPI run's summary says its ranks ended different" >&2
  exit 1
}
if [[ "$(wc -l <"$work/mpi/losses.csv")" != 23 ]]; then
  echo "FAILED: losses.csv of the MPI run does not hold 2 x 11 steps" >&2
  exit 1
fi
# A model big enough for OpenBLAS to split its GEMMs over threads, without
# any communication: under mpirun each rank must still compute what it does
# under ringlab's launcher (one BLAS thread per rank whatever started it;
# with a thread per core, losses differed from step 10 on Fashion-MNIST).
big=(--quiet --timeout=60 --model=784,1024,1024,10 --samples=2048 --epochs=2
  --sync=none --set_epoch=true --lr=0.1)
timeout -k 5 120 "$train" "${big[@]}" --comm=shm_ring --out_dir="$work/big_shm"
TMPDIR="$work" OMPI_MCA_btl_vader_backing_directory="$work" \
  timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
  "$train" "${big[@]}" --comm=mpi --out_dir="$work/big_mpi"
if ! diff <(cut -d, -f1-4 "$work/big_shm/losses.csv") \
  <(cut -d, -f1-4 "$work/big_mpi/losses.csv") >/dev/null; then
  echo "FAILED: --sync=none losses differ between mpirun and ringlab's launcher" >&2
  diff <(cut -d, -f1-4 "$work/big_shm/losses.csv") \
    <(cut -d, -f1-4 "$work/big_mpi/losses.csv") | head -5 >&2
  exit 1
fi
echo "train_mpi_test: PASSED"
