"""The fashion_mnist experiment's report: report.md, results.csv and four PNG plots, from the run
directories an invocation left under <out_dir>/runs (each with run.json, saying what the run
was and whether it finished) and <out_dir>/invocation.json (the machine, torch, the date).

Nothing here trains: the test drives it with small hand-made files.
"""

import csv
import json
import math
import os

import analysis
import links
from run_driver import machine_words

# The targets the report says PASS or FAIL against, each named by what it measures.
# Fidelity: ringlab's allreduce's test accuracy within 0.5 points of PyTorch DDP's at every
# epoch, and rank 0's first losses within 1e-4 relative of PyTorch DDP's.
ACCURACY_POINTS_TARGET = 0.5
LOSS_REL_TARGET = 1e-4
RANKS = 2  # every 2-rank run; each rank has a compute and a communication thread
# What synchronising costs ringlab: the allreduce step within 1.06x of none's on one host
# (PyTorch DDP's ratio, set by gloo's overhead rather than ringlab's, stays as a comparison).
ALLREDUCE_OVER_NONE_TARGET = 1.06
# PyTorch DDP over ringlab at 2 ranks on one host within 1.2x of one PyTorch process's step.
TORCH_BACKEND_OVER_ONE_TARGET = 1.2
HEADLINE = "shm_ring_allreduce_overlap"  # the ringlab run compared to PyTorch DDP
NONE_ONE_HOST = "shm_ring_none"
BARRIER_ONE_HOST = "shm_ring_barrier"  # none, the ranks meeting once a step
PYTORCH_DDP, PYTORCH_ONE, RINGLAB_ONE = "pytorch_ddp", "pytorch_1proc", "ringlab_1rank"
RESULT_COLUMNS = ["run", "label", "framework", "sync", "avg_period", "overlap", "comm", "ranks",
                  "status", "load_after", "epochs", "final_test_accuracy", "epochs_to_85",
                  "seconds_to_85", "median_step_ms", "exposed_comm_ms_per_step",
                  "compute_ms_per_step", "optimiser_ms_per_step", "comm_thread_ms_per_step",
                  "bytes_per_step", "ratio_to_pytorch_ddp", "run_wall_s"]


class ReportError(Exception):
    """The directory holds no invocation to report on."""


def load_runs(out_dir):
    """(invocation dict, runs in plan order: run.json plus 'stats' or a failed status)."""
    try:
        with open(os.path.join(out_dir, "invocation.json")) as f:
            invocation = json.load(f)
    except (OSError, ValueError) as e:
        raise ReportError(f"{out_dir}/invocation.json is missing or not JSON: {e}") from None
    runs_dir = os.path.join(out_dir, "runs")
    names = sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []
    runs = []
    for name in names:
        try:
            with open(os.path.join(runs_dir, name, "run.json")) as f:
                run = json.load(f)
        except (OSError, ValueError):
            continue  # not a run of this invocation
        run["name"] = name
        if run.get("status") == "ok":
            try:
                run["stats"] = analysis.summarise_run(os.path.join(runs_dir, name))
            except analysis.AnalysisError as e:
                run["status"] = f"failed: {e}"
        runs.append(run)
    if not runs:
        raise ReportError(f"no run.json under {runs_dir}")
    runs.sort(key=lambda r: r.get("order", 0))
    return invocation, runs


def _stats(runs, name):
    for run in runs:
        if run["name"] == name and run.get("stats"):
            return run["stats"]
    return None


_fmt = analysis.fmt


def _ddp_of(runs, run):
    """The PyTorch DDP run a 2-rank run compares with: the one on the same link, or on one
    host; its stats or None."""
    if run.get("link"):
        return _stats(runs, f"link_{run['link'].replace('.', '_')}_pytorch_ddp")
    return _stats(runs, PYTORCH_DDP)


def _headline(runs):
    """(ringlab allreduce run, PyTorch DDP stats) compared in the fidelity and speed sections:
    over shm_ring on one host, else on the first link that ran both; (None, None) if none."""
    candidates = [r for r in runs if r["name"] == HEADLINE]
    candidates += [r for r in runs if r.get("variant") == "allreduce_overlap"]
    for run in candidates:
        ddp = _ddp_of(runs, run)
        if run.get("stats") and ddp:
            return run, ddp
    return None, None


