"""ringlab's torch.distributed backend from Python, with torch's own tensors: 2 ranks as real
processes meeting through torch's TCPStore (MASTER_ADDR/MASTER_PORT). Exact sums (small
integers, which float32, float16 and bfloat16 hold exactly, so every order of summing gives
the same bits), avg, every root of broadcast, allgather of float and int64 tensors, barrier,
asynchronous work and its future, a barrier after an allreduce still moving, the reductions
ringlab gathers (integers, products,
bitwise ops, odd byte counts); then PyTorch's DDP over ringlab against DDP over gloo on the
same model and data, plain, with find_unused_parameters, and with PyTorch's fp16 and
PowerSGD hooks: with 2 ranks g0 + g1
is one rounding whatever the algorithm, so the parameters must agree bit for bit. And what goes
wrong: mismatched calls fail on every rank naming the mismatch, and a killed rank fails the
survivor naming it; a group destroyed with a Python callback pending, and from a callback.
The collectives, DDP and the two faults again with the ranks on two emulated hosts (over gloo).
Skips, saying why, where torch does not import.

    process_group_test.py PATH/TO/ringlab_torch.so PATH/TO/on_hosts
"""

import os
import socket
import subprocess
import sys
import unittest

WORLD = 2


def rank_main():
    import torch
    import torch.distributed as dist
    import datetime
    import ringlab_torch  # noqa: F401  (registers "ringlab")

    rank = int(os.environ["RANK"])
    dist.init_process_group("ringlab", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    failures = []

    def check(name, ok):
        if not ok:
            failures.append(name)

    group = dist.distributed_c10d._get_default_group()
    # shm_ring on one host; across emulated hosts gloo, over two channels by default.
    communicator = os.environ.get("RINGLAB_TEST_COMMUNICATOR", "shm_ring")
    check(f"the default group is ringlab's, on {communicator}",
          type(group).__name__ == "ProcessGroupRinglab" and group.communicator == communicator)
    channels = int(os.environ.get("RINGLAB_TORCH_CHANNELS",
                                  "1" if communicator == "shm_ring" else "2"))
    check(f"{channels} channel(s)", group.channels == channels)

    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        t = (torch.arange(1000) % 50 + rank).to(dtype)
        dist.all_reduce(t)
        want = sum((torch.arange(1000) % 50 + r) for r in range(WORLD)).to(dtype)
        check(f"allreduce sum {dtype}", torch.equal(t, want))
        t = (torch.arange(10) * 2 + 2 * rank).to(dtype)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        check(f"allreduce avg {dtype}", torch.equal(t, (torch.arange(10) * 2 + 1).to(dtype)))
    for root in range(WORLD):
        t = torch.full((7,), float(rank + 10))
        dist.broadcast(t, src=root)
        check(f"broadcast root {root}", torch.equal(t, torch.full((7,), float(root + 10))))
    def gathered(dtype, r):  # int64's extremes and -1: words that read as NaNs or -0
        if dtype == torch.int64:
            return torch.tensor([-1, 2 ** 63 - 1, -2 ** 63, 100 * r, -5], dtype=dtype)
        return torch.arange(5, dtype=dtype) + 100 * r

    for dtype in (torch.float32, torch.int64):
        out = [torch.zeros(5, dtype=dtype) for _ in range(WORLD)]
        dist.all_gather(out, gathered(dtype, rank))
        check(f"allgather {dtype}",
              all(torch.equal(out[r], gathered(dtype, r)) for r in range(WORLD)))
    t = gathered(torch.int64, rank)
    dist.broadcast(t, src=1)
    check("broadcast int64", torch.equal(t, gathered(torch.int64, 1)))
    dist.barrier()
    # A barrier waits for the calls before it, on whichever channels they run: 16 MB still
    # moving on one channel while the barrier's meets on the next.
    t = torch.ones(4 << 20)
    dist.all_reduce(t, async_op=True)
    dist.barrier()
    check("barrier after an async allreduce", torch.equal(t, torch.full((4 << 20,), 2.0)))
    # Works complete in call order, whichever channel finished first: when the small call's
    # future completes, the big call before it (on another channel) has run. (Its data, not
    # its Work's state: the two completions may run on two callback threads at once.)
    big, small = torch.ones(16 << 20), torch.ones(10)  # 64 MB: tens of ms to reduce
    dist.all_reduce(big, async_op=True)
    seen = dist.all_reduce(small, async_op=True).get_future().then(
        lambda _: bool(big[-1] == 2.0 and big[0] == 2.0))
    check("works complete in call order", seen.wait())
    check_gathered_reductions(torch, dist, rank, check)
    t = torch.ones(100)
    work = dist.all_reduce(t, async_op=True)
    result = work.get_future().wait()
    check("async allreduce", work.wait() and torch.equal(t, torch.full((100,), 2.0)) and
          torch.equal(result[0], torch.full((100,), 2.0)))
    # Once wait() returned, the future holds the result too.
    t = torch.ones(10)
    work = dist.all_reduce(t, async_op=True)
    check("future after wait", work.wait() and work.get_future().done() and
          torch.equal(work.get_future().value()[0], torch.full((10,), 2.0)))

    # DDP over ringlab and over gloo, from the same start, on the same batches: plain, and
    # with PyTorch's own communication hooks (whose callbacks wait for further collectives).
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
    gloo = dist.new_group(backend="gloo")
    for hook in ("none", "fp16", "powersgd", "find_unused_parameters"):
        params = []
        for group in (None, gloo):
            start, final = train_ddp(torch, rank, group, hook, default_hooks, powersgd)
            params.append(final)
        check(f"DDP ({hook} hook) over ringlab = over gloo",
              all(torch.equal(a, b) for a, b in zip(*params)))
        check(f"DDP ({hook} hook) moved the parameters",
              not any(torch.equal(a, b) for a, b in zip(start, params[0])))
    dist.destroy_process_group()
    print("FAILED: " + ", ".join(failures) if failures else "all passed", flush=True)
    return 1 if failures else 0


def check_gathered_reductions(torch, dist, rank, check):
    """What the communicator does not reduce itself (integer types, products, bitwise ops, max
    on shm_ring) and odd byte counts, against the values computed here."""
    ranks = range(WORLD)
    t = torch.arange(7, dtype=torch.int32) + rank
    dist.all_reduce(t)
    check("allreduce sum int32",
          torch.equal(t, sum(torch.arange(7, dtype=torch.int32) + r for r in ranks)))
    t = torch.tensor([2 ** 62, -3, 5], dtype=torch.int64) * (rank + 1)
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    want = torch.ones(3, dtype=torch.int64)
    for r in ranks:
        want *= torch.tensor([2 ** 62, -3, 5], dtype=torch.int64) * (r + 1)
    check("allreduce product int64 (wrapping as torch's)", torch.equal(t, want))
    t = torch.tensor([0b1100, 0b1010], dtype=torch.int16) << rank
    dist.all_reduce(t, op=dist.ReduceOp.BXOR)
    check("allreduce bxor int16", torch.equal(
        t, torch.tensor([0b1100 ^ 0b11000, 0b1010 ^ 0b10100], dtype=torch.int16)))
    t = torch.tensor([1.5, -2.0, float("inf")]) * (1 - 2 * rank)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    check("allreduce max float32", torch.equal(t, torch.tensor([1.5, 2.0, float("inf")])))
    t = torch.arange(5, dtype=torch.uint8) + 7 * rank
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    check("allreduce min uint8", torch.equal(t, torch.arange(5, dtype=torch.uint8)))
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.AVG)
        check("allreduce avg int32 refused", False)
    except RuntimeError as e:
        check("allreduce avg int32 refused, saying why", "only floating types average" in str(e))
    odd = torch.arange(3, dtype=torch.uint8) + 10 * rank  # 3 bytes: no whole word
    dist.broadcast(odd, src=1)
    check("broadcast of 3 bytes", torch.equal(odd, torch.arange(3, dtype=torch.uint8) + 10))
    out = [torch.zeros(3, dtype=torch.uint8) for _ in ranks]
    dist.all_gather(out, torch.arange(3, dtype=torch.uint8) + 10 * rank)
    check("allgather of 3 bytes", all(
        torch.equal(out[r], torch.arange(3, dtype=torch.uint8) + 10 * r) for r in ranks))
    out = torch.zeros(3 * WORLD, dtype=torch.bool)
    dist._all_gather_base(out, torch.tensor([True, rank == 1, False]))
    check("allgather_base of 3 bools", torch.equal(
        out, torch.tensor([[True, r == 1, False] for r in ranks]).flatten()))


