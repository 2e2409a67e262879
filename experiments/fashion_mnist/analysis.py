"""Reading one run's files (losses.csv, eval.csv, trace.json) and the figures the report gives.

ringlab's trainer and pytorch_ddp.py write the same losses.csv and eval.csv; only ringlab writes
a Chrome trace. Every defect of a file is an AnalysisError naming the file, so that one bad run
is reported as failed without hiding the others.
"""

import csv
import json
import math
import os
import statistics

import numpy as np

LOSSES_COLUMNS = ["rank", "epoch", "step", "loss", "step_ms", "comm_ms", "bytes_sent"]
EVAL_COLUMNS = ["epoch", "step", "test_loss", "test_accuracy", "wall_s", "bytes_sent"]
WARMUP_STEPS = 20  # rank 0's first steps, left out of the median step time
TARGET_ACCURACY = 0.85
# The compute thread's events (tid 0) and what the step-time breakdown calls them.
COMPUTE_NAMES = ("forward",)
COMPUTE_PREFIXES = ("backward",)
OPTIMISER_NAMES = ("sgd step",)
EXPOSED_NAME, EXPOSED_CAT = "wait for allreduce", "exposed_comm"


class AnalysisError(Exception):
    """A run's file is missing or malformed."""


def _number(text, path, line, column):
    """A float from a CSV field; empty means not measured (nan)."""
    if text is None or text.strip() == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise AnalysisError(f"{path}:{line}: {column} is not a number: {text!r}") from None


def _read_csv(path, columns):
    if not os.path.isfile(path):
        raise AnalysisError(f"{path} is missing")
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != columns:
            raise AnalysisError(f"{path}: header {header} is not {columns}")
        rows = []
        for line, fields in enumerate(reader, start=2):
            if not fields:
                continue
            if len(fields) != len(columns):
                raise AnalysisError(f"{path}:{line}: {len(fields)} fields, {len(columns)} "
                                    f"expected")
            rows.append({c: _number(v, path, line, c) for c, v in zip(columns, fields)})
    return rows


def read_losses(path):
    """{rank: [row, ...] sorted by step} from a losses.csv; rank and step are ints."""
    runs = {}
    for row in _read_csv(path, LOSSES_COLUMNS):
        for key in ("rank", "epoch", "step"):
            if not math.isfinite(row[key]) or row[key] != int(row[key]) or row[key] < 0:
                raise AnalysisError(f"{path}: {key} {row[key]} is not a count")
            row[key] = int(row[key])
        runs.setdefault(row["rank"], []).append(row)
    if 0 not in runs:
        raise AnalysisError(f"{path} has no step of rank 0")
    return {rank: sorted(rows, key=lambda r: r["step"]) for rank, rows in runs.items()}


def read_eval(path):
    """eval.csv's rows sorted by epoch; the accuracy must lie in [0, 1]."""
    rows = _read_csv(path, EVAL_COLUMNS)
    if not rows:
        raise AnalysisError(f"{path} has no evaluation")
    for row in rows:
        if not 0 <= row["test_accuracy"] <= 1:
            raise AnalysisError(f"{path}: test_accuracy {row['test_accuracy']} not in [0, 1]")
        row["epoch"], row["step"] = int(row["epoch"]), int(row["step"])
    return sorted(rows, key=lambda r: r["epoch"])


def read_trace(path, pid=0):
    """Totals of one rank's trace, in milliseconds: compute (forward, backward per layer),
    optimiser (sgd step), exposed communication (the compute thread's waits), evaluation,
    and the communication thread's allreduces with their bytes."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise AnalysisError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise AnalysisError(f"{path} is not JSON: {e}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise AnalysisError(f"{path} has no traceEvents list")
    totals = {"compute_ms": 0.0, "optimiser_ms": 0.0, "exposed_ms": 0.0, "evaluation_ms": 0.0,
              "comm_thread_ms": 0.0, "comm_bytes": 0, "waits": 0, "buckets": 0}
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X" or event.get("pid") != pid:
            continue
        name, dur = event.get("name", ""), event.get("dur")
        if not isinstance(dur, (int, float)) or dur < 0:
            raise AnalysisError(f"{path}: event {name!r} has no valid dur")
        ms = dur / 1000.0
        if event.get("tid") == 0:
            if name == EXPOSED_NAME or event.get("cat") == EXPOSED_CAT:
                totals["exposed_ms"] += ms
                totals["waits"] += 1
            elif name in COMPUTE_NAMES or name.startswith(COMPUTE_PREFIXES):
                totals["compute_ms"] += ms
            elif name in OPTIMISER_NAMES:
                totals["optimiser_ms"] += ms
            elif name == "evaluation":
                totals["evaluation_ms"] += ms
        elif event.get("tid") == 1 and event.get("cat") == "comm":
            totals["comm_thread_ms"] += ms
            totals["buckets"] += 1
            totals["comm_bytes"] += int((event.get("args") or {}).get("bytes", 0))
    return totals


def fmt(value, spec, missing="n/a"):
    """value formatted for the report, `missing` where it was not measured (None or nan)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return format(value, spec)


