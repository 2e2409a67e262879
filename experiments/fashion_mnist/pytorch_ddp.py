#!/usr/bin/python3
"""PyTorch DDP itself on Fashion-MNIST: the run ringlab's fashion_mnist experiment compares to.

Debian's torch 1.13 (CPU), gloo, DistributedDataParallel with its default buckets, one thread per
rank; the MLP built as ringlab builds it (torch.manual_seed(seed), then nn.Linear layers fc1, fc2,
... in order with ReLU between, so ringlab's InitLikeTorch draws the same numbers);
DistributedSampler(seed=--sampler_seed, shuffle=True) with set_epoch(epoch); DataLoader of
--batch_size per rank; torch.optim.SGD (--momentum, --nesterov, --weight_decay; plain by default);
CrossEntropyLoss (mean over the batch). The data are Debian's dataset-fashion-mnist IDX files, read
with gzip and numpy (no torchvision), pixels x / 255 as float32.

It writes what ringlab's trainer writes into --out_dir, so one parser reads both:
  losses.csv   rank,epoch,step,loss,step_ms,comm_ms,bytes_sent for every rank's steps; step_ms
               is time.perf_counter around zero_grad+forward+loss+backward (DDP's allreduce
               runs inside it)+SGD step, data loading excluded; comm_ms and bytes_sent are nan
               (PyTorch does not say how much of the step was communication or how many bytes
               gloo sent), except with --front=ringlab: the synchroniser's time and bytes, as
               the trainer counts them.
  eval.csv     epoch,step,test_loss,test_accuracy,wall_s,bytes_sent after every --eval_every
               epochs (and after the last): rank 0's model over the whole test set; wall_s is
               rank 0's seconds since its first step, evaluation excluded; bytes_sent nan.
  summary.json the configuration, torch's version and the total wall time.

--sync picks how the ranks synchronise, each the way PyTorch itself does it: ddp (DDP's bucketed
allreduce, the default), fp16 (DDP with fp16_compress_hook; 1.13 refuses bf16_compress_hook without
CUDA and NCCL), powersgd (DDP with powerSGD_hook, error feedback and warm start, each bucket's
future waited for in the hook: 1.13's own order of collectives races on gloo), post_local_sgd (DDP
with post_localSGD_hook, start_localSGD_iter = --avg_warmup, over one-rank subgroups made with
new_group, since 1.13's new_subgroups needs CUDA, or with --post_local_subgroup=host over those of
each host's ranks, --ranks_per_host of them, and PeriodicModelAverager(--avg_period, --avg_warmup)
after each optimiser step) or diloco (no DDP: each rank takes --inner_steps SGD steps on its own,
then the change of its parameters from the outer ones, divided by the world size, is allreduced and
applied to the outer parameters by torch.optim.SGD(--outer_lr, momentum=--outer_momentum,
nesterov=True), which every rank then continues from; evaluation uses the outer parameters).
ringlab's trainer takes the same --sync names (ddp is its allreduce).

--world_size 1 runs one process without DDP or a process group: the compute floor. Under a
torchrun-style launcher (RANK and WORLD_SIZE set: torchrun, or ringlab's on_hosts, which starts
the ranks on emulated hosts joined by shaped links) each process is one rank, and the ranks meet
in --out_dir.

    /usr/bin/python3 experiments/fashion_mnist/pytorch_ddp.py --out_dir DIR [--epochs 3]
"""

import os

# One BLAS thread per rank, as torchrun's OMP_NUM_THREADS=1 gives it: Debian's torch reaches
# OpenBLAS, which ignores torch.set_num_threads and, started by mp.spawn without this, runs a
# thread per core in every rank (measured here: 24.4 ms per DDP step instead of 18.8, and the
# one-process floor computing its GEMMs on both cores). Set before torch loads OpenBLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import datetime  # noqa: E402
import faulthandler
import gzip
import json
import math
import shutil
import socket
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))  # experiments/: the kit's error line

