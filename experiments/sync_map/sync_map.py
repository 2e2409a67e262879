#!/usr/bin/python3
"""The sync map: which synchroniser reaches a target accuracy first, at which link rate and rank
count, each tuned by the same rule; measured where this machine reaches, predicted beyond.

    bazel run -c opt //experiments:sync_map -- [--quick] [--out_dir=DIR] [--report_only]

1. Tuning. Every synchroniser trains each point of its declared grid (its learning rate, and
   for the DiLoCo family its outer learning rate) for the model's TUNE_EPOCHS on one host
   (2 ranks over shm_ring); the point with the best test accuracy after them is kept.
   Fashion-MNIST has no validation split: its test set stands in for one, for every
   synchroniser alike. allreduce runs twice: plain SGD, and SGD with Nesterov momentum 0.9.
2. Bench. allreduce_bench over gloo across each link of the grid (2 ranks on 2 emulated
   hosts): the alpha and B_eff the cost model (map_model.py) fits.
3. The map. Each tuned synchroniser trains on 2 emulated hosts over gloo, at each link rate
   and rank count of the grid, until it reaches the model's target (at most MAP_EPOCHS). A
   point runs only when the cost model, fitted to what ran before it, says it ends within
   the mode's point_cap_s; the others are predicted, and the report says which. Then once
   more at 2 ranks on 1gbit with a straggler: the last rank computes STRAGGLER_FACTOR times
   as long.
4. The report (map_report.py): the tuning tables, every measured point beside its
   prediction, a winner heatmap per model (link rate x ranks, up to 1024 ranks at 8 per host
   and 400 Gbit/s), the Gbit/s each synchroniser needs for 50/90/99% compute utilisation,
   and the pick-when table that docs/synchronizers.md includes.

Each finished run leaves point.json in its own directory: an interrupted sweep, run again with
the same --out_dir, continues where it stopped. --quick: the narrow MLP, four synchronisers,
links unlimited, 1gbit and 100mbit, 2 and 4 ranks (under 10 minutes here); the default: both
MLP widths, eleven synchronisers, links unlimited, 10gbit, 1gbit and 100mbit (about 75 here).
--second_sitting=DIR adds to the report how far its claims reproduce in another sitting's
folder (the quick grid run twice, say). Exit status 0 when every run finished, 1 when one
failed, 2 for bad input (one error line, before anything runs).
"""

import datetime
import json
import os
import shlex
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
for path in ("..", "../fashion_mnist", "../cost_model"):  # the kit's error line, readers, model
    path = os.path.normpath(os.path.join(HERE, path))
    if path not in sys.path:
        sys.path.append(path)

import cli_errors  # noqa: E402
import map_model  # noqa: E402
import map_report  # noqa: E402
from cli_errors import fail  # noqa: E402
from run_driver import (default_out_dir, execute, machine, probe_hosts, short_command,  # noqa: E402
                        stop_on_signal, write_invocation)

DATA_FILES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
MAX_TIMEOUT_S = 86400
# model: (--model, test accuracy to reach, tuning epochs, most epochs a map point trains at 2
# ranks; at N ranks N/2 times as many, the same number of steps)
MODELS = {"mlp_narrow": ("784,256,10", 0.85, 4, 6),
          "mlp_wide": ("784,1024,1024,10", 0.85, 3, 3)}
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
MODES = {
    "quick": dict(models=("mlp_narrow",),
                  syncs=("allreduce", "allreduce_nesterov", "diloco", "streaming_diloco"),
                  links=("unlimited", "1gbit", "100mbit"), ranks=(2, 4), point_cap_s=40,
                  straggler=("1gbit", 2)),
    "default": dict(models=("mlp_narrow", "mlp_wide"), syncs=tuple(SYNCS),
                    links=("unlimited", "10gbit", "1gbit", "100mbit"), ranks=(2, 4),
                    point_cap_s=40, straggler=("1gbit", 2)),
}
HOSTS = 2
# The slow rank of the straggler points: the last one, computing this much slower.
STRAGGLER_FACTOR = 1.5
BENCH_MAX_BYTES = 4 << 20


def tune_runs(mode):
    """[(model, sync, {flag: value})] of every tuning point, in order."""
    runs = []
    for model in MODES[mode]["models"]:
        for sync in MODES[mode]["syncs"]:
            _, _, lrs, outer = SYNCS[sync]
            for lr in lrs:
                for outer_value in (outer[1] if outer else (None,)):
                    flags = {"lr": lr}
                    if outer:
                        flags[outer[0]] = outer_value
                    runs.append((model, sync, flags))
    return runs


def point_name(flags):
    return ",".join(f"{k}={v}" for k, v in flags.items())