def unreached(run):
    """What the report says of a run's time to 85% when it has none: a run of its first
    steps only (--max_steps) measures its step, not a race to 85%."""
    return f"n/a ({run['max_steps']} steps)" if run.get("max_steps") else "not reached"


def _nan_mean(values):
    values = [v for v in values if not math.isnan(v)]
    return statistics.fmean(values) if values else math.nan


def _link_bytes(path):
    """What each emulated host's link sent per step (ringlab's summary.json "links", the mean
    over the hosts), or None off emulated hosts or for PyTorch, whose summary has none."""
    try:
        with open(path) as f:
            links = json.load(f).get("links")
    except (OSError, ValueError):
        return None
    if not links:
        return None
    return statistics.fmean(link["link_bytes_sent_per_step"] for link in links)


def summarise_run(run_dir):
    """The per-run figures of the report from the files in run_dir (trace.json optional)."""
    losses = read_losses(os.path.join(run_dir, "losses.csv"))
    evals = read_eval(os.path.join(run_dir, "eval.csv"))
    rank0 = losses[0]
    timed = rank0[WARMUP_STEPS:] if len(rank0) > WARMUP_STEPS else rank0[1:] or rank0
    stats = {
        "steps": len(rank0),
        "losses0": [r["loss"] for r in rank0],
        "evals": evals,
        "final_accuracy": evals[-1]["test_accuracy"],
        "epochs": evals[-1]["epoch"],
        "median_step_ms": statistics.median(r["step_ms"] for r in timed),
        "mean_step_ms": statistics.fmean(r["step_ms"] for r in rank0),
        # After the warm-up, every step counted: param_avg's averaging steps, 1 in K, are
        # outside its median but inside this.
        "mean_timed_step_ms": statistics.fmean(r["step_ms"] for r in timed),
        "bytes_per_step": _nan_mean([r["bytes_sent"] for r in rank0]),
        "comm_ms_csv": _nan_mean([r["comm_ms"] for r in rank0]),
        "warmup_excluded": len(rank0) > WARMUP_STEPS,
        "reach_epoch": None,
        "reach_seconds": None,
    }
    for row in evals:
        if row["test_accuracy"] >= TARGET_ACCURACY:
            stats["reach_epoch"], stats["reach_seconds"] = row["epoch"], row["wall_s"]
            break
    stats["link_bytes_per_step"] = _link_bytes(os.path.join(run_dir, "summary.json"))
    trace_path = os.path.join(run_dir, "trace.json")
    stats["trace"] = None
    if os.path.exists(trace_path):
        totals = read_trace(trace_path)
        steps = stats["steps"]
        stats["trace"] = {k: v / steps for k, v in totals.items() if k.endswith("_ms")}
        stats["trace"]["comm_bytes"] = totals["comm_bytes"] / steps
    return stats


def fidelity(ours, reference, steps=100):
    """(max |Δ per-epoch test accuracy| in points over the epochs both evaluated, max relative
    difference of rank 0's first `steps` losses as float32, epochs compared, losses compared)."""
    ref_acc = {r["epoch"]: r["test_accuracy"] for r in reference["evals"]}
    deltas = [abs(r["test_accuracy"] - ref_acc[r["epoch"]]) * 100
              for r in ours["evals"] if r["epoch"] in ref_acc]
    # Both sides' losses are float32 values, printed to 9 digits by ringlab and in full by
    # Python: compare them as the float32 values they are, not as their printed decimals.
    pairs = [(float(np.float32(a)), float(np.float32(b)))
             for a, b in zip(ours["losses0"], reference["losses0"])][:steps]
    rel = [abs(a - b) / abs(b) if b else abs(a - b) for a, b in pairs]
    return (max(deltas) if deltas else math.nan, max(rel) if rel else math.nan, len(deltas),
            len(pairs))


def loss_ulps(ours, reference, steps=100):
    """How far apart rank 0's first `steps` losses are in units in the last place of float32
    (both files hold float32 values exactly): (steps identical, leading steps within 1 ulp,
    first step that differs or None, steps compared)."""
    n = min(steps, len(ours["losses0"]), len(reference["losses0"]))
    if n == 0:
        return 0, 0, None, 0
    a = np.array(ours["losses0"][:n], dtype=np.float32).view(np.int32).astype(np.int64)
    b = np.array(reference["losses0"][:n], dtype=np.float32).view(np.int32).astype(np.int64)
    ulps = np.abs(a - b)
    differing = np.flatnonzero(ulps)
    beyond_one = np.flatnonzero(ulps > 1)
    leading = int(beyond_one[0]) if beyond_one.size else n
    first = int(differing[0]) if differing.size else None
    return int((ulps == 0).sum()), leading, first, n
