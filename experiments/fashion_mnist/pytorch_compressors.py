"""Gradient compressors with error feedback as DDP communication hooks in plain PyTorch: the
references ringlab's topk, randomk, ef_signsgd, qsgd and int8 are checked against, bit for bit
(pytorch_sync_match.py). Each is written from its paper in GRACE's split (encode, the collective
it needs, decode, a residual memory) with the conventions ringlab's descriptions state:

- a bucket is compressed in the model's order of its tensors (DDP hands it in its own order), and
  the memory is kept per parameter, so both survive DDP's rebuilding of the buckets;
- gathered wires are decoded into zeros in rank order and divided by the world size once;
- random draws come from torch.Generator().manual_seed(seed + count * stride + offset), one
  generator per bucket encoded (count: buckets this rank encoded before);
- sums of magnitudes and squares are taken in double, so float32 sees one rounding however the
  terms are ordered.
"""

import math


class Compressor:
    """One method: encode -> wire tensors, the collective, decode. `own` decodes this rank's wire
    alone (what the memory subtracts)."""

    def __init__(self, torch, dist, options, rank, world):
        self.torch, self.dist, self.options = torch, dist, options
        self.rank, self.world = rank, world
        self.count = 0

    def generator(self, stride, offset, seed):
        g = self.torch.Generator()
        g.manual_seed((seed + self.count * stride + offset) % 2**32)
        self.count += 1
        return g

    def gather(self, wire):
        parts = [self.torch.empty_like(wire) for _ in range(self.world)]
        self.dist.all_gather(parts, wire)
        return parts


class TopK(Compressor):
    error_feedback_option = "topk_error_feedback"

    def reduce(self, x):
        torch = self.torch
        k = min(max(math.ceil(self.options["topk_ratio"] * x.numel()), 1), x.numel())
        # The k largest magnitudes, ties to the lower position (a stable sort): ringlab's rule;
        # torch.topk leaves ties to its implementation.
        index = torch.sort(x.abs(), descending=True, stable=True).indices[:k].sort().values
        own = torch.zeros_like(x)
        own[index] = x[index]
        out = torch.zeros_like(x)
        for i, v in zip(self.gather(index.to(torch.int32)), self.gather(x[index])):
            out[i.long()] += v
        return out / self.world, own


class RandomK(Compressor):
    error_feedback_option = "randomk_error_feedback"

    def reduce(self, x):
        torch = self.torch
        k = min(max(math.ceil(self.options["randomk_ratio"] * x.numel()), 1), x.numel())
        g = self.generator(1, 0, self.options["randomk_seed"])
        index = torch.randperm(x.numel(), generator=g)[:k]
        values = x[index] / self.world
        own = torch.zeros_like(x)
        own[index] = values * self.world
        self.dist.all_reduce(values)
        out = torch.zeros_like(x)
        out[index] = values
        return out, own


class EfSignSgd(Compressor):
    error_feedback_option = "ef_signsgd_error_feedback"

    def reduce(self, x):
        torch = self.torch
        scale = (x.abs().double().sum() / x.numel()).float().reshape(1)
        positive = (x >= 0).to(torch.int8)
        own = torch.where(positive.bool(), scale, -scale)
        out = torch.zeros_like(x)
        for s, p in zip(self.gather(scale), self.gather(positive)):
            out += torch.where(p.bool(), s, -s)
        return out / self.world, own


class Qsgd(Compressor):
    error_feedback_option = "qsgd_error_feedback"

    def reduce(self, x):
        torch = self.torch
        levels = torch.tensor(float(self.options["qsgd_levels"]))
        g = self.generator(self.world, self.rank, self.options["qsgd_seed"])
        u = torch.rand(x.numel(), generator=g)
        norm = x.double().pow(2).sum().sqrt().float().reshape(1)
        per_unit = levels / norm if norm.item() > 0 else torch.tensor(0.0)
        exact = torch.nan_to_num(per_unit * x.abs(), nan=0.0).clamp(0, levels.item())
        lower = exact.floor()
        level = torch.minimum(lower + (u < exact - lower).float(), levels)
        signed = torch.where(x < 0, -level, level).to(torch.int8)
        own = self.decode(norm, signed, levels)
        out = torch.zeros_like(x)
        for n, q in zip(self.gather(norm), self.gather(signed)):
            out += self.decode(n, q, levels)
        return out / self.world, own

    def decode(self, norm, signed, levels):
        return (norm / levels) * signed.float()


