#!/usr/bin/python3
"""ringlab's synchronisers against PyTorch's own, bit for bit: for each pair below, ringlab's
trainer (2 ranks over shm_ring; 4 over gloo, for eleven pairs, one of them on 2 emulated hosts) and
pytorch_ddp.py (as many gloo ranks, one BLAS thread each) train the
Fashion-MNIST MLP from the same seed on the same first --train_subset images, and every training
loss of every rank must be the same float32 value, each evaluation's test accuracy the same. Both
sides reach the same OpenBLAS at run time, so this holds on any CPU and kernel (the arithmetic
each side must share is in docs/pytorch-fidelity.md, "The communication hooks"): 0 ulp is the
tolerance. The test loss is not computed alike (ringlab sums each sample's loss in double, torch
each chunk's in float32), so it must agree within 1e-6 relative: seen here, 1 ulp of float32
(6e-8).

    pytorch_sync_match.py --train PATH_TO_TRAIN [--only NAME,...] [--train_subset N]

Prints one line per pair and exits 0 when all match, 1 when one does not, 77 when torch does not
import or the data set is not installed (the test then skips).
"""

import csv
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))  # experiments/: the kit's error line

import cli_errors  # noqa: E402
import run_driver  # noqa: E402

DATA_DIR = "/usr/share/datasets/fashion-mnist"
COMMON = ["--model=784,1024,1024,10", "--lr=0.1", "--batch_size=64", "--seed=0",
          "--sampler_seed=0", "--set_epoch=true", "--eval_every=1", "--epochs=1", "--quiet"]
STREAMING = ["--sync=streaming_diloco", "--inner_steps=8", "--num_fragments=2",
             "--fragment_sync_delay=2", "--fragment_update_alpha=0.5", "--outer_lr=0.7"]
STREAMING_FLOAT = ["--sync=streaming_diloco", "--inner_steps=9", "--num_fragments=3",
                   "--fragment_sync_delay=1", "--fragment_update_alpha=0.3"]
