#!/usr/bin/python3
"""The fashion_mnist driver's parsing and report on small hand-made run directories: no
training, so that it runs in a second. The figures are chosen so that every number the report
prints can be worked out by hand (see each fixture's comment).
"""

import csv
import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import analysis  # noqa: E402
import links  # noqa: E402
import pytorch_ddp  # noqa: E402

DRIVER = os.path.join(HERE, "fashion_mnist.py")
STEPS, EPOCHS = 30, 2  # per rank; 15 steps per epoch


def losses_csv(path, losses, step_ms, bytes_sent, comm_ms="nan"):
    with open(path, "w") as f:
        f.write("rank,epoch,step,loss,step_ms,comm_ms,bytes_sent\n")
        for rank in (1, 0):  # rank 1 first: the reader must not rely on the order
            for step in range(STEPS):
                f.write(f"{rank},{step // 15},{step},{losses[step]!r},{step_ms[step]},"
                        f"{comm_ms},{bytes_sent}\n")


def eval_csv(path, accuracies, walls, bytes_per_step):
    with open(path, "w") as f:
        f.write("epoch,step,test_loss,test_accuracy,wall_s,bytes_sent\n")
        for epoch, (acc, wall) in enumerate(zip(accuracies, walls), start=1):
            f.write(f"{epoch},{15 * epoch},0.5,{acc},{wall},{bytes_per_step * 15 * epoch}\n")


def trace_json(path, wait_us):
    """Per step of rank 0: forward 1000 us, backward 200+1500+1300 us, a wait of wait_us, SGD
    500 us; one 2000 us bucket of 4 MB on the comm thread. Rank 1's events and the evaluation
    are large, so that counting them would show."""
    events, ts = [], 0
    for step in range(STEPS):
        for name, dur, cat in (("forward", 1000, "compute"), ("backward fc3", 200, "compute"),
                               ("backward fc2", 1500, "compute"),
                               ("backward fc1", 1300, "compute"),
                               ("wait for allreduce", wait_us, "exposed_comm"),
                               ("sgd step", 500, "compute")):
            events.append(dict(name=name, cat=cat, ph="X", pid=0, tid=0, ts=ts, dur=dur))
            ts += dur
        events.append(dict(name="allreduce bucket 0", cat="comm", ph="X", pid=0, tid=1,
                           ts=ts - 2500, dur=2000, args={"bytes": 4000000}))
        events.append(dict(name="wait for allreduce", cat="exposed_comm", ph="X", pid=1, tid=0,
                           ts=ts, dur=10 ** 9))
    events.append(dict(name="evaluation", ph="X", pid=0, tid=0, ts=ts, dur=10 ** 8))
    events.append(dict(name="process_name", ph="M", pid=0, args={"name": "rank 0"}))
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)


def make_run(out, order, name, label, framework, sync="allreduce", comm="shm_ring", ranks=2,
             overlap=None, status="ok", meta=None, **files):
    run_dir = os.path.join(out, "runs", name)
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump(dict(order=order, name=name, label=label, framework=framework, sync=sync,
                       avg_period=None, overlap=overlap, comm=comm, ranks=ranks, status=status,
                       wall_s=12.5, command="fixture", load_after=2.25, **(meta or {})), f)
    if "losses" in files:
        losses_csv(os.path.join(run_dir, "losses.csv"), *files["losses"])
    if "evals" in files:
        eval_csv(os.path.join(run_dir, "eval.csv"), *files["evals"])
    if "wait_us" in files:
        trace_json(os.path.join(run_dir, "trace.json"), files["wait_us"])
    return run_dir


PT_LOSSES = [2.0 - 0.01 * i for i in range(STEPS)]
# Warm-up (the first 20 steps) at 100 ms; then PyTorch's 10 steps at 20 ms (median 20), and
# ringlab's 5,6,7,8,9,100,6,7,8,6: sorted 5,6,6,6,7,7,8,8,9,100, median 7.
PT_MS = [100.0] * 20 + [20.0] * 10
RL_MS = [100.0] * 20 + [5, 6, 7, 8, 9, 100, 6, 7, 8, 6]


