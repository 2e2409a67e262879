#!/usr/bin/python3
"""The seed example's PyTorch DDP run, reproduced with every synchroniser and communicator.

Runs //train:train on the PyTorch reference's own data and initial parameters (exported by
pytorch_reference.py; rerun here when Debian's torch is installed, else the committed copy is
used) and prints one table: synchroniser, communicator, device, each rank's loss at the first
and last step, max |Δ parameter| against PyTorch, whether ranks end bitwise equal, time per
step and bytes sent per step. Writes report.md, results.csv and loss_curves.png to --out_dir.
Bad input is one error line and exit status 2, before any run starts.

    bazel run //experiments:seed_ddp [-- --out_dir=DIR]
"""

import csv
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))  # experiments/: the kit's error line

import cli_errors  # noqa: E402
import run_driver  # noqa: E402
from cli_errors import fail  # noqa: E402

TENSORS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
# The time/step column comes from a separate run of each configuration, TIMING_STEPS steps long,
# whose first TIMING_WARMUP steps (start-up, the ranks falling into step) are left out: the
# numerical run's 10 steps are too few (a median of 18 samples, dominated by who arrives first).
TIMING_STEPS = 1000
TIMING_WARMUP = 100


def read_losses(path):
    """{rank: [(step, loss, step_ms, bytes_sent)]} from a losses.csv."""
    runs = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            runs.setdefault(int(row["rank"]), []).append(
                (int(row["step"]), float(row["loss"]), float(row.get("step_ms") or "nan"),
                 float(row.get("bytes_sent") or "nan")))
    return {r: sorted(v) for r, v in runs.items()}


def read_params(directory):
    return {name: np.load(os.path.join(directory, name + ".npy")) for name in TENSORS}


def max_abs_diff(a, b):
    return max(float(np.max(np.abs(a[n].astype(np.float64) - b[n].astype(np.float64))))
               for n in TENSORS)


def gpu_available():
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                              timeout=60).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def run_reference(script, out, timeout):
    print("running the PyTorch reference (Debian's python3-torch, gloo, 2 ranks) ...", flush=True)
    result = subprocess.run(["/usr/bin/python3", script, "--out", out,
                             "--timing_steps", str(TIMING_STEPS)],
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        print(result.stdout + result.stderr, file=sys.stderr)
        fail(f"the PyTorch reference failed (exit {result.returncode})")


def run_ringlab(train, reference, run_dir, sync, comm, device, extra, timeout):
    args = [train, f"--sync={sync}", f"--comm={comm}", f"--device={device}",
            f"--data_dir={reference}", f"--init_dir={reference}/init", f"--out_dir={run_dir}",
            "--quiet", f"--timeout={timeout}"] + extra
    if comm == "mpi":
        args = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"] + args
    else:
        args.append("--nprocs=2")
    env = dict(os.environ)
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    start = time.monotonic()
    # Its own session, so that a run past the deadline is killed with all its ranks.
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=4 * timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        stdout, stderr = process.communicate()
        stderr += f"\nerror: no result after {4 * timeout:.0f} s: killed\n"
    wall = time.monotonic() - start
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr), wall


def summarise(run_dir, ref_final, ref_losses):
    losses = read_losses(os.path.join(run_dir, "losses.csv"))
    final = read_params(os.path.join(run_dir, "final"))
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    bytes_sent = [s[3] for r in losses.values() for s in r]
    rel = 0.0
    for rank, rows in losses.items():
        for (_, loss, _, _), (_, ref, _, _) in zip(rows, ref_losses.get(rank, [])):
            rel = max(rel, abs(loss - ref) / abs(ref))
    return {
        "losses": losses,
        "first_last": {r: (rows[0][1], rows[-1][1]) for r, rows in losses.items()},
        "max_dparam": max_abs_diff(final, ref_final),
        "max_rel_dloss": rel,
        "ranks_equal": summary["ranks_bitwise_equal"],
        "bytes": statistics.mean(bytes_sent) if bytes_sent else float("nan"),
    }


