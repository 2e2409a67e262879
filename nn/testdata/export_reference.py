#!/usr/bin/python3
"""Exports PyTorch reference values for ringlab's nn/ tests into nn/testdata/.

Run with Debian's torch 1.13.1 (CPU; the traces under both BLAS libraries, see below):
    /usr/bin/python3 nn/testdata/export_reference.py
(the random streams and nn.Linear's init, which no BLAS touches, are
torch_compat/testdata/export_reference.py's). Files:
  net_<widths>_{params,x,y}.npy            fixed weights and data for the traces
  net_<widths>_refblas_*.npy                forward/backward/SGD traces computed by
                                            torch on the reference BLAS
  openblas/<kernel>/net_<widths>_openblas_*.npy
                                            the same traces on OpenBLAS, once per
                                            OpenBLAS kernel in OPENBLAS_KERNELS
  sgd_exact_{params0,grads}.npy            10000 random parameters and 5 steps of gradients
  sgd_exact_<config>.npy                    the parameters after torch.optim.SGD's 5 steps
Debian's torch calls whichever libblas.so.3 the loader finds (OpenBLAS when it is
installed; its last bits differ from the reference BLAS's), so the traces are
computed in child processes with LD_LIBRARY_PATH set to each library.
OpenBLAS picks its kernel per CPU at run time and kernels sum in different
orders, so its traces are exported once per kernel (OPENBLAS_CORETYPE forces
one; the CPU must support it) into openblas/<kernel as openblas_get_corename()
names it>/, and the tests compare bit for bit only with the kernel they run.
"""
import ctypes
import os
import re
import subprocess
import sys

import numpy as np
import torch
from torch import nn

OUT = os.path.dirname(os.path.abspath(__file__))
torch.set_num_threads(1)
BLAS_DIRS = {
    "openblas": "/usr/lib/x86_64-linux-gnu/openblas-pthread",
    "refblas": "/usr/lib/x86_64-linux-gnu/blas",
}
# The kernels .ci/run tests under (SapphireRapids is Cooperlake in OpenBLAS
# 0.3.21), plus Nehalem for CPUs without AVX.
OPENBLAS_KERNELS = ["Haswell", "SkylakeX", "Cooperlake", "Zen", "Sandybridge", "Nehalem"]


class Net(nn.Module):
    def __init__(self, widths):
        super().__init__()
        self.n = len(widths) - 1
        for i in range(self.n):
            setattr(self, "fc%d" % (i + 1), nn.Linear(widths[i], widths[i + 1]))

    def forward(self, x):
        for i in range(self.n):
            x = getattr(self, "fc%d" % (i + 1))(x)
            if i + 1 < self.n:
                x = torch.relu(x)
        return x


def flat(tensors):
    return np.concatenate([t.detach().numpy().reshape(-1) for t in tensors]).astype(np.float32)


def save(name, array):
    np.save(os.path.join(OUT, name), array)


def wname(widths):
    return "_".join(str(w) for w in widths)


# Forward/backward/SGD traces. Inputs come from torch.randn (not reproducible
# in C++, so they are exported too); labels from randint.
SGD_CONFIGS = {
    "plain": dict(lr=0.1),
    "momentum": dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3),
    "nesterov": dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4),
}
STEPS = 5


def openblas_corename():
    lib = ctypes.CDLL(os.path.join(BLAS_DIRS["openblas"], "libopenblas.so.0"))
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return lib.openblas_get_corename().decode()


def traces(blas):
    # Fail loudly unless torch really runs on the requested BLAS (and kernel).
    torch.zeros(2, 2) @ torch.zeros(2, 2)
    loaded = set(re.findall(r"/\S*libblas\S*", open("/proc/self/maps").read()))
    assert any(p.startswith(BLAS_DIRS[blas]) for p in loaded), (blas, loaded)
    out = OUT
    if blas == "openblas":
        kernel = os.environ["OPENBLAS_CORETYPE"]
        assert openblas_corename() == kernel, (kernel, openblas_corename())
        out = os.path.join(OUT, "openblas", kernel)
        os.makedirs(out, exist_ok=True)
    # 10 and 17 classes take ATen's 8-lane paths in log_softmax (2 and 4 do not).
    for widths, batch in [((10, 5, 2), 50), ((3, 8, 8, 4), 16), ((12, 16, 10), 64),
                          ((6, 8, 17), 33)]:
        name = "net_" + wname(widths)
        tag = name + "_" + blas
        torch.manual_seed(0)
        net0 = Net(widths)
        gen = torch.Generator().manual_seed(1234)
        x = torch.randn(batch, widths[0], generator=gen)
        y = torch.randint(0, widths[-1], (batch,), generator=gen)
        save(name + "_params.npy", flat(net0.state_dict().values()))
        save(name + "_x.npy", x.numpy())
        save(name + "_y.npy", y.numpy().astype(np.int64))
        loss_fn = nn.CrossEntropyLoss()
        logits = net0(x)
        loss = loss_fn(logits, y)
        loss.backward()
        np.save(os.path.join(out, tag + "_logits.npy"), logits.detach().numpy())
        np.save(os.path.join(out, tag + "_loss.npy"),
                np.array([loss.item()], dtype=np.float32))
        np.save(os.path.join(out, tag + "_grads.npy"), flat([p.grad for p in net0.parameters()]))
        for cfg, kwargs in SGD_CONFIGS.items():
            net = Net(widths)
            net.load_state_dict(net0.state_dict())
            opt = torch.optim.SGD(net.parameters(), **kwargs)
            losses = []
            for _ in range(STEPS):
                opt.zero_grad()
                loss = loss_fn(net(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            np.save(os.path.join(out, "%s_sgd_%s_losses.npy" % (tag, cfg)),
                    np.array(losses, dtype=np.float32))
            np.save(os.path.join(out, "%s_sgd_%s_params.npy" % (tag, cfg)), flat(net.parameters()))


# torch.optim.SGD alone, on gradients given step by step: its float arithmetic
# (dampening is a Python double: 1 - 0.9 rounds differently from 1 - 0.9f).
SGD_EXACT_CONFIGS = {
    "plain": dict(lr=0.1),
    "momentum_d0": dict(lr=0.1, momentum=0.9),
    "momentum_d09": dict(lr=0.1, momentum=0.9, dampening=0.9),
    "momentum_d01_wd": dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3),
    "nesterov_wd": dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4),
}


def sgd_exact():
    g = torch.Generator().manual_seed(7)
    params0 = torch.randn(10000, generator=g)
    grads = torch.randn(5, 10000, generator=g)
    save("sgd_exact_params0.npy", params0.numpy())
    save("sgd_exact_grads.npy", grads.numpy())
    for name, cfg in SGD_EXACT_CONFIGS.items():
        p = torch.nn.Parameter(params0.clone())
        opt = torch.optim.SGD([p], **cfg)
        for step in range(grads.shape[0]):
            p.grad = grads[step].clone()
            opt.step()
        save("sgd_exact_%s.npy" % name, p.detach().numpy())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--traces":
        traces(sys.argv[2])
        sys.exit(0)
    sgd_exact()
    runs = [("refblas", None)] + [("openblas", k) for k in OPENBLAS_KERNELS]
    for blas, kernel in runs:
        env = dict(os.environ, LD_LIBRARY_PATH=BLAS_DIRS[blas])
        env.pop("OPENBLAS_CORETYPE", None)
        if kernel:
            env["OPENBLAS_CORETYPE"] = kernel
        subprocess.run([sys.executable, os.path.abspath(__file__), "--traces", blas],
                       env=env, check=True)
    print("wrote reference files to", OUT)