def train_argv(args, model, sync, flags, epochs, run_dir, link=None, ranks=2):
    """The trainer's argv: one host over shm_ring (tuning), or HOSTS emulated hosts."""
    name, fixed, _, _ = SYNCS[sync]
    argv = [args.train, "--dataset=fashion_mnist", f"--model={MODELS[model][0]}",
            f"--sync={name}", f"--epochs={epochs}", "--batch_size=64", "--seed=0",
            "--sampler_seed=0", "--set_epoch=true", "--eval_every=1", "--quiet",
            f"--timeout={args.timeout}", f"--out_dir={run_dir}", f"--nprocs={ranks}"]
    argv += [f"--{k}={v}" for k, v in {**fixed, **flags}.items()]
    argv += [f"--data_dir={args.data_dir}"] if args.data_dir else []
    if link:
        argv += ["--comm=gloo", f"--hosts={HOSTS}", f"--link={link}"]
    else:
        argv += ["--comm=shm_ring"]
    return argv


def read_point(run_dir):
    """The point a finished run left (point.json), or None."""
    path = os.path.join(run_dir, "point.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def finish_point(run_dir, meta, wall):
    """point.json from the run's eval.csv and rank 0's losses.csv: what the map needs."""
    import analysis  # fashion_mnist's readers of losses.csv and eval.csv
    losses = analysis.read_losses(os.path.join(run_dir, "losses.csv"))[0]
    evals = analysis.read_eval(os.path.join(run_dir, "eval.csv"))
    sent = [r["bytes_sent"] for r in losses]
    point = dict(meta, evals=[{k: e[k] for k in ("epoch", "test_accuracy", "wall_s")}
                              for e in evals],
                 bytes_per_step=sum(sent) / len(sent),
                 events=sum(1 for b in sent if b > 0) / len(sent), run_wall_s=wall)
    with open(os.path.join(run_dir, "point.json"), "w") as f:
        json.dump(point, f, indent=1)
    return point


def run_one(args, argv, run_dir, meta, label):
    """Runs argv unless run_dir already holds its point; returns the point or None."""
    point = read_point(run_dir)
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
    for model, sync, flags in tune_runs(args.mode):
        run_dir = os.path.join(out, "runs", model, "tune", sync, point_name(flags))
        argv = train_argv(args, model, sync, flags, MODELS[model][2], run_dir)
        point = run_one(args, argv, run_dir, dict(model=model, sync=sync, flags=flags),
                        f"[tune] {model} {sync} {point_name(flags)}")
        if point is None:
            continue
        accuracy = point["evals"][-1]["test_accuracy"]
        current = best.setdefault(model, {}).get(sync)
        if current is None or accuracy > current[0]:
            best[model][sync] = (accuracy, flags)
    return {m: {s: flags for s, (_, flags) in syncs.items()} for m, syncs in best.items()}


def bench(args, out):
    """allreduce_bench across each link; returns {link: (alpha, B_eff)} of those it fits."""
    import cost_model
    fits = {}
    os.makedirs(os.path.join(out, "bench"), exist_ok=True)
    for link in MODES[args.mode]["links"]:
        path = os.path.join(out, "bench", f"{link}.txt")
        if not os.path.isfile(path):
            argv = [args.bench, "--nprocs=2", f"--hosts={HOSTS}", f"--link={link}",
                    "--backends=gloo", "--min_bytes=64", f"--max_bytes={BENCH_MAX_BYTES}",
                    "--samples=5", "--max_iters=50", f"--timeout_s={args.timeout}"]
            status, wall = execute(argv, args.run_deadline_s, path + ".partial")
            print(f"[bench] {link}: {status} ({wall:.0f} s)", flush=True)
            if status != "ok":
                continue
            os.replace(path + ".partial", path)
        fits[link] = map_report.bench_fit(path, HOSTS)
    return {link: fit for link, fit in fits.items() if fit is not None}


def map_points(args, out, tuned, fits):
    """Each tuned synchroniser at each link and rank count that fits in point_cap_s."""
    mode = MODES[args.mode]
    for model in mode["models"]:
        _, target, _, max_epochs = MODELS[model]
        for sync in mode["syncs"]:
            flags = tuned.get(model, {}).get(sync)
            if flags is None:
                continue
            for ranks in mode["ranks"]:
                for link in mode["links"]:  # unlimited first: it gives the compute
                    map_point(args, out, model, sync, flags, link, ranks, fits, target,
                              max_epochs)
            map_point(args, out, model, sync, flags, *mode["straggler"], fits, target,
                      max_epochs, straggler=True)


def map_point(args, out, model, sync, flags, link, ranks, fits, target, max_epochs,
              straggler=False):
    """One point of the map (with straggler, its last rank STRAGGLER_FACTOR times slower, kept
    apart under straggler/): run unless done, skipped or predicted past the cap."""
    kind = "straggler" if straggler else "map"
    run_dir = os.path.join(out, "runs", model, kind, sync, f"{link}_n{ranks}")
    label = f"[{kind}] {model} {sync} @ {link}, {ranks} ranks"
    done = [p for p in map_report.read_points(out, model, "map") if p["sync"] == sync]
    profile = map_model.profiles(done, fits, target).get(sync)
    epochs = max_epochs * ranks // 2
    if profile and profile["epochs"].get(ranks):
        epochs = profile["epochs"][ranks]  # the same arithmetic on every link
    elif profile and ranks in profile["epochs"]:
        print(f"{label}: skipped (the target is not reached in {epochs} epochs)")
        return
    if read_point(run_dir) is None and link != "unlimited":
        stretch = STRAGGLER_FACTOR if straggler else 1.0
        predicted = map_model.predict(profile, fits, link, ranks, stretch) if profile else None
        if predicted is None or predicted[0] * 1.2 > MODES[args.mode]["point_cap_s"]:
            print(f"{label}: predicted only ({map_report.seconds(predicted)} to target)")
            return
    argv = train_argv(args, model, sync, flags, epochs, run_dir, link, ranks)
    if straggler:
        argv += [f"--straggler_rank={ranks - 1}", f"--straggler_factor={STRAGGLER_FACTOR}"]
    run_one(args, argv, run_dir, dict(model=model, sync=sync, flags=flags, link=link,
                                      ranks=ranks, straggler=straggler), label)


def run_all(args, out):
    started = time.monotonic()
    why_not = probe_hosts(args.on_hosts)
    if why_not:
        fail(f"emulated hosts cannot be made here: {why_not}")
    given = [a for a in args.argv if not a.startswith(("--train=", "--on_hosts=", "--bench="))]
    command = "bazel run -c opt //experiments:sync_map -- " + " ".join(map(shlex.quote, given))
    invocation = dict(command=short_command(command, out),
                      mode=args.mode, date=datetime.date.today().isoformat(),
                      cpu=machine()[0], cores=machine()[1],
                      load_before=" ".join(f"{x:.2f}" for x in os.getloadavg()))
    path = os.path.join(out, "invocation.json")
    if os.path.isfile(path):  # a continued sweep: the earlier sittings stay on record
        with open(path) as f:
            earlier = json.load(f)
        invocation["earlier"] = earlier.pop("earlier", []) + [earlier]
    tuned = tune(args, out)
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
    p.add_argument("--quick", action="store_const", dest="mode", const="quick",
                   default="default", help="the narrow MLP, four synchronisers (<10 min)")
    p.add_argument("--train", help="path to the //train:train binary")
    p.add_argument("--bench", help="path to the //bench:allreduce_bench binary")
    p.add_argument("--on_hosts", help="path to the //comm/job:on_hosts binary")
    p.add_argument("--data_dir", help=f"the IDX .gz files (default {DEFAULT_DATA_DIR})")
    p.add_argument("--timeout", type=float, default=120,
                   help=f"seconds any wait between ranks may take, in (0, {MAX_TIMEOUT_S}]")
    p.add_argument("--report_only", action="store_true",
                   help="rewrite the report from the runs already in --out_dir")
    p.add_argument("--second_sitting",
                   help="another sitting's --out_dir: the report says how far its claims "
                        "reproduce there")
    return p


def parse_args(argv=None):
    """Every flag checked before anything runs or is written: one error line, status 2."""
    args = parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    cli_errors.positive_finite("--timeout", args.timeout, MAX_TIMEOUT_S)
    args.run_deadline_s = max(600.0, 4 * args.timeout)
    args.out_dir = cli_errors.output_dir("--out_dir", args.out_dir)
    if args.second_sitting is not None and not os.path.isfile(
            os.path.join(args.second_sitting, "tuned.json")):
        fail(f"--second_sitting={args.second_sitting} holds no tuned.json (no sitting)")
    if args.report_only:
        if not os.path.isfile(os.path.join(args.out_dir, "tuned.json")):
            fail(f"--report_only: --out_dir={args.out_dir} holds no tuned.json (no runs)")
        return args
    for flag, path in (("--train", args.train), ("--bench", args.bench),
                       ("--on_hosts", args.on_hosts)):
        if path is None:
            fail(f"{flag} is needed: the path to its binary")
        cli_errors.executable(flag, path)
    if args.data_dir is not None:
        cli_errors.input_dir("--data_dir", args.data_dir, DATA_FILES)
    elif any(not os.path.isfile(os.path.join(DEFAULT_DATA_DIR, n)) for n in DATA_FILES):
        fail(f"{DEFAULT_DATA_DIR} lacks the Fashion-MNIST files (Debian's "
             f"dataset-fashion-mnist: tools/setup.sh installs it; or --data_dir)")
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
