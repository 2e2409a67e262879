#!/usr/bin/python3
"""A cost model of gradient synchronisation that reaches past this machine.

From allreduce_bench's tables across an emulated link (`--hosts=H --link=RATE`), it fits each
backend's latency and bandwidth terms (alpha-beta, as Hockney's model and NCCL's tuner use):
an allreduce of S bytes over a ring of N ranks takes

    T(S) = 2(N-1) * alpha + 2(N-1)/N * S / B_eff

where every one of the ring's 2(N-1) steps pays alpha, and each host's link carries 2(N-1)/N
of the buffer at B_eff, the rate the backend reached on that link (the link's nominal rate
times an efficiency, fitted). With the trainer's compute per step it predicts the step time
of each synchroniser for N ranks on H hosts:

    flat ring        T_flat = 2(N-1) alpha + 2(N-1)/N S / B_eff
    hierarchical     T_hier = T_intra + 2(H-1) alpha + 2(H-1)/H S / B_eff,
                     T_intra = 3(G-1)/G S / B_intra (an allreduce and an allgather among the G
                     ranks of a host over shared memory, as ringlab's hier does)
    allreduce        step = compute + max(0, T - overlap * compute): DDP hides communication
                     behind backward, at most the backward share of compute
    param_avg K      step = compute + T / K (the average is not overlapped; post_local_sgd
                     after its warm-up, and DiLoCo with H for K, likewise)
    none             step = compute

Assumptions, stated once: alpha is software latency and does not change with the link; the
efficiency B_eff / B measured here holds on faster links (a real NIC may do better or worse:
it is CPU-bound here); the link is each host's bottleneck (a non-blocking switch); ranks are
placed contiguously, G per host; compute per step does not change with N (weak scaling, the
same per-rank batch); backward is 2/3 of compute (two GEMMs per layer against forward's one).

    /usr/bin/python3 experiments/cost_model/cost_model.py \\
        --bench=bench/results/links/2026-12-01-allreduce-2hosts-x2-1gbit.txt [--plot=out.png]

It prints the fit, the prediction beside every measured row (the fit's own check), and the
extrapolation to N = 8 ... 1024 ranks at 8 per host on 25, 100 and 400 Gbit/s links. With
`--runs=DIR,...` (the trainer's --out_dir of runs made with the bench's --nprocs, --hosts and
--link) it also predicts each run's mean step from its own compute (step minus exposed
communication, losses.csv), its model's gradient bytes and its backend's fit, and prints it
beside the measured step.
"""

import csv
import importlib.util
import json
import math
import os
import re
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))  # experiments/: the kit's error line

import cli_errors  # noqa: E402

# Fashion-MNIST MLP 784,1024,1024,10: its gradients, float32.
DEFAULT_BUFFER_BYTES = 1863690 * 4
BACKWARD_SHARE = 2 / 3
EXTRAPOLATE_RANKS = (8, 16, 32, 64, 128, 256, 512, 1024)
EXTRAPOLATE_LINKS_GBIT = (25, 100, 400)
RANKS_PER_HOST = 8
MAX_HOSTS, MAX_BUFFER_BYTES = 1 << 16, 1 << 40
# What --plot may end in: the formats matplotlib's Agg writes ('' for its default, PNG).
PLOT_SUFFIXES = ("", "png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff",
                 "webp", "pgf", "raw", "rgba")


RUN_WARMUP_STEPS = 20  # a run's first steps (allocation, caches), left out of its mean
# What each synchroniser's step sends (the model's size): fp16 and bf16 two bytes a gradient.
SIZE_DIVISOR = {"allreduce": 1, "fp16": 2, "bf16": 2, "param_avg": 1, "post_local_sgd": 1,
                "diloco": 1, "none": 1}


class ModelError(Exception):
    """Input the model cannot use: one error line, exit status 2."""


