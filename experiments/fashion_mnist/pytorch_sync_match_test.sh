#!/usr/bin/env bash
# ringlab's allreduce, fp16, powersgd, post_local_sgd and diloco against PyTorch's DDP,
# fp16_compress_hook, powerSGD_hook, post_localSGD_hook + PeriodicModelAverager and DiLoCo, and
# its compressors against hooks written from their papers (pytorch_compressors.py), bit for bit
# (pytorch_sync_match.py); skips without torch or the data set.
set -uo pipefail
/usr/bin/python3 experiments/fashion_mnist/pytorch_sync_match.py --train="$1" "${@:2}"
code=$?
if ((code == 77)); then exit 0; fi
exit "$code"
