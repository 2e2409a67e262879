# The real run of tools/gpu_check.sh, sourced by it once its plan is made
# (names, kinds, budgets, caps, cmds; bin, log, total, limit_s): the
# environment first, then every step under its budget, the verdicts, the
# details, and the summary table last (a tool that keeps only the tail of the
# output keeps it). Not meant to be run by itself.

section() { printf '\n===== %s =====\n' "$*"; }

# Libraries a binary needs that the loader cannot find.
missing_libs() { ldd "$1" 2>/dev/null | awk '/not found/ {print $1}' | sort -u | tr '\n' ' '; }

# The CUDA runtime, cuBLAS and NCCL: the torch wheels' folders (found
# without importing torch, which takes seconds), then a toolkit, then the
# bundle's own (big ones travel gzipped: unpacked outside the bundle).
find_libraries() {
  local libdirs="" c info tried=0
  for c in ${PYTHON:-} python3 /usr/bin/python3 /opt/conda/bin/python3 \
    "${HOME:-/nonexistent}"/.venv/bin/python3 /workspace/.venv/bin/python3 /venv/bin/python3; do
    [[ -n "$c" ]] || continue
    command -v "$c" >/dev/null 2>&1 || [[ -x "$c" ]] || continue
    ((tried++ < 2)) || break
    info=$(timeout 6 "$c" - <<'PY' 2>/dev/null
import glob, importlib.metadata, importlib.util, os, site, sys
spec = importlib.util.find_spec("torch")
if spec is None:
    sys.exit(1)
roots = set(site.getsitepackages() + [site.getusersitepackages()])
roots.add(os.path.dirname(os.path.dirname(spec.origin)))
dirs = set()
for r in roots:
    for pattern in ("nvidia/*/lib", "nvidia/*/lib64", "nvidia/*/*/lib"):
        dirs.update(d for d in glob.glob(os.path.join(r, pattern)) if os.path.isdir(d))
print(":".join(sorted(dirs)))
print("torch %s, %s" % (importlib.metadata.version("torch"), sys.executable))
PY
    ) || continue
    libdirs=$(sed -n 1p <<<"$info")
    echo "python: $(sed -n 2p <<<"$info")${libdirs:+, CUDA wheels in $libdirs}"
    [[ -n "$libdirs" ]] && break
  done
  [[ -n "$libdirs" ]] || echo "python: no torch with CUDA wheels (nvidia/*/lib) found"
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64; do
    [[ -d "$d" ]] && libdirs="${libdirs:+$libdirs:}$d"
  done
  local lib="$bin/lib"
  [[ -d "$lib" ]] && libdirs="${libdirs:+$libdirs:}$lib"
  if compgen -G "$lib/*.gz" >/dev/null; then
    local unpacked z
    unpacked=$(mktemp -d /tmp/gpu_lib.XXXXXX)
    for z in "$lib"/*.gz; do
      gunzip -c "$z" >"$unpacked/$(basename "${z%.gz}")" || echo "error: cannot unpack $z"
    done
    libdirs="$libdirs:$unpacked"
  fi
  export LD_LIBRARY_PATH="${libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
}

# Everything that decides pass or fail before anything runs. Sets gpu_ok
# and gpu_why from gpu_probe (the CUDA runtime's own view).
environment() {
  section "environment"
  echo "date: $(date -u +%FT%TZ); host: $(hostname)"
  echo "kernel: $(uname -r) ($(uname -m)); $(grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null)"
  echo "cpus: $(nproc); memory: $(free -g 2>/dev/null | awk '/Mem:/ {print $2 " GiB"}')"
  if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 3 nvidia-smi 2>&1 | grep -m1 -E 'Driver Version' | sed 's/^[| ]*/nvidia-smi: /; s/[| ]*$//'
    timeout 3 nvidia-smi --query-gpu=index,name,driver_version,compute_mode,persistence_mode,mig.mode.current,memory.used,memory.total,temperature.gpu \
      --format=csv 2>&1 | sed 's/^/gpu: /'
    timeout 3 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1 |
      sed 's/^/gpu process already running: /'
  else
    echo "nvidia-smi: not found"
  fi
  local pipe=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
  if [[ -e "$pipe/control" ]] || pgrep -x nvidia-cuda-mps-control >/dev/null 2>&1; then
    echo "MPS: a control daemon is running (pipe $pipe): ranks' kernels share SMs, not time slices"
  else
    echo "MPS: not running"
  fi
  env | grep -E '^(CUDA_|NCCL_|NVIDIA_)' | sort | sed 's/^/env: /'
  find_libraries
  local exe
  for exe in "$bin"/*; do
    [[ -x "$exe" && -f "$exe" ]] || continue
    echo "ldd $(basename "$exe"): $(ldd "$exe" 2>/dev/null |
      awk '/libcuda\.|libcudart|libcublas|libnccl|not found/ {printf "%s => %s; ", $1, $3}')"
  done
  [[ -f "$bin/MANIFEST" ]] && grep '^#' "$bin/MANIFEST" | head -3 | sed 's/^/bundle: /'
  gpu_ok=0
  gpu_why="gpu_probe is not in $bin"
  if [[ -x "$bin/gpu_probe" ]]; then
    timeout -k 2 8 "$bin/gpu_probe" >"$log/gpu_probe.out" 2>&1
    local rc=$?
    sed 's/^/gpu_probe: /' "$log/gpu_probe.out"
    if ((rc == 0)); then
      gpu_ok=1
    else
      gpu_why="gpu_probe: $(grep -m1 '^probe: FAIL' "$log/gpu_probe.out" | cut -c13-)"
      [[ "$gpu_why" == "gpu_probe: " ]] && gpu_why="gpu_probe exited $rc"
    fi
  fi
}

# "passed P, skipped S, failed F" from gtest's own totals.
gtest_counts() {
  local f=$1 p s fl ok
  p=$(grep -oE '^\[  PASSED  \] [0-9]+' "$f" | tail -1 | grep -oE '[0-9]+$')
  s=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$f" | tail -1 | grep -oE '[0-9]+')
  fl=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$f" | tail -1 | grep -oE '[0-9]+')
  ok=$(grep -cE '^\[       OK \]' "$f")
  if [[ -z "$p" ]]; then
    echo "cut short: ${ok} tests finished OK"
  else
    echo "passed $p, skipped ${s:-0}, failed ${fl:-0}"
  fi
}

# Google Benchmark JSON, one row per line: name, then its counters
# (time_us, busbw_GBps, wrong, xfloor; "-" when absent) and its error.
bench_rows() {
  awk '
    function flush() { if (name != "") printf "%s %s %s %s %s %s\n", name, t, bw, w, x, err }
    /"name":/ { flush(); name = $0; sub(/.*"name": "/, "", name); sub(/".*/, "", name);
                t = bw = w = x = "-"; err = "" }
    /"time_us":/ { t = $2; sub(/,/, "", t) }
    /"busbw_GBps":/ { bw = $2; sub(/,/, "", bw) }
    /"wrong":/ { w = $2; sub(/,/, "", w) }
    /"xfloor":/ { x = $2; sub(/,/, "", x) }
    /"error_message":/ { err = $0; sub(/.*"error_message": "/, "", err); sub(/",?$/, "", err); gsub(/ /, "_", err) }
    END { flush() }' "$1"
}

