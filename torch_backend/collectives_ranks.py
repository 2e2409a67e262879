"""The rank programs of process_group_test.py's cases for the collectives beyond DDP's, the
ranks' disagreements, timeouts and the barrier: each runs as one of 2 ranks (RANK, WORLD_SIZE,
MASTER_ADDR/MASTER_PORT from the environment), prints "error: ..." lines for what it was told
to expect and "all passed" or "FAILED: <checks>" last."""

import datetime
import os
import time

WORLD = 2


def start(timeout_s=60):
    import torch.distributed as dist
    import ringlab_torch  # noqa: F401  (registers "ringlab")
    rank = int(os.environ["RANK"])
    dist.init_process_group("ringlab", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return rank


def finish(failures):
    """Prints the verdict and ends the process, not through the interpreter's finalisation
    (process_group_test.py's lifetime_main says why)."""
    print("FAILED: " + ", ".join(failures) if failures else "all passed", flush=True)
    os._exit(1 if failures else 0)


REDUCED_TYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32",
                 "int64", "bool")


def every_op_main():
    """Every reduction on every element type gloo reduces, through allreduce and reduce to each
    root, against the rows reduced here: values chosen per rank so that every op's answer
    differs from every other op's (MIN from MAX, SUM from PRODUCT), exact in every type."""
    import torch
    import torch.distributed as dist
    rank = start()
    failures = []
    ops = {"SUM": lambda a, b: a + b, "PRODUCT": lambda a, b: a * b,
           "MIN": torch.minimum, "MAX": torch.maximum, "BAND": torch.bitwise_and,
           "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}
    for name in REDUCED_TYPES:
        dtype = getattr(torch, name)
        for op_name, fn in ops.items():
            if dtype == torch.bool and op_name in ("MIN", "MAX"):
                continue
            if dtype.is_floating_point and op_name in ("BAND", "BOR", "BXOR"):
                continue
            rows = [torch.tensor([3, 1, 2, 0], dtype=torch.int64).roll(r).to(dtype)
                    for r in range(WORLD)]
            want = rows[0]
            for row in rows[1:]:
                want = fn(want, row)
            t = rows[rank].clone()
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op_name))
            if not torch.equal(t, want):
                failures.append(f"allreduce {op_name} {name}: {t.tolist()} != {want.tolist()}")
            for root in range(WORLD):
                t = rows[rank].clone()
                dist.reduce(t, dst=root, op=getattr(dist.ReduceOp, op_name))
                expected = want if rank == root else rows[rank]
                if not torch.equal(t, expected):
                    failures.append(f"reduce {op_name} {name} to {root}: {t.tolist()}")
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        t = torch.tensor([2.0, 4.0, -6.0]).to(dtype) * (rank + 1)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        if not torch.equal(t, torch.tensor([3.0, 6.0, -9.0]).to(dtype)):
            failures.append(f"allreduce AVG {dtype}: {t.tolist()}")
    return finish(failures + collectives_checks(torch, dist, rank))