NESTEROV = ["--momentum=0.9", "--nesterov", "--weight_decay=0.0005"]
# name: (ringlab's flags, PyTorch's flags). The warm-up, PowerSGD's start and H are short so that
# the few steps of a subset cross several averages, compressed steps and outer steps.
PAIRS = {
    "allreduce": (["--sync=allreduce"], ["--sync=ddp"]),
    # The fair baseline of the sync map: DDP with Nesterov momentum and weight decay.
    "allreduce_nesterov": (["--sync=allreduce"] + NESTEROV, ["--sync=ddp"] + NESTEROV),
    "fp16": (["--sync=fp16"], ["--sync=fp16"]),
    "powersgd_r1": (["--sync=powersgd", "--powersgd_rank=1", "--powersgd_start_iter=10"],
                    ["--sync=powersgd", "--powersgd_rank=1", "--powersgd_start_iter=10"]),
    "powersgd_r4": (["--sync=powersgd", "--powersgd_rank=4", "--powersgd_start_iter=10"],
                    ["--sync=powersgd", "--powersgd_rank=4", "--powersgd_start_iter=10"]),
    "powersgd_batched_r1": (["--sync=powersgd", "--powersgd_rank=1", "--powersgd_start_iter=10",
                             "--powersgd_batched"],
                            ["--sync=powersgd", "--powersgd_rank=1", "--powersgd_start_iter=10",
                             "--powersgd_batched"]),
    "powersgd_batched_r4": (["--sync=powersgd", "--powersgd_rank=4", "--powersgd_start_iter=10",
                             "--powersgd_batched"],
                            ["--sync=powersgd", "--powersgd_rank=4", "--powersgd_start_iter=10",
                             "--powersgd_batched"]),
    "post_local_sgd": (["--sync=post_local_sgd", "--avg_warmup=10", "--avg_period=4"],
                       ["--sync=post_local_sgd", "--avg_warmup=10", "--avg_period=4"]),
    "diloco": (["--sync=diloco", "--inner_steps=8", "--outer_lr=0.7", "--outer_momentum=0.9"],
               ["--sync=diloco", "--inner_steps=8", "--outer_lr=0.7", "--outer_momentum=0.9"]),
    # The compressors against the hooks written from their papers (pytorch_compressors.py), at
    # ratios and levels that leave the method's error visible in a few hundred steps.
    "topk": (["--sync=topk", "--topk_ratio=0.05"], ["--sync=topk", "--sync_option=topk_ratio=0.05"]),
    "randomk": (["--sync=randomk", "--randomk_ratio=0.1", "--randomk_seed=3"],
                ["--sync=randomk", "--sync_option=randomk_ratio=0.1",
                 "--sync_option=randomk_seed=3"]),
    "ef_signsgd": (["--sync=ef_signsgd"], ["--sync=ef_signsgd"]),
    "qsgd": (["--sync=qsgd", "--qsgd_levels=8", "--qsgd_seed=5"],
             ["--sync=qsgd", "--sync_option=qsgd_levels=8", "--sync_option=qsgd_seed=5"]),
    "int8": (["--sync=int8"], ["--sync=int8"]),
    # DeMo applies signs: a step of lr per parameter, so a small lr.
    "demo": (["--sync=demo", "--demo_decay=0.9", "--demo_topk=8", "--lr=0.002"],
             ["--sync=demo", "--demo_decay=0.9", "--demo_topk=8", "--lr=0.002"]),
    "sparseloco": (["--sync=sparseloco", "--inner_steps=4", "--sparseloco_chunk=256",
                    "--sparseloco_topk=8", "--sparseloco_outer_lr=0.8"],
                   ["--sync=sparseloco", "--inner_steps=4", "--sparseloco_chunk=256",
                    "--sparseloco_topk=8", "--sparseloco_outer_lr=0.8"]),
    # Streaming DiLoCo: 4-bit changes gathered, and float32 ones by allreduce over 3 fragments.
    "streaming_diloco": (STREAMING + ["--quantize_bits=4"], STREAMING + ["--quantize_bits=4"]),
    "streaming_diloco_float": (
        STREAMING_FLOAT + ["--quantize_bits=32"], STREAMING_FLOAT + ["--quantize_bits=32"]),
    "sparta": (["--sync=sparta", "--sparta_p=0.05", "--sparta_seed=7"],
               ["--sync=sparta", "--sparta_p=0.05", "--sparta_seed=7"]),
    # 4 ranks: a ring's sums now depend on where each gradient sits in its bucket (DDP's order,
    # not the model's), so these go over gloo on both sides.
    "allreduce_4_ranks": (["--sync=allreduce"], ["--sync=ddp"]),
    "powersgd_r4_4_ranks": (["--sync=powersgd", "--powersgd_rank=4", "--powersgd_start_iter=6"],
                            ["--sync=powersgd", "--powersgd_rank=4", "--powersgd_start_iter=6"]),
    "post_local_sgd_host": (["--sync=post_local_sgd", "--avg_warmup=4", "--avg_period=3",
                             "--post_local_subgroup=host"],
                            ["--sync=post_local_sgd", "--avg_warmup=4", "--avg_period=3",
                             "--post_local_subgroup=host"]),
}
# Where each side's ranks run: 2 over shm_ring (ringlab) and gloo (PyTorch) unless named here.
# post_local_sgd_host: 2 emulated hosts of 2 ranks (ringlab's --hosts; PyTorch's subgroups of
# --ranks_per_host on one machine: the arithmetic does not see the hosts).
JOBS = {
    "allreduce_4_ranks": (["--comm=gloo", "--nprocs=4"], ["--world_size=4"]),
    "powersgd_r4_4_ranks": (["--comm=gloo", "--nprocs=4"], ["--world_size=4"]),
    "post_local_sgd_host": (["--comm=gloo", "--nprocs=4", "--hosts=2"],
                            ["--world_size=4", "--ranks_per_host=2"]),
}
# Each compressor (and SPARTA, SparseLoCo, DeMo and Streaming DiLoCo) at 4 ranks too: gathered wires are decoded in rank order on both
# sides, and gloo sums alike on both.
COMPRESSORS = ("topk", "randomk", "ef_signsgd", "qsgd", "int8", "sparta", "sparseloco", "demo",
               "streaming_diloco")
PAIRS.update({f"{name}_4_ranks": PAIRS[name] for name in COMPRESSORS})
JOBS.update({f"{name}_4_ranks": JOBS["allreduce_4_ranks"] for name in COMPRESSORS})
DEFAULT_JOB = (["--comm=shm_ring", "--nprocs=2"], ["--world_size=2"])
# What train says where this machine cannot make emulated hosts (the pair is skipped).
NO_HOSTS = ("--hosts needs", "cannot create a network namespace")


def read_run(run_dir):
    """({(rank, step): loss as float32 bits}, [(test_loss, test_accuracy)])."""
    import numpy as np

    def bits(text):
        return int(np.float32(float(text)).view(np.int32))

    with open(os.path.join(run_dir, "losses.csv")) as f:
        losses = {(int(r["rank"]), int(r["step"])): bits(r["loss"]) for r in csv.DictReader(f)}
    with open(os.path.join(run_dir, "eval.csv")) as f:
        evals = [(float(r["test_loss"]), float(r["test_accuracy"])) for r in csv.DictReader(f)]
    return losses, evals