# The CUDA runs' losses against the CPU runs' (same world size).
compare_seed_runs() {
  local run ref status=0
  for run in threads ipc_ring nccl; do
    ref=train_seed_cpu
    [[ $run == nccl ]] && ref=train_seed_cpu_1rank
    local a="$log/train_seed_$run/losses.csv" b="$log/$ref/losses.csv"
    if [[ ! -f "$a" || ! -f "$b" ]]; then
      echo "train_seed_$run: no losses.csv to compare (the run or $ref failed)"
      status=1
      continue
    fi
    paste -d, <(cut -d, -f1-4 "$a") <(cut -d, -f1-4 "$b") | tail -n +2 | awk -F, -v run="$run" -v ref="$ref" '
      $1 != $5 || $3 != $7 { bad = 1 }
      { d = $4 - $8; if (d < 0) d = -d; m = $8 < 0 ? -$8 : $8; if (m < 1) m = 1;
        if (d / m > worst) worst = d / m; n++ }
      END { printf "train_seed_%s vs %s: %d losses, largest relative difference %.3g (tolerance 1e-4)%s\n",
                   run, ref, n, worst, bad ? ", rows differ" : "";
            exit !(n > 0 && !bad && worst <= 1e-4) }' || status=1
  done
  return $status
}

# Runs step i under its budget; sets result[i] (the summary's detail),
# verdict[i] (PASS, FAIL, TIMED OUT, NOT RUN) and seconds[i].
run_step() {
  local i=$1 name=${names[i]} kind=${kinds[i]} limit=${budgets[i]} cmd=${cmds[i]}
  local out="$log/$name.out" exe rc t0
  seconds[i]=0
  if [[ $kind == env ]]; then
    verdict[i]=$( ((gpu_ok)) && echo PASS || echo FAIL)
    result[i]=$( ((gpu_ok)) && grep -m1 '^probe:' "$log/gpu_probe.out" || echo "no usable GPU: $gpu_why")
    return
  fi
  if [[ $kind == check ]] && ((gpu_ok)); then
    $cmd >"$out" 2>&1 && verdict[i]=PASS || verdict[i]=FAIL
    result[i]=$(tr '\n' ';' <"$out" | sed 's/;$//')
    return
  fi
  if ((!gpu_ok)); then
    verdict[i]="NOT RUN"
    result[i]="no usable GPU"
    return
  fi
  exe=$(awk '{for (k = 1; k <= NF; k++) if ($k !~ /^(env|[A-Z_]+=.*)$/) {print $k; exit}}' <<<"$cmd")
  if [[ $kind == optional-* && (! -x "$exe" || ! -f "$bin/fashion_mnist.args") ]]; then
    verdict[i]="NOT RUN"
    result[i]="optional: not in this bundle yet"
    return
  fi
  if [[ ! -x "$exe" ]]; then
    verdict[i]="NOT RUN"
    result[i]="$(basename "$exe") is not in $bin"
    return
  fi
  local miss
  miss=$(missing_libs "$exe")
  if [[ -n "$miss" ]]; then
    verdict[i]="NOT RUN"
    result[i]="missing libraries: $miss"
    return
  fi
  echo "$(date -u +%T) $name (budget ${limit} s) ..."
  t0=$SECONDS
  timeout -k 2 "$limit" bash -c "$cmd" >"$out" 2>&1
  rc=$?
  seconds[i]=$((SECONDS - t0))
  judge "$i" "$rc" "$out"
}

