"""The sync map's cost model: a synchroniser's time to a model's target at any link rate and
rank count, from what its runs measured here.

    time to target (sync, link, N) = units to target (sync, N) x steps per unit (N)
                                     x step (sync, link, N)
    step (sync, link, N)           = compute (sync, N) + exposed (sync, link, N)
    comm (sync, link, N)           = events x (2(N-1) alpha
                                     + max(0, link bytes an event / B_eff (link) - credit))
    exposed (sync, link, N)        = max(0, comm (sync, link, N) - window (N)) for DDP's family,
                                     comm (sync, link, N) for the rest

- Units to target: the first evaluation at or past the target (a Target: the MLP's test
  accuracy counted in epochs, the language model's validation loss in steps), measured at each
  rank count run here. It does not depend on the link: ringlab's arithmetic is the same bit for bit
  on every link. Beyond the largest N measured, that N's (an assumption: a point using it is
  marked extrapolated).
- Compute: a run's wall-clock per step (data loading, encoding and local steps included), less
  its predicted exposed communication on its link; the median over the synchroniser's runs at
  that N, one per link, since the same steps' wall-clock here varies from run to run more than
  the margins between synchronisers (up to 1.6x on the language model); at an N not run here,
  the smallest N's (each rank then has a core of its own, as at 2 ranks here).
- Link bytes: the bytes one rank sends per step, averaged over its steps (losses.csv), scaled
  from 2 ranks by its collective's law: a ring allreduce sends 2(N-1)/N S, a ring allgather
  (N-1) w. The law is the one whose ratio between 4 and 2 ranks (1.5 against 3) is nearer the
  measured ratio; allreduce's where only 2 ranks ran. Ranks sit contiguously on hosts, so one
  rank per host sends across its host's link: the link carries one rank's bytes.
- Events: the share of steps that send anything (1 for DDP; 1/H for DiLoCo).
- alpha and B_eff: the gloo allreduce's fit to allreduce_bench across that link
  (experiments/cost_model), alpha the median over every link swept: it is software latency,
  the same on every link (the cost model's assumption), and one link's fit of it scatters
  (0.16 to 1.2 ms in one sitting here). A rate not swept takes its nominal rate times the
  efficiency of the nearest swept shaped link.
- Credit: what the emulator's token bucket lets through unshaped at each event, for measured
  points of the synchronisers outside DDP's family (the family's window, measured on the
  shaped link, holds what the bucket let through there): the bucket's depth in seconds of
  the rate, or the compute between two events where that is shorter (the bucket refills no
  more). A run the link paced that way (its transfer as long as the compute between events
  or longer, which refilled no more than the bucket) measures no compute: its runs are left
  out of the median where there are others. The map predicts real links, which have no
  bucket: a credit of 0.
- Window: the part of a step behind which DDP's family (map_grid.OVERLAPS_BACKWARD, whose
  buckets are reduced while backward runs) hides its communication: waiting on a slow link
  needs no core. For each of the family at N: its communication on its slowest shaped link
  less how much longer its steps took there than on the unlimited link (where all of it is
  taken to hide), within [0, that communication]; the window is the median over the family.
  Values outside [0, that communication] are bounds, not estimates: the median leaves them
  out where there are others. A check leaves its point's whole synchroniser out of the fit
  (a fit to the point would not check it), or, the family's only member, the point's runs. At
  an N without a window, the smallest N fitted; none fitted, none hidden. The rest send
  outside backward (the DiLoCo family and SPARTA after the optimiser's step, DeMo after
  backward): the model hides nothing of theirs, though Streaming DiLoCo overlaps its
  reductions with its next inner steps.
"""

import math
import re
import statistics

DATASET_SIZE = 60000  # Fashion-MNIST's training images
BATCH = 64
RING_RATIO, GATHER_RATIO = 1.5, 3.0  # bytes a rank sends at 4 ranks over at 2
BUCKET_MIN_BYTES, BUCKET_RATE_S = 128 << 10, 1e-3  # comm/cluster/link.h, Link::BurstBytes
LINK_BOUND = 0.05  # a run's compute this near what the link's pace gives: the link paced it


def link_bits(link):
    """A link's nominal rate in bit/s ('2.5gbit' -> 2.5e9), None for 'unlimited'."""
    if link == "unlimited":
        return None
    m = re.fullmatch(r"([0-9.]+)([kmgt])bit", link)
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]


