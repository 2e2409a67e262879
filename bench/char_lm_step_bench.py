#!/usr/bin/python3
"""The character language model's step: ringlab's allreduce through ringlab_torch.Synchronizer
against PyTorch DDP over gloo, 2 ranks on 2 emulated hosts joined by a shaped link, in
alternating rounds (the first of the two changing from round to round, so that both see the same
load). Each run is experiments/char_lm/char_lm_train.py with the small model for --steps steps;
its mean step is rank 0's after the first WARMUP steps. Prints each round's two means and their
ratio, then the median ratio and the range.

    bazel build -c opt //torch_backend:ringlab_torch //comm/job:on_hosts
    bench/char_lm_step_bench.py --ringlab_torch bazel-out/k8-opt/bin/torch_backend \\
        --on_hosts bazel-out/k8-opt/bin/comm/job/on_hosts [--link=1gbit] [--rounds=4]
"""

import argparse
import csv
import datetime
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(os.path.dirname(HERE), "experiments", "char_lm", "char_lm_train.py")
WARMUP = 20
FRONTS = {"pytorch_ddp": ["--front=pytorch", "--backend=gloo"],
          "ringlab_allreduce": ["--front=ringlab", "--sync=allreduce"]}


def mean_step_ms(args, front, out_dir):
    argv = [args.on_hosts, "--nprocs=2", "--hosts=2", f"--link={args.link}", "--",
            "/usr/bin/python3", TRAIN, f"--out_dir={out_dir}", "--config=small",
            f"--steps={args.steps}", f"--eval_every={args.steps}", "--eval_windows=16",
            "--sample_chars=1", "--quiet", f"--ringlab_torch={args.ringlab_torch}"]
    subprocess.run(argv + FRONTS[front], check=True, timeout=600, capture_output=True)
    with open(os.path.join(out_dir, "losses.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["rank"] == "0"][WARMUP:]
    return statistics.fmean(float(r["step_ms"]) for r in rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ringlab_torch", required=True)
    p.add_argument("--on_hosts", required=True)
    p.add_argument("--link", default="1gbit")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=120)
    args = p.parse_args()
    args.ringlab_torch = os.path.abspath(args.ringlab_torch)
    print(f"# {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}, "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}, link {args.link}, "
          f"{args.steps} steps per run, mean step after {WARMUP}")
    print(f"{'round':>5} {'first':>18} {'pytorch_ddp ms':>15} {'ringlab ms':>11} {'ratio':>6}")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = list(FRONTS) if r % 2 == 0 else list(reversed(FRONTS))
            means = {f: mean_step_ms(args, f, os.path.join(tmp, f"{r}_{f}")) for f in order}
            ratios.append(means["ringlab_allreduce"] / means["pytorch_ddp"])
            print(f"{r + 1:>5} {order[0]:>18} {means['pytorch_ddp']:15.1f} "
                  f"{means['ringlab_allreduce']:11.1f} {ratios[-1]:6.3f}", flush=True)
    print(f"# ringlab / pytorch_ddp: median {statistics.median(ratios):.3f}, "
          f"range {min(ratios):.3f}-{max(ratios):.3f}; load after "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
