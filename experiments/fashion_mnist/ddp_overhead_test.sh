#!/usr/bin/env bash
# ddp_overhead.py end to end with few steps: every configuration runs (DDP over ringlab and over
# gloo, with DDP's defaults and with gradient_as_bucket_view, the no-op hook at 1 and 2 ranks, the
# floors) and the table has a row for each; bad input
# is one error line with status 2. Skips where torch does not import.
set -euo pipefail
module_dir=$(dirname "$1")
script=experiments/fashion_mnist/ddp_overhead.py
if ! timeout -k 5 120 /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "skipped: torch does not import with /usr/bin/python3"; exit 0
fi
out=${TEST_TMPDIR:-$(mktemp -d)}
timeout -k 5 240 /usr/bin/python3 "$script" --ringlab_torch="$module_dir" --steps=40 \
  --rounds=1 >"$out/table.md" 2>"$out/progress"
cat "$out/table.md"
[ "$(grep -c '^| [A-Za-z].* | [0-9.]* | [0-9.]*x |$' "$out/table.md")" -eq 8 ] ||
  { echo "expected 8 rows of figures"; exit 1; }
for bad in --steps=10 --steps=abc --no_such_flag; do
  set +e
  /usr/bin/python3 "$script" --ringlab_torch="$module_dir" "$bad" 2>"$out/err"
  status=$?
  set -e
  [ "$status" -eq 2 ] && [ "$(wc -l <"$out/err")" -eq 1 ] && grep -q "^error: " "$out/err" ||
    { echo "bad input $bad: status $status, $(cat "$out/err")"; exit 1; }
done
echo "ddp_overhead: every configuration ran"
