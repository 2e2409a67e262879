#!/usr/bin/env bash
# Every registered synchroniser through ringlab_torch.Synchronizer from plain PyTorch against
# ringlab's trainer, bit for bit at 2 and 4 ranks (pytorch_front_match.py); skips without torch
# or the data set.
set -uo pipefail
/usr/bin/python3 experiments/fashion_mnist/pytorch_front_match.py --train="$1" \
  --ringlab_torch="$(dirname "$2")" "${@:3}"
code=$?
if ((code == 77)); then exit 0; fi
exit "$code"
