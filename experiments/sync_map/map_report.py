"""The sync map's report from the points its runs left (point.json): the tuning tables, every
measured point beside the cost model's prediction, a winner heatmap per model, the compute
utilisation table in Douillard's form, and the pick-when table docs/synchronizers.md includes.

A heatmap cell is validated when at least one measured point lies within one row and one column
of it and every such point is within VALIDATED_ERROR of its prediction, made with that point's
own runs held out of the compute; others are hatched (unvalidated: extrapolated past what ran
here). A point's time is its runs' median: a repeated point's runs do the same arithmetic, so
their spread is the machine's, not the model's to predict.
"""

import glob
import json
import math
import os
import statistics

import map_grid
import map_model
import map_repeats
from run_driver import machine_words

MAP_LINKS = ("100mbit", "1gbit", "10gbit", "25gbit", "100gbit", "400gbit")
MAP_RANKS = (2, 4, 8, 16, 64, 256, 1024)
VALIDATED_ERROR = 0.20
CLEAR_MARGIN = 0.20  # top two apart by more: the measured winner must be the predicted one
UTILISATION = (0.5, 0.9, 0.99)
UTILISATION_RANKS = (2, 1024)
COLOURS = {"allreduce": "C0", "allreduce_nesterov": "navy", "fp16": "C1", "topk": "olive",
           "int8": "limegreen", "ef_signsgd": "teal", "sparta": "gold", "demo": "slateblue",
           "diloco": "C6", "streaming_diloco": "C9", "sparseloco": "darkred"}


def bench_fit(path, hosts):
    """(alpha, B_eff) of the gloo allreduce in an allreduce_bench output, None if unusable."""
    import cost_model
    try:
        with open(path) as f:
            rows, ranks, _ = cost_model.parse_bench(f.read())
        return cost_model.fit(rows["allreduce/gloo"], ranks, hosts, False)
    except (OSError, KeyError, cost_model.ModelError):
        return None


def read_points(out, model, kind):
    """The points under <out>/runs/<model>/<kind>/, in a fixed order, each with which run of
    its point it is (repeat)."""
    points = []
    for path in sorted(glob.glob(os.path.join(out, "runs", model, kind, "*", "*",
                                              "point.json"))):
        with open(path) as f:
            points.append(dict(json.load(f), repeat=map_grid.repeat_of(os.path.dirname(path))))
    return points


def seconds(predicted):
    return "n/a" if predicted is None else short_s(predicted[0])


def short_s(value):
    return f"{value:.0f} s" if value >= 10 else f"{value:.2g} s"


def _fits(out):
    """{link: (alpha, B_eff)} the driver fitted (fits.json), {} before any."""
    path = os.path.join(out, "fits.json")
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        return {link: tuple(fit) for link, fit in json.load(f).items()}


def at_edge(flags, points):
    """True when the kept learning rate is the smallest or largest of those tuning tried (its
    grid widened as far as it may go)."""
    lrs = [p["flags"]["lr"] for p in points]
    return flags.get("lr") in (min(lrs), max(lrs))


def tuning_lines(out, model, tuned):
    """A table per synchroniser: each grid point's metric at each tuning evaluation (at most
    TUNING_COLUMNS of them, the last among them)."""
    target = map_grid.MODELS[model]["target"]
    lines = []
    by_sync = {}
    for p in read_points(out, model, "tune"):
        by_sync.setdefault(p["sync"], []).append(p)
    for sync, points in by_sync.items():
        shown = _columns(len(points[0]["evals"]))
        units = [points[0]["evals"][i][target.unit] for i in shown]
        lines += [f"**{sync}**", "", "| setting | " + " | ".join(
            f"{target.unit} {u}" for u in units) + " |", "|---|" + "---|" * len(units)]
        for p in sorted(points, key=lambda p: sorted(p["flags"].items())):
            mark = ""
            if p["flags"] == tuned.get(sync):
                edge = at_edge(p["flags"], points)
                mark = " (kept, at the grid's edge)" if edge else " (kept)"
            name = ", ".join(f"{k} {v}" for k, v in p["flags"].items())
            lines.append(f"| {name}{mark} | " + " | ".join(
                target.format(p["evals"][i][target.metric]) if i < len(p["evals"]) else "n/a"
                for i in shown) + " |")
        lines.append("")
    return lines


