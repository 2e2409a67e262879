#!/usr/bin/python3
"""Fashion-MNIST: ringlab's synchronisers beside PyTorch DDP, on one host and across links.

Runs PyTorch DDP itself (pytorch_ddp.py; skipped with a note where torch does not import) and
//train:train's synchronisers on the same MLP, initial parameters, sampler and
hyper-parameters, one progress line per run; across links (comm/cluster: 2 ranks on 2 emulated
hosts joined by links of the rate named), it first sweeps allreduce_bench over gloo on each
link, which the report's cost model fits. Beside every PyTorch DDP run over gloo, the same
program over ringlab's torch.distributed backend (--torch_module) trains its first
RINGLAB_TORCH_STEPS steps: their losses must be gloo's bit for bit, and its step is timed. Writes <out_dir>/report.md, results.csv and PNG
plots; each run's own files (losses.csv, eval.csv, trace.json, log.txt, run.json) stay under
<out_dir>/runs/<run>/, the sweeps under <out_dir>/bench/. What each mode runs is MODES below:

    bazel run -c opt //experiments:fashion_mnist -- [--quick | --full | --one_host]
        [--links=L1,L2|none] [--epochs=N] [--out_dir=DIR]

  (default)   per link (unlimited, 1gbit): ringlab allreduce and DiLoCo H=16, PyTorch DDP on
              1gbit, 3 epochs (allreduce passes 85% test accuracy in the third; DiLoCo, in its
              first, 2): which synchroniser reaches 85% first on each link;
  --full      on one host PyTorch DDP, ringlab allreduce, none and barrier over shm_ring and
              both compute floors; on links unlimited, 10gbit and 1gbit PyTorch DDP and ringlab's
              allreduce, fp16 compression, param_avg K=16, DiLoCo H=16, none, and the
              compressors, SPARTA, SparseLoCo, DeMo (lr 0.002) and Streaming DiLoCo at their
              defaults;
  --quick     1 epoch: PyTorch DDP and ringlab allreduce on one host, allreduce and DiLoCo
              H=16 on a 1gbit link;
  --one_host  every synchroniser over shm_ring, mpi and gloo on one host, both floors.

Measured times are in the README, per CPU. --report_only: rewrite the report from the runs
already in --out_dir. --dry_run: print the commands and stop. Exit status 0 when every run
finished, 1 when one failed (the report says which), 2 for bad input: one error line, found
before anything runs or is written (in every mode: --dry_run checks the flags, binaries, data
set and --out_dir as a run does).
"""

import datetime
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(1, os.path.dirname(HERE))  # experiments/: the kit's error line

import analysis  # noqa: E402  (after the path: these modules live next to this file)
import cli_errors  # noqa: E402
import report  # noqa: E402
from cli_errors import fail  # noqa: E402
from run_driver import (blas_core, children_cpu_s, default_out_dir, drive,  # noqa: E402
                        execute, load_average, machine_record, parse_links, probe_hosts,
                        probe_torch, stop_on_signal, write_invocation)

DATA_FILES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
MAX_EPOCHS, MAX_TIMEOUT_S = 1000, 86400
MODEL, LR, BATCH, SEED = "784,1024,1024,10", 0.1, 64, 0
# DeMo applies signs (each parameter moves by the learning rate): it trains at its own.
SYNC_LR = {"demo": 0.002}
# post_local_sgd's steps of DDP allreduce before local SGD, and PowerSGD's before it compresses
# (PyTorch's examples start both after 100 iterations; PowerSGD's own default, 1000, is past
# this run's second epoch).
POST_LOCAL_WARMUP = 100
POWERSGD_START = 100
# The variants the experiment compares: (key, --sync, the period or rank its label names, overlap
# as the report shows it, the synchroniser's options as train --list_syncs names them). A
# synchroniser the trainer lists without a row here runs with its defaults where a mode runs
# every one (registered_rows).
SYNCS = (("allreduce_overlap", "allreduce", None, True, {"overlap": "true"}),
         ("allreduce_no_overlap", "allreduce", None, False, {"overlap": "false"}),
         ("fp16", "fp16", None, True, {"overlap": "true"}),
         ("bf16", "bf16", None, True, {"overlap": "true"}),
         ("powersgd_r1", "powersgd", 1, True,
          {"powersgd_rank": 1, "powersgd_start_iter": POWERSGD_START, "overlap": "true"}),
         ("powersgd_r4", "powersgd", 4, True,
          {"powersgd_rank": 4, "powersgd_start_iter": POWERSGD_START, "overlap": "true"}),
         ("param_avg_k4", "param_avg", 4, None, {"avg_period": 4}),
         ("param_avg_k16", "param_avg", 16, None, {"avg_period": 16}),
         ("param_avg_k64", "param_avg", 64, None, {"avg_period": 64}),
         ("post_local_sgd_k16", "post_local_sgd", 16, None,
          {"avg_period": 16, "avg_warmup": POST_LOCAL_WARMUP}),
         ("diloco_h16", "diloco", 16, None, {"inner_steps": 16}),
         ("none", "none", None, None, {}),
         ("barrier", "barrier", None, None, {}))