# The verdict of a finished step.
judge() {
  local i=$1 rc=$2 out=$3 name=${names[i]} kind=${kinds[i]} detail bad=0
  if ((rc == 124 || rc == 137)); then
    verdict[i]="TIMED OUT"
    detail="over its ${budgets[i]} s budget"
  elif ((rc != 0)); then
    detail="exit $rc"
    bad=1
  else
    detail="exit 0"
  fi
  if [[ $kind == gtest ]]; then
    detail+="; $(gtest_counts "$out")"
    grep -q '^\[  FAILED  \]' "$out" && bad=1
    if grep -q 'no CUDA device' "$out"; then
      detail+="; GPU cases skipped for want of a device: $(grep -m1 -o 'no CUDA device.*' "$out" | cut -c1-120)"
      bad=1
    fi
  elif [[ $kind == bench && -f "$log/$name.json" ]]; then
    local rows wrong errors
    rows=$(bench_rows "$log/$name.json")
    wrong=$(awk '$4 != "-" && $4 + 0 != 0 {print $1 ": " $4}' <<<"$rows" | head -3 | tr '\n' ' ')
    errors=$(awk '$6 != "" && $6 !~ /^not_run:_NCCL_refuses/ {print $1 ": " $6}' <<<"$rows" | head -2 | tr '\n' ' ')
    detail+="; $(grep -c . <<<"$rows") rows"
    [[ -n "$wrong" ]] && detail+="; WRONG elements: $wrong" && bad=1
    [[ -n "$errors" ]] && detail+="; errors: $errors" && bad=1
  elif [[ $kind == bench ]]; then
    detail+="; no benchmark JSON"
    bad=1
  elif [[ $kind == train || $kind == optional-train ]]; then
    local summary="$log/$name/summary.json"
    if grep -q '"ranks_bitwise_equal": true' "$summary" 2>/dev/null; then
      detail+="; ranks bitwise equal; last: $(grep -m1 -E '^epoch .*/' <(tac "$out") | cut -c1-70)"
    else
      detail+="; ranks NOT bitwise equal or no summary.json"
      bad=1
    fi
  fi
  [[ -z "${verdict[i]:-}" ]] && verdict[i]=$( ((bad)) && echo FAIL || echo PASS)
  result[i]=$detail
}