def parse_bench(text):
    """{row: [(bytes, seconds)]} and (ranks, link bits/s) from allreduce_bench's output. An
    unshaped link's rate is what one TCP stream carried through it (the bench's floor line)."""
    rows, current = {}, None
    ranks = link_bits = None
    for raw in text.splitlines():
        line = re.sub(r"^\[rank \d+\] ", "", raw).strip()
        if m := re.match(r"# nccl-tests style: allreduce, \w+, sum, (\d+) ranks", line):
            ranks = int(m.group(1))
        elif m := re.search(r"through links of ([0-9.]+) Gbit/s", line):
            link_bits = float(m.group(1)) * 1e9
        elif m := re.search(r"\(([0-9.]+) Gbit/s\) through links of unlimited rate", line):
            link_bits = float(m.group(1)) * 1e9
        elif m := re.match(r"# (allreduce(?:_registered)?/\S+)$", line):
            current = m.group(1)
            rows[current] = []
        elif current and re.match(r"^\d+\s+\d+\s+[0-9.]+", line):
            fields = line.split()
            rows[current].append((int(fields[0]), float(fields[2]) * 1e-6))
        elif not line:
            current = None
    if not rows or ranks is None or link_bits is None:
        raise ModelError("not allreduce_bench output across a link (no tables, no rank "
                         "count or no 'link floor' line)")
    return rows, ranks, link_bits


def fit(points, ranks, hosts, hierarchical):
    """(alpha seconds, B_eff bytes/s) of T(S) = steps * alpha + share * S / B_eff: alpha from
    the small sizes (up to 64 KiB, the median: their times scatter), B_eff by least squares
    on the large ones (1 MiB and up), each corrected for the other's term, twice."""
    steps, share = ((2 * (hosts - 1), 2 * (hosts - 1) / hosts) if hierarchical
                    else (2 * (ranks - 1), 2 * (ranks - 1) / ranks))
    small = [(s, t) for s, t in points if s <= 64 << 10]
    large = [(s, t) for s, t in points if s >= 1 << 20]
    if not small or not large:
        raise ModelError("a fit needs sizes up to 64 KiB and from 1 MiB (the bench's "
                         "--min_bytes and --max_bytes)")
    alpha, inv_b = 0.0, 0.0
    for _ in range(2):
        alpha = max(0.0, float(np.median([(t - share * s * inv_b) / steps for s, t in small])))
        x = np.array([share * s for s, _ in large])
        y = np.array([t - steps * alpha for _, t in large])
        inv_b = max(float(x @ y / (x @ x)), 1e-15)
    return alpha, 1 / inv_b


def allreduce_s(size, ranks, hosts, alpha, b_eff, hierarchical, b_intra):
    g = ranks // hosts
    if not hierarchical:
        return 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * size / b_eff
    intra = 3 * (g - 1) / g * size / b_intra if g > 1 else 0.0
    return intra + 2 * (hosts - 1) * alpha + 2 * (hosts - 1) / hosts * size / b_eff


# The synchronisers step_ms has a formula for (none: compute alone). The compressors, SPARTA,
# SparseLoCo, DeMo and Streaming DiLoCo send other collectives and sizes: not modelled yet.
MODELLED_SYNCS = ("allreduce", "fp16", "bf16", "param_avg", "post_local_sgd", "diloco", "none",
                  "barrier")


def step_ms(sync, compute_ms, comm_s, k=16, hidden_share=BACKWARD_SHARE):
    """A step of `sync`: compute, plus the allreduce's time beyond what hides behind
    hidden_share of compute (backward, where communication has resources of its own: a NIC's
    DMA, a core, a stream; 0 where it shares the compute's core), or 1/K of it."""
    comm_ms = comm_s * 1e3
    if sync in ("allreduce", "fp16", "bf16"):  # comm_s of the bytes they send
        return compute_ms + max(0.0, comm_ms - hidden_share * compute_ms)
    if sync in ("param_avg", "post_local_sgd", "diloco"):  # K or H steps per allreduce
        return compute_ms + comm_ms / k
    return compute_ms


def fits_of(rows, ranks, hosts, link_bits):
    """{row: (alpha, B_eff, efficiency, hierarchical)} for every table of the bench."""
    out = {}
    for row, points in rows.items():
        hierarchical = "/hier" in row
        alpha, b_eff = fit(points, ranks, hosts, hierarchical)
        out[row] = (alpha, b_eff, b_eff * 8 / link_bits, hierarchical)
    return out


