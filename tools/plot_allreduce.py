#!/usr/bin/python3
"""Plots an allreduce_bench run: time and busbw per message size, per backend, with the floor.

    bazel-bin/bench/allreduce_bench --benchmark_out=ar.json --benchmark_out_format=json
    /usr/bin/python3 tools/plot_allreduce.py ar.json allreduce.png
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        print("error: usage: plot_allreduce.py RESULTS.json OUT.png", file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1]) as f:
            runs = json.load(f)["benchmarks"]
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {sys.argv[1]}: not a Google Benchmark JSON file ({e})", file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {}  # backend -> [(bytes, time_us, busbw)]
    for run in runs:
        # allreduce[_registered]/<backend>/<bytes>/... or floor_<kind>/<bytes>/...
        parts = run["name"].split("/")
        if parts[0] == "allreduce":
            backend, size = parts[1], int(parts[2])
        elif parts[0] == "allreduce_registered":
            backend, size = parts[1] + " (registered)", int(parts[2])
        elif parts[0] in ("floor_private", "floor_registered"):
            backend = "memory floor, " + parts[0][len("floor_"):] + " buffers"
            size = int(parts[1])
        else:
            continue
        series.setdefault(backend, []).append(
            (size, float(run.get("time_us", run["real_time"])), run.get("busbw_GBps")))
    if not series:
        print(f"error: {sys.argv[1]} holds no allreduce runs", file=sys.stderr)
        return 2

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for backend, points in sorted(series.items()):
        points.sort()
        sizes = [p[0] for p in points]
        style = ("k--" if "private" in backend else "k:") if backend.startswith("memory") else "-o"
        left.plot(sizes, [p[1] for p in points], style, ms=3, label=backend)
        if not backend.startswith("memory"):
            right.plot(sizes, [p[2] for p in points], "-o", ms=3, label=backend)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.grid(alpha=0.3, which="both")
    left.set_yscale("log")
    left.set_ylabel("time per allreduce (µs, max over ranks)")
    right.set_ylabel("busbw (GB/s) = bytes/time · 2(N−1)/N")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