# What each mode runs: its epochs; the 2-rank runs on one host, (communicator, synchroniser
# keys), after PyTorch DDP when "pytorch_ddp" is set; the compute floors; the links, and on
# each, PyTorch DDP (on the links in "link_pytorch", or "every link") and these ringlab
# synchronisers, 2 ranks on 2
# emulated hosts (one each) over gloo, whose ranks bind their host's address.
ALL_SYNCS = "every synchroniser"  # SYNCS and every other one train lists
UNLISTED = "every synchroniser without a row"  # train lists it, SYNCS has no row for it
MODES = {
    # Under 3 minutes: the headline on one host, and allreduce against param_avg on a slow link.
    "quick": dict(epochs=1, pytorch_ddp=True, one_host=(("shm_ring", ("allreduce_overlap",)),),
                  floors=False, links=("1gbit",), link_pytorch=(),
                  link_syncs=("allreduce_overlap", "diloco_h16")),
    # The README's first command, under 10 minutes: the per-link answer, a fast link against a
    # slow one, ringlab's allreduce and DiLoCo on each, PyTorch DDP beside them on the slow one
    # (the other synchronisers, and PyTorch DDP on every link, in the full run).
    "standard": dict(epochs=3, pytorch_ddp=False, one_host=(), floors=False,
                     links=("unlimited", "1gbit"), link_pytorch=("1gbit",),
                     link_syncs=("allreduce_overlap", "diloco_h16")),
    # On one host PyTorch DDP, ringlab's allreduce, none and barrier over shm_ring (what
    # synchronising costs ringlab, and how much of it is the ranks meeting rather than the
    # bytes) and both compute floors (1 epoch: they measure a step); on three links
    # every synchroniser but bf16 (fp16's cost), post_local_sgd (param_avg's once its
    # warm-up is over), PowerSGD and the other periods of param_avg: the compressors, SPARTA,
    # SparseLoCo, DeMo and Streaming DiLoCo at their defaults.
    "full": dict(epochs=3, pytorch_ddp=True,
                 one_host=(("shm_ring", ("allreduce_overlap", "none", "barrier")),),
                 floors=True, floor_epochs=1, links=("unlimited", "10gbit", "1gbit"),
                 link_pytorch="every link",
                 link_syncs=("allreduce_overlap", "fp16", "param_avg_k16", "diloco_h16",
                             "none", UNLISTED)),
    # The one-host matrix of the earlier rounds: every synchroniser over every communicator.
    "one_host": dict(epochs=3, pytorch_ddp=True,
                     one_host=tuple((comm, ALL_SYNCS) for comm in ("shm_ring", "mpi", "gloo")),
                     floors=True, links=(), link_pytorch=(), link_syncs=()),
}
# Across links, the runs that send less than a gradient per step train this many epochs more
# than the mode's: their steps are cheaper, and what a link run compares is the wall-clock to
# 85% test accuracy, which allreduce reaches in its third epoch and param_avg K=16 and none
# in their fourth (85.69% and 85.57%, after 83.51% and 83.21% at the third). DiLoCo H=16
# reaches it in its first (85.24%): it trains an epoch less.
CHEAP_EXTRA_EPOCHS = 1
# Beside every PyTorch DDP run (over gloo), PyTorch DDP over ringlab (torch_backend) trains this
# many steps, then evaluates once: its step time, and its first losses bit for bit against the
# gloo run's, at a fraction of a full run's time (the full run stays within its 25 minutes).
RINGLAB_TORCH_STEPS = 300
EXTRA_EPOCHS = {"allreduce": 0, "fp16": 0, "bf16": 0, "powersgd": 0,
                "diloco": -1}  # the others: CHEAP_EXTRA_EPOCHS