class Int8(Compressor):
    error_feedback_option = "int8_error_feedback"

    def reduce(self, x):
        torch = self.torch
        scale = (x.abs().max() / torch.tensor(127.0)).reshape(1)
        if scale.item() > 0:
            values = torch.round(x / scale).clamp(-127, 127).to(torch.int8)
        else:
            values = torch.zeros_like(x, dtype=torch.int8)
        own = scale * values.float()
        out = torch.zeros_like(x)
        for s, v in zip(self.gather(scale), self.gather(values)):
            out += s * v.float()
        return out / self.world, own


COMPRESSORS = {"topk": TopK, "randomk": RandomK, "ef_signsgd": EfSignSgd, "qsgd": Qsgd,
               "int8": Int8}
# Each one's options as ringlab declares them: (name, type, default).
OPTIONS = {
    "topk": (("topk_ratio", float, 0.01), ("topk_error_feedback", bool, True)),
    "randomk": (("randomk_ratio", float, 0.01), ("randomk_seed", int, 0),
                ("randomk_error_feedback", bool, True)),
    "ef_signsgd": (("ef_signsgd_error_feedback", bool, True),),
    "qsgd": (("qsgd_levels", int, 64), ("qsgd_seed", int, 0), ("qsgd_error_feedback", bool, False)),
    "int8": (("int8_error_feedback", bool, True),),
}


def parse_options(name, pairs):
    """{option: value} from NAME=VALUE texts, defaults for the rest; ValueError names a bad one."""
    declared = {option: (kind, default) for option, kind, default in OPTIONS[name]}
    values = {option: default for option, (_, default) in declared.items()}
    for pair in pairs:
        option, _, text = pair.partition("=")
        if option not in declared:
            raise ValueError(f"{name} has no option {option} ({', '.join(declared)})")
        kind = declared[option][0]
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"--{option} takes true or false, not {text}")
            values[option] = text.lower() in ("true", "1")
        else:
            values[option] = kind(text)
        low, high = RANGES.get(option.rsplit("_", 1)[-1], (None, None))
        if low is not None and not low <= values[option] <= high:
            raise ValueError(f"--{option} must be in [{low}, {high}], not {text}")
    if any(values[o] <= 0 for o in values if o.endswith("_ratio")):
        raise ValueError(f"{name}'s ratio must be in (0, 1]")
    return values


# ringlab's ranges, by the last word of an option's name.
RANGES = {"ratio": (0, 1), "seed": (0, 2**32 - 1), "levels": (1, 127)}


class Hook:
    """The DDP hook: the bucket in model order, the memory added, the compressor's reduce, the
    memory updated, the result back in DDP's order."""

    def __init__(self, torch, dist, model, name, options, rank, world):
        self.torch = torch
        self.compressor = COMPRESSORS[name](torch, dist, options, rank, world)
        self.error_feedback = options[self.compressor.error_feedback_option]
        params = list(model.parameters())
        self.position = {id(p): i for i, p in enumerate(params)}
        self.memory = [torch.zeros(p.numel()) for p in params]

    def reduce(self, bucket):
        torch = self.torch
        params = bucket.parameters()
        sizes = [p.numel() for p in params]
        pieces = bucket.buffer().split(sizes)
        order = sorted(range(len(params)), key=lambda i: self.position[id(params[i])])
        x = torch.cat([pieces[i] for i in order])
        if self.error_feedback:
            x = x + torch.cat([self.memory[self.position[id(params[i])]] for i in order])
        out, own = self.compressor.reduce(x)
        offset = 0
        results = [None] * len(params)
        for i in order:
            n = sizes[i]
            if self.error_feedback:
                self.memory[self.position[id(params[i])]] = x[offset:offset + n] - own[
                    offset:offset + n]
            results[i] = out[offset:offset + n]
            offset += n
        future = torch.futures.Future()
        future.set_result(torch.cat(results))
        return future


def register(torch, dist, net, model, name, option_pairs, rank, world):
    """Registers the compressor `name` on the DDP module `net` (over `model`)."""
    hook = Hook(torch, dist, model, name, parse_options(name, option_pairs), rank, world)
    net.register_comm_hook(hook, compressor_hook)


def compressor_hook(state, bucket):
    """DDP's hook signature over a Hook, the state."""
    return state.reduce(bucket)
