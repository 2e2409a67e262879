"""The cost model on synthetic bench output whose terms are known: the fit recovers them, the
predictions follow the formulas, and bad input is one error line with exit status 2."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cost_model  # noqa: E402

ALPHA, B_EFF = 50e-6, 0.1e9  # 50 us a step, 0.1 GB/s on a 1 Gbit/s link
SIZES = [4 ** k for k in range(1, 13)]


def bench_text(ranks=4, hosts=2):
    lines = [f"[rank 0] # nccl-tests style: allreduce, float32, sum, {ranks} ranks; time", ""]
    for row, hier in (("allreduce/gloo", False), ("allreduce/hier", True)):
        lines += [f"[rank 0] # {row}", "[rank 0]      size(B) count time(us) ..."]
        for size in SIZES:
            t = cost_model.allreduce_s(size, ranks, hosts, ALPHA, B_EFF, hier, 7.7e9)
            lines.append(f"[rank 0] {size:12d} {size // 4:12d} {t * 1e6:10.2f} 0 0 0 0 0 0")
        lines.append("[rank 0] ")
    lines.append("[rank 0] # link floor: one TCP stream between two hosts carried 0.119 GB/s "
                 "(0.953 Gbit/s) through links of 1.000 Gbit/s; xlink = busbw / 0.125 GB/s")
    return "\n".join(lines) + "\n"


class FitTest(unittest.TestCase):
    def test_recovers_alpha_and_bandwidth(self):
        rows, ranks, link_bits = cost_model.parse_bench(bench_text())
        self.assertEqual((ranks, link_bits), (4, 1e9))
        alpha, b_eff = cost_model.fit(rows["allreduce/gloo"], ranks, 2, False)
        # Within 1%: the times are printed to 0.01 us.
        self.assertAlmostEqual(alpha / ALPHA, 1, delta=0.01)
        self.assertAlmostEqual(b_eff / B_EFF, 1, delta=0.01)

    def test_an_unshaped_link_is_rated_at_its_tcp_floor(self):
        text = bench_text().replace("through links of 1.000 Gbit/s", "through links of "
                                    "unlimited rate")
        self.assertEqual(cost_model.parse_bench(text)[2], 0.953e9)

    def test_hier_beats_a_flat_ring_when_the_link_binds(self):
        size = 7.45e6
        flat = cost_model.allreduce_s(size, 64, 8, ALPHA, B_EFF, False, 7.7e9)
        hier = cost_model.allreduce_s(size, 64, 8, ALPHA, B_EFF, True, 7.7e9)
        # 2(N-1)/N against 2(H-1)/H of the buffer through each link, fewer slow steps.
        self.assertLess(hier, flat)
        self.assertAlmostEqual(
            flat, 126 * ALPHA + 126 / 64 * size / B_EFF, delta=1e-12)

    def test_step_time(self):
        self.assertEqual(cost_model.step_ms("none", 30.0, 1.0), 30.0)
        self.assertEqual(cost_model.step_ms("allreduce", 30.0, 0.010), 30.0)  # hidden
        self.assertAlmostEqual(cost_model.step_ms("allreduce", 30.0, 0.050), 60.0)
        self.assertAlmostEqual(cost_model.step_ms("param_avg", 30.0, 0.160, k=16), 40.0)


class CliTest(unittest.TestCase):
    def run_model(self, *args):
        return subprocess.run([sys.executable, os.path.join(HERE, "cost_model.py")] +
                              list(args), capture_output=True, text=True, timeout=60)

    def test_prints_fit_predictions_and_extrapolation(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(bench_text())
        result = self.run_model(f"--bench={f.name}")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("# prediction beside measurement", result.stdout)
        self.assertIn("1024", result.stdout)
        self.assertEqual(result.stdout.count(" hier "), 6)  # 3 links x 2 synchronisers

    def write_run(self, sync, comm, step_ms, comm_ms, world_size=4):
        run = tempfile.mkdtemp()
        with open(os.path.join(run, "config.json"), "w") as f:
            json.dump({"sync": sync, "comm": comm, "world_size": world_size,
                       "avg_period": 16, "model": "784,1024,1024,10"}, f)
        with open(os.path.join(run, "losses.csv"), "w") as f:
            f.write("rank,epoch,step,loss,step_ms,comm_ms,bytes_sent\n")
            for step in range(30):  # the warm-up's 20 steps are slower and left out
                slow = 100.0 if step < cost_model.RUN_WARMUP_STEPS else 0.0
                for rank in range(world_size):
                    f.write(f"{rank},0,{step},1.0,{step_ms + slow},{comm_ms},0\n")
        return run

    def test_predicts_each_run_from_its_compute_and_its_backends_fit(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(bench_text())
        size = cost_model.DEFAULT_BUFFER_BYTES
        flat = cost_model.allreduce_s(size, 4, 2, ALPHA, B_EFF, False, 7.7e9) * 1e3
        hier = cost_model.allreduce_s(size, 4, 2, ALPHA, B_EFF, True, 7.7e9) * 1e3
        runs = [self.write_run("allreduce", "gloo", 50.0 + flat, flat),
                self.write_run("allreduce", "hier", 50.0 + 2 * hier, 2 * hier),
                self.write_run("param_avg", "gloo", 50.0, 0.0)]
        result = self.run_model(f"--bench={f.name}", "--runs=" + ",".join(runs))
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = result.stdout.split("# training runs")[1].split("\n\n")[0].splitlines()[2:]
        self.assertEqual(len(rows), 3, result.stdout)
        ratios = [float(r.split()[-1]) for r in rows]
        # measured / predicted: 1 for the flat run, (50 + 2 hier) / (50 + hier) for hier's,
        # 50 / (50 + flat / 16) for param_avg's (its averaging amortised over K). Within 0.02:
        # the fit recovers the terms to about 1%, and the ratio is printed to 2 decimals.
        self.assertAlmostEqual(ratios[0], 1.0, delta=0.02)
        self.assertAlmostEqual(ratios[1], (50 + 2 * hier) / (50 + hier), delta=0.02)
        self.assertAlmostEqual(ratios[2], 50 / (50 + flat / 16), delta=0.02)
        wrong_size = self.write_run("allreduce", "gloo", 60.0, 10.0, world_size=2)
        no_table = self.write_run("allreduce", "mpi", 60.0, 10.0)
        no_compute = self.write_run("allreduce", "gloo", 10.0, 10.0)
        for run in (wrong_size, no_table, no_compute, "/nonexistent"):
            result = self.run_model(f"--bench={f.name}", f"--runs={run}")
            self.assertEqual(result.returncode, 2, run)
            self.assertTrue(result.stderr.startswith(f"error: {run}"), result.stderr)

    def test_every_bad_flag_is_one_error_line_before_anything_is_written(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(bench_text())
        root = tempfile.mkdtemp()
        good = f"--bench={f.name}"
        cases = [
            ([good, "--no_such_flag"], "unknown flag --no_such_flag"),
            ([good, "--hosts=abc"], "invalid int value: 'abc'"),
            ([good, "--compute_ms=abc"], "invalid float value: 'abc'"),
            ([good, "--hosts=0"], "--hosts=0 is not in [2, "),
            ([good, "--hosts=1"], "--hosts=1 is not in"),
            ([good, "--compute_ms=-1"], "--compute_ms=-1 is not in (0, inf)"),
            ([good, "--compute_ms=nan"], "--compute_ms=nan"),
            ([good, "--compute_ms=inf"], "--compute_ms=inf"),
            ([good, "--buffer_bytes=0"], "--buffer_bytes=0 is not in"),
            ([good, "--intra_gbs=nan"], "--intra_gbs=nan"),
            ([good, "--alpha_us=-1"], "--alpha_us=-1 is not a finite number >= 0"),
            ([good, "--alpha_us=inf"], "--alpha_us=inf"),
            ([], "the following arguments are required: --bench"),
            (["--bench=/nonexistent"], "--bench=/nonexistent: no such file"),
            ([f"--bench={root}"], "is not a regular file"),
            ([good, "--plot=/nonexistent/dir/x.png"], "no such directory /nonexistent/dir"),
            ([good, f"--plot={root}"], "is a directory"),
            ([good, f"--plot={root}/x.txt"], ".txt is not one of"),
            ([good, "--plot=/proc/x.png"], "holds no files"),
            ([good, "--runs=/nonexistent"], "/nonexistent: no such directory"),
        ]
        for args, fragment in cases:
            with self.subTest(args=args):
                result = self.run_model(*args)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(result.stdout, "")
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
                self.assertTrue(result.stderr.startswith("error: "), result.stderr)
                self.assertIn(fragment, result.stderr)
        self.assertEqual(os.listdir(root), [])

    def test_bad_input_is_one_error_line(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("not a bench\n")
        for args in ([f"--bench={f.name}"], ["--bench=/nonexistent"],
                     [f"--bench={f.name}", "--compute_ms=0"]):
            result = self.run_model(*args)
            self.assertEqual(result.returncode, 2, args)
            self.assertTrue(result.stderr.startswith("error: "), result.stderr)
            self.assertEqual(len(result.stderr.splitlines()), 1)


if __name__ == "__main__":
    unittest.main()
