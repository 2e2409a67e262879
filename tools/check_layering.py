#!/usr/bin/env python3
"""Checks that ringlab's packages depend only downwards (README: "Layout").

    tools/check_layering.py            (from the workspace; runs bazel query)

Every top-level package has a level; a target may depend on a target of
another package only if that package's level is lower. So packages on one
level (nn and comm; cli, cuda and io) know nothing of each other, and nothing
depends on a package above it. Inside comm the same rule holds between its
packages (COMM_LEVELS): the store at the bottom, the front above it, the job
above that, the test helpers, the backends (which know nothing of each
other), and the suites that run every backend on top. Dependencies are read from one
`bazel query 'deps(//..., 1)'` graph, every select() branch included (CUDA
targets too where CUDA is not built), implicit dependencies (toolchains)
excluded. It also prints `somepath(//nn/..., //comm/...)` and the reverse,
which must be empty. Exits 1 when a dependency breaks the layering, 2 when a
package has no level here (a new package must be placed).
"""
import re
import subprocess
import sys

# Lowest first. A package is named by its first path component, except the
# build's own infrastructure under tools/.
LEVELS = {
    # the build's own: external libraries' wrappers, the CUDA rules
    "third_party": -1,
    "tools/cuda": -1,
    "tools/platforms": -1,
    "tools/torch": -1,
    # the bottom of ringlab: no ringlab dependency at all
    "cli": 0,
    "cuda": 0,
    "io": 0,
    "testdata": 0,
    # PyTorch compatibility (its tests read .npy through io); the timeline
    "torch_compat": 1,
    "trace": 1,
    # the model and the communication, independent of each other
    "nn": 2,
    "comm": 2,
    # the synchronisers: over comm, knowing nothing of nn (checked below)
    "sync": 3,
    # training: the model and the synchronisers; torch.distributed's backend
    # and the PyTorch front of the synchronisers, beside it
    "train": 4,
    "torch_backend": 4,
    # on top: what measures, runs and checks everything below; the experiments
    # run the bench (its sweeps across links feed their cost model)
    "bench": 5,
    "experiments": 6,
    "tools": 7,
    "": 8,  # the root package: test suites and aliases
}


# Inside comm, lowest first (README: "Layout").
COMM_LEVELS = {
    "comm/store": 0,  # where ranks meet: the Store, TCP store, job secret
    "comm/cluster": 0,  # emulated hosts and links, for the launcher
    "comm/dtype": 0,  # element types and the loops that reduce them
    "comm": 1,  # the front: Communicator, descriptions, tuning, peers
    "comm/job": 2,  # rendezvous, launcher, ranks as threads
    "comm/testing": 3,  # test helpers and the conformance suite's cases
    "comm/shm_ring": 4,  # the backends, independent of each other
    "comm/ipc_ring": 4,
    "comm/adapters": 4,
    "comm/hier": 4,
    "comm/conformance": 5,  # the suite over every backend
}


def package_of(label):
    """The layering's package of a label: its first path component, or the
    infrastructure directory for tools/cuda and tools/platforms."""
    path = label[2:].split(":")[0]
    for infra in ("tools/cuda", "tools/platforms"):
        if path == infra or path.startswith(infra + "/"):
            return infra
    return path.split("/")[0]


def comm_package_of(label):
    """comm's own package of a label inside comm: comm, or comm/<second>."""
    parts = label[2:].split(":")[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 1 else parts[0]


def bazel_query(expression, *flags):
    result = subprocess.run(["bazel", "query", "--noshow_progress", *flags, expression],
                            capture_output=True, text=True)
    if result.returncode not in (0, 3):  # 3: partial results (never expected here)
        sys.stderr.write(result.stderr)
        raise SystemExit(f"error: bazel query {expression!r} failed ({result.returncode})")
    return result.stdout


def edges():
    graph = bazel_query("deps(//..., 1)", "--noimplicit_deps", "--output=graph",
                        "--nograph:factored")
    for a, b in re.findall(r'^\s*"([^"]+)" -> "([^"]+)"', graph, re.M):
        if a.startswith("//") and b.startswith("//"):
            yield a, b


def main():
    unknown = set()
    violations = []
    for a, b in edges():
        pa, pb = package_of(a), package_of(b)
        if pa == pb == "comm":
            ca, cb = comm_package_of(a), comm_package_of(b)
            if ca == cb:
                continue
            if ca not in COMM_LEVELS or cb not in COMM_LEVELS:
                unknown.update(p for p in (ca, cb) if p not in COMM_LEVELS)
            elif COMM_LEVELS[ca] <= COMM_LEVELS[cb]:
                violations.append(f"{a} -> {b}: {ca} (comm level {COMM_LEVELS[ca]}) "
                                  f"may not depend on {cb} (comm level {COMM_LEVELS[cb]})")
            continue
        if pa == pb:
            continue
        if pa not in LEVELS or pb not in LEVELS:
            unknown.update(p for p in (pa, pb) if p not in LEVELS)
            continue
        if LEVELS[pa] <= LEVELS[pb]:
            violations.append(f"{a} -> {b}: {pa or '//'} (level {LEVELS[pa]}) may not "
                              f"depend on {pb} (level {LEVELS[pb]})")
    for src, dst in (("//nn/...", "//comm/..."), ("//comm/...", "//nn/..."),
                     ("//sync/...", "//nn/..."), ("//sync/...", "//train/...")):
        path = bazel_query(f"somepath({src}, {dst})").strip()
        print(f"somepath({src}, {dst}): {path if path else '(empty)'}")
        if path:
            violations.append(f"somepath({src}, {dst}) is not empty: {path.split()}")
    for v in sorted(set(violations)):
        print("layering: " + v)
    if unknown:
        print("error: packages without a level in tools/check_layering.py: " +
              ", ".join(sorted(unknown)), file=sys.stderr)
        return 2
    print(f"check_layering: {len(set(violations))} violation(s)")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
