"""The char_lm report: per link, each run's validation loss, time and steps to the target loss,
its step split into compute, exposed communication and optimiser, the bytes its rank sent per
step, the cost model's step beside the measured one, the fastest to the target; whether ringlab's
allreduce trained bit for bit as PyTorch DDP over gloo; plots of validation loss against
wall-clock and against bytes sent; and a sample of the text each model writes.
"""

import csv
import json
import math
import os
import statistics

import run_driver  # experiments/run_driver.py
import links as fm_links  # experiments/fashion_mnist/links.py: the cost model's link fits

# The validation loss a run must reach, unless its run.json names another (--quick's 2.2). By 1.8
# nats per character the small model's samples have the Bible's verse layout and its common short
# words (and, the, of, which) spelled right, though not yet its longer ones (see each run's
# sample.txt); allreduce reaches it in the second half of the default run, so that every
# synchroniser's pace shows.
TARGET = 1.8
WARMUP_STEPS = 10  # steps left out of the step-time means: allocation, bucket rebuilding
HOSTS, RANKS = 2, 2


class ReportError(Exception):
    pass


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def summarise(run_dir, target=TARGET):
    """A finished run's figures, or raises ReportError."""
    try:
        losses = _rows(os.path.join(run_dir, "losses.csv"))
        evals = [(int(r["step"]), float(r["val_loss"]), float(r["wall_s"]), float(r["bytes_sent"]))
                 for r in _rows(os.path.join(run_dir, "eval.csv"))]
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        with open(os.path.join(run_dir, "sample.txt")) as f:
            sample = f.read()
    except (OSError, ValueError, KeyError) as e:
        raise ReportError(f"{run_dir}: unreadable outputs ({e})") from None
    rank0 = [r for r in losses if r["rank"] == "0"]
    timed = rank0[WARMUP_STEPS:] or rank0
    mean = lambda key: statistics.fmean(float(r[key]) for r in timed)  # noqa: E731
    sent = [float(r["bytes_sent"]) for r in rank0]
    reached = next((e for e in evals if e[1] <= target), None)
    return dict(summary=summary, evals=evals, sample=sample, losses=losses,
                final_val=evals[-1][1], best_val=min(e[1] for e in evals),
                target_s=reached[2] if reached else None,
                target_step=reached[0] if reached else None,
                step_ms=mean("step_ms"), compute_ms=mean("compute_ms"), comm_ms=mean("comm_ms"),
                optim_ms=mean("optim_ms"),
                bytes_per_step=statistics.fmean(sent) if not math.isnan(sent[0]) else None,
                exchanges=sum(1 for b in sent if b > 0), steps=len(rank0))


def predicted_step_ms(run, twin, fit):
    """The cost model's step: compute and optimiser measured, plus the allreduce time of the
    bytes each exchange sends (the link's fit), times exchanges per step. PyTorch DDP's
    compute is its allreduce twin's (its own holds the allreduce), its bytes the gradients'."""
    if isinstance(fit, str) or "stats" not in run:
        return None
    s = run["stats"]
    cm = fm_links._cost_model()
    if run["sync"] == "ddp":
        if twin is None or "stats" not in twin:
            return None
        compute = twin["stats"]["compute_ms"] + s["optim_ms"]
        per_exchange, per_step = 4 * s["summary"]["parameters"], 1.0
    else:
        compute = s["compute_ms"] + s["optim_ms"]
        if not s["exchanges"]:
            return compute
        per_exchange = s["bytes_per_step"] * s["steps"] / s["exchanges"]
        per_step = s["exchanges"] / s["steps"]
    alpha, b_eff = fit
    return compute + per_step * 1e3 * cm.allreduce_s(per_exchange, RANKS, HOSTS, alpha, b_eff,
                                                     False, 1.0)


def fidelity(runs):
    """Per link, whether ringlab's allreduce and PyTorch DDP trained bit for bit: a line."""
    import numpy as np
    lines = []
    for link, group in by_link(runs).items():
        ddp = next((r for r in group if r["key"] == "pytorch_ddp" and "stats" in r), None)
        ours = next((r for r in group if r["key"] == "allreduce" and "stats" in r), None)
        if ddp is None or ours is None:
            lines.append(f"- {link}: not compared (a run is missing)")
            continue
        a = [(r["rank"], r["step"], r["loss"]) for r in ddp["stats"]["losses"]]
        b = [(r["rank"], r["step"], r["loss"]) for r in ours["stats"]["losses"]]
        differing = [x for x, y in zip(a, b) if x != y] + ([None] if len(a) != len(b) else [])
        finals = [os.path.join(r["run_dir"], "final") for r in (ddp, ours)]
        names = sorted(os.listdir(finals[0]))
        same_params = names == sorted(os.listdir(finals[1])) and all(
            np.array_equal(np.load(os.path.join(finals[0], n)), np.load(os.path.join(finals[1], n)))
            for n in names)
        verdict = "PASS" if not differing and same_params else "FAIL"
        lines.append(f"- {link}: **{verdict}**: {len(a) - len(differing)} of {len(a)} losses "
                     f"(every rank, every step) equal bitwise; final parameters "
                     f"{'bitwise equal' if same_params else 'differ'} ({len(names)} tensors)")
    return lines