def report_fit(fits, rows, ranks, hosts, b_intra, link_bits):
    lines = [f"# fit: {ranks} ranks on {hosts} hosts, links of {link_bits / 1e9:g} Gbit/s; "
             f"T(S) = steps * alpha + share * S / B_eff (hier: + 3(G-1)/G S / B_intra, "
             f"B_intra {b_intra / 1e9:g} GB/s)",
             f"{'row':34} {'alpha(us)':>10} {'B_eff(GB/s)':>12} {'efficiency':>11}"]
    for row, (alpha, b_eff, eff, _) in fits.items():
        lines.append(f"{row:34} {alpha * 1e6:10.1f} {b_eff / 1e9:12.4f} {eff:11.2f}")
    lines += ["", "# prediction beside measurement (the bench's own rows)",
              f"{'row':34} {'size(B)':>10} {'measured(us)':>13} {'predicted(us)':>14} "
              f"{'ratio':>6}"]
    for row, points in rows.items():
        alpha, b_eff, _, hier = fits[row]
        for size, seconds in points:
            predicted = allreduce_s(size, ranks, hosts, alpha, b_eff, hier, b_intra)
            lines.append(f"{row:34} {size:10d} {seconds * 1e6:13.1f} {predicted * 1e6:14.1f} "
                         f"{predicted / seconds:6.2f}")
    return lines


def extrapolate(fits, flat_row, hier_row, compute_ms, size, b_intra):
    """{(gbit, sync, algorithm): [step ms per N in EXTRAPOLATE_RANKS]} and the table's lines."""
    alpha_f, _, eff_f, _ = fits[flat_row]
    alpha_h, _, eff_h, _ = fits[hier_row] if hier_row else fits[flat_row]
    table, lines = {}, [
        "", f"# extrapolation: step time (ms) at {RANKS_PER_HOST} ranks per host, "
        f"compute {compute_ms:g} ms per step, {size / 1e6:.2f} MB of gradients",
        f"{'link':>6} {'sync':>12} {'algorithm':>10} " +
        " ".join(f"{n:>8}" for n in EXTRAPOLATE_RANKS)]
    for gbit in EXTRAPOLATE_LINKS_GBIT:
        for sync in ("allreduce", "param_avg"):
            for name, hier, alpha, eff in (("flat", False, alpha_f, eff_f),
                                           ("hier", True, alpha_h, eff_h)):
                steps = []
                for n in EXTRAPOLATE_RANKS:
                    t = allreduce_s(size, n, n // RANKS_PER_HOST, alpha, eff * gbit * 1e9 / 8,
                                    hier, b_intra)
                    steps.append(step_ms(sync, compute_ms, t))
                table[(gbit, sync, name)] = steps
                lines.append(f"{gbit:>4}G {sync:>12} {name:>10} " +
                             " ".join(f"{s:8.2f}" for s in steps))
    return table, lines