def make_fixture(out):
    os.makedirs(out)
    with open(os.path.join(out, "invocation.json"), "w") as f:
        json.dump({"mode": "quick", "epochs": EPOCHS, "date": "2024-01-01T00:00:00+00:00",
                   "cpu_model": "Fixture CPU", "cores": 2, "torch_version": "1.13.0a0",
                   "load_before": "0.00 0.00 0.00", "duration_s": 90.0, "notes": []}, f)
    make_run(out, 0, "pytorch_ddp", "PyTorch DDP (gloo, 2 ranks)", "pytorch", comm="gloo",
             losses=(PT_LOSSES, PT_MS, "nan"), evals=([0.80, 0.851], [15.0, 30.0], float("nan")))
    # Losses 5e-5 relatively above PyTorch's; accuracies 0.35 and 0.15 points above.
    make_run(out, 1, "shm_ring_allreduce_overlap", "ringlab allreduce, overlap (shm_ring)",
             "ringlab", overlap=True, losses=([l * (1 + 5e-5) for l in PT_LOSSES], RL_MS, 4000000),
             evals=([0.8035, 0.8525], [14.0, 31.0], 4000000), wait_us=300)
    make_run(out, 2, "shm_ring_allreduce_no_overlap", "ringlab allreduce, no overlap (shm_ring)",
             "ringlab", overlap=False, losses=(PT_LOSSES, RL_MS, 4000000),
             evals=([0.80, 0.84], [16.0, 33.0], 4000000), wait_us=2000)
    make_run(out, 3, "pytorch_1proc", "PyTorch 1 process (compute floor)", "pytorch",
             sync="none", comm=None, ranks=1, status="skipped: torch does not import")
    # PyTorch DDP over ringlab: gloo's losses, one off in the last step of its 30, 4 ms
    # faster a step.
    make_run(out, 4, "pytorch_ddp_ringlab", "PyTorch DDP (ringlab, 2 ranks, 30 steps)",
             "pytorch", comm="ringlab", meta=dict(backend="ringlab", max_steps=30, epochs=1),
             losses=(PT_LOSSES[:-1] + [PT_LOSSES[-1] + 0.5], [ms - 4 for ms in PT_MS], "nan"),
             evals=([0.70], [8.0], float("nan")))


def run_driver(*args):
    env = dict(os.environ, MPLCONFIGDIR=tempfile.mkdtemp())
    return subprocess.run([sys.executable, DRIVER] + list(args), capture_output=True, text=True,
                          env=env, timeout=120)


class ReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fashion_mnist_test.")
        cls.out = os.path.join(cls.tmp, "good")
        make_fixture(cls.out)
        cls.result = run_driver("--report_only", f"--out_dir={cls.out}")
        with open(os.path.join(cls.out, "report.md")) as f:
            cls.report = f.read()

    def test_exit_status_zero_when_nothing_failed(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)

    def test_runs_table(self):
        # 85.25%, reached at epoch 2 after 31.0 s, median 7.00 ms, exposed 300 us per step,
        # 4 MB per step, 7 / 20 = 0.35 of PyTorch's step.
        self.assertIn("| ringlab allreduce, overlap (shm_ring) | ok | 85.25% | 2 | 31.0 | 7.00 | "
                      "0.300 | 4.00 MB | 0.35 | 2.2 |", self.report)
        self.assertIn("| PyTorch DDP (gloo, 2 ranks) | ok | 85.10% | 2 | 30.0 | 20.00 | "
                      "n/a (no trace) | n/a | 1.00 | 2.2 |", self.report)
        self.assertIn("| ringlab allreduce, no overlap (shm_ring) | ok | 84.00% | not reached | "
                      "not reached | 7.00 | 2.000 |", self.report)
        self.assertIn("| PyTorch 1 process (compute floor) | skipped: torch does not import |",
                      self.report)

    def test_fidelity_and_speed(self):
        self.assertIn("**0.350 points** over 2 epoch(s) (target ≤ 0.5): **PASS**", self.report)
        # 5e-5 relative, measured between the float32 values (5.01e-05 after their rounding).
        self.assertIn("first 30 losses: **5.01e-05** (target ≤ 0.0001): **PASS**", self.report)
        # 5e-5 relative is hundreds of float32 ulps from step 0 on.
        self.assertIn("0 of rank 0's first 30 losses are bitwise identical; the first difference "
                      "is at step 0; the first 0 steps are within 1 ulp", self.report)
        self.assertIn("ms against PyTorch DDP 20.00 ms: **0.35×**\n", self.report)
        self.assertIn("allreduce against none on one host: not measured", self.report)
        self.assertIn("- PyTorch DDP over ringlab on one host (its first 30 steps): 29 of 30 "
                      "losses bit for bit those over gloo, the first difference at step 29; "
                      "median step 16.00 ms against 20.00 ms over gloo (**0.80×**)", self.report)
        # No overlap: 0.35 points below PyTorch at epoch 1... 1.1 at epoch 2; losses equal.
        self.assertIn("| ringlab allreduce, no overlap (shm_ring) | PyTorch DDP | 1.100 | "
                      "0.00e+00 |", self.report)
        self.assertIn("overlap 0.300 ms, no overlap 2.000 ms (-85%: smaller with overlap)",
                      self.report)
        # The fixture's machine has 2 cores for 2 ranks: the report says what overlap can do.
        self.assertIn("2 core(s) for 2 ranks: a rank's communication thread gets its core only "
                      "while the compute thread waits", self.report)

    def test_allreduce_against_none_and_where_the_difference_went(self):
        out = os.path.join(tempfile.mkdtemp(prefix="fashion_mnist_none."), "out")
        make_fixture(out)
        # none: 6.5 ms after the warm-up (median and mean), the same trace without the wait.
        make_run(out, 4, "shm_ring_none", "ringlab none (shm_ring)", "ringlab", sync="none",
                 losses=(PT_LOSSES, [100.0] * 20 + [6.5] * 10, 0),
                 evals=([0.79, 0.83], [14.0, 29.0], 0), wait_us=0)
        # barrier: 6.75 ms, between them.
        make_run(out, 5, "shm_ring_barrier", "ringlab barrier (none, meeting each step) "
                 "(shm_ring)", "ringlab", sync="barrier",
                 losses=(PT_LOSSES, [100.0] * 20 + [6.75] * 10, 0),
                 evals=([0.79, 0.83], [14.0, 29.0], 0), wait_us=100)
        result = run_driver("--report_only", f"--out_dir={out}")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(out, "report.md")) as f:
            text = f.read()
        # Medians 7 against 6.5 ms; means 16.2 (the 100 ms step) against 6.5: of the 9.7 ms,
        # the trace's 0.3 ms wait is exposed communication, 9.4 untimed.
        self.assertIn("7.00 ms against ringlab none 6.50 ms: **1.08×** (target ≤ 1.06×): "
                      "**FAIL**", text)
        self.assertIn("compute +0.00 ms, exposed communication +0.30 ms, optimiser +0.00 ms, "
                      "the rest (the trace's untimed gaps) +9.40 ms", text)
        # Of the 0.5 ms, 0.25 the ranks meeting, 0.25 the bytes.
        self.assertIn("- of the difference, the ranks meeting once a step (ringlab barrier, no "
                      "byte moved: 6.75 ms, **1.04×** none) +0.25 ms; moving the gradients "
                      "(allreduce against barrier, **1.04×**) +0.25 ms", text)

    def test_header_names_machine_and_torch(self):
        self.assertIn("Fixture CPU (2 cores)", self.report)
        self.assertIn("torch: 1.13.0a0", self.report)
        self.assertIn("took 1.5 min", self.report)

    def test_results_csv(self):
        with open(os.path.join(self.out, "results.csv")) as f:
            rows = {r["run"]: r for r in csv.DictReader(f)}
        self.assertEqual(len(rows), 5)
        head = rows["shm_ring_allreduce_overlap"]
        self.assertAlmostEqual(float(head["median_step_ms"]), 7.0)
        # Per step: 4.0 ms compute, 0.3 exposed, 0.5 SGD, 2.0 on the comm thread (1e-9: the
        # microsecond sums are exact in binary up to the division).
        for key, want in (("compute_ms_per_step", 4.0), ("exposed_comm_ms_per_step", 0.3),
                          ("optimiser_ms_per_step", 0.5), ("comm_thread_ms_per_step", 2.0),
                          ("bytes_per_step", 4e6), ("ratio_to_pytorch_ddp", 0.35)):
            self.assertAlmostEqual(float(head[key]), want, delta=1e-9, msg=key)
        self.assertEqual(rows["pytorch_ddp"]["bytes_per_step"], "")
        self.assertEqual(rows["pytorch_1proc"]["final_test_accuracy"], "")

    def test_plots_are_pngs(self):
        for name in ("accuracy_vs_epoch.png", "accuracy_vs_bytes.png", "accuracy_vs_time.png",
                     "step_breakdown.png"):
            with open(os.path.join(self.out, name), "rb") as f:
                data = f.read()
            self.assertTrue(data.startswith(b"\x89PNG\r\n\x1a\n"), name)
            self.assertGreater(len(data), 10000, name)
            self.assertIn(f"]({name})", self.report)


