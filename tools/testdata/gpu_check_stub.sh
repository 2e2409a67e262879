#!/usr/bin/env bash
# Stands in for every binary of a GPU bundle in gpu_check_test: behaves like
# the binary it is named after (gtest totals, benchmark JSON, the trainer's
# outputs), as it would on a GPU that passes, unless STUB_<NAME> (the name
# upper-cased) says otherwise: fail, wrong, skip_no_gpu, sleep.
name=$(basename "$0")
var="STUB_$(tr 'a-z' 'A-Z' <<<"$name")"
mode=${!var:-pass}
[[ $mode == sleep ]] && sleep 30
case $name in
  gpu_probe)
    echo "cuda runtime: 13.0 (built with 13.0)"
    echo "devices: 1"
    echo "device 0: Stub H200, sm_90, 139.8 GiB, 132 SMs, compute mode Default"
    echo "probe: OK 1 usable device(s)"
    ;;
  *_test)
    echo "[ RUN      ] Stub.Case"
    if [[ $mode == fail ]]; then
      echo "[  FAILED  ] Stub.Case (1 ms)"
      echo "[  FAILED  ] 1 test, listed below:"
      exit 1
    elif [[ $mode == skip_no_gpu ]]; then
      echo "no CUDA device: stub"
      echo "[  SKIPPED ] Stub.Case (0 ms)"
      echo "[  PASSED  ] 0 tests."
      echo "[  SKIPPED ] 1 test, listed below:"
    else
      echo "[ max diff ] stub: max |got - want| = 0 at 0"
      echo "[       OK ] Stub.Case (1 ms)"
      echo "[  PASSED  ] 1 test."
    fi
    ;;
  *bench)
    for a in "$@"; do [[ $a == --benchmark_out=* ]] && out=${a#--benchmark_out=}; done
    wrong=0
    [[ $mode == wrong ]] && wrong=3
    cat >"$out" <<JSON
{
  "benchmarks": [
    {
      "name": "$name/row/4/iterations:5/manual_time",
      "time_us": 1.0e+01,
      "busbw_GBps": 2.0e+00,
      "wrong": $wrong.0e+00
    },
    {
      "name": "allreduce_threads/nccl",
      "error_occurred": true,
      "error_message": "not run: NCCL refuses two ranks on one GPU"
    }
  ]
}
JSON
    echo "$name: a table"
    [[ $mode == fail ]] && exit 1
    ;;
  train)
    for a in "$@"; do [[ $a == --out_dir=* ]] && dir=${a#--out_dir=}; done
    mkdir -p "$dir"
    {
      echo "rank,epoch,step,loss,step_ms,comm_ms,bytes_sent"
      for s in 0 1 2; do echo "0,$s,$s,0.69$s,1,0,0"; echo "1,$s,$s,0.68$s,1,0,0"; done
    } >"$dir/losses.csv"
    echo '{ "ranks_bitwise_equal": true }' >"$dir/summary.json"
    echo "epoch 3/3: loss 0.692 (rank 0, its last batch)"
    ;;
esac
exit 0
