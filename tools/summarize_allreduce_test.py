"""tools/summarize_allreduce.py on three hand-made sweeps (one with the launcher's
"[rank 0] " prefix): medians, ranges, ratios, and its errors."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "summarize_allreduce.py")
DATA = [os.path.join(HERE, "testdata", f"allreduce_sweep_{x}.txt") for x in "abc"]


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


class SummariseTest(unittest.TestCase):
    def test_medians_ranges_and_ratios(self):
        out = run(*DATA)
        self.assertEqual(out.returncode, 0, out.stderr)
        row = next(l for l in out.stdout.splitlines() if l.strip().startswith("1048576"))
        # shm_ring 100, 140, 120 us: median 120; MPI 300, 200, 300: median 300.
        self.assertIn("120.00 [100.00-140.00]", row)
        self.assertIn("300.00 [200.00-300.00]", row)
        self.assertIn("25.00 [25.00-25.00]", row)
        ratios = [l for l in out.stdout.splitlines() if "vsMPI" in l]
        # 300 / 120 = 2.5; 120 / 300 = 0.4; 120 / 25 = 4.8; 25 / 20 = 1.25.
        self.assertEqual(ratios, ["   1048576  vsMPI  2.50x  vsBest  0.40  priv/reg  4.80  "
                                  "reg/floor  1.25"])
        self.assertEqual(out.stdout.count("# ---- sweep"), 3)

    def test_errors(self):
        self.assertEqual(run().returncode, 2)
        missing = run("/nonexistent/sweep.txt")
        self.assertEqual(missing.returncode, 2)
        self.assertTrue(missing.stderr.startswith("error: "))
        empty = run(TOOL)  # a file with no table
        self.assertEqual(empty.returncode, 2)
        self.assertIn("no allreduce_bench table", empty.stderr)


if __name__ == "__main__":
    unittest.main()
