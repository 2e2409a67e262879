"""What a sync map sitting runs: the models and their targets, each synchroniser's tuning
grid, the modes' grids of links, ranks and stragglers, and which of them a model runs (the
flags --models, --syncs and --ranks narrow them). The driver (sync_map.py) runs them; the
report (map_report.py) reads the same declarations."""

import os

import map_model

LR = (0.05, 0.1, 0.2, 0.4)
INNER_LR = (0.05, 0.1, 0.2, 0.4)
# name: (--sync, fixed flags, learning rates, (outer flag, its values) or None). Nesterov's lr
# is a tenth of plain SGD's: with momentum 0.9 a steady gradient moves 1/(1-0.9) times as far.
SYNCS = {
    "allreduce": ("allreduce", {}, LR, None),
    "allreduce_nesterov": ("allreduce", {"momentum": 0.9, "nesterov": "true"},
                           (0.005, 0.01, 0.02, 0.04), None),
    "fp16": ("fp16", {}, LR, None),
    "topk": ("topk", {}, LR, None),
    "int8": ("int8", {}, LR, None),
    "ef_signsgd": ("ef_signsgd", {}, LR, None),
    "sparta": ("sparta", {}, LR, None),
    "demo": ("demo", {}, (0.001, 0.002, 0.004, 0.008), None),
    "diloco": ("diloco", {"inner_steps": 16}, INNER_LR, ("outer_lr", (0.7, 1.0))),
    "streaming_diloco": ("streaming_diloco", {}, INNER_LR, ("outer_lr", (0.7, 1.0))),
    "sparseloco": ("sparseloco", {}, INNER_LR, ("sparseloco_outer_lr", (0.8, 1.0))),
}
# The --syncs of DDP's family (sync/ddp.h: those with --overlap, but post_local_sgd, which stops
# reducing gradients after its warm-up): each bucket is reduced while backward runs, so the cost
# model lets a window of the step hide their communication.
OVERLAPS_BACKWARD = frozenset({"allreduce", "bf16", "ef_signsgd", "fp16", "int8", "powersgd",
                               "qsgd", "randomk", "topk"})
# The language model's: AdamW's peak learning rate around char_lm's 3e-3, the same outer grids
# (ringlab_torch.Synchronizer's options are the trainer's flags). No Nesterov twin: AdamW has
# its own momentum.
LM_LR = (0.0015, 0.003, 0.006)
LM_SYNCS = {name: (sync, fixed, LM_LR, outer) for name, (sync, fixed, _, outer) in SYNCS.items()
            if name != "allreduce_nesterov"}
MLP_TARGET = map_model.Target("test_accuracy", 0.85, higher=True, unit="epoch")
# model: what trains (the trainer's --model, or the language model), its target, its grid, and
# its budgets in the target's units: tuning, and the most a map point trains at 2 ranks (in
# epochs, at N ranks N/2 times as many, the same number of steps, but at most 2u + 1 where N/2
# ranks reached the target in u; in steps, the same at every N). N ranks do not run where any
# fewer did not reach the target.
MODELS = {
    "mlp_narrow": dict(layers="784,256,10", target=MLP_TARGET, syncs=SYNCS, tune=4, most=6),
    "mlp_wide": dict(layers="784,1024,1024,10", target=MLP_TARGET, syncs=SYNCS, tune=3, most=3),
    "char_lm": dict(layers=None, target=map_model.Target("val_loss", 2.0, higher=False,
                                                         unit="step"),
                    syncs=LM_SYNCS, tune=200, most=300),
}
DEFAULT_MODE = dict(models=("mlp_narrow",), syncs=tuple(SYNCS),
                    links=("unlimited", "10gbit", "1gbit", "100mbit"), ranks=(2, 4, 8),
                    point_cap_s=40,
                    stragglers=(("unlimited", 2), ("1gbit", 2), ("100mbit", 2), ("1gbit", 4)))
