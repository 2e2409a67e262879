#!/usr/bin/python3
"""The character language model across links: ringlab's synchronisers beside PyTorch DDP.

Trains the GPT of gpt.py on the Bible (char_lm_train.py) with 2 ranks on 2 emulated hosts
(comm/cluster) joined by links of each rate named: PyTorch DDP over gloo, and ringlab's
synchronisers through ringlab_torch.Synchronizer from the same PyTorch loop (AdamW inside,
DiLoCo's outer step Nesterov SGD as in the DiLoCo paper). It first sweeps allreduce_bench over
gloo on each link, which the report's cost model fits. Writes <out_dir>/report.md, results.csv
and PNG plots; each run's files (losses.csv, eval.csv, sample.txt, summary.json, log.txt,
run.json) stay under <out_dir>/runs/<run>/. What each mode runs is MODES below:

    bazel run -c opt //experiments:char_lm -- [--quick | --full] [--links=L1,L2]
        [--steps=N] [--out_dir=DIR]

  (default)  400 steps of the small model (0.61M parameters): on a 1gbit link PyTorch DDP,
             allreduce, DiLoCo H=16, post-local SGD K=16, PowerSGD rank 4 and fp16; on an
             unlimited one PyTorch DDP, allreduce and DiLoCo (--links: every one on each);
  --quick    the 1gbit link: PyTorch DDP, allreduce and DiLoCo H=16, 150 steps;
  --full     links unlimited, 10gbit, 1gbit and 100mbit, every synchroniser above and the
             field's (top-k, random-k, EF-SignSGD, QSGD, int8, SPARTA, SparseLoCo, DeMo,
             Streaming DiLoCo) at their defaults, 600 steps.

--report_only rewrites the report from the runs in --out_dir; --dry_run prints the commands.
Exit status 0 when every run finished, 1 when one failed (the report says which), 2 for bad
input: one error line, before anything runs or is written.
"""

import datetime
import json
import os
import shlex
import shutil
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXPERIMENTS = os.path.dirname(HERE)
for path in (HERE, EXPERIMENTS, os.path.join(EXPERIMENTS, "fashion_mnist")):
    if path not in sys.path:
        sys.path.append(path)

import char_lm_report  # noqa: E402
import cli_errors  # noqa: E402
import fashion_mnist as fm  # noqa: E402  (its link sweeps)
import run_driver  # noqa: E402
import text_data  # noqa: E402
from cli_errors import fail  # noqa: E402

CONFIG, BATCH, LR = "small", 32, 3e-3
# (key, --sync, label, options as ringlab_torch.Synchronizer names them). post_local_sgd and
# PowerSGD take DDP's allreduce for their first WARMUP steps, as PyTorch's examples do.
WARMUP = 50
SYNCS = (
    ("pytorch_ddp", "ddp", "PyTorch DDP (gloo)", {}),
    ("allreduce", "allreduce", "ringlab allreduce", {"overlap": "true"}),
    ("diloco_h16", "diloco", "ringlab DiLoCo H=16",
     {"inner_steps": 16, "outer_lr": 0.7, "outer_momentum": 0.9}),
    ("post_local_sgd_k16", "post_local_sgd", "ringlab post-local SGD K=16",
     {"avg_period": 16, "avg_warmup": WARMUP}),
    ("powersgd_r4", "powersgd", "ringlab PowerSGD rank 4",
     {"powersgd_rank": 4, "powersgd_start_iter": WARMUP}),
    ("fp16", "fp16", "ringlab fp16 compress", {}),
)
ALL = tuple(key for key, *_ in SYNCS)
# The synchronisers the field argues about, at their defaults, in the full run only (each is a
# run per link): compressors with error feedback, SPARTA, SparseLoCo, DeMo, Streaming DiLoCo.
FIELD = (
    ("topk", "topk", "ringlab top-k 1%", {}),
    ("randomk", "randomk", "ringlab random-k 1%", {}),
    ("ef_signsgd", "ef_signsgd", "ringlab EF-SignSGD", {}),
    ("qsgd", "qsgd", "ringlab QSGD", {}),
    ("int8", "int8", "ringlab int8", {}),
    ("sparta", "sparta", "ringlab SPARTA 0.5%", {}),
    ("sparseloco", "sparseloco", "ringlab SparseLoCo H=16", {}),
    ("demo", "demo", "ringlab DeMo", {}),
    ("streaming_diloco", "streaming_diloco", "ringlab Streaming DiLoCo H=16", {}),
)
SYNCS += FIELD
EVERY = tuple(key for key, *_ in SYNCS)
MODES = {
    # 150 steps reach about 2.1: the target is 2.2 there.
    "quick": dict(steps=150, links=("1gbit",), syncs=("pytorch_ddp", "allreduce", "diloco_h16"),
                  target=2.2),
    # Within 15 minutes on 2 cores: the unshaped link's baseline pair and DiLoCo, and every
    # synchroniser at 1 Gbit/s, where the choice matters.
    "standard": dict(steps=400, links=("unlimited", "1gbit"),
                     syncs={"unlimited": ("pytorch_ddp", "allreduce", "diloco_h16"),
                            "1gbit": ALL}),
    "full": dict(steps=600, links=("unlimited", "10gbit", "1gbit", "100mbit"), syncs=EVERY),
}
EVAL_EVERY = 25