def collectives_checks(torch, dist, rank):
    """gather, scatter, alltoall (equal and uneven splits), the coalesced calls, sparse sums
    and point to point (tags out of order, any source, batch_isend_irecv)."""
    failures = []

    def check(name, ok):
        if not ok:
            failures.append(name)

    for root in range(WORLD):
        out = [torch.zeros(3, dtype=torch.int64) for _ in range(WORLD)] if rank == root else None
        dist.gather(torch.arange(3) + 10 * rank, out, dst=root)
        check(f"gather to {root}", rank != root or all(
            torch.equal(out[r], torch.arange(3) + 10 * r) for r in range(WORLD)))
        out = torch.zeros(2, dtype=torch.int16)
        parts = [torch.tensor([r, -r], dtype=torch.int16) + root for r in range(WORLD)]
        dist.scatter(out, parts if rank == root else None, src=root)
        check(f"scatter from {root}", torch.equal(out, parts[rank]))
    out = torch.zeros(4, dtype=torch.int32)
    dist.all_to_all_single(out, torch.arange(4, dtype=torch.int32) + 100 * rank)
    check("alltoall_base equal", torch.equal(
        out, torch.tensor([0, 1, 100, 101], dtype=torch.int32) + 2 * rank))
    # Rank r sends r+1 rows to rank 0 and 2-r to rank 1.
    sends = [rank + 1, 2 - rank]
    receives = [1 + r if rank == 0 else 2 - r for r in range(WORLD)]
    out = torch.zeros(sum(receives), 2)
    dist.all_to_all_single(out, torch.full((3, 2), float(rank)), receives, sends)
    check("alltoall_base uneven", torch.equal(
        out, torch.cat([torch.full((n, 2), float(r)) for r, n in enumerate(receives)])))
    outs = [torch.zeros(r + 1) for r in range(WORLD)]
    dist.all_to_all(outs, [torch.full((rank + 1,), float(10 * rank + r)) for r in range(WORLD)])
    check("alltoall lists", all(torch.equal(outs[r], torch.full((r + 1,), float(10 * r + rank)))
                                for r in range(WORLD)))
    ts = [torch.ones(3) * (rank + 1), torch.ones(2, 2) * (rank + 2)]
    dist.all_reduce_coalesced(ts)
    check("allreduce_coalesced", torch.equal(ts[0], torch.full((3,), 3.0)) and
          torch.equal(ts[1], torch.full((2, 2), 5.0)))
    sparse = torch.sparse_coo_tensor([[rank, 2]], [1.0, 2.0], (4,))
    dist.all_reduce(sparse)
    check("sparse allreduce", torch.equal(sparse.to_dense(), torch.tensor([1.0, 1.0, 4.0, 0.0])))
    other = 1 - rank
    if rank == 0:  # tags matched, not order: tag 2 sent first, received second
        dist.send(torch.tensor([2.0]), other, tag=2)
        dist.send(torch.tensor([1.0]), other, tag=1)
    else:
        a, b = torch.zeros(1), torch.zeros(1)
        dist.recv(a, other, tag=1)
        dist.recv(b, other, tag=2)
        check("recv by tag", a.item() == 1.0 and b.item() == 2.0)
    if rank == 1:
        dist.send(torch.tensor([7], dtype=torch.int64), 0)
    else:
        t = torch.zeros(1, dtype=torch.int64)
        source = dist.recv(t)  # any source
        check("recv from any source names the sender", source == 1 and t.item() == 7)
    got = torch.zeros(5)
    ops = [dist.P2POp(dist.isend, torch.full((5,), float(rank)), other),
           dist.P2POp(dist.irecv, got, other)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    check("batch_isend_irecv", torch.equal(got, torch.full((5,), float(other))))
    return failures


def expect_refused(what, fn, needle):
    """Runs fn, which must raise a RuntimeError containing `needle`; prints it."""
    try:
        fn()
    except RuntimeError as e:
        print(f"error: {what}: {str(e).splitlines()[0]}", flush=True)
        return [] if needle in str(e) else [f"{what} said {e}"]
    return [f"{what} was not refused"]


def disagree_main():
    """Ranks that disagree on a call, one case after another: each refused on both ranks,
    naming both sides, and the ranks still in step for the next."""
    import torch
    import torch.distributed as dist
    rank = start()
    failures = []
    R = dist.ReduceOp

    def both(a, b):
        return a if rank == 0 else b

    failures += expect_refused("int32 MIN against MAX", lambda: dist.all_reduce(
        torch.tensor([1, 7], dtype=torch.int32) + 5 * rank, op=both(R.MIN, R.MAX)),
        "by MIN, rank 1 in ALLREDUCE of 2 Int by MAX")
    failures += expect_refused("SUM against PRODUCT", lambda: dist.all_reduce(
        torch.tensor([3, 4], dtype=torch.int32), op=both(R.SUM, R.PRODUCT)),
        "by SUM, rank 1 in ALLREDUCE of 2 Int by PRODUCT")
    failures += expect_refused("4 int32 against 16 uint8", lambda: dist.all_gather(
        [both(torch.zeros(4, dtype=torch.int32), torch.zeros(16, dtype=torch.uint8))
         for _ in range(WORLD)],
        both(torch.ones(4, dtype=torch.int32), torch.ones(16, dtype=torch.uint8))),
        "of 4 Int, rank 1 in ALLGATHER of 16 Byte")
    failures += expect_refused("int64 against int32 broadcast", lambda: dist.broadcast(
        both(torch.ones(2, dtype=torch.int64), torch.ones(4, dtype=torch.int32)), 0),
        "BROADCAST of 2 Long with root 0, rank 1 in BROADCAST of 4 Int")
    failures += expect_refused("gather roots", lambda: dist.gather(
        torch.ones(2), [torch.zeros(2) for _ in range(WORLD)] if rank == 0 else None,
        dst=both(0, 1)) if rank == 0 else dist.gather(
        torch.ones(2), [torch.zeros(2) for _ in range(WORLD)], dst=1), "with root 0")
    failures += expect_refused("scatter of 2 against 3 floats", lambda: dist.scatter(
        torch.zeros(both(2, 3)), [torch.ones(2)] * WORLD if rank == 0 else None, src=0),
        "SCATTER of 2 Float with root 0, rank 1 in SCATTER of 3 Float with root 0")
    t = torch.ones(3) * (rank + 1)
    dist.all_reduce(t)
    if not torch.equal(t, torch.full((3,), 3.0)):
        failures.append("the ranks were not in step after the refusals")
    # Last: a float32 broadcast meets the bytes path's check (its own call differs).
    failures += expect_refused("float32 against int32 broadcast", lambda: dist.broadcast(
        both(torch.ones(4), torch.ones(4, dtype=torch.int32)), 0), "ismatched")
    return finish(failures)


def timeout_main():
    """Rank 1 stays alive but never joins rank 0's allreduce: rank 0 fails by the group's
    3 s timeout, saying "Timed out", within a few seconds."""
    import torch
    import torch.distributed as dist
    rank = start(timeout_s=3)
    dist.barrier()
    if rank == 1:
        time.sleep(12)
        os._exit(0)
    began = time.monotonic()
    failures = expect_refused("an allreduce its peer never joins",
                              lambda: dist.all_reduce(torch.ones(10)), "Timed out")
    print(f"failed after {time.monotonic() - began:.1f} s", flush=True)
    finish(failures)


def mark_main():
    """A barrier waits for every earlier call on every channel: rank 0 marks the store when its
    long asynchronous allreduce completes; rank 1 finds the mark once its barrier returns.
    Rank 1 also starts with another channel count than rank 0's, which holds for both."""
    import torch
    import torch.distributed as dist
    rank = start()
    failures = []
    group = dist.distributed_c10d._get_default_group()
    if group.channels != 2:
        failures.append(f"{group.channels} channels, not rank 0's 2")
    store = dist.distributed_c10d._get_default_store()
    big = torch.ones(16 << 20)  # 64 MB: tens of ms to reduce
    work = dist.all_reduce(big, async_op=True)
    if rank == 0:
        # Its future's callback takes its time: the barrier waits for it too, as gloo's
        # waits for the Works before it, callbacks and all.
        work.get_future().then(lambda _: (time.sleep(0.5), store.add("ringlab_test/mark", 1)))
    dist.barrier()
    if rank == 1 and store.add("ringlab_test/mark", 0) != 1:
        failures.append("the barrier returned before the peer's earlier allreduce completed")
    work.wait()
    dist.barrier()  # rank 0 serves the store: it stays until rank 1 has read it
    return finish(failures)
