#!/usr/bin/python3
"""PyTorch reference run for experiments/seed_ddp: the seed example's DDP program, made runnable.

ringlab's C++ trainer reproduces this run; this script produces the numbers it is compared to
(initial and final parameters, each rank's data, the sampler's indices, per-step losses) and
exports them as .npy/.csv/.json under testdata/seed_ddp/reference/ (see README_reference.md).

Run with Debian's torch (the pyenv python3 on PATH has no torch):
    /usr/bin/python3 experiments/seed_ddp/pytorch_reference.py [--seed 0] [--out DIR]
                                                               [--timing_steps N]

DEFECTS OF THE SEED EXAMPLE AND THEIR MINIMAL FIXES (defect -> fix)
  1. The spawned function receives 4 positional arguments (mp.spawn passes the rank first, then
     the args tuple) but declares 3: "TypeError: run() takes 3 positional arguments but 4 were
     given". -> The spawned function's parameters match what spawn passes: run(rank, *args).
  2. MASTER_ADDR / MASTER_PORT are never set, so init_process_group's env:// rendezvous fails.
     -> The parent sets MASTER_ADDR=127.0.0.1 and MASTER_PORT to a free port (bind port 0).
  3. Backend "nccl": "Distributed package doesn't have NCCL built in" (CPU-only torch, no GPU).
     -> Backend "gloo".
  4. The rank is used as a CUDA device (model.to(rank), DDP(..., device_ids=[rank]), the batch
     moved .to(rank), train(model, rank, ...)): "Torch not compiled with CUDA enabled".
     -> Everything stays on the CPU: no .to(rank), DDP(model) without device_ids.

SILENT QUIRKS OF THE SEED EXAMPLE, KEPT ON PURPOSE (they are what "its intent" computes)
  a. Each rank draws its own random data set, though DistributedSampler assumes one data set
     shared by all ranks: rank r trains on its own samples at the indices the sampler gives r.
  b. Nothing is seeded (fixed here, see ADDITIONS).
  c. No sampler.set_epoch(epoch): every epoch uses the permutation of epoch 0 (seed 0 + 0).
  d. batch_size=64 > 50 samples per rank (100 samples / 2 ranks): each epoch is one full-batch
     step of 50 samples, so 10 steps per rank in 10 epochs.
  e. The labels are random (randint(0, 2)): there is nothing to learn; the loss barely moves.

ADDITIONS (not in the seed example; needed for a reproducible reference)
  - --seed S (default 0): each rank calls torch.manual_seed(S + rank) BEFORE building the model;
    the model is built (init draws: fc1.weight, fc1.bias, fc2.weight, fc2.bias), then the data
    set is drawn (torch.randn(100, 10), then torch.randint(0, 2, (100,))). So each rank has its
    own initial parameters (DDP's constructor broadcasts rank 0's) and its own data (quirk a).
    The sampler's seed stays DistributedSampler's default 0, independent of --seed.
  - torch.set_num_threads(1) per rank (determinism and a fair timing comparison).
  - Measurement and export only; the training arithmetic is the seed example's.
  - --timing_steps N: optional extra DDP run of N steps (fresh model, same seed and data) whose
    mean time per step goes to meta.json["timing"].
"""

import json
import os
import shlex
import shutil
import socket
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))  # experiments/: the kit's error line

import cli_errors  # noqa: E402

WORLD_SIZE = 2
NUM_SAMPLES = 100
NUM_FEATURES = 10
NUM_CLASSES = 2
BATCH_SIZE = 64
LR = 0.01
EPOCHS = 10
SAMPLER_SEED = 0  # DistributedSampler's default; not --seed.
PARAM_NAMES = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")

DEFECTS_FIXED = [
    "1. spawned function got 4 positional args for 3 parameters (TypeError) -> "
    "signature matches mp.spawn's call: run(rank, *args)",
    "2. MASTER_ADDR/MASTER_PORT unset -> parent sets MASTER_ADDR=127.0.0.1 and a free "
    "MASTER_PORT (bound port 0)",
    "3. NCCL backend not built in -> gloo backend",
    "4. rank used as CUDA device (.to(rank), device_ids=[rank], batch .to(rank)) without CUDA "
    "-> CPU tensors, DDP(model) without device_ids",
]
QUIRKS_KEPT = [
    "each rank draws its own random data set though the sampler assumes one shared set",
    "nothing seeded in the seed example (this script adds --seed: manual_seed(seed + rank))",
    "no sampler.set_epoch: every epoch uses epoch 0's permutation",
    "batch 64 > 50 samples per rank: one full-batch step per epoch (10 steps per rank)",
    "random labels: nothing to learn",
]


