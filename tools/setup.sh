#!/usr/bin/env bash
# Installs, from Debian's packages only, everything ringlab's build and tests
# need, and says whether GPU targets will be built. Idempotent: quiet when
# nothing is missing. It never installs CUDA.
set -uo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-skylib  # Bazel 4.2.3, offline rules
  g++ googletest libgtest-dev                    # GoogleTest is built from /usr/src/googletest
  libgflags-dev libbenchmark-dev                 # CLI flags, Google Benchmark
  libopenblas-dev                                # CBLAS for the CPU backend
  libsleef-dev                                   # exp and log as torch computes them
  libopenmpi-dev openmpi-bin                     # the mpi communicator, mpirun
  libgloo-dev                                    # the gloo communicator (PyTorch's CPU backend)
  zlib1g-dev dataset-fashion-mnist               # gzip'd IDX files, Fashion-MNIST
  nlohmann-json3-dev                             # JSON for traces and summaries
  nettle-dev                                     # SHA-256 and HMAC for the job's secret
  iproute2 util-linux                            # ip, unshare, nsenter: the two-host test
  strace                                         # counting a job's file opens
  python3-torch python3-numpy python3-matplotlib # the PyTorch reference and the plots
  python3-scipy                                  # the sync map's rank test of repeated runs
  bible-kjv                                      # the char LM's text (with bible-kjv-text)
  libtorch-dev pybind11-dev python3-dev          # the torch.distributed backend
  clang-format                                   # CI's formatting check (clang-format 14)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${#missing[@]} Debian package(s): ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  if ! $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/tmp/ringlab-apt-update.log 2>&1; then
    echo "error: setup: 'apt-get update' failed; see /tmp/ringlab-apt-update.log" >&2
    exit 1
  fi
  if ! $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
      "${missing[@]}" >/tmp/ringlab-apt-install.log 2>&1; then
    echo "error: setup: 'apt-get install ${missing[*]}' failed; see /tmp/ringlab-apt-install.log" >&2
    tail -n 5 /tmp/ringlab-apt-install.log >&2
    exit 1
  fi
fi

# CUDA is detected, never installed: the same search order as //tools/cuda.
cuda_root="${CUDA_PATH:-${CUDA_HOME:-/usr/local/cuda}}"
if [[ -x "$cuda_root/bin/nvcc" ]]; then
  if ((${#missing[@]})); then
    echo "setup: CUDA found at $cuda_root: GPU targets will be built (skip them with --config=nocuda)"
  fi
else
  echo "setup: no CUDA toolkit at $cuda_root (set CUDA_PATH): GPU targets will be skipped"
fi
exit 0