def detail(sync, k, overlap):
    """A synchroniser variant as the labels name it: "allreduce, overlap", "param_avg K=16"."""
    return {"allreduce": "allreduce, " + ("overlap" if overlap else "no overlap"),
            "fp16": "fp16 compress", "bf16": "bf16 compress",
            "powersgd": f"PowerSGD rank {k}",
            "param_avg": f"param_avg K={k}", "post_local_sgd": f"post_local_sgd K={k}",
            "diloco": f"DiLoCo H={k}", "none": "none",
            "barrier": "barrier (none, meeting each step)"}.get(sync, sync)


def registered_syncs(train):
    """{--sync name: its option names}, as train --list_syncs=json describes them."""
    try:
        listed = subprocess.run([train, "--list_syncs=json"], capture_output=True, text=True,
                                timeout=120).stdout
        return {entry["name"]: {option["name"] for option in entry["options"]}
                for entry in json.loads(listed)}
    except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError) as e:
        fail(f"--train={train} --list_syncs=json: not the trainer's synchronisers ({e})")


def registered_rows(registered):
    """SYNCS, then a row at its defaults for each synchroniser train lists that SYNCS lacks."""
    named = {sync for _, sync, _, _, _ in SYNCS}
    return SYNCS + tuple((name, name, None, None, {}) for name in sorted(registered)
                         if name not in named)


def check_syncs(runs, registered):
    """Every ringlab run asks for a synchroniser train has, with options it declares."""
    for run in runs:
        if run["framework"] != "ringlab":
            continue
        if run["sync"] not in registered:
            fail(f"the trainer has no --sync={run['sync']} (train --list_syncs lists "
                 f"{', '.join(sorted(registered))})")
        unknown = sorted(set(run.get("options", {})) - registered[run["sync"]])
        if unknown:
            fail(f"run {run['name']}: --sync={run['sync']} has no option "
                 f"{', '.join('--' + o for o in unknown)}")


def over_ringlab(run, name, label):
    """PyTorch DDP over ringlab beside the PyTorch DDP `run` (over gloo)."""
    return dict(run, name=name, label=label, comm="ringlab", backend="ringlab",
                max_steps=RINGLAB_TORCH_STEPS, epochs=1,
                variant="pytorch_ddp_ringlab" if run.get("link") else None)


def link_runs(links, mode, epochs, registered=()):
    """The runs across links: per link, PyTorch DDP, then each of the mode's link_syncs (with
    UNLISTED among them, every synchroniser train lists that SYNCS has no row for)."""
    runs = []
    for link in links:
        tag = link.replace(".", "_")
        if mode["link_pytorch"] == "every link" or link in mode["link_pytorch"]:
            runs.append(dict(name=f"link_{tag}_pytorch_ddp",
                             label=f"PyTorch DDP (gloo) @ {link}", framework="pytorch",
                             sync="allreduce", avg_period=None, overlap=True, comm="gloo",
                             ranks=2, link=link, variant="pytorch_ddp", epochs=epochs))
            runs.append(over_ringlab(runs[-1], f"link_{tag}_pytorch_ddp_ringlab",
                                     f"PyTorch DDP (ringlab, {RINGLAB_TORCH_STEPS} steps) "
                                     f"@ {link}"))
        unlisted = (registered_rows(registered)[len(SYNCS):]
                    if UNLISTED in mode["link_syncs"] else ())
        chosen = tuple(row for row in SYNCS if row[0] in mode["link_syncs"]) + unlisted
        for key, sync, k, overlap, options in chosen:
            runs.append(dict(name=f"link_{tag}_{key}",
                             label=f"ringlab {detail(sync, k, overlap)} (gloo) @ {link}",
                             framework="ringlab", sync=sync, avg_period=k, overlap=overlap,
                             options=options,
                             comm="gloo", ranks=2, link=link, variant=key,
                             epochs=max(1, epochs + EXTRA_EPOCHS.get(sync,
                                                                     CHEAP_EXTRA_EPOCHS))))
    return runs