def timing_text(run_dir):
    """'median (IQR q1–q3)' of the step times (ms) over both ranks' steps after TIMING_WARMUP
    of a timing run: the spread says how far the machine's load moved the median."""
    losses = read_losses(os.path.join(run_dir, "losses.csv"))
    step_ms = [s[2] for rows in losses.values() for s in rows[TIMING_WARMUP:]]
    if len(step_ms) < 2:
        return "n/a (timing run too short)"
    q1, median, q3 = statistics.quantiles(step_ms, n=4)
    return f"{median:.3f} (IQR {q1:.3f}–{q3:.3f})"


def fmt_losses(first_last):
    return " / ".join(f"{first_last[r][0]:.7f}→{first_last[r][1]:.7f}" for r in sorted(first_last))


def plot(rows, ref_losses, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for rank, ax in enumerate(axes):
        ref = ref_losses.get(rank, [])
        ax.plot([s[0] for s in ref], [s[1] for s in ref], "k--", lw=3, alpha=0.4,
                label="PyTorch DDP (gloo)")
        for row in rows:
            if row.get("stats"):
                series = row["stats"]["losses"].get(rank, [])
                ax.plot([s[0] for s in series], [s[1] for s in series], marker=".",
                        label=f"{row['sync']} / {row['comm']}")
        ax.set_title(f"rank {rank}: loss of its own batch per step")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("cross-entropy loss")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return None


REFERENCE_FILES = (["losses.csv", "meta.json"] +
                   [f"{kind}/{name}.npy" for kind in ("init", "final") for name in TENSORS] +
                   [f"{kind}_rank{rank}.npy" for kind in ("data", "targets") for rank in (0, 1)])
MAX_TIMEOUT_S = 86400


def on_debian_python():
    """Whether this is /usr/bin/python3, whose torch the reference runs with."""
    try:
        return os.path.samefile(sys.executable, "/usr/bin/python3")
    except OSError:
        return False


def parse_args(argv=None):
    """The flags, every one checked here, before anything runs: one error line and exit
    status 2 for any that cannot be used."""
    parser = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    default_out = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()),
                               "out", "seed_ddp")
    parser.add_argument("--out_dir", default=default_out)
    parser.add_argument("--train", required=True, help="path to the //train:train binary")
    parser.add_argument("--reference",
                        default=os.path.join(HERE, "..", "..", "testdata", "seed_ddp",
                                             "reference"),
                        help="the committed PyTorch export")
    parser.add_argument("--rerun_reference", choices=["auto", "yes", "no"], default="auto")
    parser.add_argument("--timeout", type=float, default=60,
                        help=f"seconds any wait between ranks may take, in (0, {MAX_TIMEOUT_S}]")
    args = parser.parse_args(argv)
    cli_errors.positive_finite("--timeout", args.timeout, MAX_TIMEOUT_S)
    args.out_dir = cli_errors.output_dir("--out_dir", args.out_dir)
    cli_errors.executable("--train", args.train)
    args.reference = cli_errors.input_dir("--reference", args.reference, REFERENCE_FILES)
    # Under Debian's python3 whether torch is there is known without starting one.
    if (args.rerun_reference == "yes" and on_debian_python()
            and importlib.util.find_spec("torch") is None):
        fail("--rerun_reference=yes: PyTorch is not importable by /usr/bin/python3 "
             "(apt install python3-torch)")
    return args


def load_reference(args, out):
    """The reference the runs are compared with, rerun now with torch where --rerun_reference
    asks for it: a dict of its losses, final parameters, meta.json and how it was made."""
    reference = args.reference
    note = "committed export (testdata/seed_ddp/reference)"
    fresh_reference = False
    has_torch = args.rerun_reference != "no" and run_driver.probe_torch()[0] is not None
    if args.rerun_reference == "yes" and not has_torch:
        fail("PyTorch is not importable by /usr/bin/python3 (apt install python3-torch)")
    if has_torch:
        fresh = os.path.join(out, "pytorch")
        run_reference(os.path.join(HERE, "pytorch_reference.py"), fresh, 300)
        same = all(
            np.array_equal(np.load(os.path.join(fresh, "final", n + ".npy")),
                           np.load(os.path.join(reference, "final", n + ".npy")))
            for n in TENSORS)
        note = ("rerun now with torch (" + ("identical to" if same else "DIFFERS from") +
                " the committed export)")
        reference = fresh
        fresh_reference = True
    losses = {r: [(s, l, float("nan"), float("nan")) for s, l, _, _ in rows]
              for r, rows in read_losses(os.path.join(reference, "losses.csv")).items()}
    with open(os.path.join(reference, "meta.json")) as f:
        meta = json.load(f)
    timing = meta.get("timing") or {}
    ref_ms = (statistics.median([t["median_ms"] for t in timing.values()]) if timing
              else float("nan"))
    if not timing:
        ref_time = "n/a"
    elif fresh_reference:
        ref_time = f"{ref_ms:.3f}"
    else:  # measured wherever the export was made, not in this run
        ref_time = f"{ref_ms:.3f} (committed export, other machine: not this run)"
    return {"dir": reference, "note": note, "fresh": fresh_reference, "losses": losses,
            "final": read_params(os.path.join(reference, "final")), "meta": meta,
            "time": ref_time}