def compare(ours, theirs):
    """'' when both runs hold the same values, else what differs first."""
    (a, a_evals), (b, b_evals) = ours, theirs
    if sorted(a) != sorted(b):
        return f"different steps: {len(a)} against {len(b)}"
    differ = sorted(k for k in a if a[k] != b[k])
    if differ:
        rank, step = differ[0]
        return f"{len(differ)} of {len(a)} losses differ, first rank {rank} step {step}"
    if (not a_evals or len(a_evals) != len(b_evals) or
            any(x[1] != y[1] or abs(x[0] - y[0]) > 1e-6 * abs(y[0])
                for x, y in zip(a_evals, b_evals))):
        return f"evaluations (test loss, accuracy) differ: {a_evals} against {b_evals}"
    return ""


# PyTorch's ranks wait at most this long for each other, and each dumps its threads' stacks and
# exits after (epochs + 1.5) times it (pytorch_ddp.py): a hang costs 4 minutes, not the test.
PYTORCH_TIMEOUT_S = 90
# How faulthandler's dump begins, how pytorch_ddp.py reports ranks it had to kill, and how gloo
# reports a collective that waited past --timeout.
HANG_MARKS = ("Timeout (", "did not finish within", "Timed out waiting")


class RunFailed(RuntimeError):
    """A run that exited non-zero; `output` is all it printed."""

    def __init__(self, message, output):
        super().__init__(message)
        self.output = output


def run(argv, what):
    """The run's output; raises if it failed."""
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=600)
    if result.returncode != 0:
        raise RunFailed(f"{what} exited {result.returncode}: {result.stdout[-4000:]}",
                        result.stdout)
    return result.stdout


def run_pytorch(argv, what):
    """A PyTorch run, retried once if its ranks hung. 1.13's gloo ProcessGroup and hooks are not
    ringlab's: CI saw one PowerSGD run of 28+ here hang (no reproduction since), so a hang is
    reported with its stacks and run again, while any other failure, and a second hang, fails."""
    try:
        return run(argv, what)
    except RunFailed as e:
        if not any(mark in e.output for mark in HANG_MARKS):
            raise
        print(f"note: {what} hung; its ranks' stacks:\n{e}\nretrying once", flush=True)
        return run(argv, what)


def why_skipped():
    """Why a match cannot run here (torch does not work, or the data set is missing), or
    None."""
    version, why_not, _ = run_driver.probe_torch()
    if version is None:
        return f"torch does not work with /usr/bin/python3: {why_not}"
    if not os.path.isdir(DATA_DIR):
        return f"{DATA_DIR} missing (apt-get install dataset-fashion-mnist)"
    return None


def main():
    parser = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--only", type=lambda text: text.split(","), default=[],
                        help="comma-separated pairs to run (default: all)")
    parser.add_argument("--train_subset", type=int, default=3200)
    args = parser.parse_args()
    unknown = sorted(set(args.only) - set(PAIRS))
    if unknown:
        parser.error(f"--only: no pair {', '.join(unknown)} (pairs: {', '.join(PAIRS)})")
    cli_errors.executable("--train", args.train)
    cli_errors.int_in_range("--train_subset", args.train_subset, 1, 60000)
    why = why_skipped()
    if why:
        print(f"skipped: {why}")
        return 77
    common = COMMON + [f"--train_subset={args.train_subset}"]
    failed = 0
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
        for name, (ours, theirs) in PAIRS.items():
            if args.only and name not in args.only:
                continue
            ringlab_dir, torch_dir = os.path.join(tmp, name, "ringlab"), os.path.join(tmp, name,
                                                                                     "pytorch")
            ringlab_job, torch_job = JOBS.get(name, DEFAULT_JOB)
            try:
                run([args.train, "--dataset=fashion_mnist", f"--out_dir={ringlab_dir}"] +
                    ringlab_job + common + ours, f"ringlab --sync={name}")
            except RunFailed as e:
                if "--hosts=2" not in ringlab_job or not any(m in e.output for m in NO_HOSTS):
                    raise
                print(f"{name}: skipped ({e.output.strip().splitlines()[-1]})", flush=True)
                continue
            run_pytorch(["/usr/bin/python3", os.path.join(HERE, "pytorch_ddp.py"),
                         f"--timeout={PYTORCH_TIMEOUT_S}", f"--out_dir={torch_dir}"] +
                        torch_job + common + theirs, f"pytorch {theirs[0]}")
            ringlab_run = read_run(ringlab_dir)
            difference = compare(ringlab_run, read_run(torch_dir))
            steps = len(ringlab_run[0]) // (1 + max(r for r, _ in ringlab_run[0]))
            print(f"{name}: {'bit for bit' if not difference else 'FAIL: ' + difference} "
                  f"({steps} steps per rank, test accuracy {ringlab_run[1][-1][1]:.4f})",
                  flush=True)
            failed += bool(difference)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