TUNING_COLUMNS = 8


def _columns(count):
    """The indices of the evaluations a tuning table shows: all, or TUNING_COLUMNS evenly
    spread ending at the last."""
    if count <= TUNING_COLUMNS:
        return list(range(count))
    return sorted({count - 1 - round(i * (count - 1) / (TUNING_COLUMNS - 1))
                   for i in range(TUNING_COLUMNS)})


def checks(points, fits, target, overlapping=frozenset()):
    """[(point, measured s or None, (predicted s, extrapolated) or None, error)], each point
    predicted with its own run held out of its synchroniser's compute and of the window
    (map_model.profiles): a check of a prediction, not of a fit to the run it checks. Each
    point carries bucket_share, the share of its predicted time the emulator's bucket saved
    (what a real link of its rate would not). Its repeats are held out with it, and a point
    alone at its rank count has no such prediction (another rank count's compute would check
    the scaling, not the point)."""
    rows, profile_of = [], {}
    for p in points:
        reach = map_model.first_reach(p["evals"], target)
        key = map_model.point_key(p)
        if key not in profile_of:
            profile_of[key] = map_model.profiles(points, fits, target, held_out=p,
                                                 overlapping=overlapping)[p["sync"]]
        profile = profile_of[key]
        predicted = (map_model.predict(profile, fits, p["link"], p["ranks"],
                                        emulated=True)
                     if p["ranks"] in profile["compute_ms"] else None)
        error = (predicted[0] / reach[1] - 1 if reach and predicted else None)
        real = map_model.predict(profile, fits, p["link"], p["ranks"]) if predicted else None
        share = 1 - predicted[0] / real[0] if real and real[0] > 0 else 0.0
        rows.append((dict(p, bucket_share=share), reach[1] if reach else None, predicted, error))
    return rows


def runs_by_point(rows):
    """{(sync, link, ranks): [(measured s, predicted s) of each run that reached the target
    (predicted None where it has no prediction)]}: a point's repeats together."""
    return map_model.by_point((p, (measured, predicted[0] if predicted else None))
                              for p, measured, predicted, _ in rows if measured is not None)


def point_rows(rows):
    """One row per point, as checks() gives one per run: (the point's first run, its runs'
    median time to target, the prediction its runs share, the error of that median). A
    point's runs do the same arithmetic, so they reach the target alike: a repeat runs only
    where the first run finished."""
    out = []
    for runs in map_model.by_point((r[0], r) for r in rows).values():
        first = min(runs, key=lambda r: r[0].get("repeat", 1))
        reached = [r[1] for r in runs if r[1] is not None]
        measured = statistics.median(reached) if reached else None
        predicted = first[2]
        error = predicted[0] / measured - 1 if measured and predicted else None
        out.append((first[0], measured, predicted, error))
    return out


def winner_checks(points):
    """[(link, ranks, measured winner, predicted winner, margin)] where the measured top two
    differ by more than CLEAR_MARGIN, from point_rows: a point's time its runs' median."""
    timed = {map_model.point_key(p): (measured, predicted[0])
             for p, measured, predicted, _ in points if measured is not None and predicted}
    out = []
    for (link, ranks), by_sync in sorted(map_model.by_setting(timed).items()):
        if len(by_sync) < 2:
            continue
        by_measured = sorted((measured, sync) for sync, (measured, _) in by_sync.items())
        margin = by_measured[1][0] / by_measured[0][0] - 1
        if margin > CLEAR_MARGIN:
            out.append((link, ranks, by_measured[0][1],
                        min(by_sync, key=lambda sync: by_sync[sync][1]), margin))
    return out