def plan(mode_name, links=None, epochs=None, registered=()):
    """The runs, in order: dicts with name, label, framework, sync, avg_period, overlap,
    options, comm, ranks, epochs (and, for the runs across emulated links, link and variant).
    links and epochs default to the mode's; registered: the synchronisers train lists (a mode
    that runs every one runs these too)."""
    mode = MODES[mode_name]
    epochs = epochs or mode["epochs"]
    runs = []
    if mode["pytorch_ddp"]:
        runs.append(dict(name="pytorch_ddp", label="PyTorch DDP (gloo, 2 ranks)",
                         framework="pytorch", sync="allreduce", avg_period=None, overlap=True,
                         comm="gloo", ranks=2))
        runs.append(over_ringlab(runs[-1], "pytorch_ddp_ringlab",
                                 f"PyTorch DDP (ringlab, 2 ranks, {RINGLAB_TORCH_STEPS} "
                                 f"steps)"))
    for comm, keys in mode["one_host"]:
        for key, sync, k, overlap, options in registered_rows(registered):
            if keys == ALL_SYNCS or key in keys:
                runs.append(dict(name=f"{comm}_{key}",
                                 label=f"ringlab {detail(sync, k, overlap)} ({comm})",
                                 framework="ringlab", sync=sync, avg_period=k, overlap=overlap,
                                 options=options, comm=comm, ranks=2))
    if mode["floors"]:
        runs.append(dict(name="ringlab_1rank", label="ringlab 1 rank (compute floor)",
                         framework="ringlab", sync="none", avg_period=None, overlap=None,
                         comm="shm_ring", ranks=1))
        runs.append(dict(name="pytorch_1proc", label="PyTorch 1 process (compute floor)",
                         framework="pytorch", sync="none", avg_period=None, overlap=None,
                         comm=None, ranks=1))
    for run in runs:
        # The floors and barrier measure a step, not what training reaches.
        measures_a_step = (run["name"] in ("ringlab_1rank", "pytorch_1proc")
                           or run["sync"] == "barrier")
        if not run.get("max_steps"):
            run["epochs"] = mode.get("floor_epochs", epochs) if measures_a_step else epochs
    runs += link_runs(mode["links"] if links is None else links, mode, epochs, registered)
    for order, run in enumerate(runs):
        run["order"] = order
    return runs


def command(run, args, run_dir):
    """The argv of one run."""
    if run["framework"] == "pytorch":
        argv = ["/usr/bin/python3", os.path.join(HERE, "pytorch_ddp.py"), f"--out_dir={run_dir}",
                f"--world_size={run['ranks']}", f"--epochs={run['epochs']}", f"--model={MODEL}",
                f"--lr={LR}", f"--batch_size={BATCH}", f"--seed={SEED}", "--sampler_seed=0",
                "--set_epoch=true", "--eval_every=1", "--quiet", f"--timeout={args.timeout}"]
        argv += [f"--data_dir={args.data_dir}"] if args.data_dir else []
        if run.get("backend") == "ringlab":
            argv += ["--backend=ringlab", f"--max_steps={run['max_steps']}"]
            argv += [f"--ringlab_torch={args.torch_module}"] if args.torch_module else []
        if run.get("link"):  # its ranks on 2 emulated hosts, torchrun-style
            argv = [args.on_hosts, "--nprocs=2", "--hosts=2", f"--link={run['link']}",
                    "--"] + argv
        return argv
    argv = [args.train, "--dataset=fashion_mnist", f"--model={MODEL}", f"--sync={run['sync']}",
            f"--comm={run['comm']}", f"--epochs={run['epochs']}",
            f"--lr={SYNC_LR.get(run['sync'], LR)}",
            f"--batch_size={BATCH}", f"--seed={SEED}", "--sampler_seed=0", "--set_epoch=true",
            "--eval_every=1", f"--trace={run_dir}/trace.json", f"--out_dir={run_dir}", "--quiet",
            f"--timeout={args.timeout}"]
    if args.data_dir:
        argv.append(f"--data_dir={args.data_dir}")
    argv += [f"--{name}={value}" for name, value in run.get("options", {}).items()]
    if run.get("link"):
        argv += ["--hosts=2", f"--link={run['link']}"]
    if run["comm"] == "mpi":
        return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
                str(run["ranks"])] + argv
    return argv + [f"--nprocs={run['ranks']}"]


def progress(index, total, run):
    s = run.get("stats")
    if not s:
        return f"[{index}/{total}] {run['label']}: {run['status']}"
    return (f"[{index}/{total}] {run['label']}: accuracy {100 * s['final_accuracy']:.2f}% after "
            f"{s['epochs']} epoch(s), median step {s['median_step_ms']:.2f} ms "
            f"({run['wall_s']:.0f} s)")