details() {
  local f
  for f in allreduce_threads allreduce_ipc_ring allreduce_nccl train_step_cuda; do
    [[ -f "$log/$f.out" ]] || continue
    section "$f"
    sed 's/^\[rank 0\] //' "$log/$f.out" |
      grep -vE '^\*\*\*|^WARNING|Library was built as DEBUG|^Run on|CPU Caches|L[123] |^Load Average|^-+$' |
      cut -c1-170 | head -90
  done
  for f in cuda_mlp_test cuda_kernels_test; do
    [[ -f "$log/$f.out" ]] || continue
    section "$f: largest differences"
    grep '^\[ max diff \]' "$log/$f.out" | sort -t= -k2 -g -r | head -12
  done
  for f in "$log"/conformance_*.out "$log"/gpu_backends_*.out; do
    [[ -f "$f" ]] || continue
    section "$(basename "$f" .out): failures"
    grep -E '^\[  FAILED  \]|rank [0-9]+ failed|Failure' "$f" | sort -u | head -20
  done
}

main() {
  declare -ga verdict result seconds
  section "plan"
  print_plan | tee "$log/plan.txt"
  # Not through a pipe: environment sets gpu_ok and gpu_why in this shell.
  environment >"$log/env.txt" 2>&1
  cat "$log/env.txt"
  section "running"
  local i
  for i in "${!names[@]}"; do run_step "$i"; done
  details
  section "summary"
  local failed=() used=0 gpu_passed=0
  printf '%-30s %-9s %9s  %s\n' step verdict "time/budget" detail | tee "$log/summary.txt"
  for i in "${!names[@]}"; do
    printf '%-30s %-9s %4s/%-4s s  %s\n' "${names[i]}" "${verdict[i]}" \
      "${seconds[i]}" "${budgets[i]}" "${result[i]}"
  done | tee -a "$log/summary.txt"
  for i in "${!names[@]}"; do
    [[ ${verdict[i]} == PASS && ${kinds[i]} == gtest ]] || continue
    gpu_passed=$((gpu_passed + $(grep -E '^\[       OK \]' "$log/${names[i]}.out" |
      grep -cvE 'GpuBackendsHostTest|CudaMlpRegistration')))
  done
  for i in "${!names[@]}"; do
    case "${verdict[i]}" in
      PASS) ;;
      "NOT RUN") [[ ${kinds[i]} == optional-* ]] || failed+=("${names[i]}") ;;
      *) failed+=("${names[i]}") ;;
    esac
    used=$((used + seconds[i]))
  done
  local verdict_line
  if ((!gpu_ok)); then
    verdict_line="gpu_check: FAIL: no usable GPU ($gpu_why); nothing ran on a GPU"
  elif ((gpu_passed == 0)); then
    verdict_line="gpu_check: FAIL: no GPU test case passed; nothing ran on a GPU"
  elif ((${#failed[@]} > 0)); then
    verdict_line="gpu_check: FAIL: ${#failed[@]} step(s): ${failed[*]}"
  else
    verdict_line="gpu_check: PASS ($gpu_passed GPU test cases, every step within budget)"
  fi
  echo "logs: $log ($(ls "$log" | wc -l) files); ${used} s of steps, plan $total s"
  echo "$verdict_line" | tee -a "$log/summary.txt"
  [[ $verdict_line == "gpu_check: PASS"* ]]
}
