#!/usr/bin/env bash
# compare's bad input, each one `error:` line and exit status 2, and the example script under
# three synchronisers on a 1gbit link, reported. Skips where emulated hosts cannot be made.
set -uo pipefail
compare="$1"
on_hosts="$(dirname "$compare")/compare.runfiles/ringlab/comm/job/on_hosts"
[[ -x "$on_hosts" ]] || on_hosts=comm/job/on_hosts
if ! "$on_hosts" --nprocs=2 --hosts=2 --link=1gbit -- /bin/true >/dev/null 2>&1; then
  echo "skipped: no emulated hosts here (root or user namespaces needed)"
  exit 0
fi
export MPLCONFIGDIR="${TEST_TMPDIR:-$(mktemp -d)}/matplotlib"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/compare"
mkdir -p "$tmp"
example="$PWD/experiments/compare/example_train.py"
cat >"$tmp/fails.py" <<'PY'
import os
print("training")
if os.environ["RANK"] == "1":
    raise ValueError("boom on rank 1")
PY
cat >"$tmp/silent.py" <<'PY'
print("a script that never logs")
PY
failures=0
expect_error() {  # FRAGMENT ARGS...: exit 2, one stderr line holding FRAGMENT
  local fragment="$1"; shift
  local err code
  err=$("$compare" --out_dir="$tmp/out" "$@" 2>&1 >/dev/null); code=$?
  if [[ $code -ne 2 || $(wc -l <<<"$err") -ne 1 || "$err" != *"$fragment"* ]]; then
    echo "FAIL: $* => exit $code: $err (expected one line with: $fragment)"; failures=$((failures + 1))
  else
    echo "ok: $* => $err"
  fi
}
expect_error "no synchroniser nosuch" --syncs=allreduce,nosuch -- /usr/bin/python3 "$example"
expect_error "diloco has no option nope" --syncs=diloco --option=diloco:nope=1 -- \
  /usr/bin/python3 "$example"
expect_error "--link=fast is not unlimited or a rate" --link=fast -- /usr/bin/python3 "$example"
expect_error "--link=0bit: no emulated hosts" --link=0bit -- /usr/bin/python3 "$example"
expect_error "no command" --syncs=allreduce
expect_error "boom on rank 1" --syncs=allreduce -- /usr/bin/python3 "$tmp/fails.py"
expect_error "never called ringlab_compare.log()" --syncs=allreduce -- \
  /usr/bin/python3 "$tmp/silent.py"
# The example under three synchronisers on a 1gbit link.
if ! "$compare" --out_dir="$tmp/run" --link=1gbit --syncs=pytorch_ddp,allreduce,diloco \
    --option=diloco:inner_steps=8 --target=0.5 --target_metric --higher_is_better -- \
    /usr/bin/python3 "$example" --steps=150; then
  echo "FAIL: the example did not run"; failures=$((failures + 1))
fi
for sync in pytorch_ddp allreduce diloco; do
  if ! grep -q "^| $sync" "$tmp/run/report.md" 2>/dev/null; then
    echo "FAIL: report.md has no row for $sync"; failures=$((failures + 1))
  fi
done
[[ -s "$tmp/run/compare.png" ]] || { echo "FAIL: no compare.png"; failures=$((failures + 1)); }
cat "$tmp/run/report.md" 2>/dev/null | head -20
exit $((failures > 0))
