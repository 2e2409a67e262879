#!/usr/bin/env bash
# Time per training step of the seed example's run: ringlab (bench/ddp_step_bench,
# 2 ranks over shm_ring) and PyTorch DDP (gloo, 2 ranks, 1 thread each) in one
# session, one after the other, so the figures share the machine's load.
#   bazel build -c opt //bench:ddp_step_bench && bench/ddp_vs_pytorch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bench=bazel-out/k8-opt/bin/bench/ddp_step_bench
[[ -x $bench ]] || { echo "error: build it first: bazel build -c opt //bench:ddp_step_bench" >&2; exit 2; }
steps=${STEPS:-2000}
echo "== ringlab: bench/ddp_step_bench ($steps iterations per benchmark)"
"$bench" --benchmark_min_time=0 2>&1 | grep -E "^\[rank 0\] (BM_|Benchmark)" | sed 's/^\[rank 0\] //'
torch_version=$(timeout -k 5 120 /usr/bin/python3 -c 'import torch; print(torch.__version__)') ||
  { echo "error: torch does not import with /usr/bin/python3 within 120 s" >&2; exit 2; }
echo "== PyTorch $torch_version DDP (gloo, CPU): $steps timed steps per rank"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 experiments/seed_ddp/pytorch_reference.py --out "$tmp/ref" --timing_steps "$steps" >/dev/null
/usr/bin/python3 - "$tmp/ref/meta.json" <<'PY'
import json, sys
timing = json.load(open(sys.argv[1]))["timing"]
for rank, t in sorted(timing.items()):
    print(f"{rank}: median {t['median_ms']*1000:.1f} us, mean {t['mean_ms']*1000:.1f} us, min {t['min_ms']*1000:.1f} us")
PY
