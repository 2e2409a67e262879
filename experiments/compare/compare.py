#!/usr/bin/python3
"""Compares synchronisers on a user's own PyTorch training script, on emulated hosts.

    bazel run -c opt //experiments:compare -- --hosts=2 --link=1gbit \\
        --syncs=pytorch_ddp,allreduce,diloco -- python3 my_train.py ARGS

Starts the script once per synchroniser, --hosts ranks on as many emulated hosts joined by
links of --link's rate (comm/cluster), torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT). The script changes in three lines (ringlab_compare.py: import, wrap, log), which
put the synchroniser between its loop and its optimiser and record each step's loss (and its
metric, when it logs one). Writes <out_dir>/report.md, results.csv and plots of loss and metric
against wall-clock and bytes sent; each run's logs under <out_dir>/runs/<sync>/.

Bad input is one `error:` line and exit status 2: an unknown synchroniser or option, a link
rate tc rejects, a script that fails on a rank (its last lines quoted) or never logs.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXPERIMENTS = os.path.dirname(HERE)
for path in (HERE, EXPERIMENTS):
    if path not in sys.path:
        sys.path.append(path)

import cli_errors  # noqa: E402
import compare_report  # noqa: E402
import run_driver  # noqa: E402
import ringlab_compare  # noqa: E402
from cli_errors import fail  # noqa: E402

LAST_LINES = 3  # of a failed run's output, quoted in its error line


def parser():
    p = cli_errors.ArgumentParser(description=__doc__.split("\n")[0],
                                  usage="compare.py [flags] -- COMMAND [ARGS...]")
    p.add_argument("--out_dir", default=run_driver.default_out_dir("compare"))
    p.add_argument("--hosts", type=int, default=2, help="ranks, one per emulated host, in "
                   "[2, 8]")
    p.add_argument("--link", default="1gbit", help="every host's link rate: unlimited, or "
                   "tc's units (1gbit, 2.5gbit, 100mbit)")
    p.add_argument("--syncs", default="pytorch_ddp,allreduce,diloco",
                   help="comma-separated: pytorch_ddp (DDP over gloo) and ringlab's "
                        "synchronisers (train --list_syncs)")
    p.add_argument("--option", action="append", default=[], metavar="SYNC:NAME=VALUE",
                   help="an option of one synchroniser (repeatable)")
    p.add_argument("--target", type=float, help="the loss (or, with --target_metric, the "
                   "metric) whose first reaching the report times")
    p.add_argument("--target_metric", action="store_true",
                   help="--target is the logged metric's, not the loss's")
    p.add_argument("--higher_is_better", action="store_true",
                   help="the target is reached from below (an accuracy)")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds a run may take, in (0, 86400]")
    p.add_argument("--on_hosts", help="path to the //comm/job:on_hosts binary")
    p.add_argument("--torch_module", help="the directory of ringlab_torch.so")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the script and its arguments")
    return p


def registered_syncs(torch_module):
    """{name: option names} of ringlab_torch.syncs(), in this process (nothing started)."""
    if torch_module not in sys.path:
        sys.path.insert(0, torch_module)
    try:
        import ringlab_torch
    except ImportError as e:
        fail(f"ringlab_torch does not import from --torch_module={torch_module}: {e}")
    return {s["name"]: {o["name"] for o in s["options"]} for s in ringlab_torch.syncs()}


def parse_options(texts, syncs, registered):
    """{sync: {name: value}} from --option SYNC:NAME=VALUE, each checked."""
    options = {sync: {} for sync in syncs}
    for text in texts:
        match = re.fullmatch(r"([a-z0-9_]+):([a-z0-9_]+)=(.+)", text)
        if not match:
            fail(f"--option={text}: SYNC:NAME=VALUE expected")
        sync, name, value = match.groups()
        if sync not in syncs:
            fail(f"--option={text}: {sync} is not one of --syncs ({', '.join(syncs)})")
        if name not in registered.get(sync, ()):
            known = ", ".join(sorted(registered.get(sync, ()))) or "none"
            fail(f"--option={text}: {sync} has no option {name} (its options: {known})")
        options[sync][name] = value
    return options


def parse_args(argv=None):
    args = parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        fail("no command: compare.py [flags] -- python3 my_train.py ARGS")
    cli_errors.int_in_range("--hosts", args.hosts, 2, 8)
    cli_errors.positive_finite("--timeout", args.timeout, 86400)
    if args.link != "unlimited" and not re.fullmatch(r"[0-9]+(\.[0-9]+)?[kmgt]?bit", args.link):
        fail(f"--link={args.link} is not unlimited or a rate such as 1gbit or 100mbit")
    if (args.target_metric or args.higher_is_better) and args.target is None:
        fail("--target_metric and --higher_is_better describe --target, which is missing")
    args.out_dir = cli_errors.output_dir("--out_dir", args.out_dir)
    for flag, path in (("--on_hosts", args.on_hosts),):
        if path is None:
            fail(f"{flag} is needed: the path to its binary")
        cli_errors.executable(flag, path)
    args.torch_module = cli_errors.torch_module("--torch_module", args.torch_module)
    program = shutil.which(command[0])
    if program is None:
        fail(f"{command[0]}: no such program")
    args.command = [os.path.abspath(program)] + command[1:]
    args.syncs = [s for s in args.syncs.split(",") if s]
    if not args.syncs or len(set(args.syncs)) != len(args.syncs):
        fail(f"--syncs={','.join(args.syncs)}: one or more names, each once")
    registered = registered_syncs(args.torch_module)
    unknown = [s for s in args.syncs if s != ringlab_compare.PYTORCH_DDP and s not in registered]
    if unknown:
        fail(f"--syncs: no synchroniser {unknown[0]} (known: {ringlab_compare.PYTORCH_DDP}, "
             f"{', '.join(sorted(registered))})")
    args.options = parse_options(args.option, args.syncs, registered)
    return args


def run_argv(args, sync, run_dir):
    options = ",".join(f"{k}={v}" for k, v in args.options[sync].items())
    path = os.pathsep.join([HERE, args.torch_module] + ([os.environ["PYTHONPATH"]]
                                                       if os.environ.get("PYTHONPATH") else []))
    env = [f"PYTHONPATH={path}", f"{ringlab_compare.SYNC_VARIABLE}={sync}",
           f"{ringlab_compare.OPTIONS_VARIABLE}={options}",
           f"{ringlab_compare.OUT_VARIABLE}={run_dir}",
           f"{ringlab_compare.TIMEOUT_VARIABLE}={min(args.timeout, 300):g}",
           "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"]
    return ([args.on_hosts, f"--nprocs={args.hosts}", f"--hosts={args.hosts}",
             f"--link={args.link}", "--", "/usr/bin/env"] + env + args.command)


def last_lines(log_path):
    try:
        with open(log_path, errors="replace") as f:
            lines = [line.strip() for line in f.read().splitlines()[1:] if line.strip()]
    except OSError:
        return "no output"
    return " | ".join(lines[-LAST_LINES:]) or "no output"


def run_one(args, sync, index, total):
    run_dir = os.path.join(args.out_dir, "runs", sync)
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    argv = run_argv(args, sync, run_dir)
    log = os.path.join(run_dir, "log.txt")
    status, wall = run_driver.execute(argv, args.timeout, log)
    run = dict(sync=sync, options=args.options[sync], link=args.link, hosts=args.hosts,
               status=status, wall_s=wall, order=index,
               command=" ".join(shlex.quote(a) for a in argv))
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump(run, f, indent=2)
    script = os.path.basename(args.command[1] if len(args.command) > 1 else args.command[0])
    if status != "ok":
        fail(f"{script} under {sync}: {status.split(':', 1)[-1].strip()}; its last lines: "
             f"{last_lines(log)}")
    if not compare_report.logged_steps(run_dir):
        fail(f"{script} under {sync} never called ringlab_compare.log(): nothing to compare "
             f"(docs/compare.md shows the three lines)")
    print(compare_report.progress_line(index, total, run, run_dir), flush=True)


def main(argv=None):
    signal.signal(signal.SIGTERM, run_driver.stop_on_signal)
    args = parse_args(argv)
    why = run_driver.probe_hosts(args.on_hosts, args.link)
    if why:
        fail(f"--link={args.link}: no emulated hosts with this link ({why})")
    os.makedirs(os.path.join(args.out_dir, "runs"), exist_ok=True)
    for index, sync in enumerate(args.syncs, start=1):
        run_one(args, sync, index, len(args.syncs))
    compare_report.build(args.out_dir, args)
    print(f"wrote {args.out_dir}/report.md, results.csv and the plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
