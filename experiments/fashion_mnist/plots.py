"""The fashion_mnist report's PNG plots (matplotlib, Agg backend): test accuracy against epochs,
bytes sent and wall-clock time (one panel per communicator, the PyTorch runs and ringlab's
single rank drawn in every panel as references), and each run's step time broken down into
compute, exposed communication and optimiser from its trace.
"""

import math
import os
import textwrap

# One colour per synchroniser variant, the same in every panel.
VARIANT_STYLE = {
    "allreduce_overlap": ("C0", "allreduce, overlap"),
    "allreduce_no_overlap": ("C1", "allreduce, no overlap"),
    "fp16": ("C8", "fp16 compress"),
    "bf16": ("C9", "bf16 compress"),
    "powersgd_r1": ("tab:olive", "PowerSGD rank 1"),
    "powersgd_r4": ("tab:brown", "PowerSGD rank 4"),
    "param_avg_k4": ("C2", "param_avg K=4"),
    "param_avg_k16": ("C3", "param_avg K=16"),
    "param_avg_k64": ("C4", "param_avg K=64"),
    "post_local_sgd_k16": ("C7", "post_local_sgd K=16"),
    "diloco_h16": ("C6", "DiLoCo H=16"),
    "none": ("C5", "none (no communication)"),
    "barrier": ("tab:pink", "barrier (none, meeting each step)"),
}
PANEL_HEIGHT_IN = 4.4
REFERENCE_STYLE = {
    "pytorch_ddp": dict(color="black", ls="--", lw=2.5, alpha=0.6),
    "pytorch_1proc": dict(color="grey", ls=":", lw=2),
    "ringlab_1rank": dict(color="grey", ls="-.", lw=1.5),
}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _finished(runs):
    return [r for r in runs if r.get("stats")]


def _panels(runs):
    """{communicator: [(variant key, run)]} of the 2-rank ringlab runs, and the reference runs."""
    panels, references = {}, []
    for run in _finished(runs):
        if run.get("link"):
            continue  # across emulated links: links.py draws those
        if run["name"] in REFERENCE_STYLE:
            references.append(run)
        elif run["framework"] == "ringlab":
            variant = run["name"][len(run["comm"]) + 1:]
            panels.setdefault(run["comm"], []).append((variant, run))
    return panels, references