import cli_errors  # noqa: E402
from pytorch_compressors import COMPRESSORS, parse_options  # noqa: E402
from pytorch_syncs import synchronise  # noqa: E402
from ringlab_front import (EvaluatedSwap, front_columns, ringlab_synchronizer,  # noqa: E402
                           save_final)

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
LOSSES_HEADER = "rank,epoch,step,loss,step_ms,comm_ms,bytes_sent"
EVAL_HEADER = "epoch,step,test_loss,test_accuracy,wall_s,bytes_sent"
EVAL_CHUNK = 1000  # test images per forward pass in the evaluation


class UsageError(Exception):
    """Bad input: reported as one `error: ...` line and exit status 2."""


def read_idx(path, ndim):
    """An IDX file of unsigned bytes (gzip'd when its name ends in .gz) as a numpy array."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08 or raw[3] != ndim:
        raise UsageError(f"{path} is not an IDX file of unsigned bytes with {ndim} dimension(s)")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise UsageError(f"{path}: truncated header")
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    size = math.prod(dims)
    if len(raw) != header + size:
        raise UsageError(f"{path}: {len(raw) - header} data bytes for dimensions {dims} "
                         f"({size} expected)")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def load_split(data_dir, split, features, classes):
    """(images float32 [n, features] as x / 255, labels int64 [n]) of 'train' or 'test'."""
    images_name, labels_name = FILES[split]
    images = read_idx(os.path.join(data_dir, images_name), 3)
    labels = read_idx(os.path.join(data_dir, labels_name), 1)
    if images.shape[0] != labels.shape[0]:
        raise UsageError(f"{images_name} has {images.shape[0]} images but {labels_name} "
                         f"{labels.shape[0]} labels")
    if images.shape[1] * images.shape[2] != features:
        raise UsageError(f"{images_name}: images of {images.shape[1]}x{images.shape[2]} pixels, "
                         f"but the model's input width is {features}")
    if labels.size and int(labels.max()) >= classes:
        raise UsageError(f"{labels_name}: label {int(labels.max())} >= {classes} classes")
    x = images.reshape(images.shape[0], features).astype(np.float32) / np.float32(255)
    return x, labels.astype(np.int64)


def build_model(torch, widths):
    """nn.Linear layers fc1..fcN in construction order with ReLU between (none after the last),
    as ringlab's MLP names and initialises them."""
    nn = torch.nn

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = len(widths) - 1
            for i in range(self.layers):
                setattr(self, f"fc{i + 1}", nn.Linear(widths[i], widths[i + 1]))

        def forward(self, x):
            for i in range(self.layers):
                x = getattr(self, f"fc{i + 1}")(x)
                if i + 1 < self.layers:
                    x = torch.relu(x)
            return x

    return Mlp()


def sgd(torch, net, args):
    """torch.optim.SGD with the run's --lr, --momentum, --nesterov and --weight_decay."""
    return torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum,
                           nesterov=args.nesterov, weight_decay=args.weight_decay)


def evaluate(torch, model, test_x, test_y):
    """(mean cross-entropy, accuracy) of model over the whole test set."""
    total_loss, correct = 0.0, 0
    with torch.no_grad():
        for begin in range(0, test_x.shape[0], EVAL_CHUNK):
            logits = model(test_x[begin:begin + EVAL_CHUNK])
            target = test_y[begin:begin + EVAL_CHUNK]
            total_loss += torch.nn.functional.cross_entropy(logits, target,
                                                            reduction="sum").item()
            correct += int((logits.argmax(dim=1) == target).sum().item())
    n = test_x.shape[0]
    return total_loss / n, correct / n


def join_group(dist, rank, args):
    """Joins the process group, ringlab's backend registered first where it is asked for."""
    if args.backend == "ringlab":
        if args.ringlab_torch:
            sys.path.insert(0, args.ringlab_torch)
        import ringlab_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend, rank=rank, world_size=args.world_size,
                            timeout=datetime.timedelta(seconds=args.timeout))


