#!/usr/bin/python3
"""One character-language-model training run: the GPT of gpt.py on the Bible (text_data.py),
with PyTorch DDP or any of ringlab's synchronisers through ringlab_torch.Synchronizer.

Each rank draws its batches from its DistributedSampler shard, takes --steps steps of AdamW
(warm-up, cosine decay, gradients clipped to --clip) and, every --eval_every steps, rank 0
measures the validation loss of the run's result (DiLoCo's outer parameters). Ranks come from a
torchrun-style launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: ringlab's on_hosts puts
them on emulated hosts), or, without one, --nprocs children on this host; --nprocs=1 is one
process without a group (the compute floor).

  --front=pytorch  DistributedDataParallel over --backend (gloo or ringlab); its allreduce
                   runs inside backward, the clip after it, as a DDP loop does.
  --front=ringlab  ringlab_torch.Synchronizer(model, optimizer, --sync, --sync_option...) over
                   the ringlab process group; the clip runs between the synchronised gradients
                   and the optimiser (sync.step(before_optimizer=...)).

Writes into --out_dir: losses.csv (rank,step,loss,step_ms,compute_ms,comm_ms,optim_ms,
bytes_sent: compute is zero_grad+forward+backward, comm the synchroniser's own time, optim the
clip and AdamW; PyTorch DDP's comm is inside its backward, so nan, and its bytes are nan),
eval.csv (step,val_loss,wall_s,bytes_sent: rank 0, wall_s excludes evaluation), summary.json,
sample.txt (text the final model writes) and final/<parameter>.npy (rank 0's result).

    /usr/bin/python3 experiments/char_lm/char_lm_train.py --out_dir DIR [--front=ringlab
        --sync=diloco --sync_option inner_steps=16] [--config=small] [--steps=450]
"""

import os

# One BLAS thread per rank, as torchrun's OMP_NUM_THREADS=1 gives it (before torch loads).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import datetime  # noqa: E402
import faulthandler  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
for path in (HERE, os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "fashion_mnist")):
    if path not in sys.path:
        sys.path.append(path)

import cli_errors  # noqa: E402
import gpt  # noqa: E402
import text_data  # noqa: E402

LOSSES_HEADER = "rank,step,loss,step_ms,compute_ms,comm_ms,optim_ms,bytes_sent"
EVAL_HEADER = "step,val_loss,wall_s,bytes_sent"
PROGRESS_EVERY_S = 15  # rank 0's progress line this often (the driver shows one in two)


class UsageError(Exception):
    """Bad input: one `error: ...` line and exit status 2."""