def plan(mode_name, links=None, steps=None):
    """The runs in order: dicts of name, key, label, sync, options, link, steps."""
    mode = MODES[mode_name]
    runs = []
    for link in mode["links"] if links is None else links:
        keys = mode["syncs"]
        if isinstance(keys, dict):  # per link, where the links are the mode's
            keys = keys.get(link, ALL) if links is None else ALL
        for key, sync, label, options in SYNCS:
            if key in keys:
                runs.append(dict(name=f"{link.replace('.', '_')}_{key}", key=key, sync=sync,
                                 label=f"{label} @ {link}", options=options, link=link,
                                 steps=steps or mode["steps"],
                                 target=mode.get("target", char_lm_report.TARGET)))
    return runs


def command(run, args, run_dir):
    front = ["--front=pytorch", "--backend=gloo"] if run["sync"] == "ddp" else [
        "--front=ringlab", f"--sync={run['sync']}"] + [
        f"--sync_option={k}={v}" for k, v in run["options"].items()]
    argv = ["/usr/bin/python3", os.path.join(HERE, "char_lm_train.py"), f"--out_dir={run_dir}",
            f"--config={CONFIG}", f"--steps={run['steps']}", f"--batch_size={BATCH}",
            f"--lr={LR}", f"--eval_every={EVAL_EVERY}", f"--timeout={args.timeout}"] + front
    if args.torch_module:
        argv.append(f"--ringlab_torch={args.torch_module}")
    return [args.on_hosts, "--nprocs=2", "--hosts=2", f"--link={run['link']}", "--"] + argv


class Progress:
    """A line for a run past a minute, every 30 s: its last progress line (step, loss, elapsed,
    remaining)."""

    def __init__(self, prefix, log_path):
        self.prefix, self.log_path, self.last = prefix, log_path, 0.0

    def __call__(self, seconds):
        if seconds < 60 or seconds - self.last < 30:
            return
        self.last = seconds
        try:
            with open(self.log_path, errors="replace") as f:
                lines = [l.split("progress:", 1)[1].strip() for l in f if "progress:" in l]
        except OSError:
            return
        if lines:
            print(f"{self.prefix} {lines[-1]}", flush=True)


def run_one(index, total, run, args, runs_dir):
    run_dir = os.path.join(runs_dir, run["name"])
    os.makedirs(run_dir)
    argv = command(run, args, run_dir)
    run["command"] = " ".join(shlex.quote(a) for a in argv)
    if run["sync"] != "ddp" and not args.torch_module:
        run["status"], run["wall_s"] = "skipped: ringlab_torch is not built here", None
    elif args.hosts_missing:
        run["status"], run["wall_s"] = f"skipped: {args.hosts_missing}", None
    else:
        log = os.path.join(run_dir, "log.txt")
        run["status"], run["wall_s"] = run_driver.execute(
            argv, 120 + 2 * run["steps"], log, Progress(f"[{index}/{total}] {run['label']}:", log))
    run["load_after"] = round(os.getloadavg()[0], 2)
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump(run, f, indent=2)
    print(char_lm_report.progress_line(index, total, run, run_dir), flush=True)