def grid(profiles, fits):
    """{(link, ranks): [(seconds, sync)] sorted}, the predicted times over the map. A cell
    compares compute of one kind: at a rank count not every synchroniser ran, each takes its
    smallest rank count's (one core a rank here), not some their N's (two ranks a core)."""
    measured = [set(p["compute_ms"]) for p in profiles.values() if p["compute_ms"]]
    common = set.intersection(*measured) if measured else set()
    profiles = {sync: dict(p, compute_ms={n: c for n, c in p["compute_ms"].items()
                                          if n in common or n == min(p["compute_ms"])})
                for sync, p in profiles.items()}
    cells = {}
    for link in MAP_LINKS:
        for ranks in MAP_RANKS:
            times = []
            for sync, prof in profiles.items():
                predicted = map_model.predict(prof, fits, link, ranks)
                if predicted is not None:
                    times.append((predicted[0], sync))
            cells[(link, ranks)] = sorted(times)
    return cells


def map_row(link, fits):
    """The map's row nearest a measured link: its nominal rate, or for the unlimited link the
    rate its fit reached; None when it has neither."""
    if link in MAP_LINKS:
        return MAP_LINKS.index(link)
    bits = map_model.link_bits(link)
    if bits is None:
        fit = fits.get(link)
        if fit is None:
            return None
        bits = fit[1] * 8
    return min(range(len(MAP_LINKS)),
               key=lambda i: abs(math.log(map_model.link_bits(MAP_LINKS[i]) / bits)))


def validated(rows, link, ranks, fits=None):
    """True when measured points neighbour the cell (within a row and a column) and each is
    within VALIDATED_ERROR of its prediction, which the emulator's bucket shortened by no
    more than that: a point the bucket sped up more says little of a real link."""
    li, ri = MAP_LINKS.index(link), MAP_RANKS.index(ranks)
    near = [r for r in rows if r[3] is not None and r[0]["ranks"] in MAP_RANKS
            and map_row(r[0]["link"], fits or {}) is not None
            and abs(map_row(r[0]["link"], fits or {}) - li) <= 1
            and abs(MAP_RANKS.index(r[0]["ranks"]) - ri) <= 1]
    return bool(near) and all(abs(r[3]) <= VALIDATED_ERROR
                              and r[0].get("bucket_share", 0.0) <= VALIDATED_ERROR for r in near)