MODES = {
    "quick": dict(models=("mlp_narrow",),
                  syncs=("allreduce", "allreduce_nesterov", "diloco", "streaming_diloco"),
                  links=("unlimited", "1gbit", "100mbit"), ranks=(2, 4), point_cap_s=40,
                  stragglers=(("1gbit", 2),)),
    # What fits in an hour here: the narrow MLP's whole grid.
    "default": DEFAULT_MODE,
    # Every model: the default's grid, less what the language model cannot afford.
    "full": dict(DEFAULT_MODE, models=("mlp_narrow", "mlp_wide", "char_lm"),
                 model_syncs={"char_lm": ("allreduce", "diloco", "streaming_diloco")},
                 model_ranks={"char_lm": (2, 4)},
                 model_stragglers={"char_lm": (("1gbit", 2),)},
                 model_point_cap_s={"char_lm": 150}),
}
# The rank counts --ranks may name (8 on 4 emulated hosts, the most this machine holds).
RANKS = ("2", "4", "8")
# Ranks sit contiguously on emulated hosts: 2 hosts up to 4 ranks, then 2 ranks a host.
RANKS_PER_HOST = 2
# The slow rank of the straggler points: the last one, computing this much slower.
STRAGGLER_FACTOR = 1.5
# While the best learning rate is the largest or smallest tried, tuning tries one a factor
# WIDEN_FACTOR past it, at most WIDEN_STEPS past the declared grid on each side.
WIDEN_FACTOR = 2.0
WIDEN_STEPS = 2
# --repeats: a point's runs after the first run in <its directory>_r2, _r3...; more than
# MAX_REPEATS is a typo's count, not a sitting's (each repeat is the whole grid again).
REPEAT_SUFFIX = "_r"
MAX_REPEATS = 9


def overlapping(model):
    """The names of `model`'s synchronisers in DDP's family."""
    return frozenset(name for name, (sync, *_) in MODELS[model]["syncs"].items()
                     if sync in OVERLAPS_BACKWARD)


def repeat_dir(first_dir, repeat):
    """Where a point's repeat runs: its first run's directory, then <that>_r2, <that>_r3..."""
    return first_dir if repeat == 1 else f"{first_dir}{REPEAT_SUFFIX}{repeat}"


def repeat_of(run_dir):
    """Which run of its point a run directory holds (1 for the first)."""
    _, suffix, number = os.path.basename(run_dir).rpartition(REPEAT_SUFFIX)
    return int(number) if suffix and number.isdigit() else 1


def grid_models(args):
    return [m for m in MODES[args.mode]["models"] if not args.models or m in args.models]


def per_model(args, model, key):
    """The mode's setting `key` for `model`: its model_<key> entry for the model, else the
    mode's own."""
    mode = MODES[args.mode]
    return mode.get(f"model_{key}", {}).get(model, mode[key])


def grid_syncs(args, model):
    """The synchronisers `model` runs, in order: those --syncs names that it has, else the
    mode's."""
    syncs = args.syncs or per_model(args, model, "syncs")
    return [s for s in MODELS[model]["syncs"] if s in syncs]


def grid_ranks(args, model):
    """The rank counts `model` runs, fewest first (a point's budget follows from fewer ranks'):
    --ranks, else the mode's; and 2 always, whose points give the cost model each
    synchroniser's compute and bytes (run once: a folder's finished points stay)."""
    return sorted({2, *(args.ranks or per_model(args, model, "ranks"))})


def grid_stragglers(args, model):
    """The mode's straggler settings for `model` at the rank counts it runs."""
    runs = grid_ranks(args, model)
    return [(link, ranks) for link, ranks in per_model(args, model, "stragglers")
            if ranks in runs]


def hosts(ranks):
    """The emulated hosts `ranks` ranks sit on."""
    return max(2, ranks // RANKS_PER_HOST)


def tune_runs(args):
    """[(model, sync, {flag: value})] of every point of the declared tuning grids, in order
    (tune() may widen them)."""
    return [(model, sync, flags) for model in grid_models(args)
            for sync in grid_syncs(args, model)
            for lr in MODELS[model]["syncs"][sync][2]
            for flags in lr_points(model, sync, lr)]


def lr_points(model, sync, lr):
    """The tuning points of one learning rate: with each outer value, where there is one."""
    outer = MODELS[model]["syncs"][sync][3]
    if not outer:
        return [{"lr": lr}]
    return [{"lr": lr, outer[0]: value} for value in outer[1]]


def widened_lr(declared, tried, best_lr):
    """The learning rate to try next when the best so far is the largest or smallest tried: a
    factor WIDEN_FACTOR past it, at most WIDEN_STEPS past the declared grid; else None."""
    top = max(declared) * WIDEN_FACTOR ** WIDEN_STEPS
    bottom = min(declared) / WIDEN_FACTOR ** WIDEN_STEPS
    if best_lr == max(tried) and best_lr * WIDEN_FACTOR <= top * (1 + 1e-9):
        return float(f"{best_lr * WIDEN_FACTOR:.6g}")
    if best_lr == min(tried) and best_lr / WIDEN_FACTOR >= bottom * (1 - 1e-9):
        return float(f"{best_lr / WIDEN_FACTOR:.6g}")
    return None
