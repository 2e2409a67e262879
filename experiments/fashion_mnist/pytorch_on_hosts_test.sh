#!/usr/bin/env bash
# PyTorch DDP itself on emulated hosts (comm/job:on_hosts): pytorch_ddp.py's two gloo ranks on
# two hosts joined by 1 Gbit/s links train bit for bit as the same two ranks spawned on one host
# (with 2 ranks DDP's average (g0 + g1) / 2 is exact whatever the order), and the job leaves no
# network namespace behind. Skips, saying why, without torch or where this machine may not
# create network namespaces (not root, no unprivileged user namespaces).
set -euo pipefail
on_hosts=$1
script=experiments/fashion_mnist/pytorch_ddp.py
out=${TEST_TMPDIR:-$(mktemp -d)}
if ! timeout -k 5 120 /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "skipped: torch does not import with /usr/bin/python3"; exit 0
fi
flags=(--world_size=2 --epochs=1 --train_subset=1024 --model=784,32,10 --quiet --timeout=60)
source "$2"  # comm/cluster/namespaces_lib.sh
before=$(network_namespaces)

timeout -k 5 300 /usr/bin/python3 "$script" "${flags[@]}" --out_dir="$out/one_host"
if ! timeout -k 5 300 "$on_hosts" --nprocs=2 --hosts=2 --link=1gbit -- /usr/bin/python3 \
    "$script" "${flags[@]}" --out_dir="$out/two_hosts" 2>"$out/err"; then
  if grep -q -e "--hosts needs" -e "cannot create a network namespace" "$out/err"; then
    echo "skipped: $(cat "$out/err")"; exit 0
  fi
  cat "$out/err"; exit 1
fi
cut -d, -f1-4 "$out/one_host/losses.csv" >"$out/one.txt"
cut -d, -f1-4 "$out/two_hosts/losses.csv" >"$out/two.txt"
[ "$(wc -l <"$out/one.txt")" -gt 10 ] || { echo "too few losses"; exit 1; }
diff "$out/one.txt" "$out/two.txt" || { echo "the losses differ"; exit 1; }
diff <(cut -d, -f1-4 "$out/one_host/eval.csv") <(cut -d, -f1-4 "$out/two_hosts/eval.csv") ||
  { echo "the evaluations differ"; exit 1; }
[ ! -e "$out/two_hosts/.pytorch_ddp_ranks" ] || { echo "the ranks' scratch was left"; exit 1; }
sleep 0.5
[ -z "$(new_network_namespaces "$before")" ] || { echo "a network namespace outlived the job"; exit 1; }
echo "PyTorch DDP on 2 emulated hosts: $(wc -l <"$out/two.txt") losses bitwise as on one host"
