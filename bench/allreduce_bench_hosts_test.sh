#!/usr/bin/env bash
# allreduce_bench across emulated hosts: gloo and mpi (mpirun placing its ranks on the hosts
# through its rsh agent), 2 ranks on 2 hosts joined by 1 Gbit/s links. Each backend's table
# must appear with every size right (#wrong 0) and the xlink column, beside the link's measured
# TCP floor; no network namespace outlives the run. Skips, saying why, where this machine may not
# create network namespaces or mpirun is missing. Times are not checked: speed is the bench's
# output, not a test's.
set -euo pipefail
bench=$1
out=${TEST_TMPDIR:-$(mktemp -d)}
if ! command -v mpirun >/dev/null; then echo "skipped: mpirun is not installed"; exit 0; fi
source "$2"  # comm/cluster/namespaces_lib.sh
before=$(network_namespaces)
if ! timeout -k 5 300 "$bench" --nprocs=2 --hosts=2 --link=1gbit --backends=gloo,mpi \
    --min_bytes=1024 --max_bytes=65536 --step_factor=64 --max_iters=5 --samples=1 \
    --timeout_s=60 >"$out/out" 2>"$out/err"; then
  if grep -q -e "--hosts needs" -e "cannot create a network namespace" "$out/err"; then
    echo "skipped: $(tail -1 "$out/err")"; exit 0
  fi
  cat "$out/err" "$out/out"; exit 1
fi
for backend in gloo mpi; do
  table=$(sed -n "/^# allreduce\/$backend\$/,/^\$/p" "$out/out")
  echo "$table" | grep -q "xlink" || { echo "no $backend table with xlink:"; cat "$out/out"; exit 1; }
  # size, count, time, p50, p90, algbw, busbw, #wrong, xlink: two sizes, none wrong.
  rows=$(echo "$table" | awk '$1 ~ /^[0-9]+$/ && $8 == 0' | wc -l)
  [ "$rows" -eq 2 ] || { echo "$backend: $rows right rows of 2:"; echo "$table"; exit 1; }
done
grep -q "^# link floor: one TCP stream between two hosts carried" "$out/out" ||
  { echo "no link floor"; cat "$out/out"; exit 1; }
sleep 0.5
[ -z "$(new_network_namespaces "$before")" ] || { echo "a network namespace outlived the bench"; exit 1; }
echo "allreduce_bench on 2 emulated hosts: gloo and mpi tables right"
