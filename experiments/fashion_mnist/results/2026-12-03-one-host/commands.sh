#!/bin/bash
# The alternating rounds of alternating-rounds.txt. usage:
#   commands.sh ROUNDS "name|VAR=value ...|BINARY|train flags" ...
# e.g. commands.sh 6 "none||bazel-bin/train/train|--sync=none" \
#        "barrier||bazel-bin/train/train|--sync=barrier" \
#        "ar||bazel-bin/train/train|--sync=allreduce"
# prints, per run, rank 0's and rank 1's median step after step 20.
set -u
rounds=$1; shift
out=$(mktemp -d)
for i in $(seq "$rounds"); do
  for spec in "$@"; do
    IFS='|' read -r name envs bin flags <<< "$spec"
    d=$out/$name-$i
    env $envs "$bin" --dataset=fashion_mnist --model=784,1024,1024,10 --nprocs=2 --epochs=1 \
      --eval_every=0 --out_dir="$d" $flags > /dev/null 2>&1 || echo "FAIL $name"
    python3 - "$d" "$name" <<'PY'
import csv, statistics, sys
d, name = sys.argv[1:]
rows = list(csv.DictReader(open(d + "/losses.csv")))
med = [statistics.median([float(x["step_ms"]) for x in rows if x["rank"] == r][20:])
       for r in "01"]
print("%-14s r0 %.2f r1 %.2f" % (name, med[0], med[1]), flush=True)
PY
  done
done
rm -rf "$out"
