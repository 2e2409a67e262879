#!/usr/bin/python3
"""The torch backend's collectives beyond DDP's against gloo's: reduce, gather, scatter,
allgather_coalesced and send/recv, at 4 KiB, 1 MiB and 16 MiB of float32, between 2 ranks on
one host and on 2 emulated hosts joined by a shaped link. Both groups live in the same two
processes (the default group ringlab's, a second one gloo's), and every round times the two
alternately, the first of them changing from round to round, so that both see the same load.
Per call: the median over the rounds of each round's mean time per call (ITERS calls after one
warm-up call), and ringlab's over gloo's.

    bazel build -c opt //torch_backend:ringlab_torch //comm/job:on_hosts
    bench/torch_collectives_bench.py --ringlab_torch bazel-out/k8-opt/bin/torch_backend \\
        --on_hosts bazel-out/k8-opt/bin/comm/job/on_hosts [--link=1gbit] [--rounds=5]

Prints one row per call and size: both medians, the ratio, and the range of each over the
rounds. Where the machine may not make network namespaces, the link rows say so and stop.
"""

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import time

SIZES = {"4KiB": 1 << 10, "1MiB": 1 << 18, "16MiB": 1 << 22}  # float32 elements
CALLS = ("reduce", "gather", "scatter", "allgather_coalesced", "send/recv")


def iterations(elements):
    return 50 if elements <= 1 << 10 else 10 if elements <= 1 << 18 else 3


def one_call(dist, torch, name, t, rank, group):
    """One `name` call of tensor t (every rank's input) over `group`."""
    world = dist.get_world_size(group)
    if name == "reduce":
        dist.reduce(t, dst=0, group=group)
    elif name == "gather":
        dist.gather(t, [torch.empty_like(t) for _ in range(world)] if rank == 0 else None,
                    dst=0, group=group)
    elif name == "scatter":
        dist.scatter(t, [t.clone() for _ in range(world)] if rank == 0 else None, src=0,
                     group=group)
    elif name == "allgather_coalesced":
        halves = list(t.chunk(2))
        dist.all_gather_coalesced([[torch.empty_like(h) for h in halves]
                                   for _ in range(world)], halves, group=group)
    elif rank == 0:  # send/recv: one message each way
        dist.send(t, 1, group=group)
        dist.recv(t, 1, group=group)
    else:
        dist.recv(t, 0, group=group)
        dist.send(t, 0, group=group)


def rank_main(rounds):
    import torch
    import torch.distributed as dist
    import ringlab_torch  # noqa: F401
    rank = int(os.environ["RANK"])
    dist.init_process_group("ringlab", timeout=datetime.timedelta(seconds=300))
    groups = {"ringlab": None, "gloo": dist.new_group(backend="gloo")}
    for name in CALLS:
        for size, elements in SIZES.items():
            t = torch.ones(elements)
            times = {backend: [] for backend in groups}
            for r in range(rounds):
                order = list(groups) if r % 2 == 0 else list(groups)[::-1]
                for backend in order:
                    group = groups[backend]
                    one_call(dist, torch, name, t, rank, group)  # warm-up
                    dist.barrier(group)
                    n = iterations(elements)
                    began = time.perf_counter()
                    for _ in range(n):
                        one_call(dist, torch, name, t, rank, group)
                    dist.barrier(group)
                    times[backend].append((time.perf_counter() - began) / n * 1e3)
            if rank == 0:
                print("ROW", name, size, " ".join(f"{b}={','.join(f'{x:.4f}' for x in v)}"
                                                  for b, v in times.items()), flush=True)
    dist.destroy_process_group()
    return 0


def table(output, where):
    lines = [f"## {where}", "",
             "| call | size | ringlab ms | gloo ms | ringlab / gloo | ringlab range | gloo range |",
             "|---|---|---|---|---|---|---|"]
    for line in output.splitlines():
        line = line.split("] ", 1)[1] if line.startswith("[rank ") else line  # on_hosts' prefix
        if not line.startswith("ROW "):
            continue
        _, name, size, *series = line.split()
        runs = {s.split("=")[0]: [float(x) for x in s.split("=")[1].split(",")] for s in series}
        ring, gloo = (statistics.median(runs[b]) for b in ("ringlab", "gloo"))
        lines.append(f"| {name} | {size} | {ring:.3f} | {gloo:.3f} | {ring / gloo:.2f}x | "
                     f"{min(runs['ringlab']):.3f}-{max(runs['ringlab']):.3f} | "
                     f"{min(runs['gloo']):.3f}-{max(runs['gloo']):.3f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ringlab_torch", required=True, help="the directory of ringlab_torch.so")
    parser.add_argument("--on_hosts", required=True, help="//comm/job:on_hosts")
    parser.add_argument("--link", default="1gbit", help="the emulated hosts' link (tc's units)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.path.abspath(args.ringlab_torch), OMP_NUM_THREADS="1")
    me = [sys.executable, os.path.abspath(__file__), f"--rank_rounds={args.rounds}"]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print(f"# {datetime.date.today()}, {os.cpu_count()} cores ({cpu}), {args.rounds} rounds, "
          f"median of per-round means\n")
    for hosts, where in ((1, "2 ranks on one host (ringlab: shm_ring)"),
                         (2, f"2 ranks on 2 emulated hosts, {args.link} links (ringlab: gloo)")):
        command = [os.path.abspath(args.on_hosts), "--nprocs=2", f"--hosts={hosts}",
                   f"--link={args.link if hosts > 1 else 'unlimited'}", "--"] + me
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            print(f"## {where}\n\nnot run: {done.stdout.strip().splitlines()[-1]}\n")
            continue
        print(table(done.stdout, where) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1].startswith("--rank_rounds="):
        sys.exit(rank_main(int(sys.argv[1].split("=")[1])))
    sys.exit(main())