def parser():
    p = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out_dir", required=True)
    p.add_argument("--config", choices=sorted(gpt.CONFIGS), default="small")
    p.add_argument("--steps", type=int, default=450)
    p.add_argument("--batch_size", type=int, default=32, help="sequences per rank and step")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW's peak learning rate")
    p.add_argument("--warmup", type=int, default=-1, help="warm-up steps (-1: steps / 10)")
    p.add_argument("--weight_decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0, help="global gradient norm (0: none)")
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed before the model")
    p.add_argument("--sampler_seed", type=int, default=0, help="DistributedSampler's seed")
    p.add_argument("--eval_every", type=int, default=50)
    p.add_argument("--eval_windows", type=int, default=256,
                   help="validation windows (of block_size characters)")
    p.add_argument("--front", choices=("pytorch", "ringlab"), default="pytorch")
    p.add_argument("--sync", default="ddp", help="pytorch: ddp; ringlab: any of train's")
    p.add_argument("--sync_option", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--backend", choices=("gloo", "ringlab"), default="gloo",
                   help="--front=pytorch: DDP's process group")
    p.add_argument("--ringlab_torch", default="", help="the directory of ringlab_torch.so")
    p.add_argument("--nprocs", type=int, default=2, help="ranks on this host, without a "
                   "launcher (1: one process, no group)")
    p.add_argument("--timeout", type=float, default=120, help="seconds any wait may take")
    p.add_argument("--sample_chars", type=int, default=300)
    p.add_argument("--straggler_rank", type=int, default=-1,
                   help="a rank whose forward and backward take --straggler_factor times as "
                        "long (it sleeps the difference); -1: none")
    p.add_argument("--straggler_factor", type=float, default=1.5,
                   help="how much slower --straggler_rank computes, in [1, 100]")
    p.add_argument("--quiet", action="store_true")
    return p


def parse_args(argv):
    args = parser().parse_args(argv)
    for name in ("steps", "batch_size", "eval_every", "eval_windows", "nprocs"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name}={getattr(args, name)} must be at least 1")
    if args.warmup < 0:
        args.warmup = max(1, args.steps // 10)
    for name in ("lr", "weight_decay", "clip"):
        if not (0 <= getattr(args, name) < math.inf):
            raise UsageError(f"--{name}={getattr(args, name)} must be finite and >= 0")
    if not 0 < args.timeout <= 86400:
        raise UsageError(f"--timeout={args.timeout} is not in (0, 86400]")
    if not 1 <= args.straggler_factor <= 100:
        raise UsageError(f"--straggler_factor={args.straggler_factor} is not in [1, 100]")
    if args.straggler_rank < -1:
        raise UsageError(f"--straggler_rank={args.straggler_rank} must be -1 or a rank")
    if any("=" not in option for option in args.sync_option):
        raise UsageError("--sync_option takes NAME=VALUE")
    if args.front == "pytorch" and (args.sync != "ddp" or args.sync_option):
        raise UsageError("--front=pytorch runs DDP (--sync=ddp) without options; "
                         "--front=ringlab runs ringlab's synchronisers")
    if args.front == "ringlab":
        args.backend = "ringlab"
        if args.nprocs < 2 and "WORLD_SIZE" not in os.environ:
            raise UsageError("--front=ringlab needs at least 2 ranks (--nprocs or a launcher)")
    if args.ringlab_torch:
        if not os.path.isfile(os.path.join(args.ringlab_torch, "ringlab_torch.so")):
            raise UsageError(f"--ringlab_torch={args.ringlab_torch} holds no ringlab_torch.so")
        args.ringlab_torch = os.path.abspath(args.ringlab_torch)
    args.out_dir = cli_errors.output_dir("--out_dir", args.out_dir)
    return args


# ---- one rank ----------------------------------------------------------------------------------


def join_group(torch, dist, rank, world, args):
    if args.backend == "ringlab":
        if args.ringlab_torch and args.ringlab_torch not in sys.path:
            sys.path.insert(0, args.ringlab_torch)
        import ringlab_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))


def prepare(torch, corpus, rank, world, args):
    """dict: model, net (what forward runs), optimizer, sync, evaluated (a context swapping in
    the result's parameters), batches, validation."""
    torch.manual_seed(args.seed)
    model = gpt.build(torch, args.config, len(corpus.vocab))
    block = model.block_size
    run = dict(model=model, net=model, sync=None, swap=lambda: None,
               stretch=args.straggler_factor if rank == args.straggler_rank else 1.0)
    if world > 1 and args.front == "pytorch":
        run["net"] = torch.nn.parallel.DistributedDataParallel(model)
    run["optimizer"] = gpt.adamw(torch, model, args.lr, args.weight_decay)
    if args.front == "ringlab":
        import ringlab_torch
        from ringlab_front import EvaluatedSwap
        options = dict(option.split("=", 1) for option in args.sync_option)
        run["sync"] = ringlab_torch.Synchronizer(model, run["optimizer"], args.sync, **options)
        run["swap"] = EvaluatedSwap(torch, model, run["sync"])
    run["batches"] = text_data.batches(torch, corpus, block, args.batch_size, rank, world,
                                       args.sampler_seed)
    run["validation"] = text_data.validation_batches(torch, corpus, block, args.eval_windows,
                                                     64)
    return run


def validation_loss(torch, run):
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in run["validation"]:
            total += gpt.loss(torch, run["model"], x, y).item() * x.shape[0]
            count += x.shape[0]
    return total / count


