#!/usr/bin/python3
"""PyTorch reference for the trainer over several epochs with set_epoch and several steps each.

The seed_ddp reference (pytorch_reference.py) is one full-batch step per epoch without
set_epoch: it cannot tell a sampler that ignores set_epoch, or a loss summed in another order
over a partial batch, from PyTorch's. This run takes the same model, seed, data and initial
parameters (the seed example's DDP program with fixes 1-4 of pytorch_reference.py), but a batch
of 16 (50 samples per rank: steps of 16, 16, 16 and 2) over 3 epochs, with
DistributedSampler.set_epoch(epoch) before each: 12 steps per rank. It exports each rank's
per-step losses, the sampler's indices of every epoch and the final parameters under
testdata/seed_ddp/reference_set_epoch/, which //train:trainer_test compares ringlab with.

Run with Debian's torch (the pyenv python3 on PATH has no torch):
    /usr/bin/python3 experiments/seed_ddp/pytorch_set_epoch_reference.py [--out DIR]
"""

import ctypes
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_reference as ref  # noqa: E402  (the model, the seeding, the export helpers)
import cli_errors  # noqa: E402  (experiments/, on the path since pytorch_reference is imported)

BATCH_SIZE = 16
EPOCHS = 3


def blas_kernel():
    """The OpenBLAS kernel torch multiplies with here (Debian's torch uses the system BLAS):
    the test demands bitwise equality only where ringlab's OpenBLAS runs the same one."""
    torch.zeros(2, 2) @ torch.zeros(2, 2)
    for path in sorted(set(re.findall(r"/\S*libblas\S*|/\S*libopenblas\S*",
                                      open("/proc/self/maps").read()))):
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
    return "not OpenBLAS"


def run(rank, world_size, seed, scratch):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        model, data, targets = ref._build(seed, rank)
        ddp_model = DDP(model)
        dataset = TensorDataset(data, targets)
        sampler = DistributedSampler(dataset)  # shuffle=True, seed=0
        loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
        loss_fn = nn.CrossEntropyLoss()
        optimizer = optim.SGD(ddp_model.parameters(), lr=ref.LR)
        losses, orders, step = [], [], 0
        for epoch in range(EPOCHS):
            sampler.set_epoch(epoch)
            orders.append(list(iter(sampler)))
            for batch, target in loader:
                loss, _ = ref._train_step(ddp_model, loss_fn, optimizer, batch, target)
                losses.append((epoch, step, loss.item()))
                step += 1
        dist.barrier()
        torch.save(
            {"losses": losses, "orders": orders, "final": ref._params(ddp_model.module)},
            os.path.join(scratch, f"rank{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out",
        default=os.path.join(here, "..", "..", "testdata", "seed_ddp", "reference_set_epoch"),
    )
    args = parser.parse_args(argv)
    out = cli_errors.output_dir("--out", args.out)
    scratch = tempfile.mkdtemp(prefix="set_epoch_scratch.")
    try:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(ref._free_port())
        mp.spawn(run, args=(ref.WORLD_SIZE, 0, scratch), nprocs=ref.WORLD_SIZE)
        results = [torch.load(os.path.join(scratch, f"rank{r}.pt")) for r in range(ref.WORLD_SIZE)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    # DistributedSampler's order (docs/pytorch-fidelity.md) against torch's, every epoch.
    for rank, r in enumerate(results):
        for epoch, order in enumerate(r["orders"]):
            assert order == ref.expected_sampler_indices(
                ref.NUM_SAMPLES, ref.WORLD_SIZE, rank, ref.SAMPLER_SEED, epoch
            ), f"rank {rank} epoch {epoch}: the sampler is not the facts'"
        assert r["orders"][0] != r["orders"][1], "set_epoch changed nothing"
    assert ref._all_equal(results[0]["final"], results[1]["final"])
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    with open(os.path.join(out, "losses.csv"), "w") as f:
        f.write("rank,epoch,step,loss\n")
        for rank, r in enumerate(results):
            for epoch, step, loss in r["losses"]:
                f.write(f"{rank},{epoch},{step},{loss!r}\n")
    for rank, r in enumerate(results):
        ref._save_npy(os.path.join(out, f"sampler_rank{rank}.npy"), np.array(r["orders"]), "<i8")
    ref._save_params(os.path.join(out, "final"), results[0]["final"])
    meta = {
        "torch_version": torch.__version__,
        "openblas_kernel": blas_kernel(),
        "config": {
            "as": "testdata/seed_ddp/reference (same seed, data, initial parameters, lr)",
            "batch_size": BATCH_SIZE,
            "epochs": EPOCHS,
            "steps_per_rank": len(results[0]["losses"]),
            "sampler": "DistributedSampler(dataset), set_epoch(epoch) before each epoch",
        },
    }
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"wrote {out}: {meta['config']['steps_per_rank']} steps per rank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