class DefectTest(unittest.TestCase):
    def test_malformed_run_is_reported_failed_and_exit_1(self):
        out = os.path.join(tempfile.mkdtemp(), "bad")
        make_fixture(out)
        run_dir = make_run(out, 4, "gloo_none", "ringlab none (gloo)", "ringlab", sync="none",
                           comm="gloo", losses=(PT_LOSSES, RL_MS, 0),
                           evals=([0.7, 0.8], [1, 2], 0))
        with open(os.path.join(run_dir, "eval.csv"), "w") as f:
            f.write("epoch,accuracy\n1,0.5\n")
        result = run_driver("--report_only", f"--out_dir={out}")
        self.assertEqual(result.returncode, 1, result.stderr)
        with open(os.path.join(out, "report.md")) as f:
            self.assertIn("| ringlab none (gloo) | failed: ", f.read())

    def test_no_invocation_is_error_exit_2(self):
        result = run_driver("--report_only", f"--out_dir={tempfile.mkdtemp()}")
        self.assertEqual(result.returncode, 2)
        self.assertRegex(result.stderr, r"^error: .*invocation.json")

    def test_missing_train_binary_is_error_exit_2(self):
        result = run_driver("--train=/nonexistent/train", f"--out_dir={tempfile.mkdtemp()}")
        self.assertEqual(result.returncode, 2)
        self.assertTrue(result.stderr.startswith("error: --train"), result.stderr)

    def test_trace_defects(self):
        path = os.path.join(tempfile.mkdtemp(), "trace.json")
        with open(path, "w") as f:
            f.write('{"traceEvents": [')
        with self.assertRaisesRegex(analysis.AnalysisError, "not JSON"):
            analysis.read_trace(path)
        with open(path, "w") as f:
            json.dump({"traceEvents": [{"name": "forward", "ph": "X", "pid": 0, "tid": 0}]}, f)
        with self.assertRaisesRegex(analysis.AnalysisError, "no valid dur"):
            analysis.read_trace(path)

    def test_accuracy_out_of_range(self):
        path = os.path.join(tempfile.mkdtemp(), "eval.csv")
        eval_csv(path, [85.0], [1.0], 0)  # a percentage where a fraction belongs
        with self.assertRaisesRegex(analysis.AnalysisError, "not in"):
            analysis.read_eval(path)


class UlpTest(unittest.TestCase):
    def test_counts_float32_ulps(self):
        import numpy as np

        def up(x, k):  # the float32 k ulps above x
            bits = np.array([x], dtype=np.float32).view(np.int32) + k
            return float(bits.view(np.float32)[0])

        ref = {"losses0": [2.0, 1.5, 1.25, 1.0, 0.5]}
        ours = {"losses0": [2.0, up(1.5, 1), 1.25, up(1.0, -3), up(0.5, 1)]}
        # identical at steps 0 and 2; 1 ulp at step 1; 3 ulps at step 3.
        self.assertEqual(analysis.loss_ulps(ours, ref), (2, 3, 1, 5))
        self.assertEqual(analysis.loss_ulps(ref, ref, steps=3), (3, 3, None, 3))


# A stand-in for //train:train that answers only --list_syncs=json: the synchronisers SYNCS
# names, each with the options its rows use.
FAKE_SYNCS = {"allreduce": ["overlap"], "fp16": ["overlap"], "bf16": ["overlap"],
              "powersgd": ["overlap", "powersgd_rank", "powersgd_start_iter"],
              "param_avg": ["avg_period", "avg_warmup"],
              "post_local_sgd": ["overlap", "avg_period", "avg_warmup"],
              "diloco": ["inner_steps"], "none": [], "barrier": []}


def fake_train(syncs):
    """The stand-in's script for these {synchroniser: option names}."""
    listed = [{"name": name, "options": [{"name": o} for o in options]}
              for name, options in syncs.items()]
    return ("#!/bin/sh\n[ \"$1\" = --list_syncs=json ] || exit 1\ncat <<'JSON'\n" +
            json.dumps(listed) + "\nJSON\n")


