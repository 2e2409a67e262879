#!/usr/bin/env bash
# Runs sync_map_test.py with Debian's python3 (numpy, matplotlib), and the trainer whose
# synchronisers it checks the map's declarations against.
set -euo pipefail
export RINGLAB_TRAIN="$PWD/train/train"
export PYTHONPATH="experiments:experiments/fashion_mnist:experiments/cost_model"
exec /usr/bin/python3 experiments/sync_map/sync_map_test.py
