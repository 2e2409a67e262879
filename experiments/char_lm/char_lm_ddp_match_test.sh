#!/usr/bin/env bash
# ringlab's allreduce through ringlab_torch.Synchronizer against PyTorch DDP over gloo on the
# GPT, 2 ranks on this host, 40 steps of the tiny model: every rank's losses and the final
# parameters must be bitwise equal (0 ulp: for 2 ranks the average of two float32 gradients is
# one correctly rounded sum, whichever backend adds). Skips without bible-kjv.
set -euo pipefail
if [[ ! -x /usr/bin/bible ]]; then echo "skipped: bible-kjv is not installed"; exit 0; fi
export MPLCONFIGDIR="${TEST_TMPDIR:-$(mktemp -d)}/matplotlib"
out="${TEST_TMPDIR:-$(mktemp -d)}/match"
train=(/usr/bin/python3 experiments/char_lm/char_lm_train.py --config=tiny --steps=40
  --eval_every=20 --eval_windows=32 --sample_chars=10 --quiet --nprocs=2 --timeout=60
  --ringlab_torch="$(dirname "$1")")
"${train[@]}" --out_dir="$out/ddp" --front=pytorch --backend=gloo
"${train[@]}" --out_dir="$out/ringlab" --front=ringlab --sync=allreduce
/usr/bin/python3 - "$out" <<'PY'
import os, sys
import numpy as np
out = sys.argv[1]
def losses(run):
    with open(os.path.join(out, run, "losses.csv")) as f:
        return sorted(tuple(line.split(",")[:3]) for line in f.read().splitlines()[1:])
a, b = losses("ddp"), losses("ringlab")
assert len(a) == 80, len(a)
differ = [(x, y) for x, y in zip(a, b) if x != y]
assert not differ, f"{len(differ)} of 80 losses differ, first {differ[0]}"
names = sorted(os.listdir(os.path.join(out, "ddp", "final")))
assert names == sorted(os.listdir(os.path.join(out, "ringlab", "final")))
for name in names:
    x, y = (np.load(os.path.join(out, run, "final", name)) for run in ("ddp", "ringlab"))
    assert np.array_equal(x, y), f"{name} differs: max |d| {np.abs(x - y).max()}"
print(f"bit for bit: 80 losses, {len(names)} final tensors")
PY