def one_step(torch, run, step, args):
    """(loss, compute_ms, comm_ms, optim_ms, the bytes its synchroniser has sent so far) of one
    training step."""
    optimizer, sync = run["optimizer"], run["sync"]
    lr = gpt.learning_rate(step, args.lr, args.warmup, args.steps)
    for group in optimizer.param_groups:
        group["lr"] = lr
    _, x, y = next(run["batches"])
    clip = ((lambda: torch.nn.utils.clip_grad_norm_(run["model"].parameters(), args.clip))
            if args.clip > 0 else (lambda: None))
    t0 = time.perf_counter()
    optimizer.zero_grad()
    loss = gpt.loss(torch, run["net"], x, y)
    loss.backward()
    t1 = time.perf_counter()
    if run["stretch"] > 1.0:  # a straggler: it waits, it computes nothing else
        time.sleep((run["stretch"] - 1.0) * (t1 - t0))
        t1 = time.perf_counter()
    if sync is not None:
        sync.step(before_optimizer=clip)
        t2 = time.perf_counter()
        comm_ms = sync.last_sync_ms
        return (loss.item(), (t1 - t0) * 1e3, comm_ms, (t2 - t1) * 1e3 - comm_ms,
                sync.bytes_sent)
    clip()
    optimizer.step()
    t2 = time.perf_counter()
    return loss.item(), (t1 - t0) * 1e3, math.nan, (t2 - t1) * 1e3, math.nan


def train(torch, dist, rank, world, run, args):
    """The loop: (losses.csv rows of this rank, eval.csv rows of rank 0)."""
    losses, evals = [], []
    wall = 0.0
    first = mark = run["sync"].bytes_sent if run["sync"] is not None else math.nan
    start = last_line = time.monotonic()
    for step in range(args.steps):
        loss, compute_ms, comm_ms, optim_ms, counter = one_step(torch, run, step, args)
        # Since the last step's end, as the C++ trainer counts: what a synchroniser's own thread
        # sends between two steps (streaming_diloco's fragments, during an evaluation) counts in
        # the next.
        step_bytes, mark = counter - mark, counter
        step_ms = compute_ms + (0 if math.isnan(comm_ms) else comm_ms) + optim_ms
        wall += step_ms / 1e3
        losses.append(f"{rank},{step},{loss!r},{step_ms:.4f},{compute_ms:.4f},{comm_ms:.4f},"
                      f"{optim_ms:.4f},{step_bytes}")
        if not math.isfinite(loss):
            raise RuntimeError(f"rank {rank}: the loss is {loss} at step {step}")
        done = step + 1
        if done % args.eval_every == 0 or done == args.steps:
            if rank == 0:
                run["swap"]()
                val = validation_loss(torch, run)
                run["swap"]()
                evals.append(f"{done},{val!r},{wall:.6f},{mark - first}")
            if world > 1:
                dist.barrier()  # the others wait here, outside their timed steps
        now = time.monotonic()
        if rank == 0 and now - last_line >= PROGRESS_EVERY_S:
            last_line, elapsed = now, now - start
            print(f"progress: step {done}/{args.steps}, loss {loss:.3f}, {elapsed:.0f} s, "
                  f"about {elapsed / done * (args.steps - done):.0f} s to go", flush=True)
    return losses, evals


def result_parameters(torch, run):
    if run["sync"] is not None:
        return run["sync"].evaluated_parameters()
    return {name: p.detach().clone() for name, p in run["model"].named_parameters()}


def write_rank0(torch, corpus, run, evals, scratch, args):
    import numpy as np
    with open(os.path.join(scratch, "eval.csv"), "w") as f:
        f.write(EVAL_HEADER + "\n" + "".join(line + "\n" for line in evals))
    final = os.path.join(scratch, "final")
    os.makedirs(final, exist_ok=True)
    for name, value in result_parameters(torch, run).items():
        np.save(os.path.join(final, f"{name}.npy"), value.numpy())
    run["swap"]()
    text = gpt.sample(torch, run["model"], corpus, "And God said", args.sample_chars, seed=0)
    run["swap"]()
    with open(os.path.join(scratch, "sample.txt"), "w") as f:
        f.write(text + "\n")


