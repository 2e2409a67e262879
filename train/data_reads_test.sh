#!/usr/bin/env bash
# Each input is read once per rank: a 2-rank job opens each data file at most
# three times in all (the launcher reads its header, each rank the file once),
# and so each --init_dir tensor. Counted with strace across the launcher and
# its ranks.
set -uo pipefail
train=$1
reference=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }
command -v strace >/dev/null || { echo "SKIP: no strace (apt-get install strace)"; exit 0; }

# opens <log> <file name>: successful opens of files with that name.
opens() { grep -E "open(at)?\(.*/$2\"" "$1" | grep -vc '= -1'; }

run() {  # run <log> <flags...>
  local log=$1
  shift
  strace -f -qq -e trace=open,openat -o "$log" "$train" --nprocs=2 --quiet "$@" ||
    fail "the job failed: $*"
}

run "$tmp/npy.log" --data_dir="$reference" --init_dir="$reference/init" \
  --epochs=1 --out_dir="$tmp/npy"
for f in data_rank0.npy targets_rank1.npy fc1.weight.npy fc2.bias.npy; do
  n=$(opens "$tmp/npy.log" "$f")
  echo "$f: opened $n times"
  ((n >= 1 && n <= 3)) || fail "$f opened $n times (at most 3: the launcher its header, each rank the file)"
done

# One data set shared by both ranks: still one header read and one read per
# rank of the one file.
mkdir -p "$tmp/shared"
cp "$reference/data_rank0.npy" "$tmp/shared/data.npy"
cp "$reference/targets_rank0.npy" "$tmp/shared/targets.npy"
run "$tmp/shared.log" --data_dir="$tmp/shared" --epochs=1 --out_dir="$tmp/s"
for f in data.npy targets.npy; do
  n=$(opens "$tmp/shared.log" "$f")
  echo "shared $f: opened $n times"
  ((n >= 1 && n <= 3)) || fail "shared $f opened $n times (at most 3)"
done

dir=/usr/share/datasets/fashion-mnist
if [[ -d $dir ]]; then
  run "$tmp/fm.log" --dataset=fashion_mnist --model=784,10 --epochs=0 \
    --out_dir="$tmp/fm"
  for f in train-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    n=$(opens "$tmp/fm.log" "$f")
    echo "$f: opened $n times"
    ((n >= 1 && n <= 3)) || fail "$f opened $n times (at most 3)"
  done
fi
echo PASS
