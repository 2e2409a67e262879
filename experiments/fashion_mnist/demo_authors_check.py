#!/usr/bin/python3
"""The DeMo reference of pytorch_syncs.py (which ringlab's --sync=demo matches bit for bit) against
the authors' DeMo optimiser (github.com/bloc97/DeMo, demo.py), in lockstep: 2 gloo ranks train an
MLP from the same seed on synthetic batches with the authors' optimiser, and at every step the
reference is given the same gradients (keeping its own momentum); this prints on how many
parameters the two updates (each ±lr) agree.

    demo_authors_check.py --demo_repo DIR [--steps N] [--lr LR] [--model W0,W1,...]

DIR holds the authors' demo.py (a clone of their repository; nothing of it is in ringlab). Their
code imports einops, which Debian 12 lacks: where it does not import, the six rearrange patterns
demo.py uses (each a reshape that keeps the axes' order) are supplied here, as is torch 2's
Tensor.nbytes, which it counts bytes with, on torch 1.13.

What may differ, and why: their momentum adds lr × g where the reference adds g (one rounding
apart; the top-k and the signs are scale-free), their DCT is torch's FFT where the reference
multiplies by a basis, and their top-k breaks ties as torch.topk does where the reference takes
the lower position. Each can flip the sign of an update whose value is within rounding of zero,
and a flipped sign moves that parameter by 2 × lr; on a trajectory of its own each flip
changes the next gradients, so two runs drift apart within tens of steps: the comparison is per
step, on one trajectory, not bit for bit. Exit status 0 when the check ran,
2 for bad input.
"""

import os
import re
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(1, os.path.dirname(HERE))  # experiments/: the kit's error line

import cli_errors  # noqa: E402


def install_rearrange():
    """einops.rearrange for patterns that only regroup axes in order (all demo.py uses)."""
    import math

    def groups(side):
        return [g.split() if g.startswith("(") is False else g[1:-1].split()
                for g in re.findall(r"\([^)]*\)|\S+", side)]

    def rearrange(x, pattern, **sizes):
        left, right = (groups(s) for s in pattern.split("->"))
        names = [n for g in left for n in g]
        if names != [n for g in right for n in g]:
            raise NotImplementedError(f"rearrange {pattern!r}: axes change order")
        known = dict(sizes)
        for group, size in zip(left, x.shape):
            unknown = [n for n in group if n not in known]
            rest = math.prod(known[n] for n in group if n in known)
            if len(unknown) == 1:
                known[unknown[0]] = size // rest
        return x.reshape([math.prod(known[n] for n in g) for g in right])

    module = types.ModuleType("einops")
    module.rearrange = rearrange
    sys.modules["einops"] = module


def parse_args():
    p = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--demo_repo", required=True, help="a directory holding the authors' demo.py")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--model", default="784,256,10")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--demo_decay", type=float, default=0.999)
    p.add_argument("--demo_chunk", type=int, default=64)
    p.add_argument("--demo_topk", type=int, default=32)
    args = p.parse_args()
    cli_errors.input_file("--demo_repo", os.path.join(args.demo_repo, "demo.py"))
    cli_errors.int_in_range("--steps", args.steps, 1, 10000)
    cli_errors.positive_finite("--lr", args.lr, maximum=1)
    return args


def lockstep(torch, dist, args, rank, widths):
    """Per step: the share of parameters whose update the two agree on (their signs), the
    authors' optimiser training the model and the reference given the same gradients."""
    import demo
    from pytorch_ddp import build_model
    from pytorch_syncs import DeMo as ReferenceDeMo

    torch.manual_seed(0)
    model = build_model(torch, widths)
    params = list(model.parameters())
    authors = demo.DeMo(params, lr=args.lr, compression_decay=args.demo_decay,
                        compression_topk=args.demo_topk, compression_chunk=args.demo_chunk)
    reference = ReferenceDeMo(torch, dist, model, args, dist.get_world_size())
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    agreed, losses = [], []
    for _ in range(args.steps):
        x = torch.rand(args.batch_size, widths[0], generator=data)
        y = torch.randint(widths[-1], (args.batch_size,), generator=data)
        authors.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        grads = [p.grad.clone() for p in params]
        reference.before_step()  # the gradients become its update's signs
        ours = torch.cat([p.grad.reshape(-1) for p in params])
        before = torch.nn.utils.parameters_to_vector(params).detach()
        for p, g in zip(params, grads):
            p.grad.copy_(g)
        authors.step()
        theirs = torch.sign(before - torch.nn.utils.parameters_to_vector(params).detach())
        agreed.append(int((ours == theirs).sum()))
        losses.append(loss.item())
    return agreed, before.numel(), losses


def rank_main(rank, args, port, queue):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.abspath(args.demo_repo))
    try:
        import einops  # noqa: F401
    except ImportError:
        install_rearrange()
    if not hasattr(torch.Tensor, "nbytes"):  # torch 2's; demo.py counts its bytes with it
        torch.Tensor.nbytes = property(lambda t: t.numel() * t.element_size())
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    agreed, count, losses = lockstep(torch, dist, args, rank, [int(w) for w in
                                                               args.model.split(",")])
    if rank == 0:
        queue.put((agreed, count, losses))
    dist.destroy_process_group()


def main():
    args = parse_args()
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    queue = context.Queue()
    mp.start_processes(rank_main, args=(args, port, queue), nprocs=2, start_method="spawn")
    agreed, count, losses = queue.get(timeout=60)
    for step in range(0, len(agreed), max(1, len(agreed) // 10)):
        print(f"step {step}: loss {losses[step]:.6f}, updates the same on {agreed[step]} of "
              f"{count} parameters")
    worst = min(agreed)
    print(f"{len(agreed)} steps: updates the same on {sum(agreed)} of {count * len(agreed)} "
          f"({100 * sum(agreed) / (count * len(agreed)):.4f}%); the worst step "
          f"{count - worst} different ({100 * (count - worst) / count:.4f}%); every one "
          f"the same at {sum(a == count for a in agreed)} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