class Net(nn.Module):
    """The seed example's model: Linear(10, 5) -> ReLU -> Linear(5, 2)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(NUM_FEATURES, 5)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(5, NUM_CLASSES)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


def _params(module):
    """Detached copies of the parameters by name, in PARAM_NAMES order."""
    named = dict(module.named_parameters())
    return {name: named[name].detach().clone() for name in PARAM_NAMES}


def _grads(module):
    named = dict(module.named_parameters())
    return {name: named[name].grad.detach().clone() for name in PARAM_NAMES}


def _build(seed, rank):
    """Seed, then model, then this rank's data: the draw order the C++ side reproduces."""
    torch.manual_seed(seed + rank)
    model = Net()
    data = torch.randn(NUM_SAMPLES, NUM_FEATURES)
    targets = torch.randint(0, NUM_CLASSES, (NUM_SAMPLES,))
    return model, data, targets


def _train_step(ddp_model, loss_fn, optimizer, batch, target):
    """The seed example's step; returns (loss tensor, seconds for zero_grad+fwd+bwd+step)."""
    t0 = time.perf_counter()
    optimizer.zero_grad()
    output = ddp_model(batch)
    loss = loss_fn(output, target)
    loss.backward()  # DDP averages the gradients across ranks here.
    optimizer.step()
    return loss, time.perf_counter() - t0


def _timing_run(seed, rank, timing_steps, loss_fn):
    """The seconds of each step of a second DDP run, timing_steps long (fresh model, same seed
    and data): [] when timing_steps is 0."""
    timing_times = []
    if timing_steps > 0:
        t_model, t_data, t_targets = _build(seed, rank)
        t_ddp = DDP(t_model)
        t_sampler = DistributedSampler(TensorDataset(t_data, t_targets))
        t_loader = DataLoader(
            TensorDataset(t_data, t_targets), batch_size=BATCH_SIZE, sampler=t_sampler
        )
        t_opt = optim.SGD(t_ddp.parameters(), lr=LR)
        while len(timing_times) < timing_steps:
            for batch, target in t_loader:
                _, dt = _train_step(t_ddp, loss_fn, t_opt, batch, target)
                timing_times.append(dt)
                if len(timing_times) == timing_steps:
                    break
    return timing_times