def configurations():
    """(sync, its extra flags, communicator, device, why skipped or None) of every run."""
    have_mpi = shutil.which("mpirun") is not None
    have_gpu = gpu_available()
    syncs = [("allreduce", []), ("param_avg", ["--avg_period=1"]),
             ("param_avg", ["--avg_period=4"]), ("none", [])]
    comms = [("shm_ring", "cpu", None), ("gloo", "cpu", None),
             ("mpi", "cpu", None if have_mpi else "skipped: no mpirun"),
             ("nccl", "cuda", None if have_gpu else "skipped: no GPU"),
             ("ipc_ring", "cuda", None if have_gpu else "skipped: no GPU")]
    return [(sync, extra, comm, device, skip)
            for sync, extra in syncs for comm, device, skip in comms]


def run_configuration(args, out, ref, sync, extra, comm, device):
    """One configuration's row: its numerical run against the reference, then its timing
    run. A failed run's output goes to <out>/<name>.log."""
    label = sync + ("" if not extra else f" (K={extra[0].split('=')[1]})")
    row = {"sync": label, "comm": comm, "device": device, "status": "ok"}
    name = f"{sync}{extra[0].split('=')[1] if extra else ''}_{comm}_{device}"
    run_dir = os.path.join(out, "runs", name)
    result, wall = run_ringlab(args.train, ref["dir"], run_dir, sync, comm, device, extra,
                               args.timeout)
    if result.returncode != 0:
        lines = (result.stderr + result.stdout).splitlines()
        errors = [l for l in lines if "error:" in l]
        first = errors[0] if errors else f"exit status {result.returncode}"
        row["status"] = "failed: " + run_driver.reason(first, 80)
        with open(os.path.join(out, f"{name}.log"), "w") as log:
            log.write(result.stdout + result.stderr)
        print(f"{label:16} {comm:9} {row['status']}", flush=True)
        return row
    row["stats"] = summarise(run_dir, ref["final"], ref["losses"])
    # The same configuration again, long enough for a stable median step time.
    timing, timing_wall = run_ringlab(
        args.train, ref["dir"], run_dir + "_timing", sync, comm, device,
        extra + [f"--epochs={TIMING_STEPS}"], args.timeout)
    if timing.returncode == 0:
        row["stats"]["step_ms"] = timing_text(run_dir + "_timing")
    else:
        row["stats"]["step_ms"] = f"n/a (timing run: exit {timing.returncode})"
        with open(os.path.join(out, f"{name}_timing.log"), "w") as log:
            log.write(timing.stdout + timing.stderr)
    print(f"{label:16} {comm:9} ok ({wall:.1f} s; timing run {timing_wall:.1f} s)", flush=True)
    return row


def run_all(args, out, ref):
    rows = []
    for sync, extra, comm, device, skip in configurations():
        if skip:
            label = sync + ("" if not extra else f" (K={extra[0].split('=')[1]})")
            rows.append({"sync": label, "comm": comm, "device": device, "status": skip})
            print(f"{label:16} {comm:9} {skip}", flush=True)
            continue
        rows.append(run_configuration(args, out, ref, sync, extra, comm, device))
    return rows