def prepare_rank(torch, dist, rank, args):
    """This rank's data, model, synchroniser, sampler, loader, loss and optimiser (and, on
    rank 0, the test set), as a dict."""
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    widths = [int(w) for w in args.model.split(",")]
    train_x, train_y = load_split(args.data_dir, "train", widths[0], widths[-1])
    if args.train_subset:
        train_x, train_y = train_x[:args.train_subset], train_y[:args.train_subset]
    test = None
    if rank == 0:
        test_x, test_y = load_split(args.data_dir, "test", widths[0], widths[-1])
        test = torch.from_numpy(test_x), torch.from_numpy(test_y)
    torch.manual_seed(args.seed)
    model = build_model(torch, widths)
    sync = None
    if args.front == "ringlab":
        net, after_step, diloco = model, None, None
        optimizer = sgd(torch, model, args)
        sync = ringlab_synchronizer(model, optimizer, args)
    else:
        net, after_step, diloco = synchronise(torch, dist, model, args, rank, args.world_size)
        optimizer = sgd(torch, net, args)
    dataset = TensorDataset(torch.from_numpy(train_x), torch.from_numpy(train_y))
    sampler = DistributedSampler(dataset, num_replicas=args.world_size, rank=rank,
                                 shuffle=True, seed=args.sampler_seed)
    return dict(model=model, net=net, after_step=after_step, diloco=diloco, sampler=sampler,
                loader=DataLoader(dataset, batch_size=args.batch_size, sampler=sampler),
                loss_fn=torch.nn.CrossEntropyLoss(), optimizer=optimizer, sync=sync, test=test)


def train_epochs(torch, dist, rank, args, rank_run):
    """The training loop: (losses.csv rows of this rank, eval.csv rows of rank 0)."""
    net, optimizer, loss_fn = rank_run["net"], rank_run["optimizer"], rank_run["loss_fn"]
    after_step, diloco, sync = rank_run["after_step"], rank_run["diloco"], rank_run["sync"]
    swap = diloco.swap if diloco is not None else lambda: None
    if sync is not None:
        swap = EvaluatedSwap(torch, rank_run["model"], sync)
    step_optimizer = sync.step if sync is not None else optimizer.step
    before_step = getattr(diloco, "before_step", None)  # DeMo's, on the gradients
    if before_step is not None:
        step_optimizer = lambda: (before_step(), optimizer.step())  # noqa: E731
    losses, evals = [], []
    step, eval_seconds = 0, 0.0
    start = None
    for epoch in range(args.epochs):
        if args.set_epoch:
            rank_run["sampler"].set_epoch(epoch)
        for x, y in rank_run["loader"]:
            if start is None:
                start = time.perf_counter()
            t0 = time.perf_counter()
            optimizer.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            step_optimizer()
            if after_step is not None:
                after_step(step)
            dt = time.perf_counter() - t0
            losses.append(f"{rank},{epoch},{step},{loss.item()!r},{dt * 1e3:.6f},"
                          + (front_columns(sync) if sync is not None else "nan,nan"))
            step += 1
            if step == args.max_steps:
                break
        done = epoch + 1
        capped = args.max_steps > 0 and step == args.max_steps
        if done % args.eval_every == 0 or done == args.epochs or capped:
            t0 = time.perf_counter()
            if rank == 0:  # the test set, through DiLoCo's outer parameters
                wall = t0 - start - eval_seconds
                swap()
                test_loss, accuracy = evaluate(torch, rank_run["model"], *rank_run["test"])
                swap()
                evals.append(f"{done},{step},{test_loss!r},{accuracy!r},{wall:.6f},nan")
                if not args.quiet:
                    recent = [float(r.split(",")[4]) for r in losses[-200:]]
                    print(f"pytorch {args.world_size} rank(s) epoch {done}/{args.epochs}: "
                          f"test accuracy {accuracy:.4f}, loss {test_loss:.4f}, median step "
                          f"{statistics.median(recent):.2f} ms, {wall:.1f} s", flush=True)
            if args.world_size > 1:
                dist.barrier()  # the other ranks wait here, outside their timed steps
            eval_seconds += time.perf_counter() - t0
        if capped:
            break
    return losses, evals


