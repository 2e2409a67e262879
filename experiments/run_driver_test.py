"""Tests of run_driver: what a run's environment holds, its deadline, and a sitting's record of
the machine."""

import os
import shutil
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_driver  # noqa: E402


class ExecuteTest(unittest.TestCase):
    def run_shell(self, script, deadline_s=30):
        log = os.path.join(tempfile.mkdtemp(), "log.txt")
        status, wall = run_driver.execute(["/bin/sh", "-c", script], deadline_s, log)
        with open(log) as f:
            return status, wall, f.read().splitlines()

    @mock.patch.dict(os.environ)
    def test_a_run_keeps_the_memory_it_frees(self):
        os.environ.pop("GLIBC_TUNABLES", None)
        status, _, lines = self.run_shell('echo "$GLIBC_TUNABLES"')
        self.assertEqual(status, "ok")
        self.assertEqual(lines[-1], run_driver.MALLOC_KEEP)

    @mock.patch.dict(os.environ, GLIBC_TUNABLES="glibc.malloc.arena_max=1")
    def test_the_callers_tunables_win(self):
        _, _, lines = self.run_shell('echo "$GLIBC_TUNABLES"')
        self.assertEqual(lines[-1], "glibc.malloc.arena_max=1")

    def run_c(self, code):
        """The last line code (Python, with libc as c) printed, run as execute runs it."""
        script = ("/usr/bin/python3 -c 'import ctypes; c = ctypes.CDLL(None); "
                  "c.malloc.restype = ctypes.c_void_p; c.sbrk.restype = ctypes.c_void_p; "
                  "c.free.argtypes = [ctypes.c_void_p]; " + code + "'")
        status, _, lines = self.run_shell(script)
        self.assertEqual(status, "ok", lines)
        return lines[-1]

    # glibc ignores a misspelt tunable silently, so these check each tunable's effect.
    @mock.patch.dict(os.environ)
    def test_glibc_serves_a_large_block_from_the_heap(self):
        # A 1 MiB block comes from the heap (below the program break) when kept, from a
        # mapping of its own (above it) by default.
        code = "p = c.malloc(1 << 20); print(int(p < c.sbrk(0)))"
        os.environ.pop("GLIBC_TUNABLES", None)
        self.assertEqual(self.run_c(code), "1")
        os.environ["GLIBC_TUNABLES"] = ""  # glibc's defaults
        self.assertEqual(self.run_c(code), "0")

    @mock.patch.dict(os.environ)
    def test_glibc_never_trims_the_heap(self):
        # Freeing a 1 MiB block at the heap's top leaves the program break where it was when
        # kept; with only the mmap threshold raised, glibc hands the top back (it trims past
        # 128 KiB).
        code = "p = c.malloc(1 << 20); top = c.sbrk(0); c.free(p); print(int(c.sbrk(0) == top))"
        os.environ.pop("GLIBC_TUNABLES", None)
        self.assertEqual(self.run_c(code), "1")
        os.environ["GLIBC_TUNABLES"] = run_driver.MALLOC_KEEP.split(":")[0]
        self.assertIn("mmap_threshold", os.environ["GLIBC_TUNABLES"])
        self.assertEqual(self.run_c(code), "0")

    def test_a_run_past_its_deadline_is_killed(self):
        status, wall, _ = self.run_shell("sleep 30", deadline_s=0.5)
        self.assertTrue(status.startswith("failed: no result after"), status)
        self.assertLess(wall, 20)

    def test_a_failing_run_gives_its_error_line(self):
        status, _, _ = self.run_shell("echo 'error: bad flag'; exit 2")
        self.assertEqual(status, "failed: bad flag")


class ReasonTest(unittest.TestCase):
    def test_a_reason_is_what_follows_error_stripped_and_cut(self):
        self.assertEqual(run_driver.reason("train: error: no data set here  "), "no data set here")
        self.assertEqual(run_driver.reason("exit status 3"), "exit status 3")
        self.assertEqual(run_driver.reason("error: a: error: b"), "a: error: b")
        self.assertEqual(run_driver.reason("error: " + "x" * 200), "x" * 160)
        self.assertEqual(run_driver.reason("error: " + "x" * 200, 80), "x" * 80)
        self.assertEqual(run_driver.reason("error: " + "x" * 200, None), "x" * 200)