def run_all(args, out):
    runs = plan(args.mode, args.links, args.steps)
    links = list(dict.fromkeys(r["link"] for r in runs))
    load_before = run_driver.load_average()  # before torch's import
    torch_version, torch_missing, kernel = run_driver.probe_torch()
    if torch_missing:
        fail(f"torch does not import with /usr/bin/python3 ({torch_missing}): "
             f"tools/setup.sh installs python3-torch")
    args.hosts_missing = run_driver.probe_hosts(args.on_hosts)
    started = time.monotonic()
    invocation = {"mode": args.mode, "links": links, "steps": runs[0]["steps"],
                  "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                  **run_driver.machine_record(kernel, load_before),
                  "torch_version": torch_version,
                  "config": CONFIG, "batch_size": BATCH, "lr": LR, "eval_every": EVAL_EVERY,
                  "notes": []}
    if args.hosts_missing:
        invocation["notes"].append(f"no emulated hosts here ({args.hosts_missing})")
    runs_dir = os.path.join(out, "runs")
    shutil.rmtree(runs_dir, ignore_errors=True)
    fm.bench_links(args, links, out, args.hosts_missing)
    for index, run in enumerate(runs, start=1):
        run["order"] = index
        run_one(index, len(runs), run, args, runs_dir)
    run_driver.write_invocation(out, invocation, started)


def parser():
    p = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out_dir", default=run_driver.default_out_dir("char_lm"))
    modes = p.add_mutually_exclusive_group()
    modes.add_argument("--quick", action="store_const", dest="mode", const="quick",
                       help="the 1gbit link: PyTorch DDP, allreduce and DiLoCo, 150 steps")
    modes.add_argument("--full", action="store_const", dest="mode", const="full",
                       help="every synchroniser on links unlimited, 10gbit, 1gbit and "
                            "100mbit, 600 steps")
    p.add_argument("--steps", type=int, help="steps per run, in [1, 100000] (default: the "
                   "mode's: 400, 150 with --quick, 600 with --full)")
    p.add_argument("--links", help="comma-separated link rates (unlimited, 1gbit, 2.5gbit, "
                   "100mbit, ...); default the mode's")
    p.add_argument("--timeout", type=float, default=120,
                   help="seconds any wait between ranks may take, in (0, 86400]")
    p.add_argument("--on_hosts", help="path to the //comm/job:on_hosts binary")
    p.add_argument("--bench", help="path to the //bench:allreduce_bench binary")
    p.add_argument("--torch_module", help="the directory of ringlab_torch.so")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--report_only", action="store_true",
                      help="rewrite the report from the runs already in --out_dir")
    only.add_argument("--dry_run", action="store_true",
                      help="print the commands (every flag checked as for the runs) and stop")
    return p


def parse_args(argv=None):
    args = parser().parse_args(argv)
    args.mode = args.mode or "standard"
    if args.steps is not None:
        cli_errors.int_in_range("--steps", args.steps, 1, 100000)
    cli_errors.positive_finite("--timeout", args.timeout, 86400)
    if args.links is not None:
        args.links = run_driver.parse_links(args.links)
        if not args.links:
            fail("--links: at least one link rate is needed")
    args.out_dir = cli_errors.output_dir("--out_dir", args.out_dir)
    if args.report_only:
        if not os.path.isfile(os.path.join(args.out_dir, "invocation.json")):
            fail(f"--report_only: --out_dir={args.out_dir} holds no invocation.json")
        return args
    for flag, path in (("--on_hosts", args.on_hosts), ("--bench", args.bench)):
        if path is None:
            fail(f"{flag} is needed: the path to its binary")
        cli_errors.executable(flag, path)
    if args.torch_module is not None:
        args.torch_module = cli_errors.torch_module("--torch_module", args.torch_module)
    missing = text_data.missing_bible()
    if missing:
        fail(missing)
    return args


def main(argv=None):
    signal.signal(signal.SIGTERM, run_driver.stop_on_signal)
    args = parse_args(argv)
    out = args.out_dir
    commands = [command(run, args, os.path.join(out, "runs", run["name"]))
                for run in plan(args.mode, args.links, args.steps)]
    return run_driver.drive(args, out, commands, run_all, char_lm_report.build,
                    char_lm_report.ReportError)


if __name__ == "__main__":
    sys.exit(main())