def lifetime_main():
    """A group destroyed while a Python callback of its future is pending (the destructor
    must not hold the GIL the callback needs), and a group whose last reference a callback
    drops (its destructor then runs on the callback thread: no self-join)."""
    import datetime
    import time
    import torch
    import torch.distributed as dist
    import ringlab_torch  # noqa: F401

    rank = int(os.environ["RANK"])
    dist.init_process_group("ringlab", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    group = dist.new_group(backend="ringlab")
    if rank == 1:
        time.sleep(1)  # rank 0's future stays pending meanwhile
    future = dist.all_reduce(torch.ones(10), group=group, async_op=True).get_future()
    chained = future.then(lambda f: (time.sleep(0.5), f.value()[0].sum().item())[1])
    dist.destroy_process_group(group)
    assert sys.getrefcount(group) == 2, "something else holds the group"
    del group  # the destructor: runs the queued allreduce, completes the future
    print(f"pending callback: {chained.wait()}", flush=True)

    holder = [dist.new_group(backend="ringlab")]
    if rank == 1:
        time.sleep(1)
    future = dist.all_reduce(torch.ones(10), group=holder[0], async_op=True).get_future()
    dist.destroy_process_group(holder[0])
    chained = future.then(lambda f: (holder.clear(), f.value()[0].sum().item())[1])
    print(f"last reference dropped in a callback: {chained.wait()}", flush=True)
    dist.destroy_process_group()
    print("all passed", flush=True)
    # Not through the interpreter's finalisation: torch frees the callback's Python closure on
    # the completing thread just after `chained` completes, and a thread that takes the GIL
    # while Python finalises is ended by pthread_exit, whose unwinding through a noexcept
    # destructor aborts (seen once in about 10 runs; gloo's threads would race the same way).
    os._exit(0)


def fault_main(fault):
    """A rank of a job that goes wrong on purpose: `mismatch` (rank 0 allreduces 10 floats,
    rank 1 20) or `kill` (rank 1 exits before the allreduce). Prints the error rank 0 met."""
    import datetime
    import torch
    import torch.distributed as dist
    import ringlab_torch  # noqa: F401

    rank = int(os.environ["RANK"])
    dist.init_process_group("ringlab", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=20))
    dist.barrier()
    if fault == "kill" and rank == 1:
        os._exit(0)
    try:
        dist.all_reduce(torch.ones(10 if rank == 0 or fault == "kill" else 20))
    except RuntimeError as e:
        print(f"error: {e}", flush=True)
        os._exit(3)
    print("no error", flush=True)
    os._exit(0)