FAKE_TRAIN = fake_train(FAKE_SYNCS)


def fakes():
    """(train, on_hosts, data_dir): two executables that are never run and a directory with
    the data set's file names, for --dry_run, which checks them as a run would."""
    root = tempfile.mkdtemp(prefix="fashion_mnist_fakes.")
    paths = []
    for name, script in (("train", FAKE_TRAIN), ("on_hosts", "#!/bin/sh\nexit 1\n")):
        paths.append(os.path.join(root, name))
        with open(paths[-1], "w") as f:
            f.write(script)
        os.chmod(paths[-1], 0o755)
    data = os.path.join(root, "data")
    os.makedirs(data)
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        open(os.path.join(data, name), "w").close()
    return paths[0], paths[1], data


class PlanTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.train, cls.on_hosts, cls.data = fakes()

    def plan(self, *args):
        result = run_driver("--dry_run", f"--train={self.train}", f"--on_hosts={self.on_hosts}",
                            f"--data_dir={self.data}", *args)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout.splitlines()

    def test_quick_plan(self):
        lines = self.plan("--quick")
        # PyTorch DDP over gloo, then over ringlab (its first 300 steps), and ringlab
        # allreduce on one host; allreduce and DiLoCo H=16 at 1gbit.
        self.assertEqual(len(lines), 5)
        self.assertTrue(all("--epochs=1" in l for l in lines))  # DiLoCo: never below 1
        self.assertNotIn("--backend", lines[0])
        self.assertIn("--backend=ringlab --max_steps=300", lines[1])
        self.assertNotIn("--ringlab_torch", lines[1])  # no --torch_module given
        self.assertIn("--comm=shm_ring", lines[2])
        self.assertTrue(all("--hosts=2 --link=1gbit" in l for l in lines[3:]))
        self.assertIn("--sync=diloco", lines[4])
        self.assertIn("--inner_steps=16", lines[4])
        self.assertNotIn("--avg_period", lines[4])

    def test_standard_plan_is_the_per_link_answer(self):
        lines = self.plan()
        # Per link (unlimited, 1gbit): allreduce, DiLoCo H=16; PyTorch DDP over gloo and over
        # ringlab (through on_hosts) first on 1gbit.
        self.assertEqual(len(lines), 6)
        self.assertTrue(all("--hosts=2 --link=unlimited" in l for l in lines[:2]))
        launcher = f"{self.on_hosts} --nprocs=2 --hosts=2 --link=1gbit -- "
        self.assertTrue(all(l.startswith(launcher) for l in lines[2:4]))
        self.assertIn("--backend=ringlab", lines[3])
        self.assertTrue(all("--link=1gbit" in l for l in lines[4:]))
        self.assertTrue(all("--comm=gloo" in l for l in lines[:2] + lines[4:]))
        self.assertEqual([l.count("--epochs=3") for l in (lines[2], lines[4])], [1, 1])
        self.assertTrue(all("--epochs=2" in l and "--sync=diloco" in l
                            for l in (lines[1], lines[5])))
        module = self.plan("--torch_module=" + self.module_dir())
        self.assertIn("--ringlab_torch=" + self.module_dir(), module[3])

    def test_full_plan(self):
        full = self.plan("--full")
        # PyTorch DDP over gloo and ringlab, allreduce, none and barrier over shm_ring, both
        # floors (1 epoch); per link (3) PyTorch DDP over gloo and over ringlab and 5 syncs.
        self.assertEqual(len(full), 7 + 21)
        self.assertTrue(all("--comm=shm_ring" in l for l in full[2:5]))
        self.assertIn("--sync=barrier", full[4])
        self.assertTrue(all("--epochs=1" in l for l in full[4:7]))  # barrier, the floors
        self.assertEqual(sum("--link=10gbit" in l for l in full), 7)
        self.assertEqual(sum("--backend=ringlab" in l for l in full), 4)
        self.assertEqual(sum("--sync=fp16" in l for l in full), 3)
        self.assertEqual(len(self.plan("--full", "--links=none")), 7)

    def test_one_host_plan(self):
        lines = self.plan("--one_host")
        # PyTorch DDP over gloo and over ringlab, 13 synchronisers x 3 communicators, ringlab
        # 1 rank, PyTorch 1 process.
        self.assertEqual(len(lines), 43)
        mpi = [l for l in lines if "--comm=mpi" in l]
        self.assertEqual(len(mpi), 13)
        self.assertEqual(sum("--powersgd_rank=4 --powersgd_start_iter=100" in l
                             for l in lines), 3)
        self.assertEqual(sum("--avg_warmup=100" in l for l in lines), 3)  # post_local_sgd
        self.assertTrue(all(l.startswith("mpirun --allow-run-as-root") for l in mpi))
        self.assertTrue(all("--nprocs" not in l for l in mpi))
        self.assertEqual(sum("--avg_period=64" in l for l in lines), 3)
        self.assertFalse(any("--link=" in l for l in lines))
        self.assertTrue(all("--epochs=3" in l for l in lines if "--backend" not in l))

    def test_the_runs_come_from_what_train_lists(self):
        # A synchroniser train lists that SYNCS has no row for runs at its defaults where a
        # mode runs every one; a row asking an option its synchroniser lacks stops everything.
        syncs = dict(FAKE_SYNCS, topk=["topk_ratio"])
        with open(self.train, "w") as f:
            f.write(fake_train(syncs))
        try:
            lines = self.plan("--one_host")
            self.assertEqual(sum("--sync=topk" in l for l in lines), 3)
            # ... and on each of the full run's 3 links.
            self.assertEqual(sum("--sync=topk" in l for l in self.plan("--full")), 3)
            syncs["diloco"] = []
            with open(self.train, "w") as f:
                f.write(fake_train(syncs))
            result = run_driver("--dry_run", f"--train={self.train}",
                                f"--on_hosts={self.on_hosts}", f"--data_dir={self.data}")
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn("--sync=diloco has no option --inner_steps", result.stderr)
        finally:
            with open(self.train, "w") as f:
                f.write(FAKE_TRAIN)

    def module_dir(self):
        """A directory holding a (fake) ringlab_torch.so."""
        path = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "torch_module")
        os.makedirs(path, exist_ok=True)
        open(os.path.join(path, "ringlab_torch.so"), "w").close()
        return path

    def test_links_and_epochs_override_the_mode(self):
        lines = self.plan("--quick", "--links=unlimited,2.5gbit", "--epochs=2")
        self.assertEqual(len(lines), 3 + 4)
        self.assertTrue(all("--link=2.5gbit" in l for l in lines[5:]))
        self.assertIn("--epochs=2", lines[-2])  # allreduce
        self.assertIn("--epochs=1", lines[-1])  # DiLoCo: an epoch less
        good = (f"--train={self.train}", f"--data_dir={self.data}")
        bad = run_driver("--dry_run", *good, "--links=fast")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--links: 'fast'", bad.stderr)
        both = run_driver("--dry_run", *good, "--quick", "--full")
        self.assertEqual(both.returncode, 2)
        no_module = run_driver("--dry_run", *good, "--torch_module=/nonexistent")
        self.assertEqual(no_module.returncode, 2)
        self.assertIn("holds no ringlab_torch.so", no_module.stderr)


