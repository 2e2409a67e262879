#!/usr/bin/python3
"""The sync map: which synchroniser reaches a model's target first, at which link rate and rank
count, each tuned by the same rule; measured where this machine reaches, predicted beyond.

    bazel run -c opt //experiments:sync_map -- [--quick|--full] [--models=M,..] [--syncs=S,..]
        [--ranks=N,..] [--repeats=R] [--out_dir=DIR] [--report_only]

The models (map_grid.py declares them and the grids): the Fashion-MNIST MLP at two widths
(SGD, the C++ trainer), to 85% test accuracy, and the character language model of
experiments/char_lm (AdamW, its PyTorch loop through ringlab_torch.Synchronizer), to a
validation loss of 2.0.

1. Tuning. Every synchroniser trains each point of its declared grid (its learning rate, and
   for the DiLoCo family its outer learning rate) for the model's tuning budget on one host
   (2 ranks); the point with the best metric after it is kept. While that point's learning
   rate is the largest or smallest tried, the grid widens by a factor of two past it (at
   most twice a side), so that the grid's edge does not choose the value kept. Fashion-MNIST has no
   validation split: its test set stands in for one, for every synchroniser alike. On the
   MLPs allreduce runs twice: plain SGD, and SGD with Nesterov momentum 0.9.
2. Bench. allreduce_bench over gloo across each link of the grid (2 ranks on 2 emulated
   hosts): the alpha and B_eff the cost model (map_model.py) fits.
3. The map. Each tuned synchroniser trains on emulated hosts over gloo (2 hosts up to 4
   ranks, then 2 ranks a host), at each link rate and rank count of the grid, until it
   reaches the model's target (at most the model's budget). A point runs only when the cost
   model, fitted to what ran before it, says it ends within the mode's point_cap_s; the
   others are predicted, and the report says which. Then again at the mode's straggler
   points (link, ranks): the last rank computes STRAGGLER_FACTOR times as long.
4. The report (map_report.py): the tuning tables, every measured point beside its
   prediction, a winner heatmap per model (link rate x ranks, up to 1024 ranks at 8 per host
   and 400 Gbit/s), the Gbit/s each synchroniser needs for 50/90/99% compute utilisation,
   and the pick-when table that docs/synchronizers.md includes.

Each finished run leaves point.json in its own directory: an interrupted sweep, run again with
the same --out_dir, continues where it stopped. --quick: the narrow MLP, four synchronisers,
links unlimited, 1gbit and 100mbit, 2 and 4 ranks (under 10 minutes here). The default: the
narrow MLP with eleven synchronisers, links unlimited, 10gbit, 1gbit and 100mbit, 2, 4 and 8
ranks, stragglers at four settings (about 40 minutes here). --full: the same for the wide MLP
too, and the language model with three synchronisers on the same links at 2 and 4 ranks (about
3 hours here).
--models runs a part of the mode's models; --syncs and --ranks replace its synchronisers and
rank counts (a model runs the named synchronisers it has).
--repeats=R runs each map and straggler point R times (the grid once, then again: a point's
runs are apart in time); the report takes each point's median time to target and says where
the fastest's lead exceeds the runs' spread. A continued sweep with more repeats adds them.
--second_sitting=DIR adds to the report how far its claims reproduce in another sitting's
folder (the quick grid run twice, say). Exit status 0 when every run finished, 1 when one
failed, 2 for bad input (one error line, before anything runs).
"""

import datetime
import glob
import json
import os
import shlex
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
for path in ("..", "../fashion_mnist", "../cost_model", "../char_lm"):  # the kit's error
    # line, its readers, the cost model, the language model's text
    path = os.path.normpath(os.path.join(HERE, path))
    if path not in sys.path:
        sys.path.append(path)