def train_ddp(torch, rank, group, hook, default_hooks, powersgd):
    """(initial, final) parameters of 5 DDP steps of a small MLP over `group` (None: the
    default group) with `hook`."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 3))
    start = [p.detach().clone() for p in model.parameters()][:4]
    if hook == "find_unused_parameters":  # a branch that no step uses
        model.add_module("unused", torch.nn.Linear(3, 3))
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, process_group=group, find_unused_parameters=hook == "find_unused_parameters")
    if hook == "fp16":
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    elif hook == "powersgd":
        state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                       start_powerSGD_iter=2, random_seed=0)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1 + rank)
    for _ in range(5):
        x = torch.randn(16, 20, generator=gen)
        y = torch.randint(0, 3, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return start, [p.detach().clone() for p in model.parameters()][:4]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(test, *args, **variables):
    """Runs this file with `args` as WORLD ranks (with these environment variables too);
    returns [(status, output)] once all ended."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(WORLD), PYTHONPATH=MODULE_DIR, OMP_NUM_THREADS="1", **variables)
    ranks = [subprocess.Popen([sys.executable, __file__] + list(args),
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(WORLD)]
    outputs = []
    for p in ranks:
        try:
            outputs.append((p.communicate(timeout=240)[0]))
        except subprocess.TimeoutExpired:
            for q in ranks:
                q.kill()
            test.fail("a rank did not finish within 240 s")
    return [(p.returncode, out) for p, out in zip(ranks, outputs)]


def run_on_hosts(test, *args):
    """Runs this file with `args` as WORLD ranks on WORLD emulated hosts (//comm/job:on_hosts,
    links unshaped); returns (status, output of both ranks), or skips the test where this
    machine may not make network namespaces."""
    env = dict(os.environ, PYTHONPATH=MODULE_DIR, OMP_NUM_THREADS="1",
               RINGLAB_TEST_COMMUNICATOR="gloo")
    try:
        done = subprocess.run([ON_HOSTS, f"--nprocs={WORLD}", f"--hosts={WORLD}",
                               "--link=unlimited", "--", sys.executable, __file__] + list(args),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=240)
    except subprocess.TimeoutExpired:
        test.fail("the job on emulated hosts did not finish within 240 s")
    if "--hosts needs" in done.stdout or "cannot create a network namespace" in done.stdout:
        test.skipTest(done.stdout.strip().splitlines()[-1])
    return done.returncode, done.stdout


class ProcessGroupTest(unittest.TestCase):
    def test_mismatched_calls_fail_on_every_rank_naming_them(self):
        for r, (status, out) in enumerate(run_ranks(self, "--fault=mismatch")):
            self.assertEqual(status, 3, f"rank {r}:\n{out}")
            self.assertIn("mismatched", out, f"rank {r}:\n{out}")

    def test_a_killed_peer_fails_the_survivor_naming_it(self):
        (status, out), _ = run_ranks(self, "--fault=kill")
        self.assertEqual(status, 3, out)
        # Noticed from the peer's process, not waited out (the deadline is 20 s).
        self.assertIn("rank 1", out)
        self.assertIn("died", out)

    def test_destruction_with_callbacks_pending_and_from_a_callback(self):
        for r, (status, out) in enumerate(run_ranks(self, "--lifetime")):
            self.assertEqual(status, 0, f"rank {r}:\n{out}")
            self.assertIn("pending callback: 20.0", out, f"rank {r}:\n{out}")
            self.assertIn("last reference dropped in a callback: 20.0", out, f"rank {r}:\n{out}")
            self.assertIn("all passed", out, f"rank {r}:\n{out}")

    def test_collectives_and_ddp_across_two_processes(self):
        for r, (status, out) in enumerate(run_ranks(self, "--rank")):
            self.assertEqual(status, 0, f"rank {r}:\n{out}")
            self.assertIn("all passed", out, f"rank {r}:\n{out}")

    def test_the_same_over_three_channels(self):
        # The calls take the channels in turn: each of DDP's buckets, hook collectives and
        # gathered reductions meets on the same channel on every rank.
        for r, (status, out) in enumerate(run_ranks(self, "--rank", RINGLAB_TORCH_CHANNELS="3")):
            self.assertEqual(status, 0, f"rank {r}:\n{out}")
            self.assertIn("all passed", out, f"rank {r}:\n{out}")

    # Across hosts the communicator is gloo, whose calls the front checks over connections of
    # its own, each call's description posted as the call is queued (Communicator::Announce).
    def test_the_same_across_two_emulated_hosts(self):
        status, out = run_on_hosts(self, "--rank")
        self.assertEqual(status, 0, out)
        self.assertEqual(out.count("all passed"), WORLD, out)

    def test_mismatched_calls_across_hosts_fail_on_every_rank(self):
        status, out = run_on_hosts(self, "--fault=mismatch")
        self.assertNotEqual(status, 0, out)
        self.assertEqual(out.count("mismatched collectives"), WORLD, out)
        self.assertIn("count=10", out)
        self.assertIn("count=20", out)

    def test_a_peer_gone_across_hosts_is_named(self):
        status, out = run_on_hosts(self, "--fault=kill")
        self.assertNotEqual(status, 0, out)
        # Its pid is not visible from the other host: named as the rank that went.
        self.assertIn("error: ", out)
        self.assertIn("rank 1 closed its connection", out)

    def test_every_op_on_every_type_and_the_collectives_beyond_ddp(self):
        # Through the communicator's own reduction (float sums, averages, min and max) and the
        # gathered one (the rest), with reduce, gather, scatter, alltoall, coalesced, sparse
        # and point-to-point calls.
        for r, (status, out) in enumerate(run_ranks(self, "--mode=every_op")):
            self.assertEqual(status, 0, f"rank {r}:\n{out}")
            self.assertIn("all passed", out, f"rank {r}:\n{out}")

    def test_every_op_on_every_type_across_two_emulated_hosts(self):
        status, out = run_on_hosts(self, "--mode=every_op")
        self.assertEqual(status, 0, out)
        self.assertEqual(out.count("all passed"), WORLD, out)

    def test_ranks_that_disagree_are_refused_on_both_naming_both_sides(self):
        for r, (status, out) in enumerate(run_ranks(self, "--mode=disagree")):
            self.assertEqual(status, 0, f"rank {r}:\n{out}")
            self.assertIn("all passed", out, f"rank {r}:\n{out}")
            self.assertEqual(out.count("error: "), 7, f"rank {r}:\n{out}")

    def test_a_peer_that_never_joins_times_out_by_the_groups_timeout(self):
        (status, out), _ = run_ranks(self, "--mode=timeout")
        self.assertEqual(status, 0, out)
        self.assertIn("Timed out", out)
        took = float(out.split("failed after ")[1].split(" s")[0])
        self.assertGreaterEqual(took, 2.5, out)
        self.assertLess(took, 8, out)  # the group's 3 s, not the 60 s default

    def test_a_barrier_waits_for_every_earlier_work_and_rank_0s_channels_hold(self):
        # Rank 1 asks for 3 channels, rank 0 for 2: rank 0's count holds for both.
        variables = {"RINGLAB_TORCH_CHANNELS": "2", "RINGLAB_TEST_RANK1_CHANNELS": "3"}
        for r, (status, out) in enumerate(run_ranks(self, "--mode=mark", **variables)):
            self.assertEqual(status, 0, f"rank {r}:\n{out}")
            self.assertIn("all passed", out, f"rank {r}:\n{out}")

    def test_a_malformed_variable_is_refused(self):
        for r, (status, out) in enumerate(run_ranks(self, "--mode=mark",
                                                    RINGLAB_TORCH_STAGING="yes")):
            self.assertNotEqual(status, 0, f"rank {r}:\n{out}")
            self.assertIn("RINGLAB_TORCH_STAGING=yes: expected 0 or 1", out)

    def test_the_same_with_allreduces_staged_through_registered_memory(self):
        # Over two channels: each stages through registered memory of its own.
        for r, (status, out) in enumerate(run_ranks(self, "--rank", RINGLAB_TORCH_STAGING="1",
                                                    RINGLAB_TORCH_CHANNELS="2")):
            self.assertEqual(status, 0, f"rank {r}:\n{out}")
            self.assertIn("all passed", out, f"rank {r}:\n{out}")


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1].startswith("--mode="):
        if os.environ.get("RANK") == "1" and "RINGLAB_TEST_RANK1_CHANNELS" in os.environ:
            os.environ["RINGLAB_TORCH_CHANNELS"] = os.environ["RINGLAB_TEST_RANK1_CHANNELS"]
        import collectives_ranks
        sys.exit(getattr(collectives_ranks, sys.argv[1].split("=", 1)[1] + "_main")())
    if sys.argv[1:] == ["--rank"]:
        sys.exit(rank_main())
    if sys.argv[1:] == ["--lifetime"]:
        sys.exit(lifetime_main())
    if len(sys.argv) == 2 and sys.argv[1].startswith("--fault="):
        fault_main(sys.argv[1].split("=", 1)[1])
    MODULE_DIR = os.path.dirname(os.path.abspath(sys.argv.pop(1)))
    ON_HOSTS = os.path.abspath(sys.argv.pop(1))
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"skipped: torch does not import ({e})")
        sys.exit(0)
    unittest.main()
