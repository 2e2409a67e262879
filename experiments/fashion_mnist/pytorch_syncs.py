"""pytorch_ddp.py's --sync as PyTorch itself does it: DDP and its communication hooks
(fp16_compress_hook, powerSGD_hook, post_localSGD_hook with PeriodicModelAverager), DiLoCo
and SPARTA written in plain PyTorch, and the compressors' hooks (pytorch_compressors.py)."""

import math
import os

from pytorch_compressors import COMPRESSORS, register


class DiLoCo:
    """The outer loop of DiLoCo over a plain (not DDP) model, as described in the docstring."""

    def __init__(self, torch, dist, model, args, world):
        self.torch, self.dist, self.model, self.world = torch, dist, model, world
        self.inner_steps = args.inner_steps
        self.outer = [torch.nn.Parameter(p.detach().clone()) for p in model.parameters()]
        self.optimizer = torch.optim.SGD(self.outer, lr=args.outer_lr,
                                         momentum=args.outer_momentum, nesterov=True)

    def after_step(self, step):
        if (step + 1) % self.inner_steps:
            return
        torch = self.torch
        with torch.no_grad():
            local = list(self.model.parameters())
            flat = torch.cat([(o - p).reshape(-1) for o, p in zip(self.outer, local)])
            flat.div_(self.world)  # before the sum, as average_parameters divides
            self.dist.all_reduce(flat)
            offset = 0
            for o in self.outer:
                o.grad = flat[offset:offset + o.numel()].view_as(o).clone()
                offset += o.numel()
        self.optimizer.step()
        with torch.no_grad():
            for o, p in zip(self.outer, local):
                p.copy_(o)

    def swap(self):
        """Exchanges the model's parameters with the outer ones (twice: back as they were)."""
        with self.torch.no_grad():
            for o, p in zip(self.outer, self.model.parameters()):
                own = p.detach().clone()
                p.copy_(o)
                o.copy_(own)


class SparseLoCo(DiLoCo):
    """SparseLoCo over a plain model (sync/sparseloco.cc says what it does): DiLoCo's outer
    parameters and swap, the change through an error-feedback accumulator, each chunk's top-k
    quantised, gathered from every rank, and a plain outer step."""

    def __init__(self, torch, dist, model, args, world):
        self.torch, self.dist, self.model, self.world = torch, dist, model, world
        self.inner_steps = args.inner_steps
        self.outer = [p.detach().clone() for p in model.parameters()]
        self.error = [torch.zeros_like(p) for p in self.outer]
        self.lr, self.beta = args.sparseloco_outer_lr, args.sparseloco_beta
        self.chunk, self.topk, self.bits = (args.sparseloco_chunk, args.sparseloco_topk,
                                            args.sparseloco_bits)

    def after_step(self, step):
        if (step + 1) % self.inner_steps:
            return
        torch = self.torch
        top = float(2 ** self.bits - 1)
        with torch.no_grad():
            sent = []  # per tensor, per chunk: (positions, values)
            for o, p, e in zip(self.outer, self.model.parameters(), self.error):
                e.mul_(self.beta).add_(o - p)
                flat = e.view(-1)
                chunks = []
                for begin in range(0, flat.numel(), self.chunk):
                    part = flat[begin:begin + self.chunk]
                    k = min(self.topk, part.numel())
                    order = torch.sort(part.abs(), descending=True, stable=True).indices[:k]
                    largest = part[order[0]].abs()
                    if largest.item() > 0:
                        level = torch.round((part[order] / largest * top + top) / 2).clamp(0, top)
                    else:
                        level = torch.zeros(k)
                    values = (2 * level - top) * (largest / top)
                    part[order] -= values
                    chunks.append((begin + order, values))
                sent.append(chunks)
            # The reference gathers dense (position, value) tensors: only the arithmetic is
            # compared, not the wire.
            positions = torch.cat([i for chunks in sent for i, _ in chunks]).to(torch.int32)
            values = torch.cat([v for chunks in sent for _, v in chunks])
            owner = torch.cat([torch.full((i.numel(),), t, dtype=torch.int32)
                               for t, chunks in enumerate(sent) for i, _ in chunks])
            total = [torch.zeros(o.numel()) for o in self.outer]
            for pos, val in zip(self.gather(positions), self.gather(values)):
                for t in range(len(total)):
                    mask = owner == t
                    total[t][pos[mask].long()] += val[mask]
            for o, p, t in zip(self.outer, self.model.parameters(), total):
                o.view(-1).add_(t / self.world, alpha=-self.lr)
                p.copy_(o)

    def gather(self, tensor):
        parts = [self.torch.empty_like(tensor) for _ in range(self.world)]
        self.dist.all_gather(parts, tensor)
        return parts


