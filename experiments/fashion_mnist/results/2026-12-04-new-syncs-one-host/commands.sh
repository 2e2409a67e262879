#!/bin/bash
# The runs of this folder, one after another, from the repository root after
# `bazel build -c opt //train`: 2 ranks over shm_ring, 3 epochs, each
# synchroniser at its defaults (demo at lr 0.002: it applies signs).
out=${1:-new-syncs}
for spec in "allreduce" "topk" "randomk" "ef_signsgd" "qsgd" "int8" "sparta" \
  "sparseloco" "demo --lr=0.002"; do
  name=${spec%% *}
  extra=""
  [[ "$spec" == *" "* ]] && extra=${spec#* }
  bazel-bin/train/train --dataset=fashion_mnist --model=784,1024,1024,10 \
    --lr=0.1 --batch_size=64 --epochs=3 --nprocs=2 --comm=shm_ring \
    --set_epoch=true --quiet --sync="$name" $extra --out_dir="$out/$name"
done