def results_table(rows, ref):
    """(header, table rows): the reference's row first, then one per configuration."""
    header = ["synchroniser", "communicator", "device", "loss rank0 first→last",
              "loss rank1 first→last", "max abs Δparam vs PyTorch", "max rel Δloss",
              "ranks bitwise equal", f"time/step (ms, median of {TIMING_STEPS}-step run)",
              "bytes sent/step/rank"]
    ref_first_last = {r: (rows_[0][1], rows_[-1][1]) for r, rows_ in ref["losses"].items()}
    table = [["PyTorch DDP (reference: " + ("rerun now" if ref["fresh"] else
                                             "committed export") + ")", "gloo", "cpu",
              f"{ref_first_last[0][0]:.7f}→{ref_first_last[0][1]:.7f}",
              f"{ref_first_last[1][0]:.7f}→{ref_first_last[1][1]:.7f}", "0", "0",
              "yes" if ref["meta"].get("final_params_equal_across_ranks") else "no",
              ref["time"], "n/a"]]
    for row in rows:
        s = row.get("stats")
        if not s:
            table.append([row["sync"], row["comm"], row["device"], row["status"], "", "", "", "",
                          "", ""])
            continue
        fl = s["first_last"]
        table.append([row["sync"], row["comm"], row["device"],
                      f"{fl[0][0]:.7f}→{fl[0][1]:.7f}", f"{fl[1][0]:.7f}→{fl[1][1]:.7f}",
                      f"{s['max_dparam']:.2e}", f"{s['max_rel_dloss']:.2e}",
                      "yes" if s["ranks_equal"] else "no", s["step_ms"],
                      f"{s['bytes']:.0f}"])
    return header, table


def print_table(header, table):
    widths = [max(len(str(r[i])) for r in [header] + table) for i in range(len(header))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(header, widths)),
             "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in table]
    print()
    print("\n".join(lines))


def report_lines(header, table, ref, plot_note):
    """report.md's lines."""
    meta = ref["meta"]
    md = ["# seed_ddp: the seed example's DDP run, reproduced", "",
          "Net 10→5→2, SGD lr 0.01, CrossEntropyLoss, 10 epochs, 100 samples per rank (each rank "
          "its own data, as the seed example), DistributedSampler defaults without set_epoch, "
          "batch 64 (one full-batch step of 50 samples per epoch), 2 ranks. ringlab trains from "
          "the PyTorch run's own data and initial parameters.", "",
          f"PyTorch reference: {ref['note']}; torch {meta.get('torch_version')}.", "",
          "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(str(c) for c in r) + " |" for r in table]
    md += ["", "- max abs Δparam: largest absolute difference of rank 0's final parameters from "
           "PyTorch's final parameters (float64 arithmetic).",
           f"- time/step: not from the 10-step run above (too few steps: who arrives first "
           f"dominates) but from a second run of each configuration, {TIMING_STEPS} steps long: "
           f"the median over both ranks' steps after the first {TIMING_WARMUP}, with the "
           f"interquartile range (a wide one: the machine's load moved it). PyTorch's is the "
           f"median of its own {TIMING_STEPS}-step timing run (pytorch_reference.py "
           f"--timing_steps, meta.json) when the reference was rerun now; where torch does not "
           f"import it is the committed export's figure, measured on another machine, and says "
           f"so. A noisy shared 2-core machine: compare figures from one run.",
           "- param_avg (K=1) equals allreduce up to rounding for plain SGD; K=4 and none diverge "
           "from DDP by design.",
           "", "Defects of the seed example's program fixed in pytorch_reference.py:", ""]
    md += [f"- {d}" for d in meta.get("defects_fixed", [])]
    if plot_note:
        md += ["", plot_note]
    else:
        md += ["", "![loss curves](loss_curves.png)"]
    return md


def write_outputs(out, header, table, rows, ref):
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(table)
    plot_note = plot(rows, ref["losses"], os.path.join(out, "loss_curves.png"))
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(report_lines(header, table, ref, plot_note)) + "\n")
    print(f"\nwrote {out}/report.md, results.csv" + ("" if plot_note else ", loss_curves.png"))


def main(argv=None):
    args = parse_args(argv)
    out = args.out_dir
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        fail(f"--out_dir={out} cannot be made: {e.strerror}")
    ref = load_reference(args, out)
    rows = run_all(args, out, ref)
    header, table = results_table(rows, ref)
    print_table(header, table)
    write_outputs(out, header, table, rows, ref)
    failed = [r for r in rows if r["status"].startswith("failed")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
