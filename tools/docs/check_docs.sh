#!/usr/bin/env bash
# The docs checked against the tree and the commands as built (.ci/run runs
# it): builds every command the docs show, then runs check_docs.py over
# README.md and docs/ with their --help. Bazel options (e.g. --config=ci)
# are passed to the build.
set -uo pipefail
cd "$(dirname "$0")/../.."
commands=(//train:train //bench:allreduce_bench //bench:ddp_step_bench
  //bench:train_step_bench //bench:compressor_bench //comm/job:on_hosts
  //experiments/fashion_mnist:fashion_mnist //experiments/seed_ddp:seed_ddp
  //experiments/cost_model:cost_model //experiments/char_lm:char_lm
  //experiments/compare:compare //experiments/sync_map:sync_map)
# The CUDA bench where it can be built, and without it where not.
log=$(mktemp)
if ! bazel build "$@" "${commands[@]}" //bench:allreduce_threads_bench >"$log" 2>&1 &&
  ! bazel build "$@" "${commands[@]}" >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  rm -f "$log"
  echo "check_docs: the commands do not build" >&2
  exit 1
fi
rm -f "$log"
args=()
for label in "${commands[@]}" //bench:allreduce_threads_bench; do
  package=${label#//}
  path="bazel-bin/${package%%:*}/${label##*:}"
  # Absent where it cannot be built here (the CUDA bench without CUDA).
  if [[ -x "$path" ]]; then args+=("$label=$path"); fi
done
exec /usr/bin/python3 tools/docs/check_docs.py --root . --backends_page docs/backends.md \
  --syncs_page docs/synchronizers.md --repository \
  "${args[@]}"