def bench_links(args, links, out, hosts_missing):
    """allreduce_bench over gloo at 2 ranks on 2 emulated hosts, per link (64 B to 16 MiB,
    seconds each): the sweeps the report's cost model fits. Writes <out>/bench/<link>.txt."""
    bench_dir = os.path.join(out, "bench")
    shutil.rmtree(bench_dir, ignore_errors=True)
    if not links or hosts_missing or not args.bench:
        return
    os.makedirs(bench_dir)
    for link in links:
        argv = [args.bench, "--nprocs=2", "--hosts=2", f"--link={link}", "--backends=gloo",
                "--min_bytes=64", f"--max_bytes={16 << 20}", "--samples=10",
                "--max_iters=200", f"--timeout_s={args.timeout}"]
        status, wall = execute(argv, 300, os.path.join(bench_dir, f"{link}.txt"))
        print(f"[bench] allreduce over gloo @ {link}: {status} ({wall:.0f} s)", flush=True)


def run_all(args, out):
    runs = plan(args.mode, args.links, args.epochs, args.registered)
    links = list(dict.fromkeys(r["link"] for r in runs if r.get("link")))
    load_before = load_average()  # before the probes, which import torch
    torch_version, torch_missing, _ = probe_torch()
    hosts_missing = probe_hosts(args.on_hosts) if links else None
    have_mpi = shutil.which("mpirun") is not None
    started = time.monotonic()
    invocation = {
        "mode": args.mode, "epochs": args.epochs or MODES[args.mode]["epochs"],
        "links": links,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        **machine_record(blas_core([args.train, "--help"]), load_before),
        "torch_version": torch_version,
        "model": MODEL, "lr": LR, "batch_size": BATCH, "train": args.train, "notes": []}
    if torch_missing:
        invocation["notes"].append(f"PyTorch runs skipped: torch does not import with "
                                   f"/usr/bin/python3 ({torch_missing})")
    if not have_mpi:
        invocation["notes"].append("mpi runs skipped: no mpirun on PATH")
    if hosts_missing:
        invocation["notes"].append(f"runs across links skipped: no emulated hosts here "
                                   f"({hosts_missing})")
    runs_dir = os.path.join(out, "runs")
    shutil.rmtree(runs_dir, ignore_errors=True)  # only this invocation's runs in the report
    bench_links(args, links, out, hosts_missing)
    for index, run in enumerate(runs, start=1):
        deadline = 120 + 240 * run["epochs"]
        run_dir = os.path.join(runs_dir, run["name"])
        os.makedirs(run_dir)
        argv = command(run, args, run_dir)
        run["command"] = " ".join(shlex.quote(a) for a in argv)
        if run["framework"] == "pytorch" and torch_missing:
            run["status"], run["wall_s"] = "skipped: torch does not import", None
        elif run.get("backend") == "ringlab" and not args.torch_module:
            run["status"], run["wall_s"] = ("skipped: ringlab_torch is not built here (it "
                                            "needs libtorch-dev, pybind11-dev, python3-dev)"), None
        elif run["comm"] == "mpi" and not have_mpi:
            run["status"], run["wall_s"] = "skipped: no mpirun", None
        elif run.get("link") and hosts_missing:
            run["status"], run["wall_s"] = f"skipped: {hosts_missing}", None
        else:
            cpu_before = children_cpu_s()
            run["status"], run["wall_s"] = execute(argv, deadline,
                                                   os.path.join(run_dir, "log.txt"))
            # CPU seconds of the run's processes (mpirun's ranks are its children): with the
            # wall time, how much the machine's other work stretched the run.
            run["cpu_s"] = round(children_cpu_s() - cpu_before, 1)
        run["load_after"] = round(os.getloadavg()[0], 2)
        with open(os.path.join(run_dir, "run.json"), "w") as f:
            json.dump(run, f, indent=2)
        if run["status"] == "ok":
            try:
                run["stats"] = analysis.summarise_run(run_dir)
            except analysis.AnalysisError as e:
                run["status"] = f"failed: {e}"
        print(progress(index, len(runs), run), flush=True)
    write_invocation(out, invocation, started)