def tree(root):
    """{relative path: contents} of every file under root (None for a directory)."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(directory, name), root)] = None
        for name in files:
            with open(os.path.join(directory, name), "rb") as f:
                found[os.path.relpath(os.path.join(directory, name), root)] = f.read()
    return found


class BadInputTest(unittest.TestCase):
    """Every bad input, in every mode, is one error line and exit status 2 before anything
    runs: nothing on stdout, the --out_dir as it was (or never made)."""

    def test_each_is_one_error_line_and_nothing_written(self):
        train, on_hosts, data = fakes()
        root = tempfile.mkdtemp(prefix="fashion_mnist_bad.")
        out, file = os.path.join(root, "out"), os.path.join(root, "file")
        os.makedirs(out)
        for path in (os.path.join(out, "earlier.txt"), file):
            with open(path, "w") as f:
                f.write("earlier\n")
        good = [f"--train={train}", f"--on_hosts={on_hosts}", f"--data_dir={data}",
                f"--out_dir={out}"]
        cases = [
            (["--no_such_flag"], "unknown flag --no_such_flag"),
            (["--epochs=abc"], "invalid int value: 'abc'"),
            (["--timeout=abc"], "invalid float value: 'abc'"),
            (["--quick", "--full"], "not allowed with argument --quick"),
            (["--report_only", "--dry_run"], "not allowed with argument"),
            (["--epochs=0"], "--epochs=0 is not in [1, 1000]"),
            (["--epochs=1000000"], "--epochs=1000000 is not in"),
            (["--timeout=0"], "--timeout=0 is not in (0, 86400]"),
            (["--timeout=-5"], "--timeout=-5 is not in"),
            (["--timeout=nan"], "--timeout=nan is not in"),
            (["--timeout=inf"], "--timeout=inf is not in"),
            (["--links=warp"], "--links: 'warp'"),
            (["--out_dir=/dev/null"], "--out_dir=/dev/null is not a directory"),
            ([f"--out_dir={file}"], "is not a directory"),
            (["--out_dir=/proc/ringlab"], "--out_dir=/proc/ringlab cannot be made"),
            ([f"--out_dir={file}/sub"], f"{file} is not a directory"),
            (["--data_dir=/nonexistent"], "--data_dir=/nonexistent: no such directory"),
            ([f"--data_dir={out}"], "lacks train-images-idx3-ubyte.gz"),
            (["--train=/nonexistent"], "--train=/nonexistent is not an executable file"),
            ([f"--train={file}"], "is not an executable file"),
            (["--bench=/nonexistent"], "--bench=/nonexistent is not an executable file"),
            (["--on_hosts=/nonexistent"], "--on_hosts=/nonexistent is not an executable"),
            (["--torch_module=/nonexistent"], "holds no ringlab_torch.so"),
        ]
        modes = [[], ["--dry_run"], ["--quick"]]
        missing = os.path.join(root, "never_made")
        extra = [(["--report_only"], "holds no invocation.json"),
                 (["--report_only", f"--out_dir={missing}"], "holds no invocation.json"),
                 (["--report_only", "--timeout=nan"], "--timeout=nan is not in"),
                 (["--dry_run", "--out_dir=/dev/null"], "--out_dir=/dev/null"),
                 ([f"--out_dir={missing}", "--timeout=-5"], "--timeout=-5")]
        before = tree(root)
        for args, fragment in [(m + a, f) for m in modes for a, f in cases] + extra:
            with self.subTest(args=args):
                result = run_driver(*(good + args))
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(result.stdout, "")
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
                self.assertTrue(result.stderr.startswith("error: "), result.stderr)
                self.assertIn(fragment, result.stderr)
        self.assertEqual(tree(root), before)
        self.assertFalse(os.path.exists(missing))

    def test_help_is_the_full_usage(self):
        result = run_driver("--help")
        self.assertEqual(result.returncode, 0)
        self.assertIn("--report_only", result.stdout)


# allreduce_bench's output across a link, as the cost model reads it: 2 ranks, 1 Gbit/s; every
# size takes 100 us per ring step (alpha) plus S / 0.1 GB/s (2(N-1)/N = 1 at 2 ranks).
BENCH_SWEEP = "\n".join(
    ["[rank 0] # nccl-tests style: allreduce, float, sum, 2 ranks; time = ...", "",
     "[rank 0] # allreduce/gloo",
     "[rank 0]      size(B)        count   time(us)    p50(us)    p90(us)    algbw    busbw"] +
    [f"[rank 0] {size:12d} {size // 4:12d} {2 * 100 + size / 0.1e3:10.2f} 0 0 0 0 0 0"
     for size in (64, 4096, 65536, 1 << 20, 4 << 20, 16 << 20)] +
    ["", "[rank 0] # link floor: one TCP stream between two hosts carried 0.120 GB/s (0.957 "
     "Gbit/s) through links of 1.000 Gbit/s; xlink = busbw / 0.125 GB/s"]) + "\n"


class LinksTest(unittest.TestCase):
    def test_report_names_the_fastest_on_each_link(self):
        out = os.path.join(tempfile.mkdtemp(prefix="fashion_mnist_links."), "out")
        make_fixture(out)
        for order, (name, variant, sync, walls) in enumerate(
                [("link_1gbit_pytorch_ddp", "pytorch_ddp", "allreduce", [40.0, 80.0]),
                 ("link_1gbit_param_avg_k16", "param_avg_k16", "param_avg", [10.0, 20.0])],
                start=10):
            traced = {"wait_us": 300} if sync == "param_avg" else {}
            run_dir = make_run(out, order, name, f"{variant} @ 1gbit", "ringlab",
                               comm="gloo", losses=(PT_LOSSES, RL_MS, 4000000),
                               evals=([0.80, 0.851], walls, 4000000), **traced)
            with open(os.path.join(run_dir, "run.json")) as f:
                run = json.load(f)
            run.update(link="1gbit", variant=variant, sync=sync,
                       avg_period=16 if sync == "param_avg" else None)
            with open(os.path.join(run_dir, "run.json"), "w") as f:
                json.dump(run, f)
            with open(os.path.join(run_dir, "summary.json"), "w") as f:
                json.dump({"links": [{"host": 0, "link_bytes_sent_per_step": 2e6},
                                     {"host": 1, "link_bytes_sent_per_step": 4e6}]}, f)
        os.makedirs(os.path.join(out, "bench"))
        with open(os.path.join(out, "bench", "1gbit.txt"), "w") as f:
            f.write(BENCH_SWEEP)
        result = run_driver("--report_only", f"--out_dir={out}")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(out, "report.md")) as f:
            text = f.read()
        self.assertIn("### 1gbit", text)
        self.assertIn("alpha 100 us per ring step, B_eff 0.100 GB/s", text)
        # The trace's step: compute 4 ms (forward 1, backward 3), a wait, SGD 0.5 ms; the
        # model's allreduce of the MLP's 7.45 MB: 2 * 0.1 ms + 74.5 ms; param_avg K=16 adds
        # 1/16 of it: 4.5 + 74.7 / 16 = 9.17 ms; the mean step after the warm-up, 16.2 ms
        # (the 100 ms averaging step included): 1.77.
        self.assertIn("| 4.0 / 0.3 / 0.5 | 9.2 (1.77) |", text)
        self.assertIn("| 1gbit | param_avg_k16 @ 1gbit | 20.0 |", text)
        self.assertIn("3.00 MB", text)  # the hosts' mean
        for png in links.PLOTS:
            with open(os.path.join(out, png), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


class FrontierTest(unittest.TestCase):
    def test_the_frontier_keeps_what_no_run_beats_on_both(self):
        # (MB, accuracy): (3, 84) sends more than (2, 85.5) for less; (2, 85) ties its bytes
        # for less accuracy.
        points = [(1, 80), (2, 85), (3, 84), (2, 85.5), (0.5, 70), (5, 86), (5, 86)]
        self.assertEqual(links.frontier(points),
                         [(0.5, 70), (1, 80), (2, 85.5), (5, 86), (5, 86)])


class IdxTest(unittest.TestCase):
    def write(self, name, payload):
        path = os.path.join(tempfile.mkdtemp(), name)
        with gzip.open(path, "wb") as f:
            f.write(payload)
        return path

    def test_reads_images_as_x_over_255(self):
        header = bytes([0, 0, 8, 3]) + (2).to_bytes(4, "big") + (1).to_bytes(4, "big") * 2
        path = self.write("t10k-images-idx3-ubyte.gz", header + bytes([51, 255]))
        self.assertEqual(pytorch_ddp.read_idx(path, 3).shape, (2, 1, 1))
        labels = bytes([0, 0, 8, 1]) + (2).to_bytes(4, "big") + bytes([9, 0])
        with gzip.open(os.path.join(os.path.dirname(path), "t10k-labels-idx1-ubyte.gz"),
                       "wb") as f:
            f.write(labels)
        x, y = pytorch_ddp.load_split(os.path.dirname(path), "test", 1, 10)
        self.assertEqual(x.dtype.name, "float32")
        self.assertEqual(x.reshape(-1).tolist(), [0.20000000298023224, 1.0])  # float32(51/255)
        self.assertEqual(y.tolist(), [9, 0])
        with self.assertRaisesRegex(pytorch_ddp.UsageError, "label 9 >= 9 classes"):
            pytorch_ddp.load_split(os.path.dirname(path), "test", 1, 9)

    def test_truncated_and_wrong_kind(self):
        header = bytes([0, 0, 8, 1]) + (3).to_bytes(4, "big")
        with self.assertRaisesRegex(pytorch_ddp.UsageError, r"2 data bytes .*\(3 expected\)"):
            pytorch_ddp.read_idx(self.write("lab.gz", header + bytes([1, 2])), 1)
        with self.assertRaisesRegex(pytorch_ddp.UsageError, "not an IDX file"):
            pytorch_ddp.read_idx(self.write("lab.gz", header + bytes([1, 2, 3])), 3)


if __name__ == "__main__":
    unittest.main()
