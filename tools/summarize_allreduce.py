#!/usr/bin/python3
"""Summarises several allreduce_bench sweeps of one sitting (their printed tables, each sweep's
stdout in a file): per size and row, the median [min-max] time over the sweeps, then the ratios
the README quotes. Prints the summary followed by every sweep as printed.

    mpirun ... bazel-bin/bench/allreduce_bench --backends=shm_ring,gloo,mpi:check=0 ... > s1.txt
    (three times), then: /usr/bin/python3 tools/summarize_allreduce.py s1.txt s2.txt s3.txt
"""
import re
import statistics
import sys

ROW = re.compile(r"^(?:\[rank 0\] )?# (allreduce\S*)")
FLOORS = re.compile(r"^(?:\[rank 0\] )?# floors")


def read_sweep(path):
    """{(row, bytes): time_us} from one sweep's printed tables (floors as floor_private and
    floor_registered)."""
    times, row = {}, None
    with open(path) as f:
        for line in f:
            line = re.sub(r"^\[rank 0\] ", "", line)
            if FLOORS.match(line):
                row = "floor"
                continue
            m = ROW.match(line)
            if m:
                row = m.group(1)
                continue
            fields = line.split()
            if row is None or not fields or not fields[0].isdigit():
                continue
            size = int(fields[0])
            if row == "floor" and len(fields) >= 3:
                times[("floor_private", size)] = float(fields[1])
                times[("floor_registered", size)] = float(fields[2])
            elif row != "floor" and len(fields) >= 3:
                times[(row, size)] = float(fields[2])
    return times


def summarise(sweeps):
    """Lines of the summary table and of the ratios of medians."""
    keys = set().union(*sweeps)
    rows = sorted({k[0] for k in keys})
    sizes = sorted({k[1] for k in keys})
    med = {}
    short = [r.replace("allreduce_registered", "ar_registered").replace("allreduce", "ar")
             for r in rows]
    lines = ["bytes".rjust(10) + "".join(s.rjust(32) for s in short)]
    for size in sizes:
        cells = []
        for row in rows:
            values = [s[(row, size)] for s in sweeps if (row, size) in s]
            if not values:
                cells.append("-".rjust(32))
                continue
            med[(row, size)] = statistics.median(values)
            cells.append(f"{med[(row, size)]:.2f} [{min(values):.2f}-{max(values):.2f}]".rjust(32))
        lines.append(str(size).rjust(10) + "".join(cells))
    lines += ["", "ratios of medians: MPI time / shm time (= shm busbw / MPI busbw), "
              "shm / best(MPI, gloo), private / registered, registered / its floor"]
    for size in sizes:
        shm = med.get(("allreduce/shm_ring", size))
        mpi = med.get(("allreduce/mpi:check=0", size))
        gloo = med.get(("allreduce/gloo", size))
        reg = med.get(("allreduce_registered/shm_ring", size))
        floor = med.get(("floor_registered", size))
        best = min(v for v in (mpi, gloo, float("inf")) if v is not None)
        parts = [str(size).rjust(10)]
        if shm and mpi:
            parts.append(f"vsMPI {mpi / shm:5.2f}x")
        if shm and best != float("inf"):
            parts.append(f"vsBest {shm / best:5.2f}")
        if shm and reg:
            parts.append(f"priv/reg {shm / reg:5.2f}")
        if reg and floor:
            parts.append(f"reg/floor {reg / floor:5.2f}")
        lines.append("  ".join(parts))
    return lines


def main(paths):
    if not paths:
        print("error: usage: summarize_allreduce.py SWEEP.txt...", file=sys.stderr)
        return 2
    try:
        sweeps = [read_sweep(p) for p in paths]
    except OSError as e:
        print(f"error: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    if not all(sweeps):
        empty = [p for p, s in zip(paths, sweeps) if not s]
        print(f"error: no allreduce_bench table in {', '.join(empty)}", file=sys.stderr)
        return 2
    print("\n".join(summarise(sweeps)))
    for i, path in enumerate(paths, 1):
        print(f"\n# ---- sweep {i}, as printed")
        with open(path) as f:
            print("".join(l for l in f if not l.startswith("--")), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