def train_rank(rank, args, scratch):
    """One rank (or the single process when --world_size 1). Writes scratch/losses_rank<r>.csv
    and, on rank 0, scratch/eval.csv."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # A rank that outlives its deadline prints every thread's Python stack and exits 1 (before
    # the parent's deadline kills it), so that a hang says where it hangs.
    faulthandler.dump_traceback_later(args.timeout * (args.epochs + 1.5), exit=True)
    distributed = args.world_size > 1
    if distributed:
        join_group(dist, rank, args)
    try:
        rank_run = prepare_rank(torch, dist, rank, args)
        losses, evals = train_epochs(torch, dist, rank, args, rank_run)
        with open(os.path.join(scratch, f"losses_rank{rank}.csv"), "w") as f:
            f.write("".join(line + "\n" for line in losses))
        if rank == 0:
            with open(os.path.join(scratch, "eval.csv"), "w") as f:
                f.write(EVAL_HEADER + "\n" + "".join(line + "\n" for line in evals))
            if rank_run["sync"] is not None:
                save_final(rank_run["sync"], os.path.join(scratch, "final"))
        if distributed:
            dist.barrier()  # every rank's file is written before rank 0 reads them
    finally:
        if distributed:
            dist.destroy_process_group()
        faulthandler.cancel_dump_traceback_later()


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(args, scratch):
    """Spawns the ranks and waits for them, at most --timeout seconds per epoch and then some."""
    if args.world_size == 1:
        train_rank(0, args, scratch)
        return
    import torch.multiprocessing as mp
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(_free_port())
    context = mp.spawn(train_rank, args=(args, scratch), nprocs=args.world_size, join=False)
    deadline = time.monotonic() + args.timeout * (args.epochs + 2)
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
            raise RuntimeError(f"the ranks did not finish within "
                               f"{args.timeout * (args.epochs + 2):.0f} s: killed")


def summary(args, wall, torch_version):
    """summary.json: the configuration, torch's version and the total wall time."""
    flags = lambda *names: {name: getattr(args, name) for name in names}  # noqa: E731
    ddp = (args.world_size > 1
           and args.sync not in ("diloco", "streaming_diloco", "demo", "sparseloco", "sparta")
           and args.front == "pytorch")
    return {"framework": "pytorch", "torch_version": torch_version,
            "world_size": args.world_size, "ddp": ddp,
            "front": args.front,
            **flags("sync", "avg_period", "avg_warmup", "post_local_subgroup", "inner_steps",
                    "outer_lr", "outer_momentum", "num_fragments", "fragment_sync_delay",
                    "fragment_update_alpha", "quantize_bits", "demo_decay", "demo_chunk", "demo_topk",
                    "sparseloco_outer_lr", "sparseloco_beta",
                    "sparseloco_chunk", "sparseloco_topk", "sparseloco_bits", "sparta_p",
                    "sparta_seed"),
            "backend": args.backend if args.world_size > 1 else None,
            "max_steps": args.max_steps or None, "threads_per_rank": 1,
            **flags("model", "epochs", "lr", "momentum", "nesterov", "weight_decay", "batch_size",
                    "seed", "sampler_seed", "set_epoch", "train_subset", "data_dir"),
            "wall_seconds_total": wall,
            "step_ms_note": "perf_counter around zero_grad+forward+loss+backward+step"}