import cli_errors  # noqa: E402
import map_model  # noqa: E402
import map_report  # noqa: E402
from map_grid import (LM_SYNCS, MAX_REPEATS, MODELS, MODES, RANKS,  # noqa: E402
                      STRAGGLER_FACTOR, SYNCS, grid_models, grid_ranks, grid_stragglers,
                      grid_syncs, hosts, lr_points, overlapping, per_model, repeat_dir,
                      widened_lr)
from cli_errors import fail  # noqa: E402
import run_driver  # noqa: E402
from run_driver import (default_out_dir, execute, probe, probe_hosts, stop_on_signal,  # noqa: E402
                        write_invocation)

LM_TRAIN = os.path.normpath(os.path.join(HERE, "..", "char_lm", "char_lm_train.py"))
DATA_FILES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
MAX_TIMEOUT_S = 86400
LM_EVAL_EVERY = 25
BENCH_MAX_BYTES = 4 << 20


def point_name(flags):
    return ",".join(f"{k}={v}" for k, v in flags.items())


def train_argv(args, model, sync, flags, budget, run_dir, link=None, ranks=2):
    """The argv of one run of `budget` units: one host (tuning), or hosts(ranks) emulated
    ones."""
    if MODELS[model]["layers"] is None:
        return lm_argv(args, sync, flags, budget, run_dir, link, ranks)
    name, fixed, _, _ = SYNCS[sync]
    argv = [args.train, "--dataset=fashion_mnist", f"--model={MODELS[model]['layers']}",
            f"--sync={name}", f"--epochs={budget}", "--batch_size=64", "--seed=0",
            "--sampler_seed=0", "--set_epoch=true", "--eval_every=1", "--quiet",
            f"--timeout={args.timeout}", f"--out_dir={run_dir}", f"--nprocs={ranks}"]
    argv += [f"--{k}={v}" for k, v in {**fixed, **flags}.items()]
    argv += [f"--data_dir={args.data_dir}"] if args.data_dir else []
    if link:
        argv += ["--comm=gloo", f"--hosts={hosts(ranks)}", f"--link={link}"]
    else:
        argv += ["--comm=shm_ring"]
    return argv


def lm_argv(args, sync, flags, steps, run_dir, link, ranks):
    """char_lm_train.py through ringlab_torch.Synchronizer: --nprocs children on this host
    (tuning), or ranks that on_hosts puts on hosts(ranks) emulated hosts."""
    name, fixed, _, _ = LM_SYNCS[sync]
    options = {**fixed, **flags}
    argv = ["/usr/bin/python3", LM_TRAIN, f"--out_dir={run_dir}", "--config=small",
            f"--steps={steps}", "--batch_size=32", f"--lr={options.pop('lr')}",
            f"--eval_every={LM_EVAL_EVERY}", f"--timeout={args.timeout}", "--front=ringlab",
            f"--sync={name}", f"--ringlab_torch={args.torch_module}", "--quiet"]
    argv += [f"--sync_option={k}={v}" for k, v in options.items()]
    if link:
        return [args.on_hosts, f"--nprocs={ranks}", f"--hosts={hosts(ranks)}", f"--link={link}",
                "--"] + argv
    return argv + [f"--nprocs={ranks}"]