class ProbeTest(unittest.TestCase):
    def test_a_probe_gives_the_commands_last_error_line_or_none(self):
        self.assertIsNone(run_driver.probe(["/bin/true"]))
        self.assertEqual(run_driver.probe(
            ["/bin/sh", "-c", "echo warming up >&2; echo 'error: no cgroup' >&2; exit 2"]),
            "no cgroup")
        self.assertEqual(run_driver.probe(["/bin/false"]), "exit status 1")
        self.assertEqual(run_driver.probe(["/bin/sleep", "30"], timeout_s=0.5),
                         "sleep took over 0.5 s")
        self.assertEqual(run_driver.probe(["/nonexistent"]),
                         "cannot run /nonexistent: No such file or directory")
        self.assertEqual(len(run_driver.probe(["/bin/sh", "-c", "echo error: " + "x" * 200 +
                                               " >&2; exit 2"], most_chars=None)), 200)


class RecordTest(unittest.TestCase):
    @mock.patch.dict(os.environ)
    def test_a_record_names_what_its_runs_rest_on(self):
        os.environ.pop("GLIBC_TUNABLES", None)
        kernel = run_driver.blas_core(["/bin/sh", "-c", "echo 'Core: Testlake' >&2"])
        self.assertEqual(kernel, "Testlake")
        record = run_driver.machine_record(kernel, run_driver.load_average())
        self.assertEqual(record["malloc"], run_driver.MALLOC_KEEP)
        self.assertEqual(len(record["load_before"].split()), 3)
        self.assertEqual(run_driver.machine_words(record),
                         f"{record['cpu_model']} ({record['cores']} cores, OpenBLAS Testlake, "
                         f"freed memory kept)")
        self.assertEqual(run_driver.blas_core(["/nonexistent"]), "?")

    def test_one_import_of_torch_names_its_version_and_kernel(self):
        # The probe's own program, with torch replaced by a module that prints what
        # OPENBLAS_VERBOSE=2 makes OpenBLAS print (to stdout, before the version).
        fake = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, fake)
        with open(os.path.join(fake, "torch.py"), "w") as f:
            f.write("import os\n__version__ = '9.9.9'\n"
                    "print('Core: ' + ('Fakelake' if os.environ.get('OPENBLAS_VERBOSE') == '2'"
                    " else 'unasked'))\n"
                    "class _M:\n    def __matmul__(self, other): return self\n"
                    "def ones(*shape): return _M()\n")
        with mock.patch.dict(os.environ, PYTHONPATH=fake):
            self.assertEqual(run_driver.probe_torch(), ("9.9.9", None, "Fakelake"))
        with open(os.path.join(fake, "torch.py"), "w") as f:
            f.write("raise ImportError('no torch here')\n")
        with mock.patch.dict(os.environ, PYTHONPATH=fake):
            self.assertEqual(run_driver.probe_torch(), (None, "ImportError: no torch here", "?"))
        # An import that hangs is cut at the probe's deadline and taken as none.
        with open(os.path.join(fake, "torch.py"), "w") as f:
            f.write("import time\ntime.sleep(60)\n")
        with mock.patch.dict(os.environ, PYTHONPATH=fake), \
                mock.patch.object(run_driver, "PROBE_TIMEOUT_S", 1):
            self.assertEqual(run_driver.probe_torch(),
                             (None, "import torch did not finish within 1 s", "?"))

    def test_a_report_names_only_what_a_record_holds(self):
        self.assertEqual(run_driver.machine_words({"cpu": "EPYC", "cores": 2}), "EPYC (2 cores)")
        self.assertEqual(run_driver.machine_words({"cpu_model": "EPYC", "cores": 2, "malloc": ""}),
                         "EPYC (2 cores, glibc's malloc defaults)")
        self.assertEqual(run_driver.machine_words({"cpu_model": "EPYC", "cores": 2,
                                                   "blas_core": "?"}),
                         "EPYC (2 cores, OpenBLAS kernel unknown)")


if __name__ == "__main__":
    unittest.main()
