"""compare's report: per synchroniser, the script's steps, seconds, loss and metric at the end,
the time to --target, the bytes its rank sent per step; the fastest to the target; plots of loss
and metric against wall-clock and of loss against bytes sent.

The loss a script logs is one batch's, and noisy: the report smooths it with a running mean over
SMOOTH logged steps before it reads the final loss or the time to a loss target. A metric (an
evaluation the script logs now and then) is read as logged.
"""

import csv
import json
import math
import os
import statistics

import run_driver  # experiments/run_driver.py

SMOOTH = 20  # logged steps in the running mean of the loss


def logged_steps(run_dir):
    """Rank 0's logged rows of a run, as dicts of floats ([] where it logged nothing)."""
    try:
        with open(os.path.join(run_dir, "log_rank0.csv")) as f:
            return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    except (OSError, ValueError):
        return []


def smoothed(values):
    out, window = [], []
    for v in values:
        window = (window + [v])[-SMOOTH:]
        out.append(statistics.fmean(window))
    return out


def summarise(run_dir, target=None, target_metric=False, higher_is_better=False):
    rows = logged_steps(run_dir)
    try:
        with open(os.path.join(run_dir, "model.json")) as f:
            model = json.load(f)
    except (OSError, ValueError):
        model = {}
    loss = smoothed([r["loss"] for r in rows])
    metrics = [(r["wall_s"], r["metric"]) for r in rows if not math.isnan(r["metric"])]
    sent = rows[-1]["bytes_sent"]
    if math.isnan(sent) and model.get("parameters"):  # PyTorch DDP: a ring over its gradients
        world = model.get("world_size", 2)
        sent, nominal = 4.0 * model["parameters"] * 2 * (world - 1) / world * len(rows), True
    else:
        nominal = False
    reached = None
    if target is not None:
        series = metrics if target_metric else [(r["wall_s"], v) for r, v in zip(rows, loss)]
        better = (lambda v: v >= target) if higher_is_better else (lambda v: v <= target)
        reached = next((wall for wall, v in series if better(v)), None)
    return dict(rows=rows, loss=loss, metrics=metrics, steps=len(rows),
                wall_s=rows[-1]["wall_s"], step_ms=1e3 * rows[-1]["wall_s"] / len(rows),
                final_loss=loss[-1], final_metric=metrics[-1][1] if metrics else None,
                bytes_per_step=sent / len(rows), nominal_bytes=nominal, target_s=reached)


def progress_line(index, total, run, run_dir):
    s = summarise(run_dir)
    metric = "" if s["final_metric"] is None else f", metric {s['final_metric']:.4g}"
    return (f"[{index}/{total}] {run['sync']} @ {run['link']}: loss {s['final_loss']:.4g}"
            f"{metric} after {s['steps']} steps, {s['step_ms']:.1f} ms per step "
            f"({run['wall_s']:.0f} s)")


def _label(run):
    options = ", ".join(f"{k}={v}" for k, v in run["options"].items())
    return run["sync"] + (f" ({options})" if options else "")