def train_rank(rank, world, corpus, scratch, args):
    """One rank: trains, writes its losses (and rank 0 the rest) into scratch."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    faulthandler.dump_traceback_later(args.timeout + args.steps * 10, exit=True)
    if world > 1:
        join_group(torch, dist, rank, world, args)
    try:
        run = prepare(torch, corpus, rank, world, args)
        losses, evals = train(torch, dist, rank, world, run, args)
        with open(os.path.join(scratch, f"losses_rank{rank}.csv"), "w") as f:
            f.write("".join(line + "\n" for line in losses))
        if rank == 0:
            write_rank0(torch, corpus, run, evals, scratch, args)
        if world > 1:
            dist.barrier()  # every rank's file is written before rank 0 reads them
    finally:
        if world > 1:
            dist.destroy_process_group()
        faulthandler.cancel_dump_traceback_later()


# ---- the job -----------------------------------------------------------------------------------


def summary(args, world, corpus, wall, torch_version):
    import torch
    torch.manual_seed(args.seed)
    parameters = gpt.parameter_count(gpt.build(torch, args.config, len(corpus.vocab)))
    keys = ("config", "steps", "batch_size", "lr", "warmup", "weight_decay", "clip", "seed",
            "sampler_seed", "eval_every", "eval_windows", "front", "sync", "backend")
    return {"framework": "pytorch" if args.front == "pytorch" else "ringlab",
            "torch_version": torch_version, "world_size": world,
            "sync_options": dict(o.split("=", 1) for o in args.sync_option),
            **{k: getattr(args, k) for k in keys}, "parameters": parameters,
            "model": dict(zip(("n_layer", "n_head", "n_embd", "block_size"),
                              gpt.CONFIGS[args.config])),
            "vocab": len(corpus.vocab), "text_characters": corpus.characters,
            "text_sha256": corpus.text_sha256, "train_tokens": corpus.train.numel(),
            "valid_tokens": corpus.valid.numel(), "wall_seconds_total": wall}


def write_outputs(args, world, corpus, scratch, wall, torch_version):
    """Rank 0 gathers the ranks' files into --out_dir, each file whole or absent."""
    rows = []
    for rank in range(world):
        with open(os.path.join(scratch, f"losses_rank{rank}.csv")) as f:
            rows.append(f.read())
    files = {"losses.csv": LOSSES_HEADER + "\n" + "".join(rows),
             "summary.json": json.dumps(summary(args, world, corpus, wall, torch_version),
                                        indent=2) + "\n"}
    for name in ("eval.csv", "sample.txt"):
        with open(os.path.join(scratch, name)) as f:
            files[name] = f.read()
    final, staged = os.path.join(args.out_dir, "final"), os.path.join(args.out_dir, ".final.tmp")
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(os.path.join(scratch, "final"), staged)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staged, final)  # the parameters whole, or the earlier ones
    for name, text in files.items():
        tmp = os.path.join(args.out_dir, f".{name}.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(args.out_dir, name))


def launched_rank():
    """(rank, world size) from a torchrun-style launcher, or None."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except ValueError:
        raise UsageError("RANK and WORLD_SIZE must be integers") from None


def spawn_ranks(args, argv):
    """--nprocs children of this program on this host, torchrun-style; waits for them."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    children = []
    for rank in range(args.nprocs):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.nprocs),
                   LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        children.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv,
                                         env=env))
    deadline = time.monotonic() + args.timeout + args.steps * 10
    status = 0
    for child in children:
        try:
            code = child.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for c in children:
                c.kill()
                c.wait()
            print(f"error: the ranks did not finish within {args.timeout + args.steps * 10:.0f}"
                  f" s: killed", file=sys.stderr)
            return 1
        status = status or (1 if code < 0 else code)  # killed by a signal: 1
    return status


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
        launched = launched_rank()
        corpus_text = text_data.read_text()  # here, before any rank: a missing text is one line
        if launched is None and args.nprocs > 1:
            return spawn_ranks(args, argv)
        rank, world = launched or (0, 1)
        if world < 2 and args.front == "ringlab":
            raise UsageError("--front=ringlab needs at least 2 ranks")
        if args.straggler_rank >= world:
            raise UsageError(f"--straggler_rank={args.straggler_rank} is not a rank of the "
                             f"{world} here")
        import torch
        corpus = text_data.Corpus(torch, corpus_text)
    except (UsageError, text_data.DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    scratch = os.path.join(args.out_dir, ".char_lm_ranks")
    if rank == 0:  # an earlier crashed run's files must not leak into this one's
        shutil.rmtree(os.path.join(scratch, "final"), ignore_errors=True)
    os.makedirs(scratch, exist_ok=True)
    t0 = time.perf_counter()
    train_rank(rank, world, corpus, scratch, args)
    if rank == 0:
        write_outputs(args, world, corpus, scratch, time.perf_counter() - t0, torch.__version__)
        shutil.rmtree(scratch, ignore_errors=True)
        if not args.quiet:
            print(f"wrote {args.out_dir}/losses.csv, eval.csv, summary.json, sample.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
