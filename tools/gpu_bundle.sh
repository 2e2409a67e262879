#!/usr/bin/env bash
# Builds, here (with Bazel and the CUDA toolkit, no GPU needed), the GPU test
# and benchmark binaries, the trainer and the probe that tools/gpu_check.sh
# runs on a GPU machine without Bazel, and copies them into gpu_bin/ (ignored
# by git through its own .gitignore) so that they can be carried there with
# the working tree (carry: ["gpu_bin"]).
#   tools/gpu_bundle.sh [OUT_DIR]      (default: gpu_bin)
# The GPU machine has neither Bazel nor this machine's Debian libraries
# (OpenBLAS, OpenMPI, Google Benchmark, gflags...): every library a binary
# needs (ldd) that is not glibc, libstdc++, libgcc_s or CUDA's (those come
# from the GPU machine, CUDA's from PyTorch's wheels) is copied into
# OUT_DIR/lib, and libraries over 4 MiB (OpenBLAS) are gzipped there, which
# gpu_check.sh undoes, so that the bundle stays well under the 64 MiB a
# working tree may carry. MANIFEST lists what each binary needs and where it
# comes from. OpenMPI's MCA plugins (dlopened by MPI_Init) are not bundled:
# allreduce_bench calls MPI_Init only for --backends=mpi.
# GPU_BUNDLE_NO_BUILD=1 bundles bazel-bin's binaries as they are (then
# _solib libraries of a dynamic build are bundled too).
# Targets that do not exist (yet) or fail to build are reported and left out;
# the script fails only when none could be bundled or the bundle is too big.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-gpu_bin}
max_bytes=$((48 << 20))  # leaves room in the 64 MiB carry for the tree
gzip_over=$((4 << 20))

# What tools/gpu_check.sh runs (its plan names each).
targets=(
  //tools:gpu_probe
  //comm/conformance:conformance_gpu_test
  //comm/conformance:gpu_backends_test
  //nn:cuda_kernels_test
  //nn:cuda_mlp_test
  //bench:allreduce_bench
  //bench:allreduce_threads_bench
  //bench:train_step_bench
  //train:train
)

# Provided by the GPU machine: glibc, the compiler's runtime, the driver and
# CUDA's big libraries (from the torch wheels, or a toolkit). The CUDA runtime
# (libcudart, under 1 MiB) is bundled too, as a fallback where the machine's
# wheels bring another major version; gpu_check puts the bundle's libraries
# after the machine's.
system_lib='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so|libresolv\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libnvrtc|libnvJitLink|libcurand|libcusparse|libcufft|libnvidia-)'
cuda_lib='^(libcuda\.so|libcublas|libnccl|libnvrtc|libnvJitLink|libcurand|libcusparse|libcufft|libnvidia-)'

mkdir -p "$out"
printf '*\n' >"$out/.gitignore"
rm -rf "$out/lib"
mkdir -p "$out/lib"
built=()
: >"$out/.build.log"
for t in "${targets[@]}"; do
  if [[ -n "${GPU_BUNDLE_NO_BUILD:-}" ]]; then  # bundle bazel-bin as it is
    pkg=${t#//}
    [[ -x "bazel-bin/${pkg%%:*}/${t##*:}" ]] && built+=("$t")
    continue
  fi
  # --dynamic_mode=off: our own libraries linked in, not left as .so files
  # under bazel-bin/_solib (which would not travel); CUDA stays dynamic.
  if bazel build -c opt --dynamic_mode=off "$t" >>"$out/.build.log" 2>&1; then
    built+=("$t")
    # A Fashion-MNIST configuration, once the tree has one, travels as the
    # trainer's flags (gpu_check runs it when this file exists).
    if [[ $t == //train:train && -f experiments/fashion_mnist/gpu_check.args ]]; then
      cp experiments/fashion_mnist/gpu_check.args "$out/fashion_mnist.args"
    fi
  else
    echo "gpu_bundle: skipped $t (no such target, or it failed to build:" \
      "see $out/.build.log)" >&2
  fi
done
if ((${#built[@]} == 0)); then
  echo "error: nothing built" >&2
  exit 1
fi

{
  echo "# gpu_bin built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
    "$(git status --porcelain 2>/dev/null | grep -q . && echo '(with local changes)')"
  echo "# nvcc: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1)"
  echo "# per binary: every library it needs (ldd, transitively), as" \
    "lib (bundled in lib/), sys (glibc/libstdc++/libgcc_s, the GPU machine's)" \
    "or cuda (torch wheels / CUDA toolkit)"
} >"$out/MANIFEST"
status=0
for t in "${built[@]}"; do
  pkg=${t#//}
  pkg=${pkg%%:*}
  name=${t##*:}
  src="bazel-bin/$pkg/$name"
  dst="$out/$name"
  rm -f "$dst"
  cp "$src" "$dst" && chmod u+w "$dst"
  line=""
  # "soname => /path (0x...)", or "soname => not found".
  while read -r soname path; do
    [[ -n "$soname" ]] || continue
    if [[ "$soname" =~ $cuda_lib ]]; then
      line+=" cuda:$soname"
    elif [[ "$soname" =~ $system_lib ]]; then
      line+=" sys:$soname"
    elif [[ "$path" == "not" || ! -f "$path" ]]; then
      line+=" MISSING:$soname"
      echo "gpu_bundle: $name needs $soname, which is not found here" >&2
      status=1
    else
      line+=" lib:$soname"
      [[ -e "$out/lib/$soname" || -e "$out/lib/$soname.gz" ]] && continue
      cp -L "$path" "$out/lib/$soname" && chmod u+w "$out/lib/$soname"
      if (($(stat -c %s "$out/lib/$soname") > gzip_over)); then
        gzip -6 "$out/lib/$soname"
      fi
    fi
  done < <(ldd "$src" 2>/dev/null |
    awk '$2 == "=>" {print $1, $3} $2 != "=>" {n = split($1, p, "/"); print p[n], $1}')
  echo "$name ($t) needs:$line" >>"$out/MANIFEST"
done
echo "# lib/ (bytes, .gz = gzipped, unpacked by gpu_check.sh):" >>"$out/MANIFEST"
(cd "$out/lib" && for f in *; do [[ -f "$f" ]] && echo "#   $f $(stat -c %s "$f")"; done) >>"$out/MANIFEST"
cat "$out/MANIFEST"
total=$(du -sb "$out" | awk '{print $1}')
echo "gpu_bundle: $((total >> 20)) MiB ($total bytes) in $out"
if ((total > max_bytes)); then
  echo "error: $out is over $((max_bytes >> 20)) MiB; the carry limit is 64 MiB" >&2
  exit 1
fi
exit $status
