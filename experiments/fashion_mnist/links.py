"""The fashion_mnist report across emulated links (--links): per link, each run's time to 85%
test accuracy (or its best accuracy), its step time split into compute, exposed communication
and optimiser (from its trace), the step the cost model predicts (experiments/cost_model,
fitted to the allreduce bench the driver ran on that link), and the bytes that crossed each
host's link per step; which synchroniser reached 85% first on each link; and three plots, test
accuracy against wall-clock per link, step time against the link per synchroniser, and the
frontier of bytes sent against accuracy reached per link.
"""

import os
import sys

import analysis

COST_MODEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cost_model")
HOSTS = 2  # every run across links: 2 ranks on 2 emulated hosts

LINK_STYLE = {
    "pytorch_ddp": ("black", "PyTorch DDP (gloo)"),
    "pytorch_ddp_ringlab": ("dimgray", "PyTorch DDP (ringlab)"),
    "allreduce_overlap": ("C0", "ringlab allreduce, overlap"),
    "fp16": ("C1", "ringlab fp16 compress"),
    "param_avg_k16": ("C3", "ringlab param_avg K=16"),
    "diloco_h16": ("C6", "ringlab DiLoCo H=16"),
    "none": ("C5", "ringlab none"),
    "topk": ("olive", "ringlab top-k 1%"),
    "randomk": ("darkkhaki", "ringlab random-k 1%"),
    "ef_signsgd": ("teal", "ringlab EF-SignSGD"),
    "qsgd": ("slateblue", "ringlab QSGD"),
    "int8": ("limegreen", "ringlab int8"),
    "sparta": ("gold", "ringlab SPARTA 0.5%"),
    "sparseloco": ("darkred", "ringlab SparseLoCo H=16"),
    "demo": ("navy", "ringlab DeMo (lr 0.002)"),
    "streaming_diloco": ("magenta", "ringlab Streaming DiLoCo H=16"),
}


def by_link(runs):
    """{link: [its finished or failed runs]} in plan order."""
    links = {}
    for run in runs:
        if run.get("link"):
            links.setdefault(run["link"], []).append(run)
    return links


def _mb(value):
    return "n/a (not reported)" if value is None else f"{value / 1e6:.2f} MB"


def _best(run):
    """(best test accuracy, wall seconds when reached) of a finished run."""
    evals = run["stats"]["evals"]
    best = max(evals, key=lambda e: e["test_accuracy"])
    return best["test_accuracy"], best["wall_s"]


def _cost_model():
    if COST_MODEL_DIR not in sys.path:
        sys.path.insert(0, COST_MODEL_DIR)
    import cost_model
    return cost_model


def link_fit(out_dir, link):
    """(alpha s, B_eff bytes/s) of the gloo allreduce across `link`, fitted to the sweep in
    <out_dir>/bench/<link>.txt, or a string saying why there is none."""
    cm = _cost_model()
    path = os.path.join(out_dir, "bench", f"{link}.txt")
    try:
        with open(path) as f:
            rows, ranks, _ = cm.parse_bench(f.read())
        if "allreduce/gloo" not in rows:
            raise cm.ModelError("no allreduce/gloo table")
        return cm.fit(rows["allreduce/gloo"], ranks, HOSTS, False)
    except OSError:
        return f"no bench sweep ({path})"
    except cm.ModelError as e:
        return f"bench sweep unusable: {e}"


def _compute_ms(run):
    """Compute and optimiser per step from a run's trace, or None."""
    trace = (run.get("stats") or {}).get("trace")
    return trace["compute_ms"] + trace["optimiser_ms"] if trace else None


def predicted_step_ms(run, fit, compute_ms):
    """The cost model's step for this run: its synchroniser's formula, the link's fit, the
    MLP's gradient bytes, and compute_ms of compute and optimiser."""
    cm = _cost_model()
    alpha, b_eff = fit
    # fp16 and bf16 send 2 bytes a gradient.
    size = cm.DEFAULT_BUFFER_BYTES // (2 if run["sync"] in ("fp16", "bf16") else 1)
    seconds = cm.allreduce_s(size, run["ranks"], HOSTS, alpha, b_eff, False, 1.0)
    # Each rank has one core here, which its communication thread shares with backward:
    # nothing hides (README: overlap moves waiting, it cannot hide work on this machine).
    return cm.step_ms(run["sync"], compute_ms, seconds, run.get("avg_period") or 1,
                      hidden_share=0.0)