class StreamingDiLoCo(DiLoCo):
    """Streaming DiLoCo over a plain model (sync/streaming_diloco.cc says what it does). The
    reduction is computed when a fragment sends and applied fragment_sync_delay steps later: the
    same values as ringlab's overlapped one, which only moves the wait."""

    def __init__(self, torch, dist, model, args, world):
        super().__init__(torch, dist, model, args, world)
        self.delay, self.alpha, self.bits = (args.fragment_sync_delay, args.fragment_update_alpha,
                                             args.quantize_bits)
        self.fragments = cut_fragments([p.numel() for p in self.outer], args.num_fragments)
        count = len(self.fragments)
        self.offsets = [self.inner_steps * (f + 1) // count for f in range(count)]
        self.reduced = {}  # fragment -> its averaged change, per tensor

    def after_step(self, step):
        taken = step + 1
        for f, offset in enumerate(self.offsets):
            if taken >= offset and (taken - offset) % self.inner_steps == 0:
                self.reduced[f] = self.reduce(self.fragments[f])
        for f, offset in enumerate(self.offsets):
            since = taken - self.delay - offset
            if since >= 0 and since % self.inner_steps == 0:
                self.apply(self.fragments[f], self.reduced.pop(f))

    def reduce(self, tensors):
        torch, local = self.torch, list(self.model.parameters())
        with torch.no_grad():
            deltas = [self.outer[t] - local[t] for t in tensors]
            if self.bits == 32:
                flat = torch.cat([d.reshape(-1) for d in deltas]).div_(self.world)
                self.dist.all_reduce(flat)
            else:  # the reference gathers the dequantised values: only the arithmetic compared
                mine = torch.cat([self.dequantise(d).reshape(-1) for d in deltas])
                parts = [torch.empty_like(mine) for _ in range(self.world)]
                self.dist.all_gather(parts, mine)
                flat = torch.zeros_like(mine)
                for part in parts:
                    flat += part
                flat = flat / self.world
            return list(torch.split(flat, [d.numel() for d in deltas]))

    def dequantise(self, delta):
        torch = self.torch
        levels = float(2 ** (self.bits - 1) - 1)
        largest = delta.abs().max()
        if not torch.isfinite(delta).all():
            return torch.full_like(delta, math.nan)
        if largest.item() == 0:
            return torch.zeros_like(delta)
        q = torch.round(delta / largest * levels).clamp(-levels, levels)
        return q * (largest / levels)

    def apply(self, tensors, reduced):
        torch = self.torch
        for o in self.outer:
            o.grad = None  # only this fragment steps (SGD skips the rest)
        for t, change in zip(tensors, reduced):
            self.outer[t].grad = change.view_as(self.outer[t]).clone()
        self.optimizer.step()
        with torch.no_grad():
            local = list(self.model.parameters())
            for t in tensors:
                local[t].mul_(self.alpha).add_(self.outer[t] * (1 - self.alpha))


def cut_fragments(sizes, parts):
    """Tensor indices of each fragment: consecutive tensors, each cut after the tensor whose end
    is nearest total * (f + 1) / parts (ties to the earlier), each fragment at least one."""
    total, ends, cuts, first = sum(sizes), [], [], 0
    for size in sizes:
        ends.append((ends[-1] if ends else 0) + size)
    for f in range(parts):
        target = total * (f + 1) / parts
        last_allowed = len(sizes) - (parts - f)
        best = min(range(first, last_allowed + 1), key=lambda i: (abs(ends[i] - target), i))
        if f + 1 == parts:
            best = len(sizes) - 1
        cuts.append(list(range(first, best + 1)))
        first = best + 1
    return cuts


class DeMo:
    """DeMo over a plain model (sync/demo.cc says what it does and where it departs from the
    authors' code): before each optimiser step, the gradients become the sign of the gathered
    DCT coefficients' inverse. The transforms are float32 torch.matmul products of the same
    shapes as ringlab's, so the same OpenBLAS calls."""

    def __init__(self, torch, dist, model, args, world):
        self.torch, self.dist, self.world = torch, dist, world
        self.params = list(model.parameters())
        self.decay = args.demo_decay
        self.momentum = [torch.zeros_like(p) for p in self.params]
        self.plans, self.bases = [], {}
        for p in self.params:
            matrix = p.dim() > 1
            rows = p.shape[0] if matrix else 1
            cols = p.numel() // rows
            n1 = largest_divisor(rows, args.demo_chunk) if matrix else 1
            n2 = largest_divisor(cols, args.demo_chunk)
            self.plans.append((matrix, rows, cols, n1, n2, min(args.demo_topk, n1 * n2)))

    def basis(self, n, transposed):
        if n not in self.bases:
            f = [[(math.sqrt(1.0 / n) if b == 0 else math.sqrt(2.0 / n)) *
                  math.cos(math.pi * (2 * h + 1) * b / (2.0 * n)) for b in range(n)]
                 for h in range(n)]
            f = self.torch.tensor(f, dtype=self.torch.float64).float()
            self.bases[n] = (f, f.t().contiguous())
        return self.bases[n][1 if transposed else 0]

    def forward(self, plan, x):
        matrix, rows, cols, n1, n2, _ = plan
        z = (x.reshape(-1, n2) @ self.basis(n2, False)).reshape(rows, cols)
        if not matrix:
            return z
        f1t = self.basis(n1, True)
        return self.torch.cat([f1t @ z[b * n1:(b + 1) * n1] for b in range(rows // n1)])

    def inverse(self, plan, coef):
        matrix, rows, cols, n1, n2, _ = plan
        if matrix:
            f1 = self.basis(n1, False)
            coef = self.torch.cat([f1 @ coef[b * n1:(b + 1) * n1] for b in range(rows // n1)])
        return (coef.reshape(-1, n2) @ self.basis(n2, True)).reshape(rows, cols)

    @staticmethod
    def chunks(plan, coef):
        """(chunk, position in it) from a tensor's coefficients, chunks in row-major order."""
        _, rows, cols, n1, n2, _ = plan
        return coef.view(rows // n1, n1, cols // n2, n2).permute(0, 2, 1, 3).reshape(-1, n1 * n2)

    @staticmethod
    def unchunk(plan, chunks):
        _, rows, cols, n1, n2, _ = plan
        return chunks.view(rows // n1, cols // n2, n1, n2).permute(0, 2, 1, 3).reshape(rows, cols)

    def before_step(self):
        torch = self.torch
        sent = []
        with torch.no_grad():
            for p, m, plan in zip(self.params, self.momentum, self.plans):
                m.mul_(self.decay).add_(p.grad)
                chunks = self.chunks(plan, self.forward(plan, m.view(-1)))
                order = torch.sort(chunks.abs(), dim=1, descending=True,
                                   stable=True).indices[:, :plan[5]]
                values = torch.gather(chunks, 1, order)
                own = torch.zeros_like(chunks).scatter_(1, order, values)
                m.sub_(self.inverse(plan, self.unchunk(plan, own)).view_as(m))
                sent.append((order, values))
            positions = torch.cat([o.reshape(-1) for o, _ in sent]).to(torch.int32)
            values = torch.cat([v.reshape(-1) for _, v in sent])
            every = list(zip(self.gather(positions), self.gather(values)))
            at = 0
            for p, plan, (order, _) in zip(self.params, self.plans, sent):
                shape = order.shape
                sums = torch.zeros(shape[0], plan[3] * plan[4])
                counts = torch.zeros_like(sums)
                for pos, val in every:
                    index = pos[at:at + order.numel()].long().view(shape)
                    sums.scatter_add_(1, index, val[at:at + order.numel()].view(shape))
                    counts.scatter_add_(1, index, torch.ones(shape))
                at += order.numel()
                mean = torch.where(counts > 0, sums / counts.clamp(min=1), sums)
                update = self.inverse(plan, self.unchunk(plan, mean))
                p.grad.copy_(torch.sign(update).view_as(p))

    def gather(self, tensor):
        parts = [self.torch.empty_like(tensor) for _ in range(self.world)]
        self.dist.all_gather(parts, tensor)
        return parts

    def swap(self):
        """Evaluation uses the model's own parameters."""


def largest_divisor(n, limit):
    """The largest divisor of n at most limit (DeMo's chunk side)."""
    return next(d for d in range(min(n, limit), 0, -1) if n % d == 0)


class Sparta:
    """SPARTA over a plain (not DDP) model: after every optimiser step the ranks average
    --sparta_p of the parameters, at torch.randperm(n)[:k] of a generator seeded with
    --sparta_seed + step, each divided by the world size before the sum."""

    def __init__(self, torch, dist, model, args, world):
        self.torch, self.dist, self.model, self.world = torch, dist, model, world
        self.seed = args.sparta_seed
        self.count = sum(p.numel() for p in model.parameters())
        self.k = min(max(math.ceil(args.sparta_p * self.count), 1), self.count)

    def after_step(self, step):
        torch = self.torch
        g = torch.Generator()
        g.manual_seed((self.seed + step) % 2**32)
        chosen = torch.randperm(self.count, generator=g)[:self.k]
        with torch.no_grad():
            flat = torch.nn.utils.parameters_to_vector(self.model.parameters())
            values = flat[chosen] / self.world
            self.dist.all_reduce(values)
            flat[chosen] = values
            torch.nn.utils.vector_to_parameters(flat, self.model.parameters())


def synchronise(torch, dist, model, args, rank, world):
    """(the network to train, what to call after each optimiser step or None, the DiLoCo loop or
    None) for --sync."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    if world == 1:
        return model, None, None
    if args.sync == "diloco":
        diloco = DiLoCo(torch, dist, model, args, world)
        return model, diloco.after_step, diloco
    if args.sync == "streaming_diloco":
        streaming = StreamingDiLoCo(torch, dist, model, args, world)
        return model, streaming.after_step, streaming
    if args.sync == "demo":
        return model, None, DeMo(torch, dist, model, args, world)
    if args.sync == "sparseloco":
        sparseloco = SparseLoCo(torch, dist, model, args, world)
        return model, sparseloco.after_step, sparseloco
    if args.sync == "sparta":
        return model, Sparta(torch, dist, model, args, world).after_step, None
    net = DDP(model)  # DDP broadcasts rank 0's parameters
    if args.sync == "ddp":
        return net, None, None
    if args.sync in COMPRESSORS:
        register(torch, dist, net, model, args.sync, args.sync_option, rank, world)
        return net, None, None
    if args.sync == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        net.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return net, None, None
    if args.sync == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
        state = powersgd.PowerSGDState(
            process_group=None, matrix_approximation_rank=args.powersgd_rank,
            start_powerSGD_iter=args.powersgd_start_iter, min_compression_rate=2,
            use_error_feedback=True, warm_start=True, orthogonalization_epsilon=0,
            random_seed=0)

        hook = powersgd.powerSGD_hook
        if args.powersgd_batched:
            original = powersgd._orthogonalize

            def orthogonalize(matrices, epsilon=0):
                # 1.13's batched hook passes a 2-D Q to a function that asserts a 3-D batch
                # (and raises at its first compressed step): a batch of one, a view of the
                # same memory, is what it means.
                return original(matrices.unsqueeze(0) if matrices.dim() == 2 else matrices,
                                epsilon)

            powersgd._orthogonalize = orthogonalize
            hook = powersgd.batched_powerSGD_hook

        def serialised(state, bucket):
            # 1.13 issues P's and Q's allreduces from callbacks that race with the next
            # bucket's hook (on gloo that aborted ranks): waiting here fixes the order U, P,
            # Q per bucket and changes no arithmetic.
            future = hook(state, bucket)
            future.wait()
            return future

        net.register_comm_hook(state, serialised)
        return net, None, None
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_local
    from torch.distributed.algorithms.model_averaging import averagers
    # Subgroups of one rank, or of the ranks of one host (contiguous, as torchrun places them).
    size = 1 if args.post_local_subgroup == "rank" else ranks_per_host(args, world)
    groups = [dist.new_group(list(range(first, first + size)))
              for first in range(0, world, size)]  # every rank makes every group
    state = post_local.PostLocalSGDState(process_group=None, subgroup=groups[rank // size],
                                         start_localSGD_iter=args.avg_warmup)
    net.register_comm_hook(state, post_local.post_localSGD_hook)
    averager = averagers.PeriodicModelAverager(period=args.avg_period,
                                               warmup_steps=args.avg_warmup)
    return net, lambda step: averager.average_parameters(net.parameters()), None


def ranks_per_host(args, world):
    """--ranks_per_host, else the launcher's LOCAL_WORLD_SIZE, else all: one host."""
    size = args.ranks_per_host or int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if size < 1 or world % size:
        raise ValueError(f"{world} ranks do not fill hosts of {size}")
    return size
