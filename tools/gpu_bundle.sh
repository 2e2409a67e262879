#!/usr/bin/env bash
# Builds, here (with Bazel and the CUDA toolkit, no GPU needed), the GPU test
# and benchmark binaries that tools/gpu_check.sh runs on a GPU machine without
# Bazel, and copies them into gpu_bin/ (ignored by git through its own
# .gitignore) so that they can be carried there with the working tree.
#   tools/gpu_bundle.sh [OUT_DIR]      (default: gpu_bin)
# Targets that do not exist (yet) or fail to build are reported and left out;
# the script fails only when none could be bundled.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-gpu_bin}

targets=(
  //comm:gpu_backends_test
  //nn:cuda_mlp_test
  //bench:allreduce_bench
  //bench:train_step_bench
)

mkdir -p "$out"
printf '*\n' >"$out/.gitignore"
built=()
: >"$out/.build.log"
for t in "${targets[@]}"; do
  # --dynamic_mode=off: our own libraries linked in, not left as .so files
  # under bazel-bin/_solib (which would not travel); CUDA stays dynamic.
  if bazel build -c opt --dynamic_mode=off "$t" >>"$out/.build.log" 2>&1; then
    built+=("$t")
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
} >"$out/MANIFEST"
for t in "${built[@]}"; do
  pkg=${t#//}
  pkg=${pkg%%:*}
  name=${t##*:}
  src="bazel-bin/$pkg/$name"
  dst="$out/$name"
  rm -f "$dst"
  cp "$src" "$dst" && chmod u+w "$dst"
  # The CUDA libraries each binary needs by soname: what the GPU machine's
  # LD_LIBRARY_PATH must provide.
  needs=$(objdump -p "$dst" 2>/dev/null | awk '/NEEDED/ && /cuda|cublas|nccl/ {print $2}' | tr '\n' ' ')
  echo "$name $t needs: ${needs:-(no CUDA libraries)}" >>"$out/MANIFEST"
done
cat "$out/MANIFEST"
du -sh "$out" | awk '{print "gpu_bundle: " $1 " in " $2}'
