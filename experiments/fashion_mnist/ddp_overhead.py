#!/usr/bin/python3
"""Where PyTorch DDP's step goes beyond one process's, on the Fashion-MNIST MLP: the step of one
process without DDP (the floor), of two such processes at once (what sharing the machine's memory
and caches costs, no DDP), of DDP with a hook that communicates nothing (DDP's own work: its
autograd hooks and bucket copies; at 1 and at 2 ranks), and of DDP over ringlab and over gloo at
2 ranks, with DDP's defaults and with gradient_as_bucket_view (no bucket copies). What DDP over ringlab adds beyond the no-op hook is ringlab's communication; what the
no-op hook adds beyond the floor is DDP's, which no backend removes.

Each rank is a process with one BLAS thread (as pytorch_ddp.py), training on a fixed random batch
of the MLP's shape (784,1024,1024,10; batch 64; SGD), so the arithmetic per step is the real
run's; the step is timed as pytorch_ddp.py times it (zero_grad, forward, loss, backward, SGD
step); the median of rank 0's steps after the first 20. Rounds alternate the configurations so
that a change in the machine's load lands on all of them.

    /usr/bin/python3 experiments/fashion_mnist/ddp_overhead.py \\
        --ringlab_torch=bazel-bin/torch_backend [--steps=300] [--rounds=3]
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))  # experiments/: the kit's error line

import cli_errors  # noqa: E402

# name: (ranks, DDP?, process-group backend, no-op hook?, gradient_as_bucket_view?)
CONFIGS = {
    "one process, no DDP": (1, False, None, False, False),
    "two processes at once, no DDP": (2, False, None, False, False),
    "DDP, no-op hook, 1 rank": (1, True, "gloo", True, False),
    "DDP, no-op hook, 2 ranks": (2, True, "gloo", True, False),
    "DDP over ringlab, 2 ranks": (2, True, "ringlab", False, False),
    "DDP over gloo, 2 ranks": (2, True, "gloo", False, False),
    # DDP's own option: the gradients are views into its buckets, so that it copies none in
    # or out (the same values: the losses do not change).
    "DDP over ringlab, 2 ranks, gradient_as_bucket_view": (2, True, "ringlab", False, True),
    "DDP over gloo, 2 ranks, gradient_as_bucket_view": (2, True, "gloo", False, True),
}


def rank_main(args):
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist
    ranks, ddp, backend, noop, views = CONFIGS[args.config]
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    if backend == "ringlab":
        sys.path.insert(0, args.ringlab_torch)
        import ringlab_torch  # noqa: F401  (registers the backend)
    if ddp:
        dist.init_process_group(backend, rank=rank, world_size=ranks)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10))
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=views)
    if noop:
        def nothing(_, bucket):
            done = torch.futures.Future()
            done.set_result(bucket.buffer())
            return done
        model.register_comm_hook(None, nothing)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    x, y = torch.randn(64, 784, generator=gen), torch.randint(0, 10, (64,), generator=gen)
    steps = []
    for _ in range(args.steps):
        start = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        steps.append(1e3 * (time.perf_counter() - start))
    if ddp:
        dist.destroy_process_group()
    if rank == 0:
        print(f"median_ms {statistics.median(steps[20:]):.3f}", flush=True)


def fail(message, status=2):
    """One error line; status 2 for bad input, 1 for a configuration that failed."""
    if status == 2:
        cli_errors.fail(message)
    print(f"error: {message}", file=sys.stderr)
    sys.exit(status)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_config(args, name, deadline_s=600):
    """Rank 0's median step of one configuration, in ms; the first rank to fail ends them all."""
    ranks = CONFIGS[name][0]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(ranks))
    argv = [sys.executable, os.path.abspath(__file__), "--rank_of", name,
            f"--steps={args.steps}", f"--ringlab_torch={args.ringlab_torch}"]
    # Files, not pipes: a rank that writes much cannot block on a full pipe while polled.
    errs = [tempfile.TemporaryFile(mode="w+") for _ in range(ranks)]
    procs = [subprocess.Popen(argv, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=errs[r], text=True) for r in range(ranks)]
    deadline = time.monotonic() + deadline_s
    while any(p.poll() is None for p in procs):
        failed = [p for p in procs if p.poll() not in (None, 0)]
        if failed or time.monotonic() > deadline:
            for p in procs:
                p.kill()
            if failed:
                err = errs[procs.index(failed[0])]
                err.seek(0)
                last = (err.read().strip().splitlines() or ["(nothing on stderr)"])[-1]
                why = f"a rank exited with status {failed[0].returncode}: {last}"
            else:
                why = f"it did not finish within {deadline_s} s"
            fail(f"{name}: {why}", 1)
        time.sleep(0.05)
    words = procs[0].stdout.read().split()
    if any(p.returncode != 0 for p in procs) or len(words) != 2:
        fail(f"{name}: rank 0 printed no median (exit statuses "
             f"{[p.returncode for p in procs]})", 1)
    return float(words[1])


def main():
    parser = cli_errors.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ringlab_torch", required=True,
                        help="the directory holding ringlab_torch.so")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rank_of", help=argparse.SUPPRESS)  # internal: one rank of a config
    args = parser.parse_args()
    if args.rank_of:
        args.config = args.rank_of
        return rank_main(args)
    args.ringlab_torch = cli_errors.torch_module("--ringlab_torch", args.ringlab_torch)
    if args.steps < 40 or args.rounds < 1:
        fail("--steps must be at least 40 and --rounds at least 1")
    medians = {name: [] for name in CONFIGS}
    for round_ in range(args.rounds):
        for name in CONFIGS:
            medians[name].append(run_config(args, name))
            print(f"round {round_ + 1}: {name}: {medians[name][-1]:.2f} ms", file=sys.stderr)
    floor = statistics.median(medians["one process, no DDP"])
    print("| configuration | median step per round (ms) | against one process |")
    print("|---|---|---|")
    for name, values in medians.items():
        print(f"| {name} | {' / '.join(f'{v:.2f}' for v in values)} | "
              f"{statistics.median(values) / floor:.2f}x |")


if __name__ == "__main__":
    main()