def by_link(runs):
    out = {}
    for run in runs:
        out.setdefault(run["link"], []).append(run)
    return out


def target_of(runs):
    return next((r["target"] for r in runs if "target" in r), TARGET)


def link_table(group, fit):
    target = target_of(group)
    twin = next((r for r in group if r["key"] == "allreduce"), None)
    lines = ["| run | final val loss | to val loss "
             f"{target} | step ms (mean) | compute / comm / optimiser ms | sent per step | "
             "cost model's step (measured / model) |", "|---|---|---|---|---|---|---|"]
    for run in group:
        s = run.get("stats")
        if s is None:
            lines.append(f"| {run['label']} | {run['status']} | | | | | |")
            continue
        to_target = (f"{s['target_s']:.1f} s (step {s['target_step']})" if s["target_s"]
                     else "not reached")
        model = predicted_step_ms(run, twin, fit)
        model_text = "n/a" if model is None else f"{model:.1f} ({s['step_ms'] / model:.2f})"
        sent = (f"{s['bytes_per_step'] / 1e6:.3f} MB" if s["bytes_per_step"] is not None else
                f"{4 * s['summary']['parameters'] / 1e6:.3f} MB†")
        comm = "in backward" if math.isnan(s["comm_ms"]) else f"{s['comm_ms']:.1f}"
        lines.append(f"| {run['label']} | {s['final_val']:.3f} | {to_target} | "
                     f"{s['step_ms']:.1f} | {s['compute_ms']:.1f} / {comm} / "
                     f"{s['optim_ms']:.1f} | {sent} | {model_text} |")
    return lines


def fastest(group):
    target = target_of(group)
    done = [r for r in group if r.get("stats") and r["stats"]["target_s"]]
    if not done:
        return f"no run reached validation loss {target}"
    done.sort(key=lambda r: r["stats"]["target_s"])
    first, line = done[0], ""
    line = (f"fastest to {target}: **{first['label']}** "
            f"({first['stats']['target_s']:.1f} s)")
    if len(done) > 1:
        second = done[1]
        ratio = second["stats"]["target_s"] / first["stats"]["target_s"]
        line += (f", {ratio:.2f}× sooner than {second['label']} "
                 f"({second['stats']['target_s']:.1f} s)")
    return line


def write_plots(out, runs):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["(no plots: matplotlib does not import)"]
    groups = by_link(runs)
    names = []
    for kind, xlabel, xs in (("wall", "wall-clock seconds (evaluation excluded)", 2),
                             ("bytes", "MB sent per rank (PyTorch DDP: its gradients' bytes)", 3)):
        fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.5), squeeze=False)
        for ax, (link, group) in zip(axes[0], groups.items()):
            for run in group:
                s = run.get("stats")
                if not s:
                    continue
                if kind == "bytes" and s["bytes_per_step"] is None:
                    x = [e[0] * 4 * s["summary"]["parameters"] / 1e6 for e in s["evals"]]
                else:
                    x = [e[xs] / (1e6 if kind == "bytes" else 1) for e in s["evals"]]
                ax.plot(x, [e[1] for e in s["evals"]], marker=".", label=run["label"].split(" @")[0])
            ax.axhline(target_of(group), color="gray", linestyle=":",
                       label=f"target {target_of(group)}")
            ax.set_title(f"link {link}")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("validation loss (nats per character)")
            if kind == "bytes":
                ax.set_xscale("symlog", linthresh=1)
            ax.legend(fontsize=7)
        fig.tight_layout()
        name = f"val_loss_vs_{kind}.png"
        fig.savefig(os.path.join(out, name), dpi=100)
        plt.close(fig)
        names.append(f"![validation loss against {kind}]({name})")
    return names


