#!/usr/bin/python3
"""Exports PyTorch reference values for ringlab's torch_compat/ tests into
torch_compat/testdata/.

Run with Debian's torch 1.13.1 (CPU):
    /usr/bin/python3 torch_compat/testdata/export_reference.py
Files:
  randperm_s<seed>_n<n>.npy   torch.randperm(n, generator=Generator().manual_seed(seed))
  randperm2_s<seed>_n<n>.npy  the second randperm drawn from the same generator
  randint_s<seed>_k<k>.npy    torch.randint(0, k, (64,), generator=...)
  uniform_s<seed>.npy         torch.empty(1000).uniform_(-0.3, 0.7) after manual_seed
  init_<widths>_s<seed>.npy   Net(widths) state_dict after torch.manual_seed(seed),
                              flattened in state_dict order (fc1.weight, fc1.bias, ...)
  aten_{exp,log}_{in,out}.npy torch.exp / torch.log of 1003 values (ATen's Sleef calls)
  aten_log_softmax_{in,out}_c<classes>.npy
                              torch.log_softmax(z, dim=1) of 37 rows of <classes> logits
  randn_s<seed>_n<n>.npy      torch.randn(n) after torch.manual_seed(seed) (ATen's AVX2
                              Box-Muller on this CPU; n not a multiple of 16 redraws the tail;
                              seeds include PowerSGD's first two for its Q matrices)
None of these depend on the BLAS library (nn/testdata/export_reference.py
exports the traces that do).
"""
import os

import numpy as np
import torch
from torch import nn

OUT = os.path.dirname(os.path.abspath(__file__))
SEEDS = [0, 1, 42, 2**32 - 1, 2**32 + 7]


class Net(nn.Module):
    """Linear layers widths[0] -> ... -> widths[-1], constructed in order."""

    def __init__(self, widths):
        super().__init__()
        for i in range(len(widths) - 1):
            setattr(self, "fc%d" % (i + 1), nn.Linear(widths[i], widths[i + 1]))


def save(name, array):
    np.save(os.path.join(OUT, name), array)


def flat(tensors):
    return np.concatenate([t.detach().numpy().reshape(-1) for t in tensors]).astype(np.float32)


def main():
    torch.set_num_threads(1)
    for seed in SEEDS:
        for n in [1, 2, 3, 10, 100, 1000, 5000]:
            g = torch.Generator().manual_seed(seed)
            save("randperm_s%d_n%d.npy" % (seed, n), torch.randperm(n, generator=g).numpy())
            if n == 100:
                save("randperm2_s%d_n%d.npy" % (seed, n), torch.randperm(n, generator=g).numpy())
        for k in [2, 7, 1000]:
            g = torch.Generator().manual_seed(seed)
            save("randint_s%d_k%d.npy" % (seed, k), torch.randint(0, k, (64,), generator=g).numpy())
        torch.manual_seed(seed)
        save("uniform_s%d.npy" % seed, torch.empty(1000).uniform_(-0.3, 0.7).numpy())
    for widths in [(10, 5, 2), (3, 8, 8, 4), (1024, 17)]:
        for seed in SEEDS:
            torch.manual_seed(seed)
            net = Net(widths)
            name = "_".join(str(w) for w in widths)
            save("init_%s_s%d.npy" % (name, seed), flat(net.state_dict().values()))
    aten_math()
    randn()
    print("wrote reference files to", OUT)


def randn():
    for seed in SEEDS + [209652396, 398764591]:
        for n in [1, 2, 3, 10, 15, 16, 17, 31, 784, 1024, 1030, 3136, 4096, 4120]:
            torch.manual_seed(seed)
            save("randn_s%d_n%d.npy" % (seed, n), torch.randn(n).numpy())


def aten_math():
    """ATen's exp, log and log_softmax on values that exercise every lane path."""
    g = torch.Generator().manual_seed(3)
    # exp over its useful float range (down to subnormal results) and log over
    # ten decades either side of 1, 1003 values: not a multiple of 8 lanes.
    x = torch.linspace(-100.0, 80.0, 1003)
    save("aten_exp_in.npy", x.numpy())
    save("aten_exp_out.npy", torch.exp(x).numpy())
    y = torch.exp(torch.empty(1003).uniform_(-23.0, 23.0, generator=g))
    save("aten_log_in.npy", y.numpy())
    save("aten_log_out.npy", torch.log(y).numpy())
    for classes in LOG_SOFTMAX_CLASSES:
        z = torch.randn(37, classes, generator=g) * 6.0
        save("aten_log_softmax_in_c%d.npy" % classes, z.numpy())
        save("aten_log_softmax_out_c%d.npy" % classes, torch.log_softmax(z, dim=1).numpy())


# Fewer than 8 classes, exactly 8, 8 plus a tail, several whole vectors, a tail.
LOG_SOFTMAX_CLASSES = [1, 2, 3, 7, 8, 9, 10, 16, 17, 40]


if __name__ == "__main__":
    main()