def _prediction(run, fit, runs):
    """"predicted (measured / predicted)" for the table; PyTorch's compute is taken from
    ringlab's allreduce run on the same link (torch writes no trace)."""
    if isinstance(fit, str) or not run.get("stats"):
        return "n/a"
    if run["sync"] not in _cost_model().MODELLED_SYNCS:
        return "n/a (not modelled)"
    compute = _compute_ms(run)
    note = ""
    if compute is None:
        twin = next((r for r in runs if r.get("variant") == "allreduce_overlap"), None)
        compute = _compute_ms(twin) if twin else None
        note = "†"
    if compute is None:
        return "n/a (no trace)"
    predicted = predicted_step_ms(run, fit, compute)
    return f"{predicted:.1f}{note} ({run['stats']['mean_timed_step_ms'] / predicted:.2f})"


def _split(trace):
    if not trace:
        return "n/a (no trace)"
    return " / ".join(analysis.fmt(trace.get(k), ".1f")
                      for k in ("compute_ms", "exposed_ms", "optimiser_ms"))


def _link_table(runs, fit):
    header = ["run", "seconds to 85%", "best test accuracy (at s)", "median step (ms)",
              "compute / exposed comm / optimiser per step (ms)",
              "model's step, ms (mean step ÷ model)", "link bytes sent/step and host"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in runs:
        s = run.get("stats")
        if not s:
            lines.append(f"| {run['label']} | {run['status']} |" + " |" * (len(header) - 2))
            continue
        best, at = _best(run)
        reach = (analysis.fmt(s["reach_seconds"], ".1f")
                 if s["reach_seconds"] is not None and not run.get("max_steps")
                 else analysis.unreached(run))
        lines.append("| " + " | ".join([
            run["label"], reach, f"{100 * best:.2f}% ({at:.1f} s)",
            analysis.fmt(s["median_step_ms"], ".2f"), _split(s["trace"]),
            _prediction(run, fit, runs), _mb(s.get("link_bytes_per_step"))]) + " |")
    return lines


def _fit_line(fit):
    if isinstance(fit, str):
        return f"Cost model: not fitted: {fit}."
    alpha, b_eff = fit
    return (f"Cost model (experiments/cost_model) fitted to the allreduce bench over gloo on "
            f"this link, 2 ranks on 2 hosts: alpha {alpha * 1e6:.0f} us per ring step, B_eff "
            f"{b_eff / 1e9:.3f} GB/s; its step = compute + optimiser (the run's trace) + "
            f"communication (allreduce: all of it, since each rank's one core here serves "
            f"backward and communication both, so nothing hides; param_avg: one allreduce per K "
            f"steps; none: nothing), against the mean step after the warm-up (param_avg's "
            f"averaging steps included). † PyTorch writes no trace: its compute is ringlab's "
            f"allreduce run's on the same link.")


def _fastest(runs):
    """The run that reached 85% first, else the one with the best accuracy: (run, reached)."""
    done = [r for r in runs if r.get("stats") and not r.get("max_steps")]
    reached = [r for r in done if r["stats"]["reach_seconds"] is not None]
    if reached:
        return min(reached, key=lambda r: r["stats"]["reach_seconds"]), True
    if done:
        return max(done, key=lambda r: _best(r)[0]), False
    return None, False


def link_lines(runs, out_dir):
    """The report's section across links; [] when the invocation ran none."""
    links = by_link(runs)
    if not links:
        return []
    lines = ["## Across emulated links", "",
             "2 ranks on 2 emulated hosts (`--hosts=2`, one rank each: comm/cluster), every "
             "host's link to the switch shaped to the rate named, in both directions. ringlab "
             "runs over gloo. Link bytes: what each host's eth0 sent per training step (ringlab's "
             "summary.json; PyTorch does not report them). param_avg and none train an epoch more "
             "than allreduce (their steps are cheaper; what counts here is the wall-clock to "
             "85%), DiLoCo an epoch less (it reaches 85% in its first).", ""]
    fastest = ["| link | fastest to 85% | seconds |", "|---|---|---|"]
    for link, link_runs in links.items():
        fit = link_fit(out_dir, link)
        lines += [f"### {link}", ""] + _link_table(link_runs, fit) + ["", _fit_line(fit), ""]
        run, reached = _fastest(link_runs)
        if run is None:
            fastest.append(f"| {link} | no run finished | |")
        elif reached:
            fastest.append(f"| {link} | {run['label']} | "
                           f"{run['stats']['reach_seconds']:.1f} |")
        else:
            best, at = _best(run)
            fastest.append(f"| {link} | none reached 85%; best {100 * best:.2f}%: "
                           f"{run['label']} | {at:.1f} |")
    return lines + ["### Fastest to 85% on each link", ""] + fastest + [""]


def _accuracy_vs_time(plt, links, path):
    fig, axes = plt.subplots(1, len(links), figsize=(5.2 * len(links), 4.4), sharey=True,
                             squeeze=False)
    for ax, (link, runs) in zip(axes[0], links.items()):
        for run in runs:
            if not run.get("stats") or run.get("max_steps"):  # (its step time only)
                continue
            color, label = LINK_STYLE.get(run.get("variant"), ("grey", run["label"]))
            evals = run["stats"]["evals"]
            ax.plot([e["wall_s"] for e in evals], [100 * e["test_accuracy"] for e in evals],
                    marker="o", color=color, label=label)
        ax.axhline(100 * analysis.TARGET_ACCURACY, color="grey", lw=0.8, ls=":")
        ax.set_title(f"link {link}")
        ax.set_xlabel("training wall-clock of rank 0 (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy (%)")
    axes[0][-1].legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _step_vs_link(plt, links, path):
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    names = list(links)
    for variant, (color, label) in LINK_STYLE.items():
        xs, ys = [], []
        for i, link in enumerate(names):
            for run in links[link]:
                if run.get("variant") == variant and run.get("stats"):
                    xs.append(i)
                    ys.append(run["stats"]["median_step_ms"])
        if xs:
            ax.plot(xs, ys, marker="o", color=color, label=label)
    ax.set_xticks(range(len(names)), names)
    ax.set_xlabel("link rate (each host's, both directions)")
    ax.set_ylabel("median step (ms, log scale)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def frontier(points):
    """The points (bytes, accuracy, ...) no other beats on both: none sends fewer or as many
    bytes and reaches a higher or equal accuracy, better on one; by bytes."""
    return sorted(p for p in points if not any(
        q[0] <= p[0] and q[1] >= p[1] and (q[0] < p[0] or q[1] > p[1]) for q in points))


def _frontier_plot(plt, links, path):
    """Per link: each run's MB sent by rank 0 to its last evaluation against the accuracy there
    (log x; a run sending nothing sits at the axis' left edge), the frontier joined."""
    fig, axes = plt.subplots(1, len(links), figsize=(5.6 * len(links), 4.8), sharey=True,
                             squeeze=False)
    handles = {}
    for ax, (link, runs) in zip(axes[0], links.items()):
        points = []
        for run in runs:
            if not run.get("stats") or run.get("max_steps"):
                continue
            last = run["stats"]["evals"][-1]
            if last.get("bytes_sent") is None or last["bytes_sent"] != last["bytes_sent"]:
                continue  # PyTorch DDP reports no bytes
            points.append((max(last["bytes_sent"] / 1e6, 1e-3), 100 * last["test_accuracy"],
                           run.get("variant")))
        for mb, accuracy, variant in points:
            color, label = LINK_STYLE.get(variant, ("grey", variant))
            handles[label] = ax.scatter([mb], [accuracy], color=color, s=36, label=label,
                                        zorder=3)
        best = frontier(points)
        ax.plot([p[0] for p in best], [p[1] for p in best], color="black", lw=0.8, ls="--",
                zorder=2)
        ax.axhline(100 * analysis.TARGET_ACCURACY, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_title(f"link {link}: dashed, the frontier")
        ax.set_xlabel("MB sent by rank 0 to the last evaluation (log scale)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy at the last evaluation (%)")
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=4, fontsize=7,
               frameon=False, bbox_to_anchor=(0.5, 0.04))
    fig.text(0.01, 0.01, "Each run at its own last epoch (the report's table says which); PyTorch "
             "DDP reports no bytes.", fontsize=7, alpha=0.8)
    rows = -(-len(handles) // 4)
    fig.tight_layout(rect=(0, 0.04 + 0.05 * rows, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


PLOTS = ("accuracy_vs_time_per_link.png", "step_vs_link.png", "frontier_per_link.png")


def write_plots(out_dir, runs, pyplot):
    """The PNGs across links; {name: why missing}; nothing when no run had a link."""
    links = {k: v for k, v in by_link(runs).items() if any(r.get("stats") for r in v)}
    if not by_link(runs):
        return {}
    if not links:
        return {name: "no run across links finished" for name in PLOTS}
    plt = pyplot()
    _accuracy_vs_time(plt, links, os.path.join(out_dir, PLOTS[0]))
    _step_vs_link(plt, links, os.path.join(out_dir, PLOTS[1]))
    _frontier_plot(plt, links, os.path.join(out_dir, PLOTS[2]))
    return {}
