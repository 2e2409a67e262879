#!/usr/bin/env bash
# Runs the contract suite (contract_test.py) over the commands Bazel built:
#   contract_test.sh [--with_nccl] NAME=PATH...
set -euo pipefail
here="$(dirname "$0")"
exec /usr/bin/python3 "$here/contract_test.py" --tables "$here/tables" "$@"