def heatmap(model, cells, rows, fits, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle
    fig, ax = plt.subplots(figsize=(1.3 * len(MAP_RANKS) + 3, 0.8 * len(MAP_LINKS) + 1.6))
    winners = set()
    for (link, ranks), times in cells.items():
        x, y = MAP_RANKS.index(ranks), MAP_LINKS.index(link)
        if not times:
            ax.text(x, y, "n/a", ha="center", va="center", fontsize=8)
            continue
        winners.add(times[0][1])
        ok = validated(rows, link, ranks, fits)
        ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, color=COLOURS.get(times[0][1], "grey"),
                               alpha=0.85 if ok else 0.45, hatch=None if ok else "//",
                               ec="white"))
        margin = f"+{100 * (times[1][0] / times[0][0] - 1):.0f}%" if len(times) > 1 else ""
        ax.text(x, y, f"{short_s(times[0][0])}\n{margin}", ha="center", va="center",
                fontsize=8)
    for p, measured, _, _ in rows:
        row = map_row(p["link"], fits)
        if measured is not None and row is not None and p["ranks"] in MAP_RANKS:
            ax.plot(MAP_RANKS.index(p["ranks"]) + 0.38, row - 0.38, "k^", ms=4)
    ax.set_xlim(-0.5, len(MAP_RANKS) - 0.5)
    ax.set_ylim(-0.5, len(MAP_LINKS) - 0.5)
    ax.set_xticks(range(len(MAP_RANKS)), [str(r) for r in MAP_RANKS])
    ax.set_yticks(range(len(MAP_LINKS)), [link_label(l) for l in MAP_LINKS])
    ax.set_xlabel("ranks (measured: 2 hosts up to 4 ranks, then 2 a host; predicted beyond 8: "
                  "8 a host)")
    ax.set_ylabel("each host's link")
    ax.set_title(f"{model}: the fastest to target, its predicted seconds, and +x%: how much "
                 f"longer the runner-up takes\nhatched: unvalidated (no measured neighbour, or "
                 f"one off by over 20% or sped up by the emulator's bucket by over 20%); "
                 f"triangle: measured here", fontsize=9)
    ax.legend(handles=[Patch(color=COLOURS.get(s, "grey"), label=s) for s in sorted(winners)],
              loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def link_label(link):
    bits = map_model.link_bits(link)
    return "unlimited" if bits is None else (f"{bits / 1e9:g} Gbit/s" if bits >= 1e9
                                              else f"{bits / 1e6:g} Mbit/s")


def utilisation_lines(model, profiles, fits):
    header = " | ".join(f"{int(100 * u)}% at {n} ranks" for n in UTILISATION_RANKS
                        for u in UTILISATION)
    lines = [f"| {model} | {header} |", "|---|" + "---|" * len(UTILISATION_RANKS)
             * len(UTILISATION)]
    for sync, prof in profiles.items():
        cells = []
        for ranks in UTILISATION_RANKS:
            for share in UTILISATION:
                g = map_model.utilisation_gbit(prof, fits, ranks, share)
                cells.append("n/a" if g is None else f"{g:.3g}")
        lines.append(f"| {sync} | " + " | ".join(cells) + " |")
    return lines + [""]


def pick_when_rows(model, cells, rows, fits):
    """[(model, sync, links, ranks, cells won, median lead, validated)] per winner."""
    won = {}
    for (link, ranks), times in cells.items():
        if times:
            lead = times[1][0] / times[0][0] - 1 if len(times) > 1 else math.inf
            won.setdefault(times[0][1], []).append((link, ranks, lead,
                                                    validated(rows, link, ranks, fits)))
    out = []
    for sync, where in sorted(won.items(), key=lambda kv: -len(kv[1])):
        leads = [w[2] for w in where]
        out.append((model, sync, region({(w[0], w[1]) for w in where}), len(where),
                    statistics.median(leads), sum(w[3] for w in where)))
    return out


def _span(items, order, label=str):
    """'a–b' for items contiguous in order, else 'a, c, d'."""
    idx = sorted(order.index(i) for i in items)
    if idx == list(range(idx[0], idx[-1] + 1)):
        return label(order[idx[0]]) + ("" if len(idx) == 1 else "–" + label(order[idx[-1]]))
    return ", ".join(label(order[i]) for i in idx)


def region(cells):
    """The cells a synchroniser wins, as link spans each with their ranks: consecutive links
    that share a set of ranks are one span."""
    groups = []
    for link in MAP_LINKS:
        ranks = tuple(sorted(r for l, r in cells if l == link))
        if not ranks:
            continue
        if groups and groups[-1][1] == ranks and MAP_LINKS.index(groups[-1][0][-1]) + 1 == \
                MAP_LINKS.index(link):
            groups[-1][0].append(link)
        else:
            groups.append(([link], ranks))
    return "; ".join(f"{_span(links, MAP_LINKS, link_label)} at {_span(ranks, MAP_RANKS)} ranks"
                     for links, ranks in groups)


def pick_when_table(rows):
    lines = ["| model | pick | where it is fastest to the target (each host's link, ranks) | "
             "cells | median lead over the runner-up | validated cells |",
             "|---|---|---|---|---|---|"]
    for model, sync, where, n, lead, ok in rows:
        lines.append(f"| {model} | {sync} | {where} | {n} of "
                     f"{len(MAP_LINKS) * len(MAP_RANKS)} | "
                     f"{'alone' if math.isinf(lead) else f'{100 * lead:.0f}%'} | {ok} |")
    return lines + [""]


def point_lines(rows, points):
    """The table of runs (checks()) beside their predictions, and how many are within 20%:
    points (point_rows) by their runs' median, and where a point ran more than once, run by
    run too."""
    lines = ["| synchroniser | link | ranks | measured to target | predicted | error |",
             "|---|---|---|---|---|---|"]
    for p, measured, predicted, error in rows:
        lines.append(f"| {run_name(p)} | {p['link']} | {p['ranks']} | "
                     f"{'not reached' if measured is None else f'{measured:.1f} s'} | "
                     f"{seconds(predicted)} | "
                     f"{'n/a' if error is None else f'{100 * error:+.0f}%'} |")
    unchecked = sum(r[1] is not None and r[2] is None for r in points)
    tail = f" ({unchecked} more reached it with none: n/a above)." if unchecked else "."
    within = (f"Within 20%: {within_count(points)} measured points that reached the target "
              f"with a held-out prediction")
    if len(rows) > len(points):
        within += f", a point's time its runs' median{tail} Run by run: {within_count(rows)}."
    else:
        within += tail
    sped = [f"{p['sync']} at {p['link']}, {p['ranks']} ranks ({100 * p['bucket_share']:.0f}%)"
            for p, _, predicted, _ in points
            if predicted and p.get("bucket_share", 0.0) > VALIDATED_ERROR]
    if sped:
        within += (" The emulator's bucket shortened these predictions by more than 20% of a "
                   f"real link's, so they validate no cell of the map: {', '.join(sped)}.")
    return lines + ["", within, ""]


def within_count(rows):
    """'G of N': of the rows with a prediction and a time, those within VALIDATED_ERROR."""
    checked = [r[3] for r in rows if r[3] is not None]
    return f"{sum(abs(e) <= VALIDATED_ERROR for e in checked)} of {len(checked)}"


def run_name(p):
    """A run's synchroniser, and which run of its point it is when not the first."""
    return p["sync"] + (f" (run {p['repeat']})" if p.get("repeat", 1) > 1 else "")


def straggler_lines(out, model, without, profiles, fits, target, factor):
    """Each straggler point beside the same point without one (`without`, runs_by_point), the
    rank test of its slowdown, and the prediction: a point's time its runs' median."""
    points = read_points(out, model, "straggler")
    slow = map_model.by_point(
        (p, reach[1] if (reach := map_model.first_reach(p["evals"], target)) else None)
        for p in points)
    if not slow:
        return []
    limits = sorted({p.get("straggler_limit", "sleep") for p in points})
    how = "" if limits == ["sleep"] else f", by {' and '.join(limits)}"
    lines = [f"### A straggler (the last rank computes {factor}× as long{how})", "",
             "A slowdown is settled where a two-sided Mann-Whitney U test over the runs with "
             f"and without the straggler gives p ≤ {map_repeats.SETTLED_P:g}.", "",
             "| synchroniser | link | ranks | to target without | with | slower by | "
             "slowdown settled | predicted with | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (sync, link, ranks), times in slow.items():
        base_runs = [r[0] for r in without.get((sync, link, ranks), [])]
        base = statistics.median(base_runs) if base_runs else None
        reached = [t for t in times if t is not None]
        measured = statistics.median(reached) if reached else None
        predicted = map_model.predict(profiles[sync], fits, link, ranks, factor, emulated=True)
        lines.append(
            f"| {sync}{f' ({len(times)} runs)' if len(times) > 1 else ''} | {link} | {ranks} | "
            f"{'n/a' if base is None else f'{base:.1f} s'} | "
            f"{'not reached' if measured is None else f'{measured:.1f} s'} | "
            f"{f'{100 * (measured / base - 1):.0f}%' if base and measured else 'n/a'} | "
            f"{map_repeats.slowdown_cell(base_runs, reached)} | {seconds(predicted)} | "
            f"{f'{100 * (predicted[0] / measured - 1):+.0f}%' if predicted and measured else 'n/a'}"
            f" |")
    return lines + [""]


def model_section(out, model, target, tuned, fits):
    points = read_points(out, model, "map")
    lines = [f"## {model} (target: {target.describe()})", "",
             f"### Tuning (2 ranks, one host; the setting kept is the best "
             f"{target.metric.replace('_', ' ')} at the last evaluation; a grid whose best "
             f"learning rate is at its edge is widened by a factor of "
             f"{map_grid.WIDEN_FACTOR:g} past it, at most {map_grid.WIDEN_STEPS} times a "
             f"side)", ""]
    lines += tuning_lines(out, model, tuned.get(model, {}))
    if not points:
        return lines + ["No map point ran.", ""], []
    overlapping = map_grid.overlapping(model)
    profiles = map_model.profiles(points, fits, target, overlapping=overlapping)
    rows = checks(points, fits, target, overlapping)
    missing = [s for s in tuned.get(model, {}) if s not in profiles]
    if missing:
        lines += [f"Tuned but not in the map (no point ran): {', '.join(missing)}.", ""]
    lines += ["### Measured points beside the cost model", "",
              "Each point is predicted with its own runs held out: its synchroniser's compute "
              "is the median of its other points' runs at that rank count, and the window "
              "behind which DDP's family hides its communication is fitted without its "
              "synchroniser (the family's only member: without its runs). It is predicted on "
              "the emulated link, whose token bucket lets a burst through after an idle spell "
              "(the credit); the map predicts real links, without it."]
    lines += [window_line(profiles), ""]
    medians = point_rows(rows)
    lines += point_lines(rows, medians)
    wins = winner_checks(medians)
    right = sum(w[2] == w[3] for w in wins)
    settings = f"{len(wins)} setting" + ("" if len(wins) == 1 else "s")
    lines += [f"Where the measured top two differ by more than 20% ({settings}), the predicted "
              f"fastest is the measured one at {right}."]
    lines += [f"- {link}, {ranks} ranks: measured {m}, predicted {p} (lead {100 * g:.0f}%)"
              for link, ranks, m, p, g in wins] + [""]
    point_runs = runs_by_point(rows)
    lines += map_repeats.repeat_lines(point_runs)
    lines += straggler_lines(out, model, point_runs, profiles, fits, target,
                             map_grid.STRAGGLER_FACTOR)
    cells = grid(profiles, fits)
    heatmap(model, cells, medians, fits, os.path.join(out, f"map_{model}.png"))
    lines += [f"![{model}](map_{model}.png)", "", "### Gbit/s for compute utilisation", "",
              "Douillard's form: the link rate at which compute is that share of a step, "
              "bandwidth alone (latency left out, as his simulator leaves it), at the "
              "efficiency the fastest shaped link reached here.", ""]
    lines += utilisation_lines(model, profiles, fits)
    return lines, pick_when_rows(model, cells, medians, fits)


def window_line(profiles):
    """The window the map's predictions use, per rank count, or why there is none."""
    windows = next((p["window_s"] for p in profiles.values() if p.get("window_s")), {})
    if not windows:
        return ("No window: none of DDP's family ran on both the unlimited link and a shaped "
                "one at a rank count, so nothing hides.")
    return "Window (all of DDP's family): " + ", ".join(
        f"{1e3 * w:.1f} ms at {n} ranks" for n, w in sorted(windows.items())) + "."


def minutes(sitting):
    """How long a sitting ran, from its invocation record: one not finished has none."""
    if "duration_s" not in sitting:
        return "not finished (stopped, or still running)"
    return f"{sitting['duration_s'] / 60:.1f} min"


def build(out, other=None):
    """Writes <out>/report.md, pick_when.md and map_<model>.png, with the agreement with the
    sitting in `other` when given; returns the failed runs."""
    with open(os.path.join(out, "tuned.json")) as f:
        tuned = json.load(f)
    invocation = {}
    if os.path.isfile(os.path.join(out, "invocation.json")):
        with open(os.path.join(out, "invocation.json")) as f:
            invocation = json.load(f)
    fits = _fits(out)
    lines = ["# The sync map", ""]
    for sitting in invocation.get("earlier", []) + [invocation]:
        lines += [f"- `{sitting.get('command', 'sync_map.py')}` on {sitting.get('date', '?')}, "
                  f"{machine_words(sitting)}, "
                  f"{minutes(sitting)}, load "
                  f"{sitting.get('load_before', '?')} before, "
                  f"{sitting.get('load_after', '?')} after."]
    lines += ["", "Links fitted (gloo allreduce, 2 ranks): " + ", ".join(
                 f"{link} alpha {1e6 * a:.0f} us, B_eff {8 * b / 1e9:.2f} Gbit/s"
                 for link, (a, b) in fits.items()), ""]
    picks = []
    for model in tuned:
        section, model_picks = model_section(out, model, map_grid.MODELS[model]["target"],
                                             tuned, fits)
        lines += section
        picks += model_picks
    table = pick_when_table(picks)
    for model in tuned:
        ran = {p["sync"] for p in read_points(out, model, "map")}
        if ran and set(tuned[model]) - ran:
            table += [f"{model}: among {', '.join(sorted(ran))} only; "
                      f"{', '.join(sorted(set(tuned[model]) - ran))} did not run in this "
                      f"sitting.", ""]
    lines += ["## Pick when", ""] + table
    failed = sorted(os.path.relpath(os.path.dirname(p), out)
                    for p in glob.glob(os.path.join(out, "runs", "**", "failed.txt"),
                                       recursive=True))
    lines += [f"Failed runs: {', '.join(failed) if failed else 'none'}.", ""]
    if other:
        lines += agreement_lines(out, other)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(out, "pick_when.md"), "w") as f:
        f.write("\n".join(table))
    return failed


def _sitting(out):
    """(tuned, {model: {(sync, link, ranks): seconds to target}}, {model: predicted winners})
    of one sitting's folder."""
    with open(os.path.join(out, "tuned.json")) as f:
        tuned = json.load(f)
    fits = _fits(out)
    times, winners = {}, {}
    for model in tuned:
        target = map_grid.MODELS[model]["target"]
        points = read_points(out, model, "map")
        profiles = map_model.profiles(points, fits, target,
                                      overlapping=map_grid.overlapping(model))
        runs = map_model.by_point((p, reach[1]) for p in points
                                  if (reach := map_model.first_reach(p["evals"], target)))
        times[model] = {key: statistics.median(t) for key, t in runs.items()}
        winners[model] = {cell: t[0][1] for cell, t in grid(profiles, fits).items() if t}
    return tuned, times, winners


def agreement_lines(out, other):
    """How far this sitting's claims reproduce in another's folder."""
    tuned_a, times_a, winners_a = _sitting(out)
    tuned_b, times_b, winners_b = _sitting(other)
    lines = [f"## Agreement with the sitting in {os.path.basename(os.path.normpath(other))}",
             ""]
    for model in tuned_a:
        syncs_a, syncs_b = set(tuned_a[model]), set(tuned_b.get(model, {}))
        both = sorted(syncs_a & syncs_b)
        same_tuning = [s for s in both if tuned_b[model][s] == tuned_a[model][s]]
        common = sorted(set(times_a.get(model, {})) & set(times_b.get(model, {})))
        diffs = sorted(abs(times_b[model][k] / times_a[model][k] - 1) for k in common)
        # A fastest is a claim only among two or more synchronisers measured in both.
        contested = [k for k in common
                     if sum((s, k[1], k[2]) in common for s in both) >= 2]
        measured_a = _measured_winners(times_a.get(model, {}), contested)
        measured_b = _measured_winners(times_b.get(model, {}), contested)
        lines += [f"- {model}: the same setting kept for {len(same_tuning)} of the "
                  f"{len(both)} synchronisers tuned in both.",
                  f"- {model}: {len(common)} points measured in both; time to target differs "
                  f"by a median of {100 * statistics.median(diffs):.0f}% and at most "
                  f"{100 * diffs[-1]:.0f}%." if diffs else f"- {model}: no point in both.",
                  f"- {model}: the measured fastest is the same at "
                  f"{sum(measured_a[c] == measured_b.get(c) for c in measured_a)} of "
                  f"{len(measured_a)} settings where both measured two or more of the same "
                  f"synchronisers."]
        if syncs_a != syncs_b:  # each map picks among its own synchronisers
            lines.append(f"- {model}: the maps are not compared: their synchronisers differ "
                         f"(only here: {', '.join(sorted(syncs_a - syncs_b)) or 'none'}; only "
                         f"there: {', '.join(sorted(syncs_b - syncs_a)) or 'none'}).")
            continue
        cells = set(winners_a.get(model, {})) & set(winners_b.get(model, {}))
        same = sum(winners_a[model][c] == winners_b[model][c] for c in cells)
        lines.append(f"- {model}: the map's predicted fastest is the same in {same} of "
                     f"{len(cells)} cells.")
    return lines + [""]


def _measured_winners(times, common):
    """{(link, ranks): the fastest synchroniser} over the points in common."""
    best = {}
    for sync, link, ranks in common:
        if (link, ranks) not in best or times[(sync, link, ranks)] < best[(link, ranks)][0]:
            best[(link, ranks)] = (times[(sync, link, ranks)], sync)
    return {cell: sync for cell, (_, sync) in best.items()}