def plot(table, path, compute_ms):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(EXTRAPOLATE_LINKS_GBIT), figsize=(15, 4.4), sharey=True)
    for ax, gbit in zip(axes, EXTRAPOLATE_LINKS_GBIT):
        for (g, sync, name), steps in table.items():
            if g != gbit:
                continue
            ax.plot(EXTRAPOLATE_RANKS, steps, marker="o", ls="-" if name == "flat" else "--",
                    color="C0" if sync == "allreduce" else "C3", label=f"{sync}, {name}")
        ax.axhline(compute_ms, color="grey", ls=":", label="compute alone")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{gbit} Gbit/s links, {RANKS_PER_HOST} ranks per host (model)")
        ax.set_xlabel("ranks")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("predicted step (ms)")
    axes[-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def read_run(run_dir):
    """(config, mean step ms, mean compute ms) of rank 0's steps after the warm-up in a
    trainer's out_dir; compute is the step less its exposed communication (comm_ms)."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
        with open(os.path.join(run_dir, "losses.csv")) as f:
            rows = [r for r in csv.DictReader(f) if r.get("rank") == "0"]
        steps = [float(r["step_ms"]) for r in rows[RUN_WARMUP_STEPS:]]
        comms = [float(r["comm_ms"]) for r in rows[RUN_WARMUP_STEPS:]]
    except (OSError, ValueError, KeyError, TypeError, csv.Error) as e:
        raise ModelError(f"{run_dir}: not a finished trainer run ({e})") from None
    if not isinstance(config, dict):
        raise ModelError(f"{run_dir}: config.json is not the trainer's")
    if not steps:
        raise ModelError(f"{run_dir}: fewer than {RUN_WARMUP_STEPS + 1} steps of rank 0")
    step = statistics.fmean(steps)
    compute = step - statistics.fmean(comms)
    if not (step > 0 and compute > 0 and math.isfinite(step)):
        raise ModelError(f"{run_dir}: its steps ({step:g} ms) leave no compute ({compute:g} ms)")
    return config, step, compute


def gradient_bytes(model):
    """The float32 gradients of an MLP "784,1024,1024,10": every layer's weight and bias."""
    try:
        widths = [int(w) for w in str(model).split(",")]
    except ValueError:
        raise ModelError(f"--model={model} is not a list of widths") from None
    if len(widths) < 2 or min(widths) < 1:
        raise ModelError(f"--model={model} is not a list of widths")
    return 4 * sum(i * o + o for i, o in zip(widths, widths[1:]))


def predict_run(config, compute_ms, fits, ranks, hosts, b_intra):
    """The model's step (ms) for a run: its synchroniser's formula with its backend's fit.
    Each rank here has at most a core for backward and communication both: nothing hides
    (hidden_share 0), as in the Fashion-MNIST report."""
    sync, comm = config.get("sync"), config.get("comm")
    # The trainer's config.json keeps the synchroniser's options under sync_options (older
    # runs kept them beside the other settings).
    config = dict(config, **(config.get("sync_options") or {}))
    if sync not in SIZE_DIVISOR:
        raise ModelError(f"no model for --sync={sync}")
    # Its warm-up allreduces every step, its host subgroup adds an allreduce inside each host.
    if sync == "post_local_sgd" and (config.get("avg_warmup", 0) > RUN_WARMUP_STEPS or
                                     config.get("post_local_subgroup") == "host"):
        raise ModelError(f"no model for post_local_sgd with a warm-up beyond "
                         f"{RUN_WARMUP_STEPS} steps or --post_local_subgroup=host")
    if config.get("world_size") != ranks:
        raise ModelError(f"{config.get('world_size')} ranks, the bench's {ranks}")
    row = f"allreduce/{comm}"
    if row not in fits:
        raise ModelError(f"the bench has no {row} table")
    alpha, b_eff, _, hier = fits[row]
    size = gradient_bytes(config.get("model")) // SIZE_DIVISOR[sync]
    seconds = allreduce_s(size, ranks, hosts, alpha, b_eff, hier, b_intra)
    k = config.get("inner_steps") if sync == "diloco" else config.get("avg_period", 1)
    if not isinstance(k, int) or k < 1:
        raise ModelError(f"config.json has no period for --sync={sync}")
    return step_ms(sync, compute_ms, seconds, k, hidden_share=0.0)


def report_runs(run_dirs, fits, ranks, hosts, b_intra):
    lines = ["", f"# training runs: mean step of rank 0 after {RUN_WARMUP_STEPS} steps beside "
             "the model's (compute from the run, communication from the fit, nothing hidden)",
             f"{'run':40} {'sync':>10} {'comm':>6} {'compute(ms)':>12} {'measured(ms)':>13} "
             f"{'predicted(ms)':>14} {'measured/predicted':>19}"]
    for run_dir in run_dirs:
        config, step, compute = read_run(run_dir)
        try:
            predicted = predict_run(config, compute, fits, ranks, hosts, b_intra)
        except ModelError as e:
            raise ModelError(f"{run_dir}: {e}") from None
        lines.append(f"{os.path.basename(os.path.normpath(run_dir)):40} {config['sync']:>10} "
                     f"{config['comm']:>6} {compute:12.1f} {step:13.1f} {predicted:14.1f} "
                     f"{step / predicted:19.2f}")
    return lines


def parse_args(argv=None):
    """The flags, every one checked here, before anything is read or written: one error line
    and exit status 2 for any that cannot be used."""
    parser = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bench", required=True, help="allreduce_bench output across a link")
    parser.add_argument("--hosts", type=int, default=2,
                        help=f"the bench's hosts, in [2, {MAX_HOSTS}]")
    parser.add_argument("--compute_ms", type=float, default=28.8,
                        help="compute per step (default: the Fashion-MNIST MLP's 'none' run at "
                             "2 ranks on this 2-core machine, 28.8 ms)")
    parser.add_argument("--buffer_bytes", type=int, default=DEFAULT_BUFFER_BYTES)
    parser.add_argument("--intra_gbs", type=float, default=7.7,
                        help="shared-memory bus bandwidth inside a host, GB/s (shm_ring at 64 "
                             "MiB, bench/results/cpu)")
    parser.add_argument("--alpha_us", type=float,
                        help="the latency per ring step to extrapolate with, instead of the "
                             "fitted one (on a machine whose ranks share cores the fit "
                             "measures the scheduler more than the network)")
    parser.add_argument("--plot", help="write the extrapolation's PNG here")
    parser.add_argument("--runs", default="",
                        help="comma-separated trainer out_dirs run on the bench's ranks, hosts "
                             "and link: each one's step predicted beside its measured one")
    args = parser.parse_args(argv)
    cli_errors.int_in_range("--hosts", args.hosts, 2, MAX_HOSTS)
    cli_errors.positive_finite("--compute_ms", args.compute_ms)
    cli_errors.int_in_range("--buffer_bytes", args.buffer_bytes, 1, MAX_BUFFER_BYTES)
    cli_errors.positive_finite("--intra_gbs", args.intra_gbs)
    if args.alpha_us is not None:
        cli_errors.non_negative_finite("--alpha_us", args.alpha_us)
    cli_errors.input_file("--bench", args.bench)
    args.runs = [r for r in args.runs.split(",") if r]
    for run in args.runs:
        if not os.path.isdir(run):
            cli_errors.fail(f"{run}: no such directory (--runs)")
    if args.plot is not None:
        cli_errors.output_file("--plot", args.plot, PLOT_SUFFIXES)
        if importlib.util.find_spec("matplotlib") is None:
            cli_errors.fail(f"--plot: matplotlib is not installed for {sys.executable}")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        try:
            with open(args.bench) as f:
                rows, ranks, link_bits = parse_bench(f.read())
        except OSError as e:
            raise ModelError(f"cannot read {args.bench}: {e.strerror}") from None
        if ranks % args.hosts:
            raise ModelError(f"{ranks} ranks do not spread over --hosts={args.hosts}")
        b_intra = args.intra_gbs * 1e9
        fits = fits_of(rows, ranks, args.hosts, link_bits)
        flat = next((r for r in fits if r.startswith("allreduce/") and "/hier" not in r), None)
        hier = next((r for r in fits if r == "allreduce/hier"), None)
        if flat is None:
            raise ModelError("the bench has no flat allreduce row to fit")
        lines = report_fit(fits, rows, ranks, args.hosts, b_intra, link_bits)
        if args.runs:
            lines += report_runs(args.runs, fits, ranks, args.hosts, b_intra)
        if args.alpha_us is not None:
            fits = {row: (args.alpha_us * 1e-6,) + terms[1:] for row, terms in fits.items()}
            lines += ["", f"# extrapolating with alpha = {args.alpha_us:g} us per ring step "
                      "(--alpha_us), the fitted B_eff"]
        table, more = extrapolate(fits, flat, hier, args.compute_ms, args.buffer_bytes,
                                  b_intra)
    except ModelError as e:
        cli_errors.fail(e)
    print("\n".join(lines + more))
    if args.plot:
        plot(table, args.plot, args.compute_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