def table(runs, args):
    target = "—" if args.target is None else (
        f"to {'metric' if args.target_metric else 'loss'} {args.target:g}")
    lines = [f"| synchroniser | steps | seconds | ms per step | final loss (mean of {SMOOTH}) | "
             f"last metric | {target} | MB sent per step |", "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        s = run["stats"]
        metric = "—" if s["final_metric"] is None else f"{s['final_metric']:.4g}"
        reached = ("not reached" if s["target_s"] is None else f"{s['target_s']:.1f} s"
                   ) if args.target is not None else "—"
        sent = f"{s['bytes_per_step'] / 1e6:.3f}" + ("†" if s["nominal_bytes"] else "")
        lines.append(f"| {_label(run)} | {s['steps']} | {s['wall_s']:.1f} | {s['step_ms']:.1f} |"
                     f" {s['final_loss']:.4g} | {metric} | {reached} | {sent} |")
    return lines


def fastest(runs, args):
    if args.target is None:
        return "No --target: the table gives each run's end; pass --target to time one."
    done = sorted((r for r in runs if r["stats"]["target_s"] is not None),
                  key=lambda r: r["stats"]["target_s"])
    if not done:
        return f"No synchroniser reached the target {args.target:g}."
    line = f"Fastest to the target: **{_label(done[0])}** ({done[0]['stats']['target_s']:.1f} s)"
    if len(done) > 1:
        ratio = done[1]["stats"]["target_s"] / done[0]["stats"]["target_s"]
        line += f", {ratio:.2f}× sooner than {_label(done[1])}"
    return line + "."


def sent_series(s):
    """MB sent by each logged step: as logged, or PyTorch DDP's nominal bytes step by step."""
    if s["nominal_bytes"]:
        return [s["bytes_per_step"] * (i + 1) / 1e6 for i in range(s["steps"])]
    return [r["bytes_sent"] / 1e6 for r in s["rows"]]


def plots(out, runs):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["(no plots: matplotlib does not import)"]
    panels = [("loss_vs_wall", "wall-clock seconds since wrap()", "loss",
               lambda s: ([r["wall_s"] for r in s["rows"]], s["loss"]))]
    if any(r["stats"]["metrics"] for r in runs):
        panels.append(("metric_vs_wall", "wall-clock seconds since wrap()", "metric",
                       lambda s: ([w for w, _ in s["metrics"]], [v for _, v in s["metrics"]])))
    panels.append(("loss_vs_bytes", "MB sent per rank (†: the gradients' bytes)", "loss",
                   lambda s: (sent_series(s), s["loss"])))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for ax, (name, xlabel, ylabel, series) in zip(axes[0], panels):
        for run in runs:
            x, y = series(run["stats"])
            ax.plot(x, y, label=_label(run) + ("†" if name == "loss_vs_bytes" and
                                               run["stats"]["nominal_bytes"] else ""))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{ylabel} ({'running mean of ' + str(SMOOTH) if ylabel == 'loss' else 'as logged'})")
        if name == "loss_vs_bytes":
            ax.set_xscale("symlog", linthresh=1)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "compare.png"), dpi=100)
    plt.close(fig)
    return ["![loss and metric against wall-clock and bytes](compare.png)"]


def build(out, args):
    runs = []
    for sync in args.syncs:
        run_dir = os.path.join(out, "runs", sync)
        with open(os.path.join(run_dir, "run.json")) as f:
            run = json.load(f)
        run["stats"] = summarise(run_dir, args.target, args.target_metric,
                                 args.higher_is_better)
        runs.append(run)
    lines = ["# compare", "", f"`{' '.join(args.command)}` under each synchroniser, "
             f"{args.hosts} ranks on {args.hosts} emulated hosts, links of {args.link}.", "",
             fastest(runs, args), ""] + table(runs, args) + [
             "", "Seconds are rank 0's from wrap() to its last log() call: the script's whole "
             "loop, its own evaluation included. † PyTorch DDP's bytes are its gradients', 4 "
             "bytes per parameter per step through a ring, 2(N-1)/N of them per rank (gloo does not "
             "count them).", ""] + plots(out, runs)
    lines += ["", "## Runs", "", "Paths as in the checkout; OUT is this report's folder.", ""]
    lines += [f"- {r['sync']}: `{run_driver.short_command(r['command'], out)}`" for r in runs]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "results.csv"), "w") as f:
        f.write("sync,options,steps,seconds,ms_per_step,final_loss,last_metric,"
                "seconds_to_target,bytes_per_step\n")
        for r in runs:
            s = r["stats"]
            f.write(",".join(str(x) for x in (
                r["sync"], ";".join(f"{k}={v}" for k, v in r["options"].items()), s["steps"],
                s["wall_s"], s["step_ms"], s["final_loss"], s["final_metric"], s["target_s"],
                s["bytes_per_step"])) + "\n")
    return runs