def read_point(run_dir):
    """The point a finished run left (point.json), or None."""
    path = os.path.join(run_dir, "point.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def run_records(run_dir, target):
    """(evaluations with the target's unit, metric and wall_s; rank 0's bytes sent per step)
    from a run's eval.csv and losses.csv: the trainer's, or char_lm_train.py's."""
    import csv
    with open(os.path.join(run_dir, "eval.csv")) as f:
        evals = [{k: float(row[k]) for k in (target.unit, target.metric, "wall_s")}
                 for row in csv.DictReader(f)]
    with open(os.path.join(run_dir, "losses.csv")) as f:
        sent = [float(row["bytes_sent"]) for row in csv.DictReader(f) if row["rank"] == "0"]
    for e in evals:
        e[target.unit] = int(e[target.unit])
    return sorted(evals, key=lambda e: e[target.unit]), sent


def finish_point(run_dir, meta, wall):
    """point.json from the run's eval.csv and rank 0's losses.csv: what the map needs."""
    evals, sent = run_records(run_dir, MODELS[meta["model"]]["target"])
    point = dict(meta, evals=evals,
                 bytes_per_step=sum(sent) / len(sent),
                 events=sum(1 for b in sent if b > 0) / len(sent), run_wall_s=wall)
    with open(os.path.join(run_dir, "point.json"), "w") as f:
        json.dump(point, f, indent=1)
    return point


def supersede(run_dir, flags, straggler_limit=None):
    """Renames run_dir's point.json to point.superseded.json when it ran with other flags than
    `flags` (a setting tuning has replaced since), or a straggler point with another
    `straggler_limit` (a point from before the flag slept); returns the point still current,
    or None."""
    point = read_point(run_dir)
    if point is not None and (point["flags"] != flags or straggler_limit not in (
            None, point.get("straggler_limit", "sleep"))):
        os.replace(os.path.join(run_dir, "point.json"),
                   os.path.join(run_dir, "point.superseded.json"))
        return None
    return point


def run_one(args, argv, run_dir, meta, label):
    """Runs argv unless run_dir already holds its point with the same settings (one with others
    is superseded first); returns the point or None."""
    point = supersede(run_dir, meta["flags"], meta.get("straggler_limit"))
    if point is not None:
        print(f"{label}: done before", flush=True)
        return point
    os.makedirs(run_dir, exist_ok=True)
    status, wall = execute(argv, args.run_deadline_s, os.path.join(run_dir, "log.txt"))
    print(f"{label}: {status} ({wall:.0f} s)", flush=True)
    if status != "ok":
        with open(os.path.join(run_dir, "failed.txt"), "w") as f:
            f.write(status + "\n")
        return None
    return finish_point(run_dir, meta, wall)


def tune(args, out):
    """Every tuning point; returns {model: {sync: best flags}}."""
    best = {}
    for model in grid_models(args):
        for sync in grid_syncs(args, model):
            flags = tune_sync(args, out, model, sync)
            if flags is not None:
                best.setdefault(model, {})[sync] = flags
    return best


def tune_sync(args, out, model, sync):
    """The declared grid of `sync`, widened while its best learning rate sits at an edge (a
    best at the edge says the grid chose it, not the synchroniser); the best flags, or None
    when no run finished."""
    target = MODELS[model]["target"]
    declared = MODELS[model]["syncs"][sync][2]
    best, tried, pending = None, [], list(declared)
    while pending:
        for lr in pending:
            for flags in lr_points(model, sync, lr):
                run_dir = os.path.join(out, "runs", model, "tune", sync, point_name(flags))
                argv = train_argv(args, model, sync, flags, MODELS[model]["tune"], run_dir)
                point = run_one(args, argv, run_dir, dict(model=model, sync=sync, flags=flags),
                                f"[tune] {model} {sync} {point_name(flags)}")
                if point is None:
                    continue
                score = point["evals"][-1][target.metric] * (1 if target.higher else -1)
                if best is None or score > best[0]:
                    best = (score, flags)
        tried += pending
        wider = widened_lr(declared, tried, best[1]["lr"]) if best else None
        pending = [wider] if wider is not None else []
    return best[1] if best else None


def bench(args, out):
    """allreduce_bench across each link; returns {link: (alpha, B_eff)} of those it fits."""
    fits = {}
    os.makedirs(os.path.join(out, "bench"), exist_ok=True)
    for link in MODES[args.mode]["links"]:
        path = os.path.join(out, "bench", f"{link}.txt")
        if not os.path.isfile(path):
            argv = [args.bench, "--nprocs=2", f"--hosts={hosts(2)}", f"--link={link}",
                    "--backends=gloo", "--min_bytes=64", f"--max_bytes={BENCH_MAX_BYTES}",
                    "--samples=5", "--max_iters=50", f"--timeout_s={args.timeout}"]
            status, wall = execute(argv, args.run_deadline_s, path + ".partial")
            print(f"[bench] {link}: {status} ({wall:.0f} s)", flush=True)
            if status != "ok":
                continue
            with open(path + ".partial") as f:  # the results name no path outside the tree
                text = f.read().replace(args.bench, "bazel-bin/bench/allreduce_bench")
            with open(path + ".partial", "w") as f:
                f.write(text)
            os.replace(path + ".partial", path)
        fits[link] = map_report.bench_fit(path, hosts(2))
    return {link: fit for link, fit in fits.items() if fit is not None}


def map_points(args, out, tuned, fits):
    """Each tuned synchroniser at each link and rank count that fits in point_cap_s, the whole
    grid once per repeat: a repeat's runs are apart in time, as a second sitting's are."""
    mode = MODES[args.mode]
    tuned_syncs = [(model, sync, tuned[model][sync]) for model in grid_models(args)
                   for sync in grid_syncs(args, model)
                   if tuned.get(model, {}).get(sync) is not None]
    # A sync's points of an earlier setting leave first: none may feed its profile.
    for model, sync, flags in tuned_syncs:
        for kind, limit in (("map", None), ("straggler", args.straggler_limit)):
            for run_dir in glob.glob(os.path.join(out, "runs", model, kind, sync, "*")):
                supersede(run_dir, flags, limit)
    for repeat in range(1, args.repeats + 1):
        for model, sync, flags in tuned_syncs:
            for ranks in grid_ranks(args, model):
                for link in mode["links"]:  # unlimited first: it gives the compute
                    map_point(args, out, model, sync, flags, (link, ranks), fits, repeat)
            for link, ranks in grid_stragglers(args, model):
                map_point(args, out, model, sync, flags, (link, ranks), fits, repeat,
                          straggler=True)


def point_budget(model, profile, ranks):
    """(the units a map point at `ranks` trains, None) or (None, why it does not run), from
    the synchroniser's profile of the points run before it (or None)."""
    target = MODELS[model]["target"]
    units = profile["units"] if profile else {}
    budget = MODELS[model]["most"] * (ranks // 2 if target.unit == "epoch" else 1)
    missed = [r for r, u in units.items() if r < ranks and not u]
    if missed:  # more ranks, fewer steps an epoch: no nearer the target
        return None, f"the target is not reached at {min(missed)} ranks"
    fewer = units.get(ranks // 2)
    if fewer and target.unit == "epoch":
        # Twice the ranks, half the steps an epoch: at most twice the epochs (and one more).
        budget = min(budget, 2 * fewer + 1)
    if ranks in units and not units[ranks]:
        return None, f"the target is not reached in {budget} {target.unit}s"
    if units.get(ranks) and target.unit == "epoch":
        # Up to the target only: a constant learning rate, the same arithmetic on every link.
        # The language model's schedule decays over its steps: it always runs them all.
        return units[ranks], None
    return budget, None


def map_point(args, out, model, sync, flags, setting, fits, repeat=1, straggler=False):
    """One run of a point (link, ranks) of the map (with straggler, its last rank
    STRAGGLER_FACTOR times slower, kept apart under straggler/): the first run unless done,
    skipped or predicted past the cap; a repeat where the first run finished."""
    link, ranks = setting
    kind = "straggler" if straggler else "map"
    first_dir = os.path.join(out, "runs", model, kind, sync, f"{link}_n{ranks}")
    run_dir = repeat_dir(first_dir, repeat)
    label = (f"[{kind}] {model} {sync} @ {link}, {ranks} ranks"
             + (f", run {repeat}" if repeat > 1 else ""))
    target = MODELS[model]["target"]
    if repeat > 1:
        first = read_point(first_dir)
        if first is not None:  # as far as the first run trained: the same arithmetic again
            run_point(args, model, sync, flags, setting, first["evals"][-1][target.unit],
                      run_dir, label, straggler)
        return
    profile = map_model.profiles(map_report.read_points(out, model, "map"), fits, target,
                                 overlapping=overlapping(model)).get(sync)
    budget, why_not = point_budget(model, profile, ranks)
    if why_not:
        print(f"{label}: skipped ({why_not})")
        return
    existing = read_point(run_dir)
    # The unlimited link's point always runs (the first, it gives the compute the others' caps
    # are predicted with); a straggler's is capped too.
    if existing is None and (link != "unlimited" or straggler):
        stretch = STRAGGLER_FACTOR if straggler else 1.0
        predicted = (map_model.predict(profile, fits, link, ranks, stretch, emulated=True)
                     if profile else None)
        if predicted is None or predicted[0] * 1.2 > per_model(args, model, "point_cap_s"):
            print(f"{label}: predicted only ({map_report.seconds(predicted)} to target)")
            return
    run_point(args, model, sync, flags, setting, budget, run_dir, label, straggler)


def run_point(args, model, sync, flags, setting, budget, run_dir, label, straggler):
    link, ranks = setting
    argv = train_argv(args, model, sync, flags, budget, run_dir, link, ranks)
    meta = dict(model=model, sync=sync, flags=flags, link=link, ranks=ranks,
                straggler=straggler)
    if straggler:
        argv += [f"--straggler_rank={ranks - 1}", f"--straggler_factor={STRAGGLER_FACTOR}",
                 f"--straggler_limit={args.straggler_limit}"]
        meta["straggler_limit"] = args.straggler_limit
    run_one(args, argv, run_dir, meta, label)


def recorded_argv(argv):
    """The flags a sitting is recorded with: those the wrapper adds left out, and the folders
    named OUT and OTHER (another machine's are elsewhere), however they were typed."""
    named = {"--out_dir": "OUT", "--second_sitting": "OTHER"}
    wrapper = ("--train", "--on_hosts", "--bench", "--torch_module")
    recorded, skip = [], False
    for arg in argv:
        if skip:  # the value of `--flag VALUE`, left out with its flag
            skip = False
            continue
        flag, equals, _ = arg.partition("=")
        if flag in named:
            recorded.append(f"{flag}={named[flag]}")
        elif flag not in wrapper:
            recorded.append(arg)
            continue
        skip = not equals
    return recorded


# What a folder's runs are timed with, one of each a folder (docs/sync-map.md, "Run-to-run
# spread"): (field of a sitting's record, its value in a record from before the field, values
# that were not found out and so prove nothing, what it is, the variable that sets it).
ONE_PER_FOLDER = (
    ("blas_core", "?", ("?", None), "OpenBLAS's {} kernel", "OPENBLAS_CORETYPE"),
    # A record from before the keep was timed with glibc's defaults.
    ("malloc", "", (), "GLIBC_TUNABLES={!r}", "GLIBC_TUNABLES"),
)


def check_continues(earlier, here, out_dir):
    """Fails with one line when this sitting's record (here) would time its runs otherwise
    than the earlier sitting of out_dir did: one kernel, one arithmetic; one memory behaviour,
    one pace."""
    for field, before_field, unknown, what, variable in ONE_PER_FOLDER:
        was, now = earlier.get(field, before_field), here[field]
        if was != now and was not in unknown and now not in unknown:
            fail(f"--out_dir={out_dir} was swept with {what.format(was)} and this sweep's "
                 f"runs would get {what.format(now)}: set {variable}={shlex.quote(was)}, or "
                 f"use another --out_dir")


def run_all(args, out):
    started, load_before = time.monotonic(), run_driver.load_average()
    why_not = probe_hosts(args.on_hosts)
    if why_not:
        fail(f"emulated hosts cannot be made here: {why_not}")
    command = "bazel run -c opt //experiments:sync_map -- " + " ".join(
        map(shlex.quote, recorded_argv(args.argv)))
    invocation = dict(command=command, mode=args.mode, date=datetime.date.today().isoformat(),
                      **run_driver.machine_record(run_driver.blas_core([args.train, "--help"]),
                                                  load_before))
    path = os.path.join(out, "invocation.json")
    if os.path.isfile(path):  # a continued sweep: the earlier sittings stay on record
        with open(path) as f:
            earlier = json.load(f)
        check_continues(earlier, invocation, args.out_dir)
        invocation["earlier"] = earlier.pop("earlier", []) + [earlier]
    # On record from the start: a sweep stopped midway and continued elsewhere meets its kernel
    # and tunables.
    with open(path, "w") as f:
        json.dump(invocation, f, indent=2)
    tuned = {}
    if os.path.isfile(os.path.join(out, "tuned.json")):  # models another sitting tuned stay
        with open(os.path.join(out, "tuned.json")) as f:
            tuned = json.load(f)
    for model, settings in tune(args, out).items():  # a sitting of other syncs keeps these
        tuned.setdefault(model, {}).update(settings)
    with open(os.path.join(out, "tuned.json"), "w") as f:
        json.dump(tuned, f, indent=1)
    fits = bench(args, out)
    with open(os.path.join(out, "fits.json"), "w") as f:
        json.dump(fits, f, indent=1)
    map_points(args, out, tuned, fits)
    write_invocation(out, invocation, started)


def parser():
    p = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out_dir", default=default_out_dir("sync_map"))
    grid = p.add_mutually_exclusive_group()
    grid.add_argument("--quick", action="store_const", dest="mode", const="quick",
                      default="default", help="the narrow MLP, four synchronisers (<10 min)")
    grid.add_argument("--full", action="store_const", dest="mode", const="full",
                      help="every model: both MLPs and the language model (~3 h)")
    p.add_argument("--train", help="path to the //train:train binary")
    p.add_argument("--bench", help="path to the //bench:allreduce_bench binary")
    p.add_argument("--on_hosts", help="path to the //comm/job:on_hosts binary")
    p.add_argument("--torch_module", help="the directory of ringlab_torch.so (the language "
                   "model's runs)")
    p.add_argument("--models", type=cli_errors.subset("--models", MODELS),
                   help=f"a part of the mode's models, comma-separated: {', '.join(MODELS)}")
    p.add_argument("--syncs", type=cli_errors.subset("--syncs", SYNCS),
                   help="the synchronisers to run on each model that has them, comma-separated "
                        "(default: the mode's)")
    p.add_argument("--ranks", type=cli_errors.subset("--ranks", RANKS, int),
                   help=f"the rank counts to run, comma-separated, of {', '.join(RANKS)} "
                        "(default: the mode's)")
    p.add_argument("--data_dir", help=f"the IDX .gz files (default {DEFAULT_DATA_DIR})")
    p.add_argument("--timeout", type=float, default=120,
                   help=f"seconds any wait between ranks may take, in (0, {MAX_TIMEOUT_S}]")
    p.add_argument("--repeats", type=int, default=1,
                   help=f"runs of each map and straggler point, 1 to {MAX_REPEATS}: the "
                        "report takes a point's median and shows its spread")
    p.add_argument("--straggler_limit", choices=("sleep", "cpu_quota"), default="sleep",
                   help="how the straggler is slowed: it sleeps the difference after each "
                        "forward and backward, or a cgroup quota holds its process to 1/"
                        f"{STRAGGLER_FACTOR} of a CPU (the MLPs only; needs root)")
    p.add_argument("--report_only", action="store_true",
                   help="rewrite the report from the runs already in --out_dir")
    p.add_argument("--second_sitting",
                   help="another sitting's --out_dir: the report says how far its claims "
                        "reproduce there")
    return p


def check_inputs(args):
    """The binaries and data the grid's models need, and (last) whether the trainer can
    hold a straggler to a CPU quota here."""
    for flag, path in (("--train", args.train), ("--bench", args.bench),
                       ("--on_hosts", args.on_hosts)):
        if path is None:
            fail(f"{flag} is needed: the path to its binary")
        cli_errors.executable(flag, path)
    if not grid_models(args):
        fail(f"--models={','.join(args.models)} names none of the {args.mode} grid's models "
             f"(--full has every model)")
    models = [m for m in grid_models(args) if grid_syncs(args, m)]
    if not models:
        fail(f"--syncs={','.join(args.syncs)}: none of them runs on "
             f"{', '.join(grid_models(args))}")
    if any(MODELS[m]["layers"] for m in models):
        if args.data_dir is not None:
            cli_errors.input_dir("--data_dir", args.data_dir, DATA_FILES)
        elif any(not os.path.isfile(os.path.join(DEFAULT_DATA_DIR, n)) for n in DATA_FILES):
            fail(f"{DEFAULT_DATA_DIR} lacks the Fashion-MNIST files (Debian's "
                 f"dataset-fashion-mnist: tools/setup.sh installs it; or --data_dir)")
    if args.straggler_limit == "cpu_quota" and any(
            "char_lm" == m and grid_stragglers(args, m) for m in models):
        fail("--straggler_limit=cpu_quota: the language model's straggler only sleeps; "
             "--models without char_lm")
    if "char_lm" in models:
        import text_data
        if args.torch_module is None:
            fail("the language model needs --torch_module: ringlab_torch is built where "
                 "libtorch-dev is installed (tools/setup.sh); or --models without char_lm")
        args.torch_module = cli_errors.torch_module("--torch_module", args.torch_module)
        missing = text_data.missing_bible()
        if missing:
            fail(missing)
    if args.straggler_limit == "cpu_quota" and any(grid_stragglers(args, m) for m in models):
        # The seed example's job (a second, writing nothing) with its straggler under the
        # quota: the trainer's own check, after the cheap ones and before any run.
        why_not = probe([args.train, "--quiet", "--epochs=1", "--straggler_rank=1",
                         f"--straggler_factor={STRAGGLER_FACTOR}",
                         "--straggler_limit=cpu_quota"], most_chars=None)
        if why_not:
            fail(why_not if why_not.startswith("--straggler_limit") else
                 f"--straggler_limit=cpu_quota: {why_not}")


def parse_args(argv=None):
    """Every flag checked before anything is written or any run starts (a CPU-quota sitting's
    trainer runs one small job first): one error line, status 2."""
    args = parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    cli_errors.positive_finite("--timeout", args.timeout, MAX_TIMEOUT_S)
    args.run_deadline_s = max(600.0, 4 * args.timeout)
    cli_errors.int_in_range("--repeats", args.repeats, 1, MAX_REPEATS)
    args.out_dir = cli_errors.output_dir("--out_dir", args.out_dir)
    if args.second_sitting is not None and not os.path.isfile(
            os.path.join(args.second_sitting, "tuned.json")):
        fail(f"--second_sitting={args.second_sitting} holds no tuned.json (no sitting)")
    if args.report_only:
        if not os.path.isfile(os.path.join(args.out_dir, "tuned.json")):
            fail(f"--report_only: --out_dir={args.out_dir} holds no tuned.json (no runs)")
        return args
    check_inputs(args)
    return args


def main(argv=None):
    signal.signal(signal.SIGTERM, stop_on_signal)
    args = parse_args(argv)
    out = args.out_dir
    if not args.report_only:
        os.makedirs(out, exist_ok=True)
        run_all(args, out)
    failed = map_report.build(out, args.second_sitting)
    print(f"wrote {out}/report.md and its figures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