def _accuracy_figure(runs, path, x_of, xlabel, logx=False, note=None, integer_x=False):
    plt = _pyplot()
    panels, references = _panels(runs)
    if not panels and not references:
        if any(r.get("link") for r in _finished(runs)):
            return ("no run on one host to plot (this invocation's runs are across links: the "
                    "per-link plots below)")
        return "no finished run to plot"
    comms = list(panels) or ["(no ringlab 2-rank run)"]
    fig, axes = plt.subplots(1, len(comms), figsize=(5.2 * len(comms), PANEL_HEIGHT_IN),
                             sharey=True, squeeze=False)
    legend = {}  # label -> handle, one legend for every panel
    for ax, comm in zip(axes[0], comms):
        curves = [(REFERENCE_STYLE[r["name"]], r["label"], r) for r in references]
        for variant, run in panels.get(comm, []):
            color, label = VARIANT_STYLE.get(variant, (None, variant))
            # Overlap on and off train identically: the dashes keep both visible.
            dashed = variant.endswith("no_overlap")
            curves.append((dict(color=color, marker="x" if dashed else "o", ms=4,
                                ls="--" if dashed else "-"), f"ringlab {label}", run))
        for style, label, run in curves:
            points = [(x_of(run, e), 100 * e["test_accuracy"]) for e in run["stats"]["evals"]]
            points = [(x, y) for x, y in points if x is not None and not math.isnan(x)
                      and (x > 0 or not logx)]
            if points:
                (line,) = ax.plot([p[0] for p in points], [p[1] for p in points], label=label,
                                  **style)
                legend.setdefault(label, line)
        ax.axhline(85, color="red", lw=0.8, alpha=0.5)
        ax.set_title(f"2 ranks over {comm}" if comm in panels else comm)
        ax.set_xlabel(xlabel)
        if logx:
            ax.set_xscale("log")
        if integer_x:
            from matplotlib.ticker import MaxNLocator
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy (%) — red line: 85%")
    # Below the panels: the legend, then the note (sizes in inches, added to the height).
    ncol = 3 if len(comms) > 1 else 2
    rows = -(-len(legend) // ncol)
    note = textwrap.fill(note, width=int(95 * len(comms))) if note else ""
    note_in = 0.15 * (note.count("\n") + 1) + 0.05 if note else 0.0
    legend_in = 0.2 * rows + 0.15 if legend else 0.0
    height = PANEL_HEIGHT_IN + legend_in + note_in
    fig.set_figheight(height)
    if legend:
        fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=ncol,
                   fontsize=8, frameon=False, bbox_to_anchor=(0.5, note_in / height))
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, alpha=0.8)
    fig.tight_layout(rect=(0, (legend_in + note_in) / height, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None if legend else "no curve with data"


def _breakdown_figure(runs, path):
    plt = _pyplot()
    bars = [r for r in _finished(runs)]
    if not bars:
        return "no finished run to plot"
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(bars) + 1.6))
    labels = []
    parts = (("compute (forward + backward)", "compute_ms", "C0"),
             ("exposed communication (wait for allreduce)", "exposed_ms", "C3"),
             ("optimiser (SGD step)", "optimiser_ms", "C2"))
    used = set()
    for y, run in enumerate(bars):
        s = run["stats"]
        labels.append(run["label"])
        trace = s["trace"]
        if not trace:
            ax.barh(y, s["mean_step_ms"], color="lightgrey", hatch="//", edgecolor="grey",
                    label=None if "untraced" in used else "whole step (no trace)")
            used.add("untraced")
            continue
        left = 0.0
        for name, key, color in parts:
            ax.barh(y, trace[key], left=left, color=color, label=None if key in used else name)
            used.add(key)
            left += trace[key]
        other = s["mean_step_ms"] - left
        if other > 0:
            ax.barh(y, other, left=left, color="lightgrey",
                    label=None if "other" in used else "rest of the step (untraced)")
            used.add("other")
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("mean time per step of rank 0 (ms)")
    ax.set_title("Where a step's time goes (from each run's trace)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def _bytes_note(runs):
    """Which runs the log axis of bytes leaves out, and why."""
    unmeasured, zero = [], []
    for run in _finished(runs):
        sent = [e["bytes_sent"] for e in run["stats"]["evals"]]
        if all(math.isnan(b) for b in sent):
            unmeasured.append(run["label"])
        elif all(b <= 0 for b in sent if not math.isnan(b)):
            zero.append(run["label"])
    parts = []
    if unmeasured:
        parts.append(f"{', '.join(unmeasured)} (bytes not reported)")
    if zero:
        parts.append(f"{', '.join(zero)} (0 bytes: no place on a log axis)")
    return "Not drawn: " + "; ".join(parts) + "." if parts else None


def write_all(out_dir, runs):
    """Writes the four PNGs; returns {file name: why it is missing} for those not written."""
    try:
        _pyplot()
    except ImportError:
        return {name: "matplotlib is not installed: no plot" for name in (
            "accuracy_vs_epoch.png", "accuracy_vs_bytes.png", "accuracy_vs_time.png",
            "step_breakdown.png")}
    notes = {}
    figures = {
        "accuracy_vs_epoch.png": lambda p: _accuracy_figure(
            runs, p, lambda run, e: e["epoch"], "epochs completed", integer_x=True),
        "accuracy_vs_bytes.png": lambda p: _accuracy_figure(
            runs, p, lambda run, e: e["bytes_sent"] / 1e6,
            "MB sent by rank 0 so far (log scale)", logx=True,
            note=_bytes_note(runs)),
        "accuracy_vs_time.png": lambda p: _accuracy_figure(
            runs, p, lambda run, e: e["wall_s"],
            "training wall-clock of rank 0 (s, evaluation excluded)"),
        "step_breakdown.png": lambda p: _breakdown_figure(runs, p),
    }
    for name, draw in figures.items():
        note = draw(os.path.join(out_dir, name))
        if note:
            notes[name] = note
    return notes