def write_outputs(args, scratch, wall, torch_version):
    os.makedirs(args.out_dir, exist_ok=True)
    rows = []
    for rank in range(args.world_size):
        with open(os.path.join(scratch, f"losses_rank{rank}.csv")) as f:
            rows.append(f.read())
    with open(os.path.join(scratch, "eval.csv")) as f:
        evals = f.read()
    files = {
        "losses.csv": LOSSES_HEADER + "\n" + "".join(rows),
        "eval.csv": evals,
        "summary.json": json.dumps(summary(args, wall, torch_version), indent=2) + "\n",
    }
    final = os.path.join(scratch, "final")
    if os.path.isdir(final):
        shutil.rmtree(os.path.join(args.out_dir, "final"), ignore_errors=True)
        shutil.copytree(final, os.path.join(args.out_dir, "final"))
    for name, text in files.items():  # each file complete or absent
        tmp = os.path.join(args.out_dir, f".{name}.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(args.out_dir, name))


# The synchronisers this program runs as PyTorch does, and the compressors it runs as hooks
# written here (pytorch_compressors.py).
PYTORCH_SYNCS = ("ddp", "fp16", "powersgd", "post_local_sgd", "diloco", "streaming_diloco",
                 "demo", "sparseloco", "sparta") + tuple(COMPRESSORS)


def parser():
    parser = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--data_dir", default=DEFAULT_DATA_DIR)
    parser.add_argument("--model", default="784,1024,1024,10")
    parser.add_argument("--world_size", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    for name in ("momentum", "weight_decay"):
        parser.add_argument(f"--{name}", type=float, default=0.0, help="torch.optim.SGD's")
    parser.add_argument("--nesterov", action="store_true", help="torch.optim.SGD's")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed before the model")
    parser.add_argument("--sampler_seed", type=int, default=0, help="DistributedSampler's seed")
    parser.add_argument("--set_epoch", type=lambda s: s.lower() in ("1", "true", "yes"),
                        default=True, help="call sampler.set_epoch(epoch) (default true)")
    parser.add_argument("--eval_every", type=int, default=1, help="epochs between evaluations")
    parser.add_argument("--train_subset", type=int, default=0,
                        help="train on the first N images only (0: all; for quick checks)")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds any wait between ranks may take")
    parser.add_argument("--sync", default="ddp",
                        help=f"{', '.join(PYTORCH_SYNCS)}; with --front=ringlab, any of "
                             f"ringlab's (train --list_syncs)")
    parser.add_argument("--powersgd_rank", type=int, default=1, help="powersgd")
    parser.add_argument("--powersgd_start_iter", type=int, default=1000,
                        help="powersgd: steps of plain allreduce first")
    parser.add_argument("--powersgd_batched", action="store_true",
                        help="powersgd: batched_powerSGD_hook (its 2-D orthogonalisation fixed)")
    parser.add_argument("--avg_period", type=int, default=4, help="post_local_sgd: K")
    parser.add_argument("--avg_warmup", type=int, default=0,
                        help="post_local_sgd: steps of DDP allreduce first")
    parser.add_argument("--post_local_subgroup", choices=("rank", "host"), default="rank",
                        help="post_local_sgd after the warm-up: each rank's gradients its own, "
                        "or averaged among its host's ranks (an intra-node subgroup)")
    parser.add_argument("--ranks_per_host", type=int, default=0,
                        help="post_local_subgroup=host: ranks per host, contiguous (0: "
                        "LOCAL_WORLD_SIZE under a launcher, else every rank)")
    parser.add_argument("--inner_steps", type=int, default=16, help="diloco: H")
    parser.add_argument("--outer_lr", type=float, default=0.7, help="diloco")
    parser.add_argument("--outer_momentum", type=float, default=0.9, help="diloco (Nesterov)")
    parser.add_argument("--num_fragments", type=int, default=2, help="streaming_diloco: P")
    parser.add_argument("--fragment_sync_delay", type=int, default=1,
                        help="streaming_diloco: tau")
    parser.add_argument("--fragment_update_alpha", type=float, default=0.5,
                        help="streaming_diloco: alpha")
    parser.add_argument("--quantize_bits", type=int, choices=(4, 8, 32), default=4,
                        help="streaming_diloco")
    parser.add_argument("--demo_decay", type=float, default=0.999, help="demo")
    parser.add_argument("--demo_chunk", type=int, default=64, help="demo: largest chunk side")
    parser.add_argument("--demo_topk", type=int, default=32, help="demo: coefficients per chunk")
    parser.add_argument("--sparseloco_outer_lr", type=float, default=1.0, help="sparseloco")
    parser.add_argument("--sparseloco_beta", type=float, default=0.95,
                        help="sparseloco: the accumulator's decay")
    parser.add_argument("--sparseloco_chunk", type=int, default=4096, help="sparseloco")
    parser.add_argument("--sparseloco_topk", type=int, default=64,
                        help="sparseloco: values per chunk")
    parser.add_argument("--sparseloco_bits", type=int, choices=(1, 2, 4, 8), default=2,
                        help="sparseloco")
    parser.add_argument("--sparta_p", type=float, default=0.005,
                        help="sparta: the share of the parameters averaged per step")
    parser.add_argument("--sparta_seed", type=int, default=0, help="sparta")
    parser.add_argument("--backend", choices=("gloo", "ringlab"), default="gloo",
                        help="torch.distributed's backend; ringlab needs the module built "
                             "(bazel build -c opt //torch_backend:ringlab_torch) on PYTHONPATH "
                             "(bazel-bin/torch_backend)")
    parser.add_argument("--ringlab_torch", default="",
                        help="the directory holding ringlab_torch.so, put on the ranks' path "
                             "(else PYTHONPATH must reach it)")
    parser.add_argument("--max_steps", type=int, default=0,
                        help="stop after this many steps (0: the epochs), then evaluate once: "
                             "enough for the step time and the first losses")
    parser.add_argument("--front", choices=("pytorch", "ringlab"), default="pytorch",
                        help="pytorch: --sync as PyTorch does it (DDP and its hooks); ringlab: "
                             "--sync names any of ringlab's synchronisers, run through "
                             "ringlab_torch.Synchronizer over the ringlab backend (rank 0's final "
                             "parameters in final/)")
    parser.add_argument("--sync_option", action="append", default=[], metavar="NAME=VALUE",
                        help="an option of the synchroniser (repeatable): --front=ringlab's, or "
                             "a compressor's, named as ringlab names it")
    parser.add_argument("--quiet", action="store_true")
    return parser


def parse_args(argv):
    """The flags, every one checked before any rank starts (UsageError or the error line)."""
    args = parser().parse_args(argv)
    try:
        widths = [int(w) for w in args.model.split(",")]
    except ValueError:
        raise UsageError(f"--model={args.model}: comma-separated integers expected") from None
    if len(widths) < 2 or min(widths) < 1:
        raise UsageError(f"--model={args.model}: at least two positive widths expected")
    for name in ("world_size", "epochs", "batch_size", "eval_every", "avg_period", "inner_steps"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1")
    if args.post_local_subgroup == "host" and args.sync != "post_local_sgd":
        raise UsageError("--post_local_subgroup=host is post_local_sgd's")
    if args.ranks_per_host and args.world_size % args.ranks_per_host:
        raise UsageError(f"--world_size={args.world_size} is not a multiple of "
                         f"--ranks_per_host={args.ranks_per_host}")
    if min(args.train_subset, args.seed, args.sampler_seed, args.avg_warmup,
           args.ranks_per_host, args.max_steps) < 0:
        raise UsageError("--train_subset, --seed, --sampler_seed, --avg_warmup, "
                         "--ranks_per_host and --max_steps must be >= 0")
    if args.front == "ringlab":
        args.backend = "ringlab"  # the synchronisers run over ringlab's group
        if args.world_size < 2:
            raise UsageError("--front=ringlab needs --world_size of at least 2")
    elif args.sync not in PYTORCH_SYNCS:
        raise UsageError(f"--sync={args.sync} is not one of PyTorch's ({', '.join(PYTORCH_SYNCS)}):"
                         f" --front=ringlab runs ringlab's")
    if any("=" not in option for option in args.sync_option):
        raise UsageError("--sync_option takes NAME=VALUE")
    if args.sync_option and args.front != "ringlab" and args.sync not in COMPRESSORS:
        raise UsageError("--sync_option is --front=ringlab's, or a compressor's "
                         f"({', '.join(COMPRESSORS)})")
    if args.front == "pytorch" and args.sync in COMPRESSORS:
        try:
            parse_options(args.sync, args.sync_option)
        except ValueError as e:
            raise UsageError(str(e)) from None
    if args.ringlab_torch and args.backend != "ringlab":
        raise UsageError("--ringlab_torch is --backend=ringlab's")
    if args.ringlab_torch and not os.path.isfile(
            os.path.join(args.ringlab_torch, "ringlab_torch.so")):
        raise UsageError(f"--ringlab_torch={args.ringlab_torch} holds no ringlab_torch.so "
                         f"(bazel build -c opt //torch_backend:ringlab_torch)")
    args.ringlab_torch = os.path.abspath(args.ringlab_torch) if args.ringlab_torch else ""
    if not 0 <= args.demo_decay < 1 or not 1 <= args.demo_chunk <= 256 or args.demo_topk < 1:
        raise UsageError("--demo_decay must be in [0, 1), --demo_chunk in [1, 256] and "
                         "--demo_topk at least 1")
    if not 1 <= args.sparseloco_topk <= args.sparseloco_chunk <= 65536:
        raise UsageError("--sparseloco_topk and --sparseloco_chunk must hold "
                         "1 <= topk <= chunk <= 65536")
    if not 0 <= args.sparseloco_beta <= 1 or not 0 <= args.sparseloco_outer_lr < math.inf:
        raise UsageError("--sparseloco_beta must be in [0, 1] and --sparseloco_outer_lr >= 0")
    if args.sync == "streaming_diloco" and not (
            1 <= args.num_fragments <= min(args.inner_steps, 1024)
            and 0 <= args.fragment_sync_delay < args.inner_steps // args.num_fragments
            and 0 <= args.fragment_update_alpha <= 1):
        raise UsageError("--num_fragments must be in [1, --inner_steps], --fragment_sync_delay "
                         "below --inner_steps / --num_fragments and --fragment_update_alpha in "
                         "[0, 1]")
    if not 0 < args.sparta_p <= 1 or not 0 <= args.sparta_seed < 2**32:
        raise UsageError("--sparta_p must be in (0, 1] and --sparta_seed in [0, 2^32)")
    if not (0 <= args.outer_lr < math.inf) or not (0 <= args.outer_momentum < 1):
        raise UsageError("--outer_lr must be finite and >= 0 and --outer_momentum in [0, 1)")
    if not (0 <= args.lr < math.inf) or not (0 < args.timeout <= 86400):
        raise UsageError("--lr must be finite and >= 0 and --timeout in (0, 86400]")
    if not (0 <= args.momentum < 1 and 0 <= args.weight_decay < math.inf) or (
            args.nesterov and args.momentum == 0):
        raise UsageError("--momentum must be in [0, 1), --weight_decay finite and >= 0, and "
                         "--nesterov needs --momentum above 0")
    args.out_dir = cli_errors.output_dir("--out_dir", args.out_dir)
    cli_errors.input_dir("--data_dir", args.data_dir, FILES["train"] + FILES["test"])
    return args


def launched_rank():
    """This process's (rank, world size) when a torchrun-style launcher started it (torchrun,
    ringlab's on_hosts on emulated hosts: RANK and WORLD_SIZE set), else None."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except ValueError:
        raise UsageError("RANK and WORLD_SIZE must be integers") from None


def run_launched(args, rank, world, torch_version):
    """One rank of a job its launcher started; the ranks share --out_dir, where their losses
    meet (in a hidden directory rank 0 removes once it has written the outputs)."""
    if world != args.world_size:
        raise UsageError(f"WORLD_SIZE={world} but --world_size={args.world_size}")
    scratch = os.path.join(args.out_dir, ".pytorch_ddp_ranks")
    os.makedirs(scratch, exist_ok=True)
    t0 = time.perf_counter()
    train_rank(rank, args, scratch)
    wall = time.perf_counter() - t0
    if rank == 0:
        write_outputs(args, scratch, wall, torch_version)
        shutil.rmtree(scratch, ignore_errors=True)
    return wall


def run_spawned(args, torch_version):
    """The ranks as this process's children (or itself, for --world_size 1); the seconds."""
    scratch = tempfile.mkdtemp(prefix="pytorch_ddp.")
    try:
        t0 = time.perf_counter()
        run_ranks(args, scratch)
        wall = time.perf_counter() - t0
        write_outputs(args, scratch, wall, torch_version)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return wall


def main(argv=None):
    try:
        args = parse_args(argv)
        launched = launched_rank()
        # The data are checked here, in the parent, so that a bad file is one error line.
        widths = [int(w) for w in args.model.split(",")]
        for split in ("train", "test"):
            load_split(args.data_dir, split, widths[0], widths[-1])
        try:
            import torch
        except ImportError as e:
            raise UsageError(f"torch does not import with {sys.executable}: {e}") from None
        wall = (run_spawned(args, torch.__version__) if launched is None else
                run_launched(args, *launched, torch.__version__))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.quiet and (launched is None or launched[0] == 0):
        print(f"wrote {args.out_dir}/losses.csv, eval.csv, summary.json ({wall:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
