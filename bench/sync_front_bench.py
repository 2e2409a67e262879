#!/usr/bin/python3
"""What a synchroniser costs through ringlab_torch.Synchronizer against the trainer: the same
synchroniser (the same C++) on the Fashion-MNIST MLP, 2 ranks over shm_ring, once from ringlab's
trainer and once from plain PyTorch (pytorch_ddp.py --front=ringlab), in alternating rounds so
that both see the same load; for allreduce also PyTorch DDP over the ringlab backend. Per run,
rank 0's steps after its first WARMUP: the mean time in the synchroniser (comm_ms: its
AfterBackward and AfterStep, the optimiser's step excluded, as both sides count it; a mean, since
param_avg and diloco communicate on one step in K) and the median whole step (step_ms: forward
and backward are torch's on one side, ringlab's on the other).

    bazel build -c opt //train //torch_backend:ringlab_torch
    bench/sync_front_bench.py --train bazel-bin/train/train --ringlab_torch bazel-bin/torch_backend

Prints one row per synchroniser and round, then each synchroniser's medians over the rounds.
The rounds' spread on 2 busy cores is wide (a run's mean synchroniser time moves by 2x between
rounds): compare the medians, and the rows for the spread.
"""

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTORCH_DDP = os.path.join(ROOT, "experiments", "fashion_mnist", "pytorch_ddp.py")
COMMON = ["--model=784,1024,1024,10", "--lr=0.1", "--batch_size=64", "--seed=0",
          "--sampler_seed=0", "--set_epoch=true", "--eval_every=1", "--epochs=1", "--quiet"]
WARMUP = 5


def medians(run_dir):
    """(mean comm_ms, median step_ms) of rank 0's steps after the warm-up."""
    with open(os.path.join(run_dir, "losses.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["rank"] == "0"][WARMUP:]
    return (statistics.fmean(float(r["comm_ms"]) for r in rows),
            statistics.median(float(r["step_ms"]) for r in rows))


def run(argv):
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=1800)
    if result.returncode != 0:
        sys.exit(f"error: {' '.join(argv[:3])} ... exited {result.returncode}: "
                 f"{result.stdout[-2000:]}")


def one_round(args, sync, tmp, index):
    """{side: (comm_ms, step_ms)} for one round of `sync`."""
    common = COMMON + [f"--train_subset={args.train_subset}", f"--sync={sync}"]
    out = {}
    trainer = os.path.join(tmp, f"{sync}{index}_trainer")
    run([args.train, "--dataset=fashion_mnist", "--comm=shm_ring", "--nprocs=2",
         f"--out_dir={trainer}"] + common)
    out["trainer"] = medians(trainer)
    front = os.path.join(tmp, f"{sync}{index}_front")
    run(["/usr/bin/python3", PYTORCH_DDP, "--front=ringlab", "--world_size=2",
         f"--ringlab_torch={args.ringlab_torch}", f"--out_dir={front}"] + common)
    out["front"] = medians(front)
    if sync == "allreduce":
        ddp = os.path.join(tmp, f"{sync}{index}_ddp")
        run(["/usr/bin/python3", PYTORCH_DDP, "--backend=ringlab", "--world_size=2",
             f"--ringlab_torch={args.ringlab_torch}", f"--out_dir={ddp}"] +
            [c for c in common if not c.startswith("--sync")] + ["--sync=ddp"])
        out["ddp"] = (float("nan"), medians(ddp)[1])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--ringlab_torch", required=True)
    parser.add_argument("--syncs", default="allreduce,fp16,powersgd,param_avg,diloco")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train_subset", type=int, default=6400)
    args = parser.parse_args()
    args.ringlab_torch = os.path.abspath(args.ringlab_torch)
    print(f"{'sync':>10} {'round':>5} {'trainer sync ms':>16} {'front sync ms':>14} "
          f"{'ratio':>6} {'trainer step ms':>16} {'front step ms':>14} {'DDP/ringlab step':>17}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            for sync in args.syncs.split(","):
                r = one_round(args, sync, tmp, index)
                results.setdefault(sync, []).append(r)
                ddp = r.get("ddp", (0, float("nan")))[1]
                print(f"{sync:>10} {index:>5} {r['trainer'][0]:16.3f} {r['front'][0]:14.3f} "
                      f"{r['front'][0] / r['trainer'][0]:6.2f} {r['trainer'][1]:16.2f} "
                      f"{r['front'][1]:14.2f} {ddp:17.2f}", flush=True)
    print("\nmedians over the rounds")
    for sync, rounds in results.items():
        trainer = statistics.median(r["trainer"][0] for r in rounds)
        front = statistics.median(r["front"][0] for r in rounds)
        line = (f"{sync:>10}: synchroniser {trainer:.3f} ms (trainer) against {front:.3f} ms "
                f"(front), {front / trainer:.2f}x; step {statistics.median(r['trainer'][1] for r in rounds):.2f} "
                f"against {statistics.median(r['front'][1] for r in rounds):.2f} ms")
        if sync == "allreduce":
            line += (f"; DDP over ringlab {statistics.median(r['ddp'][1] for r in rounds):.2f}"
                     " ms")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