def _bytes(value):
    if value is None or math.isnan(value):
        return "n/a"
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def result_rows(runs):
    """One dict per run with RESULT_COLUMNS (numbers unformatted, None where not measured)."""
    rows = []
    for run in runs:
        s = run.get("stats")
        ddp = _ddp_of(runs, run) if run.get("ranks") == 2 else _stats(runs, PYTORCH_DDP)
        row = {c: run.get(c) for c in RESULT_COLUMNS}
        row["run"], row["run_wall_s"] = run["name"], run.get("wall_s")
        if s:
            trace = s["trace"] or {}
            row.update({
                "epochs": s["epochs"], "final_test_accuracy": s["final_accuracy"],
                "epochs_to_85": s["reach_epoch"], "seconds_to_85": s["reach_seconds"],
                "median_step_ms": s["median_step_ms"],
                "exposed_comm_ms_per_step": trace.get("exposed_ms"),
                "compute_ms_per_step": trace.get("compute_ms"),
                "optimiser_ms_per_step": trace.get("optimiser_ms"),
                "comm_thread_ms_per_step": trace.get("comm_thread_ms"),
                "bytes_per_step": None if math.isnan(s["bytes_per_step"]) else s["bytes_per_step"],
                "ratio_to_pytorch_ddp": (s["median_step_ms"] / ddp["median_step_ms"]
                                         if ddp else None),
            })
        rows.append(row)
    return rows


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=RESULT_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})


