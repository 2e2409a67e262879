#!/bin/bash
# The runs of this folder, one after another, from the repository root after
# `bazel build -c opt //train` (as root: emulated hosts): 2 ranks on 2
# emulated hosts joined by 1 Gbit/s links, over gloo, 4 epochs, each
# synchroniser at its defaults (demo at lr 0.002: it applies signs).
out=${1:-new-syncs-1gbit}
for spec in "allreduce" "diloco" "streaming_diloco" "topk" "randomk" \
  "ef_signsgd" "qsgd" "int8" "sparta" "sparseloco" "demo --lr=0.002"; do
  name=${spec%% *}
  extra=""
  [[ "$spec" == *" "* ]] && extra=${spec#* }
  bazel-bin/train/train --dataset=fashion_mnist --model=784,1024,1024,10 \
    --lr=0.1 --batch_size=64 --epochs=4 --nprocs=2 --hosts=2 --link=1gbit \
    --comm=gloo --set_epoch=true --quiet --sync="$name" $extra \
    --out_dir="$out/$name"
done