def progress_line(index, total, run, run_dir):
    if run["status"] != "ok":
        return f"[{index}/{total}] {run['label']}: {run['status']}"
    try:
        s = summarise(run_dir, run.get("target", TARGET))
    except ReportError as e:
        return f"[{index}/{total}] {run['label']}: {e}"
    return (f"[{index}/{total}] {run['label']}: validation loss {s['final_val']:.3f} after "
            f"{s['steps']} steps, mean step {s['step_ms']:.1f} ms ({run['wall_s']:.0f} s)")


def load_runs(out):
    runs_dir = os.path.join(out, "runs")
    runs = []
    for name in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        try:
            with open(os.path.join(runs_dir, name, "run.json")) as f:
                run = json.load(f)
        except (OSError, ValueError):
            continue
        run["run_dir"] = os.path.join(runs_dir, name)
        if run["status"] == "ok":
            try:
                run["stats"] = summarise(run["run_dir"], run.get("target", TARGET))
            except ReportError as e:
                run["status"] = f"failed: {e}"
        runs.append(run)
    return sorted(runs, key=lambda r: r.get("order", 0))


def results_csv(out, runs):
    with open(os.path.join(out, "results.csv"), "w") as f:
        f.write("link,run,sync,status,final_val_loss,seconds_to_target,steps_to_target,"
                "mean_step_ms,compute_ms,comm_ms,optim_ms,bytes_per_step\n")
        for r in runs:
            s = r.get("stats") or {}
            f.write(",".join(str(x) for x in (
                r["link"], r["key"], r["sync"], r["status"].split(":")[0], s.get("final_val"),
                s.get("target_s"), s.get("target_step"), s.get("step_ms"), s.get("compute_ms"),
                s.get("comm_ms"), s.get("optim_ms"), s.get("bytes_per_step"))) + "\n")


def build(out):
    """Writes report.md, results.csv and the plots from <out>'s runs; returns the runs."""
    try:
        with open(os.path.join(out, "invocation.json")) as f:
            inv = json.load(f)
    except (OSError, ValueError) as e:
        raise ReportError(f"{out}/invocation.json unreadable: {e}") from None
    runs = load_runs(out)
    first = next((r["stats"]["summary"] for r in runs if r.get("stats")), None)
    lines = ["# The character language model across links", "",
             f"{inv['date']}, {run_driver.machine_words(inv)}, torch "
             f"{inv['torch_version']}, load {inv['load_before']} before and "
             f"{inv['load_after']} after, {inv['duration_s'] / 60:.1f} minutes; mode "
             f"{inv['mode']}, {inv['steps']} steps per run, 2 ranks on 2 emulated hosts.", ""]
    if first:
        m = first["model"]
        lines += [f"Model `{first['config']}`: {first['parameters']:,} parameters "
                  f"({m['n_layer']} layers, {m['n_head']} heads, width {m['n_embd']}, context "
                  f"{m['block_size']}); AdamW at peak lr {first['lr']} (warm-up "
                  f"{first['warmup']} steps, cosine to a tenth), clip {first['clip']}; "
                  f"{first['batch_size']} sequences per rank and step. Text: the KJV Bible "
                  f"from Debian's bible-kjv, {first['text_characters']:,} characters "
                  f"(sha256 {first['text_sha256'][:16]}…), vocabulary {first['vocab']}, "
                  f"{first['train_tokens']:,} train / {first['valid_tokens']:,} validation "
                  f"characters. Validation: {first['eval_windows']} windows, every "
                  f"{first['eval_every']} steps.", ""]
    lines += [f"Target: validation loss {target_of(runs)} nats per character.", "",
              "## ringlab's allreduce against PyTorch DDP over gloo", ""] + fidelity(runs)
    for link, group in by_link(runs).items():
        fit = fm_links.link_fit(out, link)
        lines += ["", f"## Link {link}", "", fastest(group), ""] + link_table(group, fit)
        lines += ["", "† PyTorch DDP's bytes: its gradients, 4 bytes per parameter per step "
                  "(gloo does not count them); its cost-model compute is the allreduce run's."]
        if isinstance(fit, str):
            lines.append(f"Cost model: {fit}.")
    lines += ["", "## Plots", ""] + write_plots(out, runs)
    sample = next((r for r in runs if r.get("stats") and r["key"] == "allreduce"), None)
    if sample:
        lines += ["", f"## What the model writes ({sample['label']}, prompt \"And God said\")",
                  "", "```", sample["stats"]["sample"].rstrip(), "```"]
    lines += ["", "## Runs", "", "Paths as in the checkout; OUT is this report's folder.", ""]
    lines += [f"- {r['name']}: {r['status']}: `{run_driver.short_command(r.get('command', ''), out)}`"
              for r in runs]
    lines += [f"- note: {n}" for n in inv.get("notes", [])]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    results_csv(out, runs)
    return runs