def _runs_table(runs, rows):
    header = ["run", "status", "final test accuracy", "epochs to 85%", "seconds to 85%",
              "median step (ms)", "exposed comm/step (ms)", "bytes/step (rank 0)",
              "step ÷ PyTorch DDP", "load after"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run, row in zip(runs, rows):
        if not run.get("stats"):
            lines.append(f"| {run['label']} | {run['status']} |" + " |" * (len(header) - 2))
            continue
        reached = row["epochs_to_85"] is not None
        unreached = analysis.unreached(run)
        lines.append("| " + " | ".join([
            run["label"], "ok", f"{100 * row['final_test_accuracy']:.2f}%",
            str(row["epochs_to_85"]) if reached else unreached,
            _fmt(row["seconds_to_85"], ".1f") if reached else unreached,
            _fmt(row["median_step_ms"], ".2f"),
            _fmt(row["exposed_comm_ms_per_step"], ".3f", "n/a (no trace)"),
            _bytes(row["bytes_per_step"]), _fmt(row["ratio_to_pytorch_ddp"], ".2f"),
            _fmt(run.get("load_after"), ".1f"),
        ]) + " |")
    return lines


def _verdict(value, target):
    if value is None or math.isnan(value):
        return "not measured"
    return "PASS" if value <= target else "FAIL"


def _ulp_line(ours, reference):
    same, leading, first, n = analysis.loss_ulps(ours, reference)
    if first is None:
        return f"- rank 0's first {n} losses are bitwise identical (float32)"
    return (f"- as float32, {same} of rank 0's first {n} losses are bitwise identical; the first "
            f"difference is at step {first}; the first {leading} steps are within 1 ulp (a loss "
            f"that differs means the parameters entering that step, or the loss arithmetic, "
            f"differ)")


def _fidelity_lines(runs):
    one = _stats(runs, PYTORCH_ONE)
    head, ddp = _headline(runs)
    lines = ["## Fidelity: ringlab against PyTorch", ""]
    if not head:
        return lines + ["Not measured: no finished pair of ringlab allreduce (overlap) and "
                        "PyTorch DDP runs in this invocation.", ""]
    acc, rel, epochs, steps = analysis.fidelity(head["stats"], ddp)
    lines += [
        f"Same initial parameters (torch.manual_seed), sampler and hyper-parameters; "
        f"{head['label']} against PyTorch DDP"
        f"{' on the same link' if head.get('link') else ''}:", "",
        f"- max |Δ per-epoch test accuracy|: **{_fmt(acc, '.3f')} points** over {epochs} "
        f"epoch(s) (target ≤ {ACCURACY_POINTS_TARGET}): "
        f"**{_verdict(acc, ACCURACY_POINTS_TARGET)}**",
        f"- max relative difference of rank 0's first {steps} losses: **{_fmt(rel, '.2e')}** "
        f"(target ≤ {LOSS_REL_TARGET:g}): **{_verdict(rel, LOSS_REL_TARGET)}**",
        _ulp_line(head["stats"], ddp), "",
        "Every run that should compute the same as PyTorch:", "",
        "| run | against | max abs Δ accuracy (points) | max rel Δ of first 100 losses |",
        "|---|---|---|---|"]
    for run in runs:
        s = run.get("stats")
        if not s or run["framework"] != "ringlab":
            continue
        if run.get("sync") == "allreduce" and run.get("ranks") == 2 and _ddp_of(runs, run):
            ref = _ddp_of(runs, run)
            ref_label = "PyTorch DDP" + (f" @ {run['link']}" if run.get("link") else "")
        elif run["name"] == RINGLAB_ONE and one:
            ref, ref_label = one, "PyTorch 1 process"
        else:
            continue
        a, r, _, _ = analysis.fidelity(s, ref)
        lines.append(f"| {run['label']} | {ref_label} | {_fmt(a, '.3f')} | {_fmt(r, '.2e')} |")
    return lines + [""]


def _allreduce_cost_lines(runs):
    """allreduce's step against none's on one host, the verdict, and where the difference
    went per step by the traces."""
    on, none = _stats(runs, HEADLINE), _stats(runs, NONE_ONE_HOST)
    if not (on and none):
        return ["- allreduce against none on one host: not measured (this mode runs no ringlab "
                "none over shm_ring; --one_host does)"]
    ratio = on["median_step_ms"] / none["median_step_ms"]
    lines = [f"- median step at 2 ranks on one host, ringlab allreduce (shm_ring, overlap) "
             f"{on['median_step_ms']:.2f} ms against ringlab none {none['median_step_ms']:.2f} "
             f"ms: **{ratio:.2f}×** (target ≤ {ALLREDUCE_OVER_NONE_TARGET}×): "
             f"**{_verdict(ratio, ALLREDUCE_OVER_NONE_TARGET)}**"]
    barrier = _stats(runs, BARRIER_ONE_HOST)
    if barrier:
        met = barrier["median_step_ms"] - none["median_step_ms"]
        moved = on["median_step_ms"] - barrier["median_step_ms"]
        lines.append(f"- of the difference, the ranks meeting once a step (ringlab barrier, no "
                     f"byte moved: {barrier['median_step_ms']:.2f} ms, "
                     f"**{barrier['median_step_ms'] / none['median_step_ms']:.2f}×** none) "
                     f"{met:+.2f} ms; moving the gradients (allreduce against barrier, "
                     f"**{on['median_step_ms'] / barrier['median_step_ms']:.2f}×**) "
                     f"{moved:+.2f} ms")
    if on["trace"] and none["trace"]:
        parts = {name: on["trace"][key] - none["trace"][key] for name, key in (
            ("compute", "compute_ms"), ("exposed communication", "exposed_ms"),
            ("optimiser", "optimiser_ms"))}
        parts["the rest (the trace's untimed gaps)"] = (
            on["mean_timed_step_ms"] - none["mean_timed_step_ms"] - sum(parts.values()))
        lines.append("- where the difference went, per step (the traces; mean steps "
                     f"{on['mean_timed_step_ms']:.2f} against {none['mean_timed_step_ms']:.2f} "
                     "ms): " + ", ".join(f"{name} {value:+.2f} ms"
                                        for name, value in parts.items()))
    return lines


def _torch_backend_lines(runs):
    """PyTorch DDP over ringlab against the same program over gloo (on one host and each
    link): its first losses bit for bit, its step; on one host, against one process."""
    lines = []
    for run in runs:
        s = run.get("stats")
        if run.get("backend") != "ringlab" or not s:
            continue
        gloo = _ddp_of(runs, run)
        where = f"@ {run['link']}" if run.get("link") else "on one host"
        if not gloo:
            lines.append(f"- PyTorch DDP over ringlab {where}: no PyTorch DDP over gloo beside "
                         f"it")
            continue
        same, _, first, n = analysis.loss_ulps(s, gloo, steps=run["max_steps"])
        bits = (f"all {n} of rank 0's losses bit for bit those over gloo" if first is None
                else f"{same} of {n} losses bit for bit those over gloo, the first difference "
                     f"at step {first}")
        lines.append(f"- PyTorch DDP over ringlab {where} (its first {run['max_steps']} "
                     f"steps): {bits}; median step "
                     f"{s['median_step_ms']:.2f} ms against {gloo['median_step_ms']:.2f} ms over "
                     f"gloo (**{s['median_step_ms'] / gloo['median_step_ms']:.2f}×**)")
        one = _stats(runs, PYTORCH_ONE)
        if not run.get("link") and one:
            ratio = s["median_step_ms"] / one["median_step_ms"]
            lines.append(f"- PyTorch DDP over ringlab on one host against one PyTorch process "
                         f"({one['median_step_ms']:.2f} ms): **{ratio:.2f}×** (target ≤ "
                         f"{TORCH_BACKEND_OVER_ONE_TARGET}×): "
                         f"**{_verdict(ratio, TORCH_BACKEND_OVER_ONE_TARGET)}**")
    return lines


def _speed_lines(runs, cores=None):
    lines = ["## Speed", ""] + _allreduce_cost_lines(runs) + _torch_backend_lines(runs)
    for run in runs:  # ringlab's allreduce against PyTorch DDP, on one host and on each link
        ddp = _ddp_of(runs, run) if run.get("stats") else None
        if not ddp or not (run["name"] == HEADLINE or run.get("variant") == "allreduce_overlap"):
            continue
        ratio = run["stats"]["median_step_ms"] / ddp["median_step_ms"]
        where = f"over gloo @ {run['link']}" if run.get("link") else "shm_ring, overlap"
        lines.append(f"- median step at 2 ranks, ringlab allreduce ({where}) "
                     f"{run['stats']['median_step_ms']:.2f} ms against PyTorch DDP "
                     f"{ddp['median_step_ms']:.2f} ms: **{ratio:.2f}×**")
    for floor in (PYTORCH_ONE, RINGLAB_ONE):
        s = _stats(runs, floor)
        if s:
            label = next(r["label"] for r in runs if r["name"] == floor)
            lines.append(f"- compute floor, {label}: median step {s['median_step_ms']:.2f} ms")
    comms = [r["comm"] for r in runs if r["name"].endswith("_allreduce_overlap")]
    for comm in comms:
        on = _stats(runs, f"{comm}_allreduce_overlap")
        off = _stats(runs, f"{comm}_allreduce_no_overlap")
        if not (on and off and on["trace"] and off["trace"]):
            continue
        a, b = on["trace"]["exposed_ms"], off["trace"]["exposed_ms"]
        change = f"{100 * (a - b) / b:+.0f}%" if b > 0 else "n/a"
        smaller = "smaller" if a < b else "NOT smaller"
        lines.append(f"- exposed communication per step over {comm} (trace): overlap {a:.3f} ms, "
                     f"no overlap {b:.3f} ms ({change}: {smaller} with overlap); median step "
                     f"{on['median_step_ms']:.2f} against {off['median_step_ms']:.2f} ms")
    if comms and isinstance(cores, int) and cores < 2 * RANKS:  # a core per thread
        lines.append(f"- {cores} core(s) for {RANKS} ranks: a rank's communication thread gets its "
                     f"core only while the compute thread waits, so overlap can move waiting "
                     f"into backward but not hide work behind it; compare the median steps, and "
                     f"the step breakdown for where the time went")
    return lines + [""]


def _more_epochs(invocation, runs):
    """" (the compute floors 1, param_avg across links 4, ...)": the runs that trained
    other epochs than the invocation's (run.json records each run's)."""
    other = {}
    for run in runs:
        if run.get("epochs") in (None, invocation.get("epochs")) or run.get("max_steps"):
            continue
        kind = ("the compute floors" if run["name"] in (PYTORCH_ONE, RINGLAB_ONE) else
                f"{run['sync']} across links" if run.get("link") else run["label"])
        other.setdefault(kind, set()).add(run["epochs"])
    if not other:
        return ""
    return " (" + ", ".join(f"{kind} {', '.join(map(str, sorted(e)))}"
                            for kind, e in other.items()) + ")"


def write_markdown(path, invocation, runs, rows, plot_notes):
    out_dir = os.path.dirname(path)
    inv = invocation
    minutes = inv["duration_s"] / 60 if isinstance(inv.get("duration_s"), (int, float)) else None
    lines = [
        "# Fashion-MNIST: ringlab's synchronisers side by side with PyTorch DDP", "",
        f"- date: {inv.get('date', 'unknown')}; this invocation took {_fmt(minutes, '.1f')} min "
        f"({inv.get('mode', '?')} run)",
        f"- machine: {machine_words(inv)}; load "
        f"average (1, 5, 15 min) before the runs {inv.get('load_before', 'unknown')}, after "
        f"{inv.get('load_after', 'unknown')}: the runs use every core, so a load above "
        f"{inv.get('cores', 2)} means other work shared them and stretched the times",
        f"- torch: {inv.get('torch_version') or 'not importable: PyTorch runs skipped'}",
        f"- every run: MLP {inv.get('model', '784,1024,1024,10')}, SGD lr {inv.get('lr', 0.1)} "
        f"without momentum, batch {inv.get('batch_size', 64)} per rank, DistributedSampler seed 0 "
        f"with set_epoch, torch.manual_seed(0) initial parameters, {inv.get('epochs', '?')} "
        f"epoch(s){_more_epochs(inv, runs)}, one thread per rank, test set evaluated by rank 0 "
        f"after every epoch"]
    timed = [r for r in runs if isinstance(r.get("cpu_s"), (int, float))]
    if timed:
        cpu = [r["cpu_s"] / r["ranks"] for r in timed]
        lines.append(f"- the runs' processes used {sum(r['cpu_s'] for r in timed) / 60:.1f} "
                     f"min of CPU time: with each rank on a core of its own and nothing else "
                     f"running, their training would take about {sum(cpu) / 60:.1f} min of the "
                     f"{_fmt(minutes, '.1f')} (an estimate: waiting ranks spin, and spin for "
                     f"longer on a busy machine)")
    lines += [f"- note: {n}" for n in inv.get("notes", [])]
    lines += ["", "## Runs", ""] + _runs_table(runs, rows) + [
        "",
        f"- median step: rank 0's steps after the first {analysis.WARMUP_STEPS} (warm-up); "
        "ringlab's step is its whole step (forward, backward, synchronisation, SGD), PyTorch's "
        "time.perf_counter around zero_grad+forward+backward+step; data loading excluded.",
        "- exposed comm/step: from the trace, the compute thread's \"wait for allreduce\" time "
        "(the part of communication not hidden behind backward) summed over the run and divided "
        "by rank 0's steps. PyTorch writes no trace.",
        "- bytes/step: rank 0's bytes sent per step, mean over all steps (PyTorch does not "
        "report them).",
        "- seconds to 85%: training wall-clock of rank 0 at the first evaluation at or above "
        "85%, evaluation time excluded.",
        "- load after: the machine's 1-minute load average when the run ended (2 ranks of a run "
        "make about 2): well above that, the run's times are stretched by other work.", ""]
    lines += _fidelity_lines(runs) + _speed_lines(runs, inv.get("cores"))
    lines += links.link_lines(runs, out_dir)
    lines += ["## Plots", ""]
    figures = [("Test accuracy against epochs", "accuracy_vs_epoch.png"),
               ("Test accuracy against bytes sent", "accuracy_vs_bytes.png"),
               ("Test accuracy against wall-clock time", "accuracy_vs_time.png"),
               ("Step time breakdown", "step_breakdown.png")]
    if links.by_link(runs):
        figures += [("Test accuracy against wall-clock time, per link",
                     "accuracy_vs_time_per_link.png"),
                    ("Step time against the link, per synchroniser", "step_vs_link.png"),
                    ("Bytes sent against accuracy reached, per link: the frontier",
                     "frontier_per_link.png")]
    for title, name in figures:
        note = plot_notes.get(name)
        lines += [f"{title}: {note}" if note else f"![{title}]({name})", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def build(out_dir):
    """Writes report.md, results.csv and the plots into out_dir; returns the runs."""
    import plots  # matplotlib is imported there, only when a report is written

    invocation, runs = load_runs(out_dir)
    rows = result_rows(runs)
    write_csv(os.path.join(out_dir, "results.csv"), rows)
    plot_notes = plots.write_all(out_dir, runs)
    try:
        plot_notes.update(links.write_plots(out_dir, runs, plots._pyplot))
    except ImportError:
        plot_notes.update({n: "matplotlib is not installed: no plot" for n in links.PLOTS})
    write_markdown(os.path.join(out_dir, "report.md"), invocation, runs, rows, plot_notes)
    return runs
