#!/bin/bash
# How the files beside this one were made (2026-12-03, 2 vCPUs AMD EPYC 2.6 GHz, 1 Gbit/s
# links): per layout (2 ranks on 2 hosts, 3 on 3, 4 on 2), the allreduce bench across the link,
# then the training runs (Fashion-MNIST MLP, 1 epoch), then the cost model on both. Made with
# the tree of commit 6d5a6d5 (the same script as 2026-12-02-runs); the model-*.txt lists are the last step's.
#   bazel build -c opt //train //bench:allreduce_bench && bash <this file>
set -u
cd "$(git rev-parse --show-toplevel)"
out=${OUT:-/tmp/cm}; rm -rf "$out"; mkdir -p "$out"
T=bazel-bin/train/train; B=bazel-bin/bench/allreduce_bench
common="--dataset=fashion_mnist --model=784,1024,1024,10 --epochs=1 --link=1gbit"
for layout in "2 2 gloo" "3 3 gloo" "4 2 gloo,hier"; do
  set -- $layout; n=$1; h=$2; comms=$3; tag=n${n}h${h}
  $B --nprocs=$n --hosts=$h --link=1gbit --backends=$comms --min_bytes=64 --max_bytes=16777216 \
     --step_factor=4 --max_iters=100 --samples=5 2>/dev/null >"$out/bench-$tag.txt"
  for c in ${comms//,/ }; do
    for s in allreduce param_avg; do
      [ $c = hier ] && [ $s = param_avg ] && continue
      $T $common --nprocs=$n --hosts=$h --comm=$c --sync=$s --avg_period=16 \
         --out_dir="$out/$tag-$c-$s" >"$out/$tag-$c-$s.log" 2>&1
    done
  done
  (cd "$out" && /usr/bin/python3 "$OLDPWD/experiments/cost_model/cost_model.py" \
     --bench="bench-$tag.txt" --hosts=$h --runs="$(ls -d $tag-*/ | tr '\n' ',')") >"$out/model-$tag.txt"
done
