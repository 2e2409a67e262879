"""The sync map's report on repeated points (--repeats): a point's runs do the same arithmetic,
so only their wall-clock differs, and only that spread says whether one synchroniser's lead
over another is real.

A lead is settled when a two-sided exact Mann-Whitney U test over the two points' runs gives
p <= SETTLED_P, the test Google Benchmark's compare.py applies to two benchmarks' repetitions;
two-sided, since which of the two leads is read off the same runs. It assumes nothing of the
spread's shape, which here is far from normal (a run can take 2.75x another). With three runs
each no lead can be settled (p >= 0.1); with four each, only when every run of one beats every
run of the other (p = 0.029). Each test stands alone; those against BASELINE at a setting are
also given under Holm's correction for their number.
"""

import statistics

from scipy import stats

import map_model

SETTLED_P = 0.05
BASELINE = "allreduce"  # the synchroniser every other is held against: DDP's


def rank_test(a, b):
    """(p, lead): the two-sided exact Mann-Whitney U p-value of runs `a` against runs `b`, and
    -1 where `a` is settled the faster (its median the lower, p <= SETTLED_P), +1 where `b` is,
    0 where neither (1e-9: an exact p of 0.05 must not fall to rounding)."""
    p = stats.mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue
    if p > SETTLED_P + 1e-9:
        return p, 0
    median_a, median_b = statistics.median(a), statistics.median(b)
    return p, (median_a > median_b) - (median_a < median_b)


def repeat_lines(point_runs):
    """Where points ran more than once ({(sync, link, ranks): [(measured s, predicted s)]}):
    each one's spread, and at each setting with such a point whether the fastest's lead over
    the runner-up is settled; then each synchroniser against BASELINE."""
    runs = {key: sorted(r[0] for r in v) for key, v in point_runs.items()}
    repeated = {key: t for key, t in runs.items() if len(t) > 1}
    if not repeated:
        return []
    lines = ["### Repeated points", "",
             "A point's time is its runs' median; the spread is its slowest run over its "
             "fastest. The same arithmetic each run: only the wall-clock differs. A lead is "
             f"settled where a two-sided Mann-Whitney U test over the two points' runs gives "
             f"p ≤ {SETTLED_P:g}.", "",
             "| synchroniser | link | ranks | runs | median to target | fastest – slowest | "
             "spread |", "|---|---|---|---|---|---|---|"]
    for (sync, link, ranks), t in sorted(repeated.items()):
        lines.append(f"| {sync} | {link} | {ranks} | {len(t)} | {statistics.median(t):.1f} s | "
                     f"{t[0]:.1f} – {t[-1]:.1f} s | {100 * (t[-1] / t[0] - 1):.0f}% |")
    spreads = [t[-1] / t[0] - 1 for t in repeated.values()]
    lines += ["", f"Spread: a median of {100 * statistics.median(spreads):.0f}%, at most "
                  f"{100 * max(spreads):.0f}%.", ""]
    for (link, ranks), by_sync in sorted(map_model.by_setting(runs).items()):
        entries = sorted((statistics.median(t), sync, t) for sync, t in by_sync.items())
        if len(entries) < 2 or all(len(e[2]) < 2 for e in entries):
            continue
        (first, sync, _), (second, runner, _) = entries[:2]
        lines.append(f"- {link}, {ranks} ranks: {sync} fastest (median {first:.1f} s), "
                     f"{100 * (second / first - 1):.0f}% ahead of {runner}; "
                     f"{lead_verdict(entries)}")
    return lines + [""] + against_baseline(runs)


def lead_verdict(entries):
    """Whether the fastest's lead at a setting ([(median, sync, sorted runs)], by median) is
    settled over the runner-up and then over each other point that ran more than once: a
    lead settled over the runner-up need not be settled over a point behind it whose runs
    overlap the fastest's more."""
    (_, _, fastest), (_, _, runner_up) = entries[:2]
    if min(len(fastest), len(runner_up)) < 2:
        return "one of the two ran once: its spread is not known, nor whether it is settled."
    p, lead = rank_test(fastest, runner_up)
    if lead >= 0:
        return f"p = {p:.3f} over their runs: within the spread, not settled."
    others = [(sync, *rank_test(fastest, runs)) for _, sync, runs in entries[2:] if len(runs) > 1]
    open_leads = [f"{sync} (p = {q:.3f})" for sync, q, lead in others if lead >= 0]
    if open_leads:
        return (f"p = {p:.3f} over their runs: settled; its lead over "
                f"{', '.join(open_leads)} is not.")
    return f"p = {p:.3f} over their runs: settled" + (", and over every other." if others else ".")


def against_baseline(runs, baseline=BASELINE):
    """At each setting where the baseline and others ran more than once ({key: sorted times}):
    which are settled faster than it, which settled slower, and which neither; then which are
    settled either way under Holm's correction for the setting's tests."""
    lines = []
    for (link, ranks), by_sync in sorted(map_model.by_setting(runs).items()):
        base = by_sync.get(baseline, [])
        others = {s: t for s, t in by_sync.items() if s != baseline and len(t) > 1}
        if len(base) < 2 or not others:
            continue
        names = sorted(others)
        tests = [rank_test(others[s], base) for s in names]
        faster, slower, neither = ([s for s, (_, lead) in zip(names, tests) if lead == sign]
                                   for sign in (-1, 1, 0))
        kept = holm([p for p, _ in tests])
        held_faster, held_slower = ([s for s, (_, lead), keep in zip(names, tests, kept)
                                     if keep and lead == sign] for sign in (-1, 1))
        lines.append(f"- {link}, {ranks} ranks, against {baseline} ({len(base)} runs, "
                     f"{base[0]:.1f} – {base[-1]:.1f} s): settled faster: "
                     f"{', '.join(faster) or 'none'}; settled slower: "
                     f"{', '.join(slower) or 'none'}; not settled: {', '.join(neither) or 'none'}. "
                     f"With Holm's correction for {tests_here(len(names))}: settled faster: "
                     f"{', '.join(held_faster) or 'none'}; settled slower: "
                     f"{', '.join(held_slower) or 'none'}.")
    return lines + [""] if lines else []


def tests_here(n):
    return "this 1 test" if n == 1 else f"these {n} tests"


def holm(p_values):
    """For each test, whether Holm's step-down procedure keeps it settled at SETTLED_P: the
    smallest p against SETTLED_P / m, the next against SETTLED_P / (m - 1), and so on until
    one fails; so the chance that any of the m is settled falsely stays at most SETTLED_P."""
    order = sorted(range(len(p_values)), key=p_values.__getitem__)
    kept = [False] * len(p_values)
    for k, i in enumerate(order):
        if p_values[i] > SETTLED_P / (len(p_values) - k) + 1e-9:
            break
        kept[i] = True
    return kept


def slowdown_cell(without, with_straggler):
    """A straggler table's cell: the rank test of a point's runs without a straggler against
    its runs with one; n/a where either side ran once."""
    if min(len(without), len(with_straggler)) < 2:
        return "n/a (one run)"
    p, lead = rank_test(without, with_straggler)
    return f"p = {p:.3f}: " + {-1: "settled", 0: "not settled", 1: "faster with it, settled"}[lead]
