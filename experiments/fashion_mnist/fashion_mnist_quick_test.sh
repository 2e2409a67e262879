#!/usr/bin/env bash
# `--quick` end to end, as a user runs it: the subset of runs trains on
# Debian's Fashion-MNIST (skipped where it is not installed), and the report,
# results.csv and plots come out, every run ok, with the fidelity and speed
# sections filled in (their PASS/FAIL is the report's; figures depend on the
# machine's load and are not asserted here).
set -uo pipefail
runner=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }
if [[ ! -d /usr/share/datasets/fashion-mnist ]]; then
  echo "SKIP: /usr/share/datasets/fashion-mnist missing (apt-get install dataset-fashion-mnist)"
  exit 0
fi
"$runner" --quick --out_dir="$tmp/out" > "$tmp/log" 2>&1 || fail "exit $?: $(tail -20 "$tmp/log")"
cat "$tmp/log"
for f in report.md results.csv accuracy_vs_epoch.png accuracy_vs_bytes.png \
  accuracy_vs_time.png step_breakdown.png; do
  [[ -s $tmp/out/$f ]] || fail "no $f"
done
grep -q "ringlab allreduce, overlap (shm_ring) | ok" "$tmp/out/report.md" ||
  fail "the allreduce run is not ok: $(grep -m3 'shm_ring' "$tmp/out/report.md")"
grep -q "^## Fidelity" "$tmp/out/report.md" || fail "no fidelity section"
# PyTorch DDP over ringlab's torch backend, where it ran (skipped without torch or the
# module): its first 300 losses are PyTorch DDP over gloo's, bit for bit.
if grep -q "PyTorch DDP (ringlab, 2 ranks, 300 steps) | ok |" "$tmp/out/report.md"; then
  grep -q "PyTorch DDP over ringlab on one host (its first 300 steps): all 300 of rank 0's losses bit for bit" \
    "$tmp/out/report.md" || fail "PyTorch DDP over ringlab is not gloo's bit for bit: $(grep -m1 'over ringlab on one host' "$tmp/out/report.md")"
fi
grep -q "^## Speed" "$tmp/out/report.md" || fail "no speed section"
# Across the 1gbit link: its runs and the cost model's fit to the bench on it, unless this
# machine cannot make emulated hosts (then the report says why, in a note).
if ! grep -q "runs across links skipped" "$tmp/out/report.md"; then
  grep -q "ringlab allreduce, overlap (gloo) @ 1gbit | ok |" "$tmp/out/report.md" ||
    fail "the 1gbit allreduce run did not finish: $(grep -m3 '@ 1gbit' "$tmp/out/report.md")"
  grep -q "^Cost model (experiments/cost_model) fitted" "$tmp/out/report.md" ||
    fail "no cost model fit: $(grep -m1 '^Cost model' "$tmp/out/report.md")"
fi
echo PASS