def run(rank, world_size, seed, timing_steps, scratch):
    """One rank (fixes 1-4 applied). Writes its results to scratch/rank{rank}.pt."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)  # fixes 2, 3
    try:
        model, data, targets = _build(seed, rank)
        init_pre = _params(model)
        ddp_model = DDP(model)  # fix 4; broadcasts rank 0's parameters.
        init_post = _params(ddp_model.module)

        dataset = TensorDataset(data, targets)
        sampler = DistributedSampler(dataset)  # defaults: shuffle=True, seed=0
        assert sampler.seed == SAMPLER_SEED and sampler.shuffle and not sampler.drop_last
        indices = list(iter(sampler))
        # No set_epoch: a second iteration (a later epoch) gives the same order.
        assert indices == list(iter(sampler)), "sampler order changed without set_epoch"
        loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)

        loss_fn = nn.CrossEntropyLoss()
        optimizer = optim.SGD(ddp_model.parameters(), lr=LR)

        losses, step_times, grads_step0 = [], [], None
        batch_checked = False
        step = 0
        for epoch in range(EPOCHS):
            for batch, target in loader:
                if not batch_checked:  # the loader really feeds data[sampler indices].
                    idx = torch.tensor(indices[: len(target)])
                    assert torch.equal(batch, data[idx]) and torch.equal(target, targets[idx])
                    batch_checked = True
                if step == 0:
                    # Same step, split so the averaged gradients can be captured.
                    t0 = time.perf_counter()
                    optimizer.zero_grad()
                    loss = loss_fn(ddp_model(batch), target)
                    loss.backward()
                    t1 = time.perf_counter()
                    grads_step0 = _grads(ddp_model.module)
                    t2 = time.perf_counter()
                    optimizer.step()
                    dt = (t1 - t0) + (time.perf_counter() - t2)
                else:
                    loss, dt = _train_step(ddp_model, loss_fn, optimizer, batch, target)
                losses.append((epoch, step, loss.item()))
                step_times.append(dt)
                step += 1
        final = _params(ddp_model.module)
        timing_times = _timing_run(seed, rank, timing_steps, loss_fn)
        dist.barrier()
        torch.save(
            {
                "init_pre": init_pre,
                "init_post": init_post,
                "data": data,
                "targets": targets,
                "sampler": indices,
                "losses": losses,
                "step_times": step_times,
                "grads_step0": grads_step0,
                "final": final,
                "timing_times": timing_times,
            },
            os.path.join(scratch, f"rank{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()


# ---- checks against DistributedSampler's order (docs/pytorch-fidelity.md) ---------------------


class MT19937:
    """Pure-Python 32-bit Mersenne Twister (std::mt19937), to check the sampler's facts."""

    def __init__(self, seed):
        self.mt = [0] * 624
        self.mt[0] = seed & 0xFFFFFFFF
        for i in range(1, 624):
            prev = self.mt[i - 1]
            self.mt[i] = (1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF
        self.index = 624

    def __call__(self):
        if self.index >= 624:
            for i in range(624):
                y = (self.mt[i] & 0x80000000) | (self.mt[(i + 1) % 624] & 0x7FFFFFFF)
                self.mt[i] = self.mt[(i + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y & 0xFFFFFFFF


def expected_sampler_indices(n, world_size, rank, seed, epoch=0):
    """DistributedSampler per the facts: forward Fisher-Yates randperm, pad, stride by rank."""
    gen = MT19937(seed + epoch)
    perm = list(range(n))
    for i in range(n - 1):
        z = gen() % (n - i)
        perm[i], perm[i + z] = perm[i + z], perm[i]
    num_samples = -(-n // world_size)
    total = num_samples * world_size
    while len(perm) < total:
        perm += perm[: total - len(perm)]
    return perm[rank:total:world_size]


# ---- parent: spawn, check, export ------------------------------------------------------------


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _save_npy(path, tensor, dtype):
    arr = np.ascontiguousarray(tensor.numpy() if torch.is_tensor(tensor) else tensor, dtype=dtype)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, arr, allow_pickle=False)


def _save_params(directory, params):
    for name in PARAM_NAMES:
        _save_npy(os.path.join(directory, f"{name}.npy"), params[name], "<f4")


def _all_equal(a, b):
    return all(torch.equal(a[n], b[n]) for n in PARAM_NAMES)


def _timing_summary(times):
    ms = [t * 1e3 for t in times]
    return {
        "steps": len(ms),
        "mean_ms": statistics.fmean(ms),
        "median_ms": statistics.median(ms),
        "min_ms": min(ms),
        "mean_ms_excluding_first": statistics.fmean(ms[1:]) if len(ms) > 1 else None,
    }


def export(results, out_tmp, args, command_line):
    r0, r1 = results
    checks = {}
    _save_params(os.path.join(out_tmp, "init"), r0["init_post"])
    _save_params(os.path.join(out_tmp, "init_rank1_before_broadcast"), r1["init_pre"])
    checks["init_equals_rank0_pre_broadcast"] = _all_equal(r0["init_post"], r0["init_pre"])
    checks["rank1_post_broadcast_equals_rank0"] = _all_equal(r1["init_post"], r0["init_post"])
    checks["rank1_pre_broadcast_differs_from_rank0"] = not _all_equal(r1["init_pre"], r0["init_pre"])
    for rank, r in enumerate(results):
        _save_npy(os.path.join(out_tmp, f"data_rank{rank}.npy"), r["data"], "<f4")
        _save_npy(os.path.join(out_tmp, f"targets_rank{rank}.npy"), r["targets"], "<i8")
        _save_npy(os.path.join(out_tmp, f"sampler_rank{rank}.npy"), r["sampler"], "<i8")
    checks["sampler_same_every_epoch_no_set_epoch"] = True  # asserted in each rank
    checks["sampler_ranks_partition_0_to_99"] = sorted(r0["sampler"] + r1["sampler"]) == list(
        range(NUM_SAMPLES)
    )
    checks["sampler_matches_mt19937_forward_fisher_yates"] = all(
        r["sampler"] == expected_sampler_indices(NUM_SAMPLES, WORLD_SIZE, rank, SAMPLER_SEED)
        for rank, r in enumerate(results)
    )
    _save_params(os.path.join(out_tmp, "final"), r0["final"])
    checks["final_params_rank1_bitwise_equal_rank0"] = _all_equal(r1["final"], r0["final"])
    _save_params(os.path.join(out_tmp, "grads_step0_rank0"), r0["grads_step0"])
    checks["grads_step0_rank1_bitwise_equal_rank0"] = _all_equal(r1["grads_step0"], r0["grads_step0"])

    with open(os.path.join(out_tmp, "losses.csv"), "w", newline="\n") as f:
        f.write("rank,epoch,step,loss\n")
        for rank, r in enumerate(results):
            for epoch, step, loss in r["losses"]:
                f.write(f"{rank},{epoch},{step},{loss!r}\n")

    meta = {
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "python_version": sys.version.split()[0],
        "config": {
            "model": "Net: fc1=Linear(10,5) -> ReLU -> fc2=Linear(5,2)",
            "loss": "CrossEntropyLoss(reduction='mean')",
            "optimizer": "SGD(lr=0.01, momentum=0, weight_decay=0)",
            "lr": LR,
            "epochs": EPOCHS,
            "samples": NUM_SAMPLES,
            "features": NUM_FEATURES,
            "classes": NUM_CLASSES,
            "batch_size": BATCH_SIZE,
            "world_size": WORLD_SIZE,
            "steps_per_rank": len(r0["losses"]),
            "seed": args.seed,
            "seed_rule": "torch.manual_seed(seed + rank), then Net() init, then "
            "randn(100,10), then randint(0,2,(100,))",
            "sampler": "DistributedSampler(dataset): shuffle=True, drop_last=False, no set_epoch",
            "sampler_seed": SAMPLER_SEED,
            "backend": "gloo (CPU)",
            "threads_per_rank": 1,
        },
        "defects_fixed": DEFECTS_FIXED,
        "quirks_kept": QUIRKS_KEPT,
        "checks": checks,
        "final_params_equal_across_ranks": checks["final_params_rank1_bitwise_equal_rank0"],
        # Everything above is deterministic; the timing entries below are not.
        "wall_time_per_step_ms": {
            f"rank{rank}": statistics.fmean(r["step_times"]) * 1e3
            for rank, r in enumerate(results)
        },
        "wall_time_per_step_note": "mean over the training steps of perf_counter around "
        "zero_grad+forward+loss+backward(allreduce)+step; data loading excluded",
        "timing": (
            {f"rank{rank}": _timing_summary(r["timing_times"]) for rank, r in enumerate(results)}
            if args.timing_steps > 0
            else None
        ),
        "command_line": command_line,
    }
    with open(os.path.join(out_tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=False)
        f.write("\n")
    return meta


def main(argv=None):
    parser = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="manual_seed(seed + rank) per rank")
    parser.add_argument("--out", default=os.path.join(HERE, "..", "..", "testdata", "seed_ddp",
                                                      "reference"), help="output directory")
    parser.add_argument(
        "--timing_steps", type=int, default=0, help="extra timed DDP run of N steps (0 = off)"
    )
    args = parser.parse_args(argv)
    if args.timing_steps < 0:
        parser.error("--timing_steps must be >= 0")
    if args.seed < 0:
        parser.error("--seed must be >= 0")
    cli_errors.output_dir("--out", args.out)
    command_line = " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv)

    out = os.path.abspath(args.out)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    out_tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.tmp.", dir=parent)
    scratch = tempfile.mkdtemp(prefix="seed_ddp_scratch.")
    try:
        os.environ["MASTER_ADDR"] = "127.0.0.1"  # fix 2
        os.environ["MASTER_PORT"] = str(_free_port())
        t0 = time.perf_counter()
        mp.spawn(  # fix 1: run(rank, world_size, seed, timing_steps, scratch)
            run, args=(WORLD_SIZE, args.seed, args.timing_steps, scratch), nprocs=WORLD_SIZE
        )
        wall = time.perf_counter() - t0
        results = [torch.load(os.path.join(scratch, f"rank{r}.pt")) for r in range(WORLD_SIZE)]
        meta = export(results, out_tmp, args, command_line)
        failed = [k for k, v in meta["checks"].items() if not v]
        if failed:
            raise RuntimeError(f"reference checks failed: {failed}")
        # Replace the old reference only now that the new one is complete.
        old = None
        if os.path.exists(out):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.old.", dir=parent)
            os.rmdir(old)
            os.rename(out, old)
        os.rename(out_tmp, out)
        if old:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(out_tmp, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"wrote {out} in {wall:.2f} s (spawn + training)")
    print("rank  step  loss")
    for rank, r in enumerate(results):
        for i in (0, len(r["losses"]) - 1):
            print(f"{rank:4d}  {r['losses'][i][1]:4d}  {r['losses'][i][2]!r}")
    for key, value in meta["wall_time_per_step_ms"].items():
        print(f"{key}: {value:.3f} ms/step (mean of {len(results[0]['step_times'])} steps)")
    if meta["timing"]:
        for key, t in meta["timing"].items():
            print(f"timing {key}: mean {t['mean_ms']:.3f} ms, median {t['median_ms']:.3f} ms "
                  f"over {t['steps']} steps")
    for key, value in meta["checks"].items():
        print(f"check {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