def steps_per_epoch(ranks):
    """DistributedSampler's share per rank (padded), in batches of BATCH."""
    return math.ceil(math.ceil(DATASET_SIZE / ranks) / BATCH)


class Target:
    """What a model trains to: its evaluations' `metric` reaching `value` (at or above it when
    `higher`, else at or below), evaluations counted in `unit`: 'epoch' (Fashion-MNIST's, of
    steps_per_epoch steps at N ranks) or 'step'."""

    def __init__(self, metric, value, higher, unit):
        self.metric, self.value, self.higher, self.unit = metric, value, higher, unit

    def reached(self, evaluation):
        got = evaluation[self.metric]
        return got >= self.value if self.higher else got <= self.value

    def steps(self, units, ranks):
        return units * steps_per_epoch(ranks) if self.unit == "epoch" else units

    def describe(self):
        if self.metric == "test_accuracy":
            return f"{100 * self.value:.0f}% test accuracy"
        return f"{self.metric.replace('_', ' ')} {'at least' if self.higher else 'at most'} " \
               f"{self.value:g}"

    def format(self, value):
        return f"{100 * value:.2f}%" if self.metric == "test_accuracy" else f"{value:.3f}"


def link_fit(fits, link):
    """(alpha s, B_eff bytes/s) across `link`: the median alpha of the fits, and the link's
    own B_eff or its nominal rate times the efficiency of the swept shaped link nearest in
    rate; None without one."""
    if not fits:
        return None
    alphas = sorted(alpha for alpha, _ in fits.values())
    alpha = (alphas[(len(alphas) - 1) // 2] + alphas[len(alphas) // 2]) / 2
    if link in fits:
        return alpha, fits[link][1]
    bits = link_bits(link)
    shaped = [(abs(math.log(link_bits(name) / bits)), name) for name in fits
              if name != "unlimited"] if bits else []
    if not shaped:
        return None
    name = min(shaped)[1]
    return alpha, bits / 8 * (fits[name][1] * 8 / link_bits(name))


def bytes_law(bytes_by_ranks):
    """'allgather' when the bytes at 4 ranks over those at 2 are nearer 3 than 1.5, else
    'allreduce'."""
    two, four = bytes_by_ranks.get(2), bytes_by_ranks.get(4)
    if not two or not four:
        return "allreduce"
    ratio = four / two
    return "allgather" if abs(ratio - GATHER_RATIO) < abs(ratio - RING_RATIO) else "allreduce"


def link_bytes(profile, ranks):
    """Bytes one rank sends per step at `ranks`: measured there, else scaled from 2 ranks."""
    if ranks in profile["bytes"]:
        return profile["bytes"][ranks]
    two = profile["bytes"][2]
    if profile["law"] == "allgather":
        return two * (ranks - 1)
    return two * (ranks - 1) / (ranks / 2)


def bucket_s(link):
    """Seconds of its rate the emulator's token bucket holds on a shaped `link`
    (comm/cluster/link.h, Link::BurstBytes: a millisecond of the rate, at least 128 KiB): a
    sender idle that long finds the bucket full and sends that much unshaped."""
    bits = link_bits(link)
    if bits is None:
        return 0.0
    return max(BUCKET_MIN_BYTES * 8 / bits, BUCKET_RATE_S)


def transfer_s(profile, fit, ranks):
    """Seconds one communication event's bytes take at `fit`'s B_eff (a step's, where the
    synchroniser has no events)."""
    events = profile["events"]
    return link_bytes(profile, ranks) / (events if events > 0 else 1) / fit[1]


def comm_s(profile, fit, ranks, credit_s=0.0):
    """Seconds a step spends communicating: per event, the ring's latency and its bytes at
    B_eff less `credit_s`, what the bucket lets through unshaped."""
    events = profile["events"]
    transfer = transfer_s(profile, fit, ranks)
    if events <= 0:
        return transfer
    return events * (2 * (ranks - 1) * fit[0] + max(0.0, transfer - credit_s))


def window_at(profile, ranks):
    """The seconds of a step that hide `profile`'s communication at `ranks`: its window
    there, else at the smallest N fitted, else none."""
    windows = profile.get("window_s")
    if not windows:
        return 0.0
    return windows[ranks] if ranks in windows else windows[min(windows)]


def overlaps(profile):
    """True for DDP's family (profiles() marks it; a profile with a window is of it)."""
    return profile.get("overlaps", bool(profile.get("window_s")))


def exposed_s(profile, fits, link, ranks, compute_s, window_ranks=None, *, emulated):
    """The communication a step waits for across `link`, with compute_s of compute a step:
    for DDP's family what its window (at window_ranks, default `ranks`) does not hide, which
    was measured on the shaped link, bucket and all; for the rest, on an emulated link, less
    what the bucket let through, refilled during the compute between two events (at most its
    depth). A real link has no bucket: it sends at its rate from the first byte."""
    events = profile["events"]
    gap = compute_s / events if events > 0 else math.inf
    credit = min(bucket_s(link), gap) if emulated and not overlaps(profile) else 0.0
    comm = comm_s(profile, link_fit(fits, link), ranks, credit)
    return max(0.0, comm - window_at(profile, ranks if window_ranks is None else window_ranks))


def run_compute_s(step, profile, fits, link, ranks):
    """(a run's compute a step, paced?): its step less what it waited for, the bucket full at
    each event, and whether the link paced the run. Then an event's transfer lasts as long as
    the compute between two events or longer, and that compute refills no more than the bucket
    holds: the step is the link's pace whatever the compute below that, so it bounds the
    compute but does not measure it. Worked back from such a step, the compute between events
    comes out at the shorter of the transfer and the bucket; a run within LINK_BOUND of that is
    taken as paced."""
    full = step - exposed_s(profile, fits, link, ranks, math.inf, emulated=True)
    events = profile["events"]
    if full <= 0 or events <= 0 or bucket_s(link) <= 0 or overlaps(profile):
        return full, False
    pace = min(transfer_s(profile, link_fit(fits, link), ranks), bucket_s(link))
    return full, abs(full / events - pace) <= LINK_BOUND * pace


def step_s(point, target):
    """A run's wall-clock per step, to its last evaluation."""
    last = point["evals"][-1]
    return last["wall_s"] / target.steps(last[target.unit], point["ranks"])


def first_reach(evals, target):
    """(units, wall seconds) of the first evaluation at or past the Target, or None."""
    for e in evals:
        if target.reached(e):
            return e[target.unit], e["wall_s"]
    return None


def point_key(p):
    """(sync, link, ranks): what makes a run one point's; its repeats share it."""
    return p["sync"], p["link"], p["ranks"]


def by_point(pairs):
    """{point_key: [value, ...]} of (point, value) pairs: a point's repeats together."""
    grouped = {}
    for p, value in pairs:
        grouped.setdefault(point_key(p), []).append(value)
    return grouped


def by_setting(per_point):
    """{(link, ranks): {sync: value}} of {point_key: value}: the points one setting compares."""
    grouped = {}
    for (sync, link, ranks), value in per_point.items():
        grouped.setdefault((link, ranks), {})[sync] = value
    return grouped


def fit_windows(points, fits, target, by_sync, family):
    """{N: window seconds} from the runs of the synchronisers in `family` (by_sync: their
    profiles): at each N, each one's communication on its slowest shaped link less how much
    longer its steps took there than on the unlimited link, and the median over them. A value
    outside [0, that communication] is clamped there, a bound rather than an estimate, so the
    median is over the unclamped values where there are any. A synchroniser without both
    links at N, or without their fits, gives none."""
    steps = by_point((p, step_s(p, target)) for p in points if p["sync"] in family)
    hidden = {}
    for (sync, link, ranks), runs in steps.items():
        fast = steps.get((sync, "unlimited", ranks))
        shaped = [(link_bits(n), n) for s, n, r in steps
                  if s == sync and r == ranks and n != "unlimited" and link_fit(fits, n)]
        if not fast or not shaped or min(shaped)[1] != link:
            continue
        comm = comm_s(by_sync[sync], link_fit(fits, link), ranks)
        shortfall = comm - (statistics.median(runs) - statistics.median(fast))
        hidden.setdefault(ranks, []).append((min(max(shortfall, 0.0), comm),
                                             not 0.0 <= shortfall <= comm))
    windows = {}
    for ranks, values in hidden.items():
        estimates = [v for v, clamped in values if not clamped] or [v for v, _ in values]
        windows[ranks] = statistics.median(estimates)
    return windows


def profiles(points, fits, target, held_out=None, overlapping=frozenset()):
    """{sync: profile} from one model's measured points (dicts with sync, link, ranks, evals,
    bytes_per_step, events): bytes and units to the Target per N, the bytes' law, the window
    per N of those in `overlapping` (DDP's family), and compute per N, the median over the
    links' runs but those of the point `held_out` (every run of its synchroniser, link and
    rank count: a repeat of it would predict it from itself). The window leaves out the held-out
    point's runs too, and its whole synchroniser where the family has another member."""
    out = {}
    for p in points:
        prof = out.setdefault(p["sync"], {"bytes": {}, "units": {}, "compute_ms": {},
                                          "events": p["events"], "target": target})
        prof["bytes"].setdefault(p["ranks"], p["bytes_per_step"])
        reach = first_reach(p["evals"], target)
        prof["units"].setdefault(p["ranks"], reach[0] if reach else None)
    for prof in out.values():
        prof["law"] = bytes_law(prof["bytes"])
    held_out_key = point_key(held_out) if held_out is not None else None
    members = {s for s in overlapping if s in out}
    others = members - {held_out["sync"]} if held_out is not None else members
    windows = fit_windows([p for p in points if point_key(p) != held_out_key], fits, target, out,
                          others or members)
    for sync, prof in out.items():
        prof["window_s"] = windows if sync in overlapping else {}
        prof["overlaps"] = sync in overlapping
        per_ranks = {}
        for p in points:
            if (p["sync"] != sync or link_fit(fits, p["link"]) is None
                    or point_key(p) == held_out_key):
                continue
            per_ranks.setdefault(p["ranks"], []).append(
                run_compute_s(step_s(p, target), prof, fits, p["link"], p["ranks"]))
        for ranks, computes in per_ranks.items():
            measured = [c for c, paced in computes if not paced] or [c for c, _ in computes]
            prof["compute_ms"][ranks] = max(statistics.median(measured), 0.0) * 1e3
    return out


def predict(profile, fits, link, ranks, stretch=1.0, emulated=False):
    """(seconds to target, extrapolated?) or None when unreachable or unmodelled here (no
    compute measured, no fit for the link, the target not reached within the budget): on a
    real link, or on this machine's emulated one (its token bucket's bursts counted). With
    stretch, one rank computes stretch times as long, and every synchroniser here waits for
    it: none is asynchronous. DDP's family's window stretches too (an assumption): the buckets
    handed to the communication thread cross the link while the slow rank computes on."""
    fit = link_fit(fits, link)
    if fit is None or not profile["compute_ms"] or 2 not in profile["bytes"]:
        return None
    units_n = ranks if ranks in profile["units"] else max(profile["units"])
    units = profile["units"][units_n]
    if units is None:
        return None
    compute_n = ranks if ranks in profile["compute_ms"] else min(profile["compute_ms"])
    compute = stretch * profile["compute_ms"][compute_n] / 1e3
    if stretch != 1.0 and profile.get("window_s"):
        profile = dict(profile, window_s={n: stretch * w for n, w in profile["window_s"].items()})
    step = compute + exposed_s(profile, fits, link, ranks, compute, compute_n,
                               emulated=emulated)
    extrapolated = ranks not in profile["units"] or ranks not in profile["compute_ms"]
    return profile["target"].steps(units, ranks) * step, extrapolated


def utilisation_gbit(profile, fits, ranks, share):
    """The link rate (Gbit/s) at which compute is `share` of the step, in Douillard's form:
    bandwidth alone (latency left out, as his simulator leaves it), at the efficiency of the
    fastest shaped link swept, its window's worth hidden; None without a profile or a swept
    shaped link."""
    shaped = sorted((link_bits(n), n) for n in fits if n != "unlimited")
    if not shaped or not profile["compute_ms"]:
        return None
    bits, name = shaped[-1]
    efficiency = fits[name][1] * 8 / bits
    smallest = min(profile["compute_ms"])
    compute_s = profile["compute_ms"][smallest] / 1e3
    budget = compute_s * (1 - share) / share + window_at(profile, smallest)
    return link_bytes(profile, ranks) * 8 / budget / efficiency / 1e9