def parser():
    p = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out_dir", default=default_out_dir("fashion_mnist"))
    p.add_argument("--train", help="path to the //train:train binary")
    modes = p.add_mutually_exclusive_group()
    modes.add_argument("--quick", action="store_const", dest="mode", const="quick",
                       help="1 epoch: PyTorch DDP, ringlab allreduce and param_avg K=16 on one "
                            "host, the last two on a 1gbit link too")
    modes.add_argument("--full", action="store_const", dest="mode", const="full",
                       help="every run: all synchronisers and communicators on one host, both "
                            "compute floors, and every synchroniser on links unlimited, "
                            "10gbit and 1gbit")
    modes.add_argument("--one_host", action="store_const", dest="mode", const="one_host",
                       help="the one-host matrix: every synchroniser over shm_ring, mpi and "
                            "gloo, both compute floors, no links")
    p.add_argument("--epochs", type=int,
                   help=f"epochs per run, in [1, {MAX_EPOCHS}] (param_avg and none across "
                        f"links: {CHEAP_EXTRA_EPOCHS} more, DiLoCo 1 fewer); default "
                        f"{MODES['standard']['epochs']}, 1 with --quick")
    p.add_argument("--data_dir", help=f"the IDX .gz files (default {DEFAULT_DATA_DIR})")
    p.add_argument("--timeout", type=float, default=120,
                   help=f"seconds any wait between ranks may take, in (0, {MAX_TIMEOUT_S}]")
    p.add_argument("--links",
                   help="comma-separated link rates (e.g. unlimited,10gbit,1gbit), or "
                        "none: PyTorch DDP and ringlab's synchronisers at 2 emulated hosts "
                        "on each (needs root or user namespaces); default the mode's: "
                        + "; ".join(f"{name} {','.join(m['links'])}"
                                    for name, m in MODES.items()))
    p.add_argument("--bench", help="path to the //bench:allreduce_bench binary (the "
                                   "sweeps across each link that the cost model fits)")
    p.add_argument("--on_hosts", help="path to the //comm/job:on_hosts binary")
    p.add_argument("--torch_module",
                   help="the directory holding //torch_backend:ringlab_torch's "
                        "ringlab_torch.so (without it, PyTorch DDP over ringlab is "
                        "skipped)")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--report_only", action="store_true",
                      help="rewrite the report from the runs already in --out_dir")
    only.add_argument("--dry_run", action="store_true",
                      help="print the commands (every flag checked as for the runs) and stop")
    return p


def check_inputs(args):
    """The binaries and directories the runs read: each one given must be usable; --train
    and the data set are needed to run (or to print the runs: --dry_run checks as a run)."""
    runs = not args.report_only
    if args.train is not None or runs:
        if args.train is None:
            fail("--train is needed: the path to the //train:train binary")
        cli_errors.executable("--train", args.train)
    for flag, path in (("--on_hosts", args.on_hosts), ("--bench", args.bench)):
        if path is not None:
            cli_errors.executable(flag, path)
    if args.torch_module is not None:
        args.torch_module = cli_errors.torch_module("--torch_module", args.torch_module)
    if args.data_dir is not None:
        cli_errors.input_dir("--data_dir", args.data_dir, DATA_FILES)
    elif runs:
        missing = [n for n in DATA_FILES if not os.path.isfile(os.path.join(DEFAULT_DATA_DIR, n))]
        if missing:
            fail(f"{DEFAULT_DATA_DIR} lacks {', '.join(missing)} (Debian's "
                 f"dataset-fashion-mnist: tools/setup.sh installs it; or --data_dir)")


def parse_args(argv=None):
    """The flags, every one checked here, before anything runs or is written: one error
    line and exit status 2 for any that cannot be used."""
    args = parser().parse_args(argv)
    args.mode = args.mode or "standard"
    if args.epochs is not None:
        cli_errors.int_in_range("--epochs", args.epochs, 1, MAX_EPOCHS)
    cli_errors.positive_finite("--timeout", args.timeout, MAX_TIMEOUT_S)
    if args.links is not None:
        args.links = parse_links(args.links)
    args.out_dir = cli_errors.output_dir("--out_dir", args.out_dir)
    if args.report_only and not os.path.isfile(os.path.join(args.out_dir, "invocation.json")):
        fail(f"--report_only: --out_dir={args.out_dir} holds no invocation.json (no runs "
             f"to report on)")
    check_inputs(args)
    return args


def main(argv=None):
    signal.signal(signal.SIGTERM, stop_on_signal)
    args = parse_args(argv)
    out = args.out_dir
    # The runs come from what the trainer lists, and ask only what it has.
    args.registered = registered_syncs(args.train) if not args.report_only else {}
    if not args.report_only:
        check_syncs(plan(args.mode, args.links, args.epochs, args.registered), args.registered)
    commands = [command(run, args, os.path.join(out, "runs", run["name"]))
                for run in plan(args.mode, args.links, args.epochs, args.registered)]
    return drive(args, out, commands, run_all, report.build, report.ReportError)


if __name__ == "__main__":
    sys.exit(main())
